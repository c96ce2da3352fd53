use ringbus::subscriber;

struct Order;

struct Audit;

impl Audit {
    #[subscriber("orders")]
    async fn audit(&self, _order: &Order) {}
}

fn main() {}
