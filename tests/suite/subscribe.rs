//! Guarantee 8, subscribe at any time: a subscriber sees the messages published after
//! `subscribe` returned; `unsubscribe` handles what was queued and stops, releasing a
//! publisher that waited on it. Also unbuffered topics (capacity 0) and batch subscribers.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use common::{gated, recording, take, Gate, Log};
use ringbus::{Batch, Bus, BusBuilder, Error, SubscribeOptions, Subscription};
use tokio::sync::mpsc;
use tokio_test::{assert_pending, assert_ready_ok, task};

#[tokio::test]
async fn a_subscriber_sees_exactly_what_is_published_after_it_subscribed() {
    let bus = Bus::builder().capacity(4).build();
    let topic = bus.topic::<u64>("t").unwrap();
    for m in 0..5u64 {
        bus.publish("t", m).await.unwrap(); // nobody listens: these go nowhere
    }
    let first = recording(&bus, "t", "first");
    for m in 5..10u64 {
        topic.publish(m).await.unwrap();
    }
    let second_log = Log::new();
    let logged = second_log.clone();
    let second = topic
        .subscribe(SubscribeOptions::new().name("second"), move |m: &u64| {
            let (m, logged) = (*m, logged.clone());
            async move { logged.push(m) }
        })
        .unwrap();
    for m in 10..15u64 {
        bus.publish("t", m).await.unwrap();
    }
    bus.close().await;
    assert_eq!(first.log.snapshot(), (5..15).collect::<Vec<_>>());
    assert_eq!(second_log.snapshot(), (10..15).collect::<Vec<_>>());
    assert_eq!(second.stats().handled, 5);
}

/// Subscribing while a publisher runs: the subscriber gets a gapless run of the sequence,
/// starting no earlier than the first publish that had not completed when `subscribe` was
/// called and no later than the first publish that began after it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subscribing_while_a_publisher_runs() {
    const N: u64 = 20_000;
    let bus = Bus::builder().capacity(16).build();
    // A subscriber from the start that yields on every message, so the publisher is still
    // running while the late ones join.
    let _pace = bus
        .subscribe("t", |_: &u64| tokio::task::yield_now())
        .unwrap();
    let begun = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    let (tx, mut started) = mpsc::unbounded_channel();
    let publisher = {
        let (begun, completed) = (begun.clone(), completed.clone());
        let topic = bus.topic::<u64>("t").unwrap();
        tokio::spawn(async move {
            for m in 0..N {
                begun.store(m + 1, SeqCst);
                topic.publish(m).await.unwrap();
                completed.store(m + 1, SeqCst);
                if m == 100 {
                    let _ = tx.send(());
                }
            }
        })
    };
    started.recv().await.unwrap();
    let mut windows = Vec::new();
    for i in 0..5 {
        let before = completed.load(SeqCst);
        let rec = recording(&bus, "t", &format!("late{i}"));
        // Every publish of a message numbered `after` or higher began after subscribe returned.
        let after = begun.load(SeqCst);
        windows.push((before, after, rec));
        tokio::task::yield_now().await;
    }
    publisher.await.unwrap();
    bus.close().await;
    for (before, after, rec) in windows {
        let got = rec.log.snapshot();
        // Nothing at all is right only if every publish began before subscribe returned.
        let first = got.first().copied().unwrap_or(N);
        assert!(
            before <= first && first <= after,
            "{}: started at {first}, outside {before}..={after}",
            rec.sub.name()
        );
        assert!(got.iter().copied().eq(first..N), "{}: gaps", rec.sub.name());
    }
}

