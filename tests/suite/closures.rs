//! Closure handlers: async closures (`async |msg: &T| ...`), whose futures borrow the message,
//! `with_state` for an async closure that needs state, and closures that return an
//! `async move` block (copy out first), for single messages and batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ringbus::{with_state, Batch, Bus, SubscribeOptions};

#[derive(Debug)]
struct Order {
    id: u64,
    note: String,
}

type Seen = Arc<Mutex<Vec<(u64, String)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_closures_borrow_the_message_across_an_await() {
    let bus = Bus::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sub = bus
        .subscribe(
            "orders",
            with_state(seen.clone(), async |seen: &Seen, order: &Order| {
                // The borrow of `order` lives across an await: the future borrows the message.
                let note: &str = &order.note;
                tokio::task::yield_now().await;
                seen.lock().unwrap().push((order.id, note.to_owned()));
            }),
        )
        .expect("subscribe");
    for id in 1..=3 {
        let note = format!("order {id}");
        bus.publish("orders", Order { id, note }).await.unwrap();
    }
    sub.unsubscribe().await;
    let seen = seen.lock().unwrap().clone();
    let want: Vec<_> = (1..=3).map(|id| (id, format!("order {id}"))).collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn async_closures_and_copying_closures_run_side_by_side() {
    let bus = Bus::new();
    // A `&'static` is `Copy`: an async closure may capture it.
    let borrowed: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let copied = Arc::new(AtomicU64::new(0));
    let a = bus
        .subscribe("n", async move |n: &u64| {
            tokio::task::yield_now().await;
            borrowed.fetch_add(*n, Ordering::Relaxed);
        })
        .expect("subscribe");
    let b = bus
        .subscribe("n", {
            let copied = copied.clone();
            move |n: &u64| {
                let (n, copied) = (*n, copied.clone());
                async move {
                    copied.fetch_add(n, Ordering::Relaxed);
                }
            }
        })
        .expect("subscribe");
    for n in 1..=10u64 {
        bus.publish("n", n).await.unwrap();
    }
    a.unsubscribe().await;
    b.unsubscribe().await;
    assert_eq!(borrowed.load(Ordering::Relaxed), 55);
    assert_eq!(copied.load(Ordering::Relaxed), 55);
}

#[derive(Debug)]
struct Refused(u64);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused {}", self.0)
    }
}

#[tokio::test]
async fn an_async_closure_returning_err_is_counted_as_a_handler_error() {
    let bus = Bus::new();
    let sub = bus
        .subscribe("n", async |n: &u64| {
            if *n % 2 == 0 {
                Err(Refused(*n))
            } else {
                Ok(())
            }
        })
        .expect("subscribe");
    for n in 1..=4u64 {
        bus.publish("n", n).await.unwrap();
    }
    bus.close().await;
    let stats = bus.stats();
    let topic = stats
        .topics
        .iter()
        .find(|t| t.name == "n")
        .expect("topic n");
    assert_eq!(topic.subscribers[0].handled, 4);
    assert_eq!(topic.subscribers[0].errors, 2);
    drop(sub);
}

#[tokio::test]
async fn async_closures_handle_batches_in_place() {
    // An async closure borrows the batch across an await.
    let bus = Bus::new();
    let total: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let sub = bus
        .subscribe_batch(
            "n",
            SubscribeOptions::new(),
            async move |batch: Batch<'_, u64>| {
                let first = batch.iter().next();
                tokio::task::yield_now().await;
                assert!(first.is_some(), "a batch is never empty");
                total.fetch_add(batch.iter().sum::<u64>(), Ordering::Relaxed);
            },
        )
        .expect("subscribe");
    for n in 1..=100u64 {
        bus.publish("n", n).await.unwrap();
    }
    sub.unsubscribe().await;
    assert_eq!(total.load(Ordering::Relaxed), 5050);
}

#[tokio::test]
async fn copying_closures_handle_batches() {
    let bus = Bus::new();
    let total = Arc::new(AtomicU64::new(0));
    let sub = bus
        .subscribe_batch("n", SubscribeOptions::new(), {
            let total = total.clone();
            move |batch: Batch<'_, u64>| {
                let (sum, total) = (batch.iter().sum::<u64>(), total.clone());
                async move {
                    total.fetch_add(sum, Ordering::Relaxed);
                }
            }
        })
        .expect("subscribe");
    for n in 1..=100u64 {
        bus.publish("n", n).await.unwrap();
    }
    sub.unsubscribe().await;
    assert_eq!(total.load(Ordering::Relaxed), 5050);
}
