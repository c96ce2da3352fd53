//! Guarantee 4, backpressure: `publish` waits while the slowest subscriber's queue is full,
//! `try_publish` says `Full(msg)` at once, a subscriber with a stall timeout is detached
//! instead of holding publishers forever, and no handler ever sees a slot being overwritten.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use common::{gated, recording, take, Gate, Rng};
use ringbus::{Bus, Handler, HandlerError, PublishError, SubscribeOptions};
use tokio_test::{assert_pending, assert_ready_ok, task};

fn assert_full<T: std::fmt::Debug + PartialEq>(result: Result<(), PublishError<T>>, msg: T) {
    match result {
        Err(PublishError::Full(back)) => assert_eq!(back, msg),
        other => panic!("expected Full({msg:?}), got {other:?}"),
    }
}

#[tokio::test]
async fn publish_waits_while_the_slowest_subscriber_is_full() {
    let bus = Bus::builder().capacity(4).build();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "slow", &gate);
    let mut fast = recording(&bus, "t", "fast");
    let topic = bus.topic::<u64>("t").unwrap();
    for m in 0..4u64 {
        topic.try_publish(m).unwrap();
    }
    // The fast subscriber has handled everything; the slow one sits on message 0.
    assert_eq!(take(&mut fast.handled, 4).await, [0, 1, 2, 3]);
    assert_eq!(slow.entered.recv().await, Some(0));

    assert_full(bus.try_publish("t", 4u64), 4);
    assert_full(topic.try_publish(4), 4);
    let mut publish = task::spawn(bus.publish("t", 4u64));
    assert_pending!(publish.poll());
    // While a publisher waits for room, `try_publish` still answers at once.
    assert_full(topic.try_publish(5), 5);
    let mut batch = task::spawn(bus.publish_batch("t", [5u64, 6]));
    assert_pending!(batch.poll());

    // The slow subscriber finishes message 0 (and starts on 1): one slot frees up.
    gate.release(1);
    assert_eq!(slow.entered.recv().await, Some(1));
    assert!(
        publish.is_woken(),
        "room did not wake the waiting publisher"
    );
    assert_ready_ok!(publish.poll());
    assert_pending!(batch.poll());
    assert_full(topic.try_publish(5), 5);

    // One more slot: the batch puts 5 in and waits for room for 6. Dropped there, it keeps
    // 5 published and drops 6.
    gate.release(1);
    assert_eq!(slow.entered.recv().await, Some(2));
    assert_pending!(batch.poll());
    drop(batch);

    gate.open();
    bus.close().await;
    assert_eq!(slow.log.snapshot(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(fast.log.snapshot(), [0, 1, 2, 3, 4, 5]);
}

/// A handler that never completes, detached after its stall timeout: publishers stop waiting
/// for it and the other subscribers keep receiving.
#[tokio::test(start_paused = true)]
async fn stalled_subscriber_is_detached() {
    let bus = Bus::builder().capacity(4).build();
    let stuck_log = common::Log::new();
    let logged = stuck_log.clone();
    let stuck = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new()
                .name("stuck")
                .stall_timeout(Duration::from_secs(1)),
            move |m: &u64| {
                let (m, logged) = (*m, logged.clone());
                async move {
                    if m == 2 {
                        std::future::pending::<()>().await;
                    }
                    logged.push(m);
                }
            },
        )
        .unwrap();
    let mut healthy = recording(&bus, "t", "healthy");

    // 2..6 fill the ring behind the stuck message; publishing 6 waits until the detach.
    for m in 0..20u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert_eq!(
        take(&mut healthy.handled, 20).await,
        (0..20).collect::<Vec<_>>()
    );
    assert!(stuck.is_finished());
    let stats = stuck.stats();
    assert!(stats.detached, "{stats:?}");
    assert!(!stats.running);
    assert_eq!(stats.handled, 2);
    assert_eq!(stats.lag, 0, "a detached subscriber lags nobody");
    assert_eq!(stuck_log.snapshot(), [0, 1]);

    let topic = &bus.stats().topics[0];
    let listed = topic
        .subscribers
        .iter()
        .find(|s| s.name == "stuck")
        .unwrap();
    assert!(listed.detached && !listed.running);

    // It stays detached; the bus goes on.
    for m in 20..40u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert_eq!(
        take(&mut healthy.handled, 20).await,
        (20..40).collect::<Vec<_>>()
    );
    bus.close().await;
    assert_eq!(stuck_log.snapshot(), [0, 1]);
}

