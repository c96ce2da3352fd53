use ringbus::subscriber;

struct Order;

#[subscriber("orders", retries = 3)]
async fn audit(_order: &Order) {}

fn main() {}
