use ringbus::subscriber;

struct Order;

#[subscriber("orders")]
async fn audit() {}

fn main() {}
