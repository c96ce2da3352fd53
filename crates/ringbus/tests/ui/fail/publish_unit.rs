use ringbus::subscriber;

struct Order;

#[subscriber("orders", publish("receipts"))]
async fn audit(_order: &Order) {}

fn main() {}