#[tokio::test]
async fn unsubscribe_handles_what_was_queued_then_stops() {
    let bus = Bus::builder().capacity(8).build();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "leaving", &gate);
    let stays = recording(&bus, "t", "stays");
    for m in 0..5u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert_eq!(slow.entered.recv().await, Some(0));
    let mut leaving = task::spawn(slow.sub.unsubscribe());
    assert_pending!(leaving.poll()); // the request is made; it waits for the queue
    for m in 5..7u64 {
        bus.publish("t", m).await.unwrap(); // after the request: not for the leaver
    }
    gate.open();
    leaving.await;
    assert_eq!(slow.log.snapshot(), [0, 1, 2, 3, 4]);
    let listed = bus.stats().topics[0].subscribers.clone();
    let left = listed.iter().find(|s| s.name == "leaving").unwrap();
    assert!(!left.running && left.handled == 5, "{left:?}");

    bus.close().await;
    assert_eq!(stays.log.snapshot(), (0..7).collect::<Vec<_>>());
}

#[tokio::test]
async fn unsubscribe_releases_a_publisher_waiting_on_that_subscriber() {
    let bus = Bus::builder().capacity(2).build();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "slow", &gate);
    let mut fast = recording(&bus, "t", "fast");
    bus.publish("t", 0u64).await.unwrap();
    bus.publish("t", 1u64).await.unwrap();
    assert_eq!(take(&mut fast.handled, 2).await, [0, 1]);
    assert_eq!(slow.entered.recv().await, Some(0));

    let mut waiting = task::spawn(bus.publish("t", 2u64));
    assert_pending!(waiting.poll());
    let mut leaving = task::spawn(slow.sub.unsubscribe());
    assert_pending!(leaving.poll());
    assert_pending!(waiting.poll());
    // It may finish its queue (two messages), no more: once it is through, it leaves.
    gate.release(2);
    leaving.await;
    assert!(
        waiting.is_woken(),
        "the leaving subscriber did not release the publisher"
    );
    assert_ready_ok!(waiting.poll());
    // Message 2's publish began before the unsubscribe and returned Ok, but landed after it:
    // the leaver does not handle it (guarantee 2, as `Subscription::unsubscribe` states).
    // Nothing gates the topic but the fast subscriber now, though the gate stays shut: with
    // the slow one still in, these would wait for it forever (a failure, not a hang).
    let publishes = async {
        for m in 3..20u64 {
            bus.publish("t", m).await.unwrap();
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), publishes)
        .await
        .expect("the unsubscribed subscriber still gates the topic");
    bus.close().await;
    assert_eq!(slow.log.snapshot(), [0, 1]);
    assert_eq!(fast.log.snapshot(), (0..20).collect::<Vec<_>>());
}

/// A handler that unsubscribes its own subscriber: the request is made, the handler goes on
/// (no waiting for itself), and the subscriber stops after what was published by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_from_its_own_handler() {
    let bus = Bus::builder().capacity(4).build();
    let own: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let log = Log::new();
    let (mine, logged) = (own.clone(), log.clone());
    let (tx, mut unsubscribed) = mpsc::unbounded_channel();
    let sub = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("quitter"),
            move |m: &u64| {
                let (m, logged, tx) = (*m, logged.clone(), tx.clone());
                let sub = if m == 3 {
                    mine.lock().unwrap().take()
                } else {
                    None
                };
                async move {
                    if let Some(sub) = sub {
                        sub.unsubscribe().await;
                        let _ = tx.send(());
                    }
                    logged.push(m);
                }
            },
        )
        .unwrap();
    *own.lock().unwrap() = Some(sub);
    let witness = recording(&bus, "t", "witness");
    // A watchdog, not a wait: an unsubscribe that waited for its own handler would hang here
    // (a multi-thread runtime cannot pause time).
    let ended = async {
        for m in 0..50u64 {
            bus.publish("t", m).await.unwrap();
        }
        unsubscribed.recv().await.unwrap();
        bus.close().await;
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), ended)
        .await
        .expect("an unsubscribe from its own handler waited for that handler");
    let got = log.snapshot();
    assert!(got.len() >= 4 && got.len() < 50, "{got:?}");
    assert!(got.iter().copied().eq(0..got.len() as u64), "{got:?}");
    assert_eq!(witness.log.len(), 50);
    let listed = bus.stats().topics[0].subscribers.clone();
    assert!(listed.iter().all(|s| !s.running), "{listed:?}");
}

