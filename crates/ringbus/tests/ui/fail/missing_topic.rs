use ringbus::subscriber;

struct Order;

#[subscriber(name = "audit")]
async fn audit(_order: &Order) {}

fn main() {}
