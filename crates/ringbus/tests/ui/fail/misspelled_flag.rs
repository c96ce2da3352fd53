use ringbus::{subscriber, Batch};

struct Order;

#[subscriber("orders", batc)]
async fn audit(_orders: Batch<'_, Order>) {}

fn main() {}
