use ringbus::subscriber;

struct Order;
struct Receipt;

#[subscriber("orders", publsh("receipts"))]
async fn bill(_order: &Order) -> Receipt {
    Receipt
}

fn main() {}