/// A subscriber of an unbuffered topic whose handler reports when it starts and when it is
/// done with each message, and waits for `gate` in between.
fn unbuffered_sub(
    bus: &Bus,
    name: &str,
    gate: &Gate,
) -> (
    Subscription,
    mpsc::UnboundedReceiver<u64>,
    mpsc::UnboundedReceiver<u64>,
) {
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let (done_tx, done) = mpsc::unbounded_channel();
    let gate = gate.clone();
    let sub = bus
        .subscribe_with(
            "u",
            SubscribeOptions::new().name(name).capacity(0),
            move |m: &u64| {
                let (m, gate, entered_tx, done_tx) =
                    (*m, gate.clone(), entered_tx.clone(), done_tx.clone());
                async move {
                    let _ = entered_tx.send(m);
                    gate.pass().await;
                    let _ = done_tx.send(m);
                }
            },
        )
        .unwrap();
    (sub, entered, done)
}

#[tokio::test]
async fn unbuffered_publish_completes_once_every_subscriber_handled_it() {
    let bus = Bus::builder().capacity(0).build();
    // With nobody subscribed, an unbuffered publish has nobody to wait for.
    bus.publish("nobody", 1u64).await.unwrap();
    bus.publish("nobody", 2u64).await.unwrap();
    let (ga, gb) = (Gate::closed(), Gate::closed());
    let (_a, mut a_in, mut a_done) = unbuffered_sub(&bus, "a", &ga);
    let (_b, mut b_in, mut b_done) = unbuffered_sub(&bus, "b", &gb);
    assert_eq!(
        bus.stats()
            .topics
            .iter()
            .find(|t| t.name == "u")
            .unwrap()
            .capacity,
        0
    );

    let mut publish = task::spawn(bus.publish("u", 7u64));
    assert_pending!(publish.poll());
    assert_eq!((a_in.recv().await, b_in.recv().await), (Some(7), Some(7)));
    assert_pending!(publish.poll());
    ga.release(1);
    assert_eq!(a_done.recv().await, Some(7));
    assert_pending!(publish.poll()); // b has not handled it yet
    assert!(matches!(
        bus.try_publish("u", 8u64),
        Err(ringbus::PublishError::Full(8))
    ));
    gb.release(1);
    assert_eq!(b_done.recv().await, Some(7));
    assert!(publish.is_woken());
    assert_ready_ok!(publish.poll());

    // Each publish in turn waits for both.
    ga.open();
    gb.open();
    for m in 0..20u64 {
        bus.publish("u", m).await.unwrap();
        assert_eq!(
            a_done.try_recv(),
            Ok(m),
            "publish returned before a handled {m}"
        );
        assert_eq!(
            b_done.try_recv(),
            Ok(m),
            "publish returned before b handled {m}"
        );
    }
    bus.close().await;
}

