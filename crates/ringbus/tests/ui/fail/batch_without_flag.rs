use ringbus::subscriber;

struct Order;

use ringbus::Batch;

#[subscriber("orders")]
async fn audit(_orders: Batch<'_, Order>) {}

fn main() {}
