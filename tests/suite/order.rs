//! Guarantee 1, order: each subscriber handles a topic's messages in the order their
//! publishes completed.

use crate::common;

use std::collections::HashMap;

use common::{Log, Rng};
use ringbus::{Bus, Context, SubscribeOptions, Subscription};

/// One message of one publisher: who sent it and its number in that publisher's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Seq {
    publisher: u32,
    n: u64,
}

/// A subscriber that logs every `Seq` it handles, yielding now and then so that subscribers
/// run at different speeds.
fn logging(bus: &Bus, topic: &str, name: &str, seed: u64) -> (Subscription, Log<Seq>) {
    let log = Log::new();
    let logged = log.clone();
    let sub = bus
        .subscribe_with(topic, SubscribeOptions::new().name(name), move |m: &Seq| {
            let (m, logged) = (*m, logged.clone());
            // Cheap, deterministic per message: some calls yield once or twice.
            let yields = (m.n.wrapping_mul(seed) >> 7) % 3;
            async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                logged.push(m);
            }
        })
        .expect("subscribe");
    (sub, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_publisher_every_subscriber_in_publish_order() {
    const N: u64 = 3_000;
    let bus = Bus::builder().capacity(8).build();
    let subs: Vec<_> = (0..3)
        .map(|i| logging(&bus, "seq", &format!("sub{i}"), 0x9e37_79b9 + i))
        .collect();
    let topic = bus.topic::<Seq>("seq").unwrap();
    for n in 0..N {
        let m = Seq { publisher: 0, n };
        // Alternate between the three ways of publishing one message.
        match n % 3 {
            0 => bus.publish("seq", m).await.unwrap(),
            1 => topic.publish(m).await.unwrap(),
            _ => topic.publish_with(&Context::new(), m).await.unwrap(),
        }
    }
    bus.close().await;
    let expected: Vec<_> = (0..N).map(|n| Seq { publisher: 0, n }).collect();
    for (sub, log) in subs {
        assert_eq!(log.snapshot(), expected, "{} out of order", sub.name());
        assert!(sub.is_finished());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_publishers_order_kept_per_publisher_and_same_for_everyone() {
    const PUBLISHERS: u32 = 4;
    const N: u64 = 1_500;
    let bus = Bus::builder().capacity(16).build();
    let subs: Vec<_> = (0..4)
        .map(|i| logging(&bus, "seq", &format!("sub{i}"), 0x51_7cc1 + i))
        .collect();
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let bus = bus.clone();
            tokio::spawn(async move {
                let topic = bus.topic::<Seq>("seq").unwrap();
                let mut rng = Rng::new(u64::from(p) + 1);
                let mut n = 0;
                while n < N {
                    match rng.below(3) {
                        0 => bus.publish("seq", Seq { publisher: p, n }).await.unwrap(),
                        1 => topic.publish(Seq { publisher: p, n }).await.unwrap(),
                        _ => {
                            // A short batch: its messages stay in order, one after another.
                            let end = (n + 1 + rng.below(5)).min(N);
                            let batch = (n..end).map(|k| Seq { publisher: p, n: k });
                            let sent = bus.publish_batch("seq", batch).await.unwrap();
                            assert_eq!(sent, end - n);
                            n = end;
                            continue;
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for p in publishers {
        p.await.unwrap();
    }
    bus.close().await;

    let logs: Vec<_> = subs.iter().map(|(_, log)| log.snapshot()).collect();
    for ((sub, _), log) in subs.iter().zip(&logs) {
        assert_eq!(
            log.len() as u64,
            u64::from(PUBLISHERS) * N,
            "{}",
            sub.name()
        );
        let mut next: HashMap<u32, u64> = HashMap::new();
        for m in log {
            let expected = next.entry(m.publisher).or_insert(0);
            assert_eq!(
                m.n,
                *expected,
                "{}: publisher {} out of order",
                sub.name(),
                m.publisher
            );
            *expected += 1;
        }
    }
    // One ring per topic: every subscriber sees the same interleaving.
    for log in &logs[1..] {
        assert_eq!(log, &logs[0], "subscribers disagree on the order");
    }
}

/// Publishes that complete one after another in different tasks (a baton passed between
/// publishers) are handled in exactly that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completion_order_across_tasks() {
    const PUBLISHERS: usize = 4;
    const N: u64 = 2_000;
    let bus = Bus::builder().capacity(4).build();
    let subs: Vec<_> = (0..3)
        .map(|i| logging(&bus, "baton", &format!("sub{i}"), 7 + i))
        .collect();

    // Publisher p publishes n when it holds the baton n, then hands baton n + 1 to the next one.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..PUBLISHERS)
        .map(|_| tokio::sync::mpsc::unbounded_channel::<u64>())
        .unzip();
    let tasks: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(p, mut rx)| {
            let bus = bus.clone();
            let next = txs[(p + 1) % PUBLISHERS].clone();
            tokio::spawn(async move {
                while let Some(n) = rx.recv().await {
                    if n == N {
                        let _ = next.send(N); // let the others finish too
                        return;
                    }
                    bus.publish(
                        "baton",
                        Seq {
                            publisher: p as u32,
                            n,
                        },
                    )
                    .await
                    .unwrap();
                    let _ = next.send(n + 1);
                }
            })
        })
        .collect();
    txs[0].send(0).unwrap();
    drop(txs);
    for t in tasks {
        t.await.unwrap();
    }
    bus.close().await;
    for (sub, log) in subs {
        let got: Vec<u64> = log.snapshot().iter().map(|m| m.n).collect();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "{}", sub.name());
    }
}
