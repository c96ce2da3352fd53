use ringbus::subscriber;

struct Order;

#[subscriber("orders")]
async fn audit(_order: &Order, _retries: u32) {}

fn main() {}
