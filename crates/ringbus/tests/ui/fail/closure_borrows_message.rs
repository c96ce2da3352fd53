struct Order {
    id: u64,
}

fn main() {
    let bus = ringbus::Bus::new();
    // The `async move` block a plain closure returns cannot borrow the message: copy `id` out
    // first, or write an async closure, `async |order: &Order| ...`.
    let _ = bus.subscribe("orders", |order: &Order| async move {
        println!("{}", order.id);
    });
}
