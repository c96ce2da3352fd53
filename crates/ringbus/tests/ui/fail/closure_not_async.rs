struct Order {
    id: u64,
}

fn main() {
    let bus = ringbus::Bus::new();
    // Not a future: a handler must be async.
    let _ = bus.subscribe("orders", |order: &Order| println!("{}", order.id));
}
