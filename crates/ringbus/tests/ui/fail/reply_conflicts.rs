use ringbus::{subscriber, Batch};

struct Quote;

#[subscriber("prices", reply, publish("audit"))]
async fn price(_quote: &Quote) -> u64 {
    1
}

#[subscriber("prices", batch, reply)]
async fn prices(_quotes: Batch<'_, Quote>) -> u64 {
    1
}

#[subscriber("prices", reply, retry(attempts = 2))]
async fn retried(_quote: &Quote) -> u64 {
    1
}

#[subscriber("prices", replay)]
async fn misspelled(_quote: &Quote) -> u64 {
    1
}

fn main() {}