/// A close ends an unbuffered publish that waits for its message's handling (the drain
/// handles the message): the publish, parked when the close begins, is woken by it.
#[tokio::test]
async fn a_close_ends_an_unbuffered_publish_waiting_for_its_handling() {
    let bus = Bus::builder().capacity(0).build();
    let gate = Gate::closed();
    let (_a, mut a_in, mut a_done) = unbuffered_sub(&bus, "a", &gate);
    let mut publish = task::spawn(bus.publish("u", 7u64));
    assert_pending!(publish.poll());
    assert_eq!(a_in.recv().await, Some(7));
    assert_pending!(publish.poll()); // parked: its message is being handled
    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll()); // the drain waits for the handler
    assert!(
        publish.is_woken(),
        "the close did not wake the parked publish"
    );
    assert_ready_ok!(publish.poll());
    gate.open();
    assert_eq!(a_done.recv().await, Some(7));
    close.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_subscribers_get_everything_in_order() {
    const N: u64 = 20_000;
    let bus = Bus::builder().capacity(16).build();
    let mut subs = Vec::new();
    for i in 0..3 {
        let batches: Log<Vec<u64>> = Log::new();
        let logged = batches.clone();
        let sub = bus
            .subscribe_batch(
                "t",
                SubscribeOptions::new().name(format!("batch{i}")),
                move |batch: Batch<'_, u64>| {
                    logged.push(batch.iter().copied().collect());
                    async move {
                        if i == 1 {
                            tokio::task::yield_now().await; // a slower one
                        }
                    }
                },
            )
            .unwrap();
        subs.push((sub, batches));
    }
    let single = recording(&bus, "t", "single");
    let topic = bus.topic::<u64>("t").unwrap();
    let mut m = 0;
    while m < N {
        if m % 7 == 0 {
            let end = (m + 1 + m % 13).min(N);
            bus.publish_batch("t", m..end).await.unwrap();
            m = end;
        } else {
            topic.publish(m).await.unwrap();
            m += 1;
        }
    }
    bus.close().await;
    for (sub, batches) in subs {
        let batches = batches.snapshot();
        assert!(batches.iter().all(|b| !b.is_empty() && b.len() <= 16));
        let all: Vec<u64> = batches.into_iter().flatten().collect();
        assert!(
            all.iter().copied().eq(0..N),
            "{} lost or reordered",
            sub.name()
        );
        assert_eq!(sub.stats().handled, N);
    }
    assert_eq!(single.log.len() as u64, N);
}

/// A capacity no topic can have is refused where it is set, with a message naming the limit,
/// not by a panic inside the first publish or subscribe that makes the topic (as it was: the
/// ring's size overflowed there).
#[test]
fn a_capacity_past_the_limit_is_refused_where_it_is_set() {
    let max = BusBuilder::MAX_CAPACITY;
    fn on_the_bus(capacity: usize) {
        drop(Bus::builder().capacity(capacity));
    }
    fn on_a_subscription(capacity: usize) {
        drop(SubscribeOptions::new().capacity(capacity));
    }
    let setters = [on_the_bus, on_a_subscription];
    for (set, name) in setters.into_iter().zip(["BusBuilder", "SubscribeOptions"]) {
        set(max); // the limit itself is accepted
        for capacity in [max + 1, usize::MAX] {
            let panic = std::panic::catch_unwind(|| set(capacity))
                .expect_err(&format!("{name}({capacity}) was accepted"));
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or_default();
            assert!(
                message.contains(&capacity.to_string()) && message.contains("MAX_CAPACITY"),
                "{name}({capacity}): {message:?}"
            );
        }
    }
}

