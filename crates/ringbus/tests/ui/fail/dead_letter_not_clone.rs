use ringbus::subscriber;

// Not `Clone`: a dead letter carries a copy of the message.
struct Order;

#[subscriber("orders", retry(attempts = 3), dead_letter("orders.dead"))]
async fn audit(_order: &Order) {}

fn main() {}
