use ringbus::subscriber;

struct Order;

#[subscriber("orders")]
async fn audit<T>(_order: &T) {}

fn main() {}
