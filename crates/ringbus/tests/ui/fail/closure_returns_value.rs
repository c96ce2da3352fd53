struct Order {
    id: u64,
}

fn main() {
    let bus = ringbus::Bus::new();
    // A closure handler's future must resolve to `()` or `Result<(), E>`.
    let _ = bus.subscribe("orders", async |order: &Order| order.id);
}