/// The builder's stall timeout applies to every subscriber; a handler that is slow but
/// finishes within it keeps gating publishers and loses nothing.
#[tokio::test(start_paused = true)]
async fn slow_within_the_stall_timeout_is_not_detached() {
    let bus = Bus::builder()
        .capacity(2)
        .stall_timeout(Duration::from_secs(1))
        .build();
    let log = common::Log::new();
    let logged = log.clone();
    let slow = bus
        .subscribe("t", move |m: &u64| {
            let (m, logged) = (*m, logged.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(900)).await;
                logged.push(m);
            }
        })
        .unwrap();
    for m in 0..10u64 {
        bus.publish("t", m).await.unwrap();
    }
    bus.close().await;
    assert_eq!(log.snapshot(), (0..10).collect::<Vec<_>>());
    assert!(!slow.stats().detached);
    assert_eq!(slow.stats().handled, 10);

    // A stalled one under the builder's default is detached.
    let bus = Bus::builder()
        .capacity(2)
        .stall_timeout(Duration::from_secs(1))
        .build();
    let stuck = bus
        .subscribe("t", |_: &u64| std::future::pending::<()>())
        .unwrap();
    for m in 0..10u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert!(stuck.stats().detached);
    bus.close().await;
}

/// A payload whose every word is derived from its sequence number: a handler can tell if the
/// slot it reads is being overwritten under it.
struct Payload {
    publisher: u64,
    seq: u64,
    words: [u64; 16],
}

impl Payload {
    fn new(publisher: u64, seq: u64) -> Self {
        let mut words = [0; 16];
        for (i, w) in words.iter_mut().enumerate() {
            *w = (publisher << 32 | seq).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64;
        }
        Payload {
            publisher,
            seq,
            words,
        }
    }

    fn intact(&self) -> bool {
        self.words == Payload::new(self.publisher, self.seq).words
    }
}

/// Holds the message it is given across yields and checks it at every step. Failures are
/// counted, not panicked (the bus catches handler panics).
struct Verify {
    torn: Arc<AtomicU64>,
    out_of_order: Arc<AtomicU64>,
    handled: Arc<AtomicU64>,
    /// The next sequence number expected from each publisher.
    next: std::sync::Mutex<Vec<u64>>,
    /// Never finishes its handler call on the first message with this `seq % 101`.
    stuck_at: Option<u64>,
}

impl Verify {
    fn new(torn: &Arc<AtomicU64>, stuck_at: Option<u64>) -> (Self, Arc<AtomicU64>) {
        let handled = Arc::new(AtomicU64::new(0));
        let v = Verify {
            torn: torn.clone(),
            out_of_order: torn.clone(),
            handled: handled.clone(),
            next: std::sync::Mutex::new(vec![0; PUBLISHERS as usize]),
            stuck_at,
        };
        (v, handled)
    }
}

impl Handler<Payload> for Verify {
    async fn call(&self, msg: &Payload) -> Result<(), HandlerError> {
        let (publisher, seq) = (msg.publisher, msg.seq);
        if !msg.intact() {
            self.torn.fetch_add(1, SeqCst);
        }
        {
            let mut next = self.next.lock().unwrap();
            let expected = &mut next[publisher as usize];
            if seq != *expected {
                self.out_of_order.fetch_add(1, SeqCst);
            }
            *expected = seq + 1;
        }
        if self.stuck_at == Some(seq % 101) {
            std::future::pending::<()>().await;
        }
        let mut rng = Rng::new(seq ^ publisher << 40);
        for _ in 0..rng.below(4) {
            tokio::task::yield_now().await;
            if msg.publisher != publisher || msg.seq != seq || !msg.intact() {
                self.torn.fetch_add(1, SeqCst);
            }
        }
        self.handled.fetch_add(1, SeqCst);
        Ok(())
    }
}

