use ringbus::subscriber;

struct Order;

#[subscriber("orders", retry(atempts = 3))]
async fn audit(_order: &Order) {}

fn main() {}
