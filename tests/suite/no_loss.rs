//! Guarantee 2, no loss: a message whose publish returned `Ok` is handled by every subscriber
//! that was subscribed when the publish began, across `unsubscribe` and `close`. Topics are
//! small (capacity 4) so that publishers keep running into backpressure.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use common::{Log, Rng};
use ringbus::{Bus, PublishError, SubscribeOptions, Subscription};

/// A subscriber that logs every message, yielding a seeded random number of times per call so
/// that subscribers run at different speeds.
fn uneven(bus: &Bus, topic: &str, name: &str, seed: u64) -> (Subscription, Log<u64>) {
    let log = Log::new();
    let logged = log.clone();
    let sub = bus
        .subscribe_with(topic, SubscribeOptions::new().name(name), move |m: &u64| {
            let (m, logged) = (*m, logged.clone());
            let yields = Rng::new(seed ^ m).below(4);
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

/// Every id `0..n` exactly once (and nothing else), in any order.
fn assert_exactly_once(name: &str, got: &[u64], n: u64) {
    let mut seen = vec![0u32; n as usize];
    for &m in got {
        assert!(m < n, "{name}: got {m}, which was never published");
        seen[m as usize] += 1;
    }
    for (m, &count) in seen.iter().enumerate() {
        assert_eq!(count, 1, "{name}: message {m} handled {count} times");
    }
}

/// Two publishers, three subscribers of different speeds, then every subscriber unsubscribes:
/// each handled every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_ok_publish_reaches_every_subscriber_across_unsubscribe() {
    const PER_PUBLISHER: u64 = 2_000;
    let bus = Bus::builder().capacity(4).build();
    let subs: Vec<_> = (0..3)
        .map(|i| uneven(&bus, "t", &format!("sub{i}"), 11 + i))
        .collect();
    let publishers: Vec<_> = (0..2u64)
        .map(|p| {
            let topic = bus.topic::<u64>("t").unwrap();
            tokio::spawn(async move {
                for i in 0..PER_PUBLISHER {
                    topic.publish(p * PER_PUBLISHER + i).await.unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.await.unwrap();
    }
    for (sub, log) in subs {
        let name = sub.name().to_string();
        sub.unsubscribe().await;
        assert_exactly_once(&name, &log.snapshot(), 2 * PER_PUBLISHER);
    }
    // The bus is still open: unsubscribing touched nothing else.
    assert!(!bus.is_closed());
    bus.publish("t", 0u64).await.unwrap();
}

/// Publishers race `close`: each publish returns `Ok` (and is handled by every subscriber) or
/// `Closed` with its message (and is handled by none).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_ok_publish_reaches_every_subscriber_across_close() {
    const PER_PUBLISHER: u64 = 3_000;
    let bus = Bus::builder().capacity(4).build();
    let subs: Vec<_> = (0..3)
        .map(|i| uneven(&bus, "t", &format!("sub{i}"), 101 + i))
        .collect();
    // A clock shared by publishers and the closer, to order their events.
    let clock = Arc::new(AtomicU64::new(0));
    let (halfway_tx, halfway) = tokio::sync::oneshot::channel();
    let mut halfway_tx = Some(halfway_tx);
    let publishers: Vec<_> = (0..3u64)
        .map(|p| {
            let bus = bus.clone();
            let clock = clock.clone();
            let mut halfway_tx = if p == 0 { halfway_tx.take() } else { None };
            tokio::spawn(async move {
                // (message, when its publish began) of every Ok publish.
                let mut ok = Vec::new();
                for i in 0..PER_PUBLISHER {
                    let m = p * PER_PUBLISHER + i;
                    if i == PER_PUBLISHER / 4 {
                        if let Some(tx) = halfway_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    let began = clock.fetch_add(1, SeqCst);
                    match bus.publish("t", m).await {
                        Ok(()) => ok.push((m, began)),
                        Err(PublishError::Closed(back)) => assert_eq!(back, m),
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                ok
            })
        })
        .collect();
    halfway.await.unwrap();
    bus.close().await;
    let closed = clock.fetch_add(1, SeqCst);
    let mut ok = Vec::new();
    for p in publishers {
        ok.extend(p.await.unwrap());
    }
    for &(m, began) in &ok {
        assert!(
            began < closed,
            "publish of {m}, begun after close returned, succeeded"
        );
    }
    assert!(ok.len() < 9_000, "close came too late to test anything");
    let mut ok: Vec<u64> = ok.into_iter().map(|(m, _)| m).collect();
    ok.sort_unstable();
    for (sub, log) in subs {
        let mut got = log.snapshot();
        got.sort_unstable();
        assert_eq!(got, ok, "{} lost or invented messages", sub.name());
        assert!(sub.is_finished());
    }
}

/// A subscriber unsubscribed while a publisher keeps going handled every publish that
/// completed before `unsubscribe` was called, as a gapless prefix of the sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsubscribe_mid_stream_handles_everything_published_before() {
    const N: u64 = 5_000;
    let bus = Bus::builder().capacity(4).build();
    let (stays, stays_log) = uneven(&bus, "t", "stays", 1);
    let (leaves, leaves_log) = uneven(&bus, "t", "leaves", 2);
    let completed = Arc::new(AtomicU64::new(0));
    let (tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let publisher = {
        let completed = completed.clone();
        let topic = bus.topic::<u64>("t").unwrap();
        tokio::spawn(async move {
            for m in 0..N {
                topic.publish(m).await.unwrap();
                completed.store(m + 1, SeqCst);
                if m == N / 3 {
                    let _ = tx.send(());
                }
            }
        })
    };
    progress.recv().await.unwrap();
    let done_before = completed.load(SeqCst);
    leaves.unsubscribe().await;
    publisher.await.unwrap();
    stays.unsubscribe().await;

    assert_eq!(stays_log.snapshot(), (0..N).collect::<Vec<_>>());
    let got = leaves_log.snapshot();
    assert!(
        got.len() as u64 >= done_before,
        "handled {} of the {done_before} published before unsubscribe",
        got.len()
    );
    assert_eq!(got, (0..got.len() as u64).collect::<Vec<_>>());
}