const PUBLISHERS: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_handler_sees_a_slot_being_overwritten() {
    const N: u64 = 3_000;
    let bus = Bus::builder().capacity(8).build();
    let torn = Arc::new(AtomicU64::new(0));
    let mut keepers = Vec::new();
    for i in 0..3 {
        let (v, handled) = Verify::new(&torn, None);
        let sub = bus
            .subscribe_with("p", SubscribeOptions::new().name(format!("v{i}")), v)
            .unwrap();
        keepers.push((sub, handled));
    }
    // These get stuck on some message and are detached (real time, but nothing waits on a
    // clock: the publishers simply complete once the detach has happened).
    let mut stalled = Vec::new();
    for i in 0..2 {
        let (v, _) = Verify::new(&torn, Some(17 + i));
        let options = SubscribeOptions::new()
            .name(format!("stalls{i}"))
            .stall_timeout(Duration::from_millis(5));
        stalled.push(bus.subscribe_with("p", options, v).unwrap());
    }
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let topic = bus.topic::<Payload>("p").unwrap();
            tokio::spawn(async move {
                for seq in 0..N {
                    topic.publish(Payload::new(p, seq)).await.unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.await.unwrap();
    }
    bus.close().await;
    assert_eq!(
        torn.load(SeqCst),
        0,
        "a handler saw a torn or reordered payload"
    );
    for (sub, handled) in keepers {
        assert_eq!(handled.load(SeqCst), PUBLISHERS * N, "{}", sub.name());
        let stats = sub.stats();
        assert_eq!((stats.panics, stats.errors, stats.detached), (0, 0, false));
    }
    for sub in stalled {
        let stats = sub.stats();
        assert!(stats.detached, "{stats:?}");
        assert!(stats.handled < PUBLISHERS * N);
    }
}

/// `Full` means the slowest subscriber's queue is full, nothing else. Here nothing gates the
/// topic (no subscriber), so it always has room; publishers race on more workers than the
/// machine has cores, so lock holders get preempted inside the writer lock. No `try_publish`
/// may say `Full`.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn try_publish_is_not_full_while_there_is_room() {
    const TRYING: u64 = 8;
    const WAITING: u64 = 2;
    const EACH: u64 = 20_000;
    let bus = Bus::builder().capacity(64).build();
    let topic = bus.topic::<u64>("roomy").unwrap();
    let trying: Vec<_> = (0..TRYING)
        .map(|_| {
            let topic = topic.clone();
            tokio::spawn(async move {
                let mut full = 0u64;
                for m in 0..EACH {
                    match topic.try_publish(m) {
                        Ok(()) => {}
                        Err(PublishError::Full(_)) => full += 1,
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
                full
            })
        })
        .collect();
    // Publishers that wait hold the same lock.
    let waiting: Vec<_> = (0..WAITING)
        .map(|_| {
            let topic = topic.clone();
            tokio::spawn(async move {
                for m in 0..EACH {
                    topic.publish(m).await.unwrap();
                }
            })
        })
        .collect();
    let mut full = 0;
    for t in trying {
        full += t.await.unwrap();
    }
    for t in waiting {
        t.await.unwrap();
    }
    assert_eq!(
        full, 0,
        "try_publish said Full {full} times on a topic with room"
    );
    assert_eq!(topic.published(), (TRYING + WAITING) * EACH);
    bus.close().await;
}

/// A message whose `Drop` publishes to its own topic, run by the bus while it holds the
/// topic's writer (the message's slot is being reused).
struct Reenter {
    topic: Option<ringbus::Topic<Reenter>>,
    outcomes: Outcomes,
}

type Outcomes = Arc<std::sync::Mutex<Vec<&'static str>>>;

/// `try_publish` of a plain `Reenter`, its outcome recorded in `outcomes`.
fn try_again(topic: &ringbus::Topic<Reenter>, outcomes: &Outcomes) {
    let msg = Reenter {
        topic: None,
        outcomes: outcomes.clone(),
    };
    let outcome = match topic.try_publish(msg) {
        Ok(()) => "ok",
        Err(PublishError::Full(_)) => "full",
        Err(_) => "other",
    };
    outcomes.lock().unwrap().push(outcome);
}

impl Drop for Reenter {
    fn drop(&mut self) {
        if let Some(topic) = self.topic.take() {
            try_again(&topic, &self.outcomes);
        }
    }
}

/// User code the bus runs while it holds a topic's writer (a message's `Drop`, a
/// `publish_batch` iterator) calling `try_publish` on that topic: it cannot get in, and it
/// must say so (`Full`) rather than wait for its own thread forever.
#[test]
fn try_publish_from_under_the_writer_does_not_wait_for_itself() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let bus = Bus::builder().capacity(1).build();
        let topic = bus.topic::<Reenter>("r").unwrap();
        let outcomes = Outcomes::default();
        let plain = || Reenter {
            topic: None,
            outcomes: outcomes.clone(),
        };
        // No subscriber: the ring always has room, and each publish reuses the one slot.
        let first = Reenter {
            topic: Some(topic.clone()),
            outcomes: outcomes.clone(),
        };
        topic.try_publish(first).ok().unwrap();
        topic.try_publish(plain()).ok().unwrap(); // reuses the first one's slot
        let batch = (0..2).map(|i| {
            if i == 1 {
                try_again(&topic, &outcomes);
            }
            plain()
        });
        let ctx = ringbus::Context::new();
        let published = ringbus::ring::block_on(topic.publish_batch(&ctx, batch)).ok();
        let outcomes = outcomes.lock().unwrap().clone();
        done_tx
            .send((published, topic.published(), outcomes))
            .unwrap();
    });
    let (published, total, outcomes) = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("try_publish from under the writer waited for its own thread");
    assert_eq!(outcomes, ["full", "full"]);
    assert_eq!(published, Some(2));
    assert_eq!(total, 4);
}

