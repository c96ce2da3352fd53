use ringbus::subscriber;

struct Quote;

#[subscriber("prices", reply)]
async fn price(_quote: &Quote) {}

fn main() {}
