struct Order;

fn main() {
    let bus = ringbus::Bus::new();
    // `register` takes what `#[subscriber]` makes; a closure goes to `subscribe`.
    let _ = bus.register(async |_order: &Order| {});
}
