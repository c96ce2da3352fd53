use ringbus::subscriber;

struct Order {
    id: u64,
}
struct Receipt {
    order: u64,
}

// Returns a message but does not say where to publish it.
#[subscriber("orders")]
async fn bill(order: &Order) -> Receipt {
    Receipt { order: order.id }
}

fn main() {}
