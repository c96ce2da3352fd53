use ringbus::subscriber;

struct Order;

#[subscriber("orders", retry(attempts = "three"))]
async fn audit(_order: &Order) {}

fn main() {}
