use ringbus::subscriber;

struct Order;

#[subscriber("orders", retry(attempts = 3, backoff = "10 parsecs"))]
async fn audit(_order: &Order) {}

fn main() {}
