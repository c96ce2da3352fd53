use ringbus::subscriber;

struct Order;

#[subscriber("orders")]
fn audit(_order: &Order) {}

fn main() {}