/// A topic whose ring cannot be allocated is an `Err` naming the topic, the capacity and the
/// bytes asked for, from every call that would make it, never an abort of the process (issue
/// 34: `capacity(1 << 30)` with a 64-byte message aborted at the topic's first use, "memory
/// allocation of 68719476736 bytes failed"). Nothing is made, and the name stays free. The
/// sizes here are refused on any 64-bit machine, whatever it has and however it overcommits:
/// 2^30 messages of 1 MiB ask for 1 PiB, more than a process can map; of 8 GiB, past
/// `isize::MAX` bytes. (`tests/ring_alloc.rs` has the issue's own 64 GiB.)
#[cfg(target_pointer_width = "64")]
#[test]
fn a_topic_whose_ring_cannot_be_allocated_is_an_error() {
    type Mib = [u8; 1 << 20];
    const MIB: u128 = 1 << 20;
    fn is_too_large(e: &ringbus::RingTooLarge, topic: &str, size: u128) -> bool {
        let capacity = BusBuilder::MAX_CAPACITY;
        let fields = (&*e.topic, e.capacity, e.message_size as u128, e.bytes);
        let says = e.to_string();
        fields == (topic, capacity, size, capacity as u128 * size)
            && says.contains(&format!("\"{topic}\""))
            && says.contains(&capacity.to_string())
            && says.contains(&(capacity as u128 * size).to_string())
    }
    // The messages are 1 MiB values moved by value, and a debug build gives each temporary
    // its own stack slot: a stack of 512 MiB (address space, used only as far as it is).
    let run = std::thread::Builder::new().stack_size(512 << 20).spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let bus = Bus::builder().capacity(BusBuilder::MAX_CAPACITY).build();
            match bus.publish("frames", [7u8; 1 << 20]).await {
                Err(ringbus::PublishError::RingTooLarge(back, e)) => {
                    assert_eq!(back[0], 7, "the message comes back");
                    assert!(is_too_large(&e, "frames", MIB), "{e:?}");
                }
                other => panic!("{:?}", other.map_err(|e| e.to_string())),
            }
            match bus.try_publish("frames", [7u8; 1 << 20]) {
                Err(ringbus::PublishError::RingTooLarge(_, e)) => {
                    assert!(is_too_large(&e, "frames", MIB), "{e:?}");
                }
                other => panic!("{:?}", other.map_err(|e| e.to_string())),
            }
            let batch = bus.publish_batch("frames", [[1u8; 1 << 20]]).await;
            let Err(ringbus::PublishError::RingTooLarge(mut rest, e)) = batch else {
                panic!("{:?}", batch.map_err(|e| e.to_string()));
            };
            assert!(is_too_large(&e, "frames", MIB), "{e:?}");
            assert_eq!(rest.next().map(|m| m[0]), Some(1), "the batch comes back");
            let error = bus.subscribe("frames", |_: &Mib| async {}).unwrap_err();
            assert!(matches!(&error, Error::RingTooLarge(e) if is_too_large(e, "frames", MIB)));
            assert_eq!(error.to_string(), e.to_string());
            let error = bus.topic::<Mib>("frames").unwrap_err();
            assert!(matches!(&error, Error::RingTooLarge(e) if is_too_large(e, "frames", MIB)));
            // Past `isize::MAX` bytes: refused before the allocator is asked.
            let error = bus.topic::<[u8; 1 << 33]>("huge").unwrap_err();
            assert!(matches!(&error, Error::RingTooLarge(e) if is_too_large(e, "huge", 1 << 33)));

            // Nothing was made; a smaller ring under the same name is.
            assert!(bus.stats().topics.is_empty(), "{:?}", bus.stats());
            let options = SubscribeOptions::new().capacity(16);
            let sub = bus.subscribe_with("frames", options, |_: &Mib| async {});
            assert!(sub.is_ok(), "{:?}", sub.map(drop));
            bus.close().await;
        })
    });
    run.unwrap().join().unwrap();
}

#[tokio::test]
async fn subscribe_errors() {
    let bus = Bus::builder().capacity(8).max_subscribers(2).build();
    let a = bus.subscribe("t", |_: &u64| async {}).unwrap();
    let _b = bus.subscribe("t", |_: &u64| async {}).unwrap();
    match bus.subscribe("t", |_: &u64| async {}) {
        Err(Error::TooManySubscribers { topic, max }) => {
            assert_eq!((&*topic, max), ("t", 2));
        }
        other => panic!("expected TooManySubscribers, got {other:?}"),
    }
    a.unsubscribe().await; // its place is free again
    let _c = bus.subscribe("t", |_: &u64| async {}).unwrap();

    let err = bus
        .subscribe_with("t", SubscribeOptions::new().capacity(64), |_: &u64| async {
        })
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::CapacityMismatch {
                capacity: 8,
                requested: 64,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"t\""), "{err}");
    bus.close().await;
}
