use ringbus::subscriber;

struct Order;

#[subscriber("orders", stall_timeout = "5 parsecs")]
async fn audit(_order: &Order) {}

fn main() {}
