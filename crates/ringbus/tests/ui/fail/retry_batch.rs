use ringbus::{subscriber, Batch};

struct Order;

#[subscriber("orders", batch, retry(attempts = 3))]
async fn audit(_orders: Batch<'_, Order>) {}

fn main() {}