/// A subscriber takes what is in its queue as one ring batch (see `subscriber::RUN`), but
/// frees each message's slot as soon as its handler is done with it, not at the end of the
/// batch: here the handler of message 1 blocks its thread until a publisher that needs message
/// 0's slot has published. Freed only at the end of the batch, that publisher would wait for
/// the very handler that waits for it (the watchdog then fails the test).
#[test]
fn a_subscriber_frees_each_slot_as_soon_as_it_handled_the_message() {
    use std::sync::mpsc;
    let (runtime, release_worker) = common::runtime_with_held_worker();
    let bus = runtime.block_on(async { Bus::builder().capacity(2).build() });
    let (started, handler_started) = mpsc::channel::<()>();
    let (published, publish_done) = mpsc::channel::<()>();
    let publish_done = std::sync::Mutex::new(publish_done);
    let (seen, saw) = mpsc::channel::<bool>();
    let _sub = runtime
        .block_on(async {
            bus.subscribe("t", move |m: &u64| {
                if *m == 1 {
                    let _ = started.send(());
                    let in_time = publish_done
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(10))
                        .is_ok();
                    let _ = seen.send(in_time);
                }
                std::future::ready(())
            })
        })
        .unwrap();
    let topic = runtime.block_on(async { bus.topic::<u64>("t") }).unwrap();
    topic.try_publish(0).unwrap();
    topic.try_publish(1).unwrap();
    release_worker.send(()).unwrap();
    let handle = runtime.handle().clone();
    let publisher = std::thread::spawn(move || {
        handler_started.recv().unwrap();
        // Needs message 0's slot: the queue holds 2 and message 1 is still being handled.
        handle.block_on(topic.publish(2)).unwrap();
        let _ = published.send(());
    });
    assert!(
        saw.recv().unwrap(),
        "message 0's slot was not freed while message 1 was handled"
    );
    publisher.join().unwrap();
    runtime.block_on(bus.close());
}

