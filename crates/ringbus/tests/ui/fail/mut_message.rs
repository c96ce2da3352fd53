use ringbus::subscriber;

struct Order;

#[subscriber("orders")]
async fn audit(_order: &mut Order) {}

fn main() {}