/// A handler that spends the task's whole cooperative budget on every poll is still timed
/// out: its stall timer is polled outside the budget it used up (as `tokio::time::timeout`
/// does), not with none left, where it would never fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_spends_its_whole_budget_on_every_poll_is_still_timed_out() {
    let bus = Bus::new();
    let sub = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().stall_timeout(Duration::from_millis(50)),
            |_: &u64| async {
                loop {
                    tokio::task::coop::consume_budget().await;
                }
                #[allow(unreachable_code)]
                ()
            },
        )
        .unwrap();
    bus.publish("t", 1u64).await.unwrap();
    // The task ends once the subscriber is detached; the timeout is only a watchdog.
    let stats = sub.stats();
    assert!(
        tokio::time::timeout(Duration::from_secs(10), sub.unsubscribe())
            .await
            .is_ok(),
        "the stall timeout never fired: {stats:?}"
    );
}

/// A batch that exactly fills the room left returns at once with everything published: it
/// does not wait for more room it does not need (and so is not cancelled while waiting for
/// it, reporting `Cancelled` for a batch that was in fact published). Then a batch one
/// message longer than the room waits for a slot, and gives back only that last message if
/// cancelled.
#[tokio::test]
async fn a_batch_that_exactly_fills_the_room_returns_without_waiting() {
    let bus = Bus::builder().capacity(4).build();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "slow", &gate);
    let topic = bus.topic::<u64>("t").unwrap();

    let mut batch = task::spawn(bus.publish_batch("t", [1u64, 2, 3, 4]));
    assert_eq!(
        assert_ready_ok!(batch.poll()),
        4,
        "an exactly fitting batch waited"
    );
    drop(batch);
    assert_eq!(slow.entered.recv().await, Some(1));
    assert_full(topic.try_publish(5), 5);

    // One message more than the room (none now): cancelled at once, it gives everything back.
    let ctx = ringbus::Context::new().with_timeout(Duration::ZERO);
    match topic.publish_batch(&ctx, [5u64]).await {
        Err(PublishError::Cancelled(rest)) => assert_eq!(rest.collect::<Vec<_>>(), [5]),
        other => panic!("expected Cancelled([5]), got {other:?}"),
    }
    gate.open();
    assert_eq!(take(&mut slow.entered, 3).await, [2, 3, 4]);
}

/// A stall timeout too long for the clock to represent (`Duration::MAX`) never fires: the
/// subscriber handles its messages, whose handlers suspend, rather than its task dying on an
/// overflow with the messages accepted and never handled.
#[tokio::test]
async fn a_stall_timeout_too_long_for_the_clock_never_fires() {
    let bus = Bus::new();
    let seen = Arc::new(AtomicU64::new(0));
    let counted = seen.clone();
    bus.subscribe_with(
        "t",
        SubscribeOptions::new().stall_timeout(Duration::MAX),
        move |m: &u64| {
            let (m, counted) = (*m, counted.clone());
            async move {
                tokio::task::yield_now().await;
                counted.fetch_add(m, SeqCst);
            }
        },
    )
    .unwrap();
    bus.publish("t", 1u64).await.unwrap();
    bus.publish("t", 2u64).await.unwrap();
    bus.close().await;
    assert_eq!(seen.load(SeqCst), 3);
    let stats = bus.stats();
    let sub = &stats.topics[0].subscribers[0];
    assert_eq!((sub.handled, sub.panics), (2, 0));
}
