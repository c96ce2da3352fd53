//! Guarantee 5, close drains: `close()` is idempotent; after it every publish returns
//! `Closed(msg)`; it returns when every accepted message has been handled by every subscriber
//! and every handler task has finished; a bounded variant reports what was left; closing from
//! inside a handler does not deadlock; dropping the close future does not reopen the bus.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{gated, recording, take, Gate, Log};
use ringbus::{Bus, CancellationToken, Context, Error, PublishError, SubscribeOptions};
use tokio::sync::{oneshot, Barrier};
use tokio_test::{assert_pending, assert_ready, task};

fn assert_closed<T: std::fmt::Debug + PartialEq>(result: Result<(), PublishError<T>>, msg: T) {
    match result {
        Err(PublishError::Closed(back)) => assert_eq!(back, msg),
        other => panic!("expected Closed({msg:?}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_drains_10_000_messages_queued_for_100_subscribers() {
    const SUBSCRIBERS: usize = 100;
    const N: u64 = 10_000;
    let bus = Bus::builder().capacity(16_384).build();
    let gate = Gate::closed();
    let subs: Vec<_> = (0..SUBSCRIBERS)
        .map(|i| gated(&bus, "t", &format!("sub{i}"), &gate))
        .collect();
    assert_eq!(bus.publish_batch("t", 0..N).await.unwrap(), N);

    // Every handler is held: close cannot be done.
    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    assert!(bus.is_closed());
    assert_closed(bus.publish("t", N).await, N);

    gate.open();
    close.await;
    for s in &subs {
        assert!(
            s.sub.is_finished(),
            "{} still running after close",
            s.sub.name()
        );
        assert_eq!(s.log.len() as u64, N, "{}", s.sub.name());
        let log = s.log.snapshot();
        assert!(
            log.iter().copied().eq(0..N),
            "{} handled something twice, missed something or reordered",
            s.sub.name()
        );
        let stats = s.sub.stats();
        assert_eq!((stats.handled, stats.lag, stats.running), (N, 0, false));
    }
}

#[tokio::test]
async fn close_is_idempotent_and_refuses_everything_after() {
    let bus = Bus::new();
    let mut rec = recording(&bus, "t", "rec");
    bus.publish("t", 1u64).await.unwrap();
    bus.close().await;
    assert_eq!(take(&mut rec.handled, 1).await, [1]);
    bus.close().await;
    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_secs(1)))
        .await;
    assert!(
        report.complete && report.unfinished.is_empty(),
        "{report:?}"
    );
    assert!(bus.is_closed() && bus.stats().closed);

    assert_closed(bus.publish("t", 2u64).await, 2);
    assert_closed(bus.try_publish("t", 3u64), 3);
    let topic = bus.topic::<u64>("t").unwrap();
    assert_closed(topic.publish(4).await, 4);
    assert_closed(topic.publish_with(&Context::new(), 5).await, 5);
    assert_closed(topic.try_publish(6), 6);
    match bus.publish_batch("t", vec![7u64, 8]).await {
        Err(PublishError::Closed(rest)) => assert_eq!(rest.collect::<Vec<_>>(), [7, 8]),
        other => panic!("expected Closed, got {other:?}"),
    }
    // A topic that did not exist before the close refuses as well.
    let s = String::from("late");
    assert_closed(bus.publish("new-topic", s.clone()).await, s);

    assert_eq!(
        bus.subscribe("t", |_: &u64| async {}).unwrap_err(),
        Error::Closed
    );
    assert!(rec.sub.is_finished());
    assert_eq!(rec.log.snapshot(), [1]);
}

#[tokio::test]
async fn publisher_waiting_for_room_when_close_begins_gets_its_message_back() {
    let bus = Bus::builder().capacity(2).build();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "slow", &gate);
    bus.publish("t", 0u64).await.unwrap();
    bus.publish("t", 1u64).await.unwrap();
    assert_eq!(slow.entered.recv().await, Some(0));

    let topic = bus.topic::<u64>("t").unwrap();
    let mut waiting = task::spawn(bus.publish("t", 2u64));
    assert_pending!(waiting.poll());
    let ctx = Context::new();
    let mut batch = task::spawn(topic.publish_batch(&ctx, vec![3u64, 4]));
    assert_pending!(batch.poll());

    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    assert!(
        waiting.is_woken(),
        "close did not wake the waiting publisher"
    );
    assert_closed(assert_ready!(waiting.poll()), 2);
    match assert_ready!(batch.poll()) {
        Err(PublishError::Closed(rest)) => assert_eq!(rest.collect::<Vec<_>>(), [3, 4]),
        other => panic!("expected Closed, got {other:?}"),
    }

    assert_pending!(close.poll());
    gate.open();
    close.await;
    assert_eq!(slow.log.snapshot(), [0, 1]);
    assert!(slow.sub.is_finished());
}

/// Current-thread: the ten publishes all go in before any handler runs. A watchdog turns a
/// handler's `close` that waits for itself into a failure instead of a hang (paused time would
/// not do: the drain keeps the runtime busy, so the clock never jumps).
#[tokio::test]
async fn close_from_inside_a_handler_returns_and_drains_everything() {
    let bus = Bus::builder().capacity(16).build();
    let (tx, closed_inside) = oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let closer_log = Log::new();
    let (b, logged) = (bus.clone(), closer_log.clone());
    let closer = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("closer"),
            move |m: &u64| {
                let (m, bus, logged) = (*m, b.clone(), logged.clone());
                let tx = if m == 1 {
                    tx.lock().unwrap().take()
                } else {
                    None
                };
                async move {
                    if let Some(tx) = tx {
                        bus.close().await;
                        let _ = tx.send(());
                    }
                    logged.push(m);
                }
            },
        )
        .unwrap();
    let other = recording(&bus, "t", "other");
    let drained = async {
        for m in 0..10u64 {
            bus.publish("t", m).await.unwrap();
        }
        closed_inside.await.unwrap();
        bus.close().await;
    };
    tokio::time::timeout(Duration::from_secs(60), drained)
        .await
        .expect("a handler's close waited for its own handler");
    assert_eq!(closer_log.snapshot(), (0..10).collect::<Vec<_>>());
    assert_eq!(other.log.snapshot(), (0..10).collect::<Vec<_>>());
    assert!(closer.is_finished() && other.sub.is_finished());
}

/// Two handlers (of the same topic, or of two topics) call `close` at the same time; each
/// must not wait for the other, which is itself stuck in `close`.
///
/// Paused time turns a deadlock into a prompt failure: once every task is idle, the clock
/// jumps to the timeout.
#[tokio::test(start_paused = true)]
async fn two_handlers_closing_at_once_do_not_deadlock() {
    for topics in [["t", "t"], ["a", "b"]] {
        let bus = Bus::new();
        let both_inside = Arc::new(Barrier::new(2));
        let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
        let mut subs = Vec::new();
        for (i, topic) in topics.iter().enumerate() {
            let (b, barrier, done_tx) = (bus.clone(), both_inside.clone(), done_tx.clone());
            let sub = bus
                .subscribe_with(
                    topic,
                    SubscribeOptions::new().name(format!("closer{i}")),
                    move |_: &u64| {
                        let (bus, barrier, done_tx) = (b.clone(), barrier.clone(), done_tx.clone());
                        async move {
                            barrier.wait().await;
                            bus.close().await;
                            let _ = done_tx.send(());
                        }
                    },
                )
                .unwrap();
            subs.push(sub);
        }
        for topic in ["a", "b", "t"] {
            if topics.contains(&topic) {
                bus.publish(topic, 0u64).await.unwrap();
            }
        }
        let both = async {
            done.recv().await.unwrap();
            done.recv().await.unwrap();
            bus.close().await;
        };
        tokio::time::timeout(Duration::from_secs(3600), both)
            .await
            .unwrap_or_else(|_| panic!("handlers closing at once deadlocked ({topics:?})"));
        assert!(subs.iter().all(|s| s.is_finished()));
    }
}

/// Handlers may still publish while the bus drains, so a chain of topics runs to its end:
/// here the relay is blocked publishing into a full topic when the close begins.
#[tokio::test]
async fn close_lets_a_chain_of_handlers_finish() {
    const N: u64 = 50;
    let bus = Bus::builder().capacity(64).build();
    let b = bus.clone();
    let relay = bus
        .subscribe("first", move |m: &u64| {
            let (m, bus) = (*m, b.clone());
            async move { bus.publish("second", m * 10).await }
        })
        .unwrap();
    let gate = Gate::closed();
    let mut end = common::gated_with(
        &bus,
        "second",
        SubscribeOptions::new().name("end").capacity(4),
        &gate,
    );
    for m in 0..N {
        bus.publish("first", m).await.unwrap();
    }
    // The relay fills "second" (4 slots, the first of them held by `end`) and then waits.
    assert_eq!(end.entered.recv().await, Some(0));
    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    assert_closed(bus.publish("first", N).await, N);

    gate.open();
    close.await;
    assert_eq!(
        end.log.snapshot(),
        (0..N).map(|m| m * 10).collect::<Vec<_>>(),
        "the chain lost messages while the bus drained"
    );
    let stats = relay.stats();
    assert_eq!((stats.handled, stats.errors), (N, 0), "{stats:?}");
}

#[tokio::test]
async fn dropping_the_close_future_does_not_reopen_the_bus() {
    let bus = Bus::builder().capacity(4).build();
    let gate = Gate::closed();
    let slow = gated(&bus, "t", "slow", &gate);
    for m in 0..3u64 {
        bus.publish("t", m).await.unwrap();
    }
    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    drop(close);

    assert!(bus.is_closed());
    assert_closed(bus.publish("t", 3u64).await, 3);
    assert_closed(bus.try_publish("t", 4u64), 4);
    assert_eq!(
        bus.subscribe("t", |_: &u64| async {}).unwrap_err(),
        Error::Closed
    );

    gate.open();
    bus.close().await;
    assert!(slow.sub.is_finished());
    assert_eq!(slow.log.snapshot(), [0, 1, 2]);
    assert_closed(bus.publish("t", 5u64).await, 5);
}

#[tokio::test(start_paused = true)]
async fn bounded_close_reports_the_stuck_subscriber() {
    let bus = Bus::builder().capacity(8).build();
    let stuck = bus
        .subscribe_with(
            "orders",
            SubscribeOptions::new().name("stuck"),
            |_: &u64| std::future::pending::<()>(),
        )
        .unwrap();
    let mut fine = recording(&bus, "orders", "fine");
    for m in 0..5u64 {
        bus.publish("orders", m).await.unwrap();
    }
    assert_eq!(take(&mut fine.handled, 5).await, [0, 1, 2, 3, 4]);

    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_millis(10)))
        .await;
    assert!(!report.complete, "{report:?}");
    assert_eq!(report.unfinished.len(), 1, "{report:?}");
    let left = &report.unfinished[0];
    assert_eq!(
        (left.topic.as_str(), left.subscriber.as_str(), left.messages),
        ("orders", "stuck", 5)
    );
    assert_eq!(
        report.to_string(),
        "not drained: 1 subscriber unfinished\n  orders / stuck: 5 unhandled, stopped\n"
    );
    // The stuck subscriber was aborted; the bus stays closed and a later close completes.
    stuck.unsubscribe().await;
    fine.sub.unsubscribe().await;
    let running: Vec<_> = bus.stats().topics[0]
        .subscribers
        .iter()
        .filter(|s| s.running)
        .map(|s| s.name.clone())
        .collect();
    assert!(running.is_empty(), "{running:?}");
    assert_closed(bus.publish("orders", 9u64).await, 9);
    let again = bus.close_with(&Context::new()).await;
    assert!(again.complete, "{again:?}");
    assert_eq!(
        again.to_string(),
        "drained: every accepted message was handled\n"
    );
}

#[tokio::test(start_paused = true)]
async fn bounded_close_by_token() {
    let bus = Bus::new();
    let _stuck = bus
        .subscribe_with("t", SubscribeOptions::new().name("stuck"), |_: &u64| {
            std::future::pending::<()>()
        })
        .unwrap();
    bus.publish("t", 0u64).await.unwrap();
    let token = CancellationToken::new();
    let ctx = Context::from(token.clone());
    let mut close = task::spawn(bus.close_with(&ctx));
    assert_pending!(close.poll());
    token.cancel();
    let report = close.await;
    assert!(!report.complete);
    assert_eq!(report.unfinished[0].subscriber, "stuck");
    assert_eq!(report.unfinished[0].messages, 1);
}

/// A handler closes the bus while another handler is blocked publishing into a topic that
/// the closer's own subscriber keeps full. Waiting in the closer would deadlock (the other
/// handler waits for room only the closer can make), so a close from a handler starts the
/// drain and returns; the drain then finishes everything.
#[tokio::test(start_paused = true)]
async fn close_from_a_handler_while_another_handler_publishes_to_it() {
    let bus = Bus::builder().capacity(2).build();
    let (b, closing) = (bus.clone(), Gate::closed());
    let gate = closing.clone();
    let _closer = bus
        .subscribe("t", move |m: &u64| {
            let (m, bus, gate) = (*m, b.clone(), gate.clone());
            async move {
                if m == 0 {
                    gate.pass().await;
                    bus.close().await;
                }
            }
        })
        .unwrap();
    let b = bus.clone();
    let _feeder = bus
        .subscribe("u", move |m: &u64| {
            let (m, bus) = (*m, b.clone());
            async move { bus.publish("t", m).await }
        })
        .unwrap();
    bus.publish("t", 0u64).await.unwrap();
    bus.publish("t", 1u64).await.unwrap();
    // The feeder blocks publishing 2 into the full "t"; then the closer closes.
    bus.publish("u", 2u64).await.unwrap();
    tokio::task::yield_now().await;
    closing.open();
    tokio::time::timeout(Duration::from_secs(3600), bus.close())
        .await
        .expect("close deadlocked");
}

/// A job for `close_waits_for_an_outside_publish_in_flight`: the one carrying `hold` blocks
/// in its `Drop` (run by the publisher that reuses its slot, inside that publish) until the
/// test lets it go.
struct Job {
    id: u64,
    hold: Hold,
}

type Hold = std::sync::Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>;

impl Drop for Job {
    fn drop(&mut self) {
        let hold = self
            .hold
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((entered, release)) = hold {
            let _ = entered.send(());
            let _ = release.recv();
        }
    }
}

/// An outside publish that had passed the closed check when `close` began, but had not yet
/// made its message visible, is waited for: its message is handled, and the chain its
/// handler starts (publishing to a downstream topic) finishes instead of finding that topic
/// closed.
#[tokio::test]
async fn close_waits_for_an_outside_publish_in_flight() {
    // One slot: the second job's publish reuses the first one's slot, and runs its `Drop`
    // between the publish's closed check and the store that makes the job visible.
    let bus = Bus::builder().capacity(1).build();
    // The old drain closed "down" before "jobs" (the map's order), so the chain broke.
    let down = bus.topic::<u64>("down").unwrap();
    let mut downstream = recording(&bus, "down", "downstream");
    let chain = bus
        .subscribe("jobs", move |job: &Job| {
            let (id, down) = (job.id, down.clone());
            async move { down.publish(id).await }
        })
        .unwrap();

    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let held = Job {
        id: 0,
        hold: Hold::new(Some((entered_tx, release_rx))),
    };
    bus.publish("jobs", held).await.unwrap();
    assert_eq!(take(&mut downstream.handled, 1).await, [0]);

    // A publisher from outside the handlers, on a plain thread: stalled in the `Drop`.
    let publisher = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            let job = Job {
                id: 1,
                hold: Hold::default(),
            };
            ringbus::ring::block_on(bus.publish("jobs", job)).is_ok()
        })
    };
    tokio::task::spawn_blocking(move || entered.recv())
        .await
        .unwrap()
        .expect("the publisher reached the Drop");

    // The close begins (its first poll decides what it can) while the publish is in flight.
    let close = bus.close();
    tokio::pin!(close);
    std::future::poll_fn(|cx| {
        let first = std::future::Future::poll(close.as_mut(), cx);
        assert!(first.is_pending(), "close finished early");
        std::task::Poll::Ready(())
    })
    .await;
    release.send(()).unwrap();
    assert!(publisher.join().unwrap(), "the in-flight publish failed");
    tokio::time::timeout(Duration::from_secs(30), close)
        .await
        .expect("close did not finish");

    assert_eq!(
        downstream.log.snapshot(),
        [0, 1],
        "the chain of job 1 broke"
    );
    assert_eq!(chain.stats().errors, 0);
}

/// A bounded close that ends while a handler is blocked without yielding (here: blocked on a
/// std channel on its worker thread) cannot abort that subscriber until the handler yields.
/// Its report must say what is true when it returns: that subscriber is still running; one
/// whose handler was waiting (yielding) was aborted.
///
/// The handler blocks in the kernel rather than spinning, and the waiting one says so from
/// its future's first poll: with a spinning handler, three busy threads on two cores let the
/// waiting subscriber's worker be preempted inside its first poll, and the close then rightly
/// reported that task running (1 run in 100).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_close_reports_a_handler_that_does_not_yield_as_running() {
    let bus = Bus::builder().capacity(8).build();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let blocked = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("blocked"),
            move |m: &u64| {
                let _ = entered_tx.send(*m);
                // Blocks its worker thread: no yield until released.
                if let Ok(released) = released.lock() {
                    let _ = released.recv();
                }
                std::future::ready(())
            },
        )
        .unwrap();
    let (waiting_tx, mut waiting_entered) = tokio::sync::mpsc::unbounded_channel();
    let waiting = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("waiting"),
            move |m: &u64| {
                let waiting_tx = waiting_tx.clone();
                let m = *m;
                // Pending for ever; says so from its first poll, just before returning.
                std::future::poll_fn(move |_| {
                    let _ = waiting_tx.send(m);
                    std::task::Poll::<()>::Pending
                })
            },
        )
        .unwrap();
    for m in 0..4u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert_eq!(entered.recv().await, Some(0));
    assert_eq!(waiting_entered.recv().await, Some(0));

    let token = CancellationToken::new();
    token.cancel();
    let report = bus.close_with(&Context::from(token)).await;
    let still_running = blocked.stats().running;
    for _ in 0..4 {
        let _ = release.send(()); // one per message left: the subscriber ends as its ring is read
    }

    assert!(!report.complete);
    let reported: Vec<_> = report
        .unfinished
        .iter()
        .map(|u| (u.subscriber.as_str(), u.running))
        .collect();
    assert!(
        still_running,
        "the blocked handler cannot have been aborted"
    );
    assert!(reported.contains(&("blocked", true)), "{report:?}");
    assert!(reported.contains(&("waiting", false)), "{report:?}");
    assert!(!waiting.stats().running, "{:?}", waiting.stats());
    // Released, the blocked subscriber reads what is left of its closed ring and ends.
    blocked.unsubscribe().await;
}

/// A bounded close's report says what is true when it returns. Here the close meets a handler
/// in the middle of its call, which returns during the close's grace: it handled that message,
/// and on its way published one more (a relay) to a topic whose subscriber the close had
/// already stopped while it was idle. A report made of the numbers seen when the subscribers
/// were stopped lists the handled message and misses the relayed one.
///
/// The handler returns once the close has stopped every other subscriber, plus 300 µs: well
/// inside the grace of 2 ms, after the close has looked at the counts. A worker preempted
/// past the grace makes a round inconclusive (the handler is then reported running, and
/// what it leaves is not settled), not wrong: rounds are run until one is conclusive, 20 at
/// most (on a quiet machine the first is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_close_reports_what_was_left_when_it_returns() {
    for _ in 0..20 {
        if report_round().await {
            return;
        }
    }
    panic!("20 rounds in a row had the handler preempted past the close's grace");
}

/// One round of `a_bounded_close_reports_what_was_left_when_it_returns`: false if it was
/// inconclusive.
async fn report_round() -> bool {
    let bus = Bus::builder().capacity(8).build();
    let (entered_tx, entered) = std::sync::mpsc::channel::<u64>();
    let (relayed_tx, mut relayed) = tokio::sync::mpsc::unbounded_channel();
    let (canary_tx, mut canary_handled) = tokio::sync::mpsc::unbounded_channel();
    let (stats, relay) = (bus.clone(), bus.clone());
    let _relaying = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("relaying"),
            move |m: &u64| {
                if *m == 0 {
                    let _ = entered_tx.send(*m);
                    // Holds its worker until the close stopped the others (bounded: a broken
                    // close makes the assertions below fail, not this test hang).
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while (running(&stats, "t", "canary") || running(&stats, "sink", "sink"))
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::yield_now();
                    }
                    let stopped = std::time::Instant::now();
                    while stopped.elapsed() < Duration::from_micros(300) {
                        std::hint::spin_loop();
                    }
                }
                let (relay, relayed_tx, m) = (relay.clone(), relayed_tx.clone(), *m);
                async move {
                    let _ = relayed_tx.send(relay.publish("sink", m).await.is_ok());
                }
            },
        )
        .unwrap();
    let _canary = bus
        .subscribe_with(
            "t",
            SubscribeOptions::new().name("canary"),
            move |m: &u64| {
                let _ = canary_tx.send(*m);
                std::future::ready(())
            },
        )
        .unwrap();
    let _sink = recording(&bus, "sink", "sink");
    for m in 0..4u64 {
        bus.publish("t", m).await.unwrap();
    }
    assert_eq!(
        entered.recv_timeout(Duration::from_secs(10)),
        Ok(0),
        "the relaying handler did not start"
    );
    for m in 0..4u64 {
        assert_eq!(canary_handled.recv().await, Some(m));
    }

    let token = CancellationToken::new();
    token.cancel();
    let report = bus.close_with(&Context::from(token)).await;
    assert!(!report.complete);
    let reported = |topic: &str, name: &str| {
        let found = report.unfinished.iter();
        found
            .filter(|u| u.topic == topic && u.subscriber == name)
            .map(|u| (u.messages, u.running))
            .next()
            .unwrap_or((0, false))
    };
    if reported("t", "relaying").1 {
        return false; // inconclusive: see above
    }
    // The handler returned: it published its relay (a handler may while the bus drains).
    assert_eq!(relayed.recv().await, Some(true), "the relay was refused");
    let after = bus.stats();
    let left = |topic: &str, name: &str| {
        let topic = after.topics.iter().find(|t| t.name == topic).unwrap();
        let sub = topic.subscribers.iter().find(|s| s.name == name).unwrap();
        topic.published - sub.handled
    };
    assert_eq!(left("t", "relaying"), 3, "{after:?}");
    assert_eq!(left("sink", "sink"), 1, "{after:?}");
    assert_eq!(reported("t", "relaying"), (3, false), "{report:?}");
    assert_eq!(reported("sink", "sink"), (1, false), "{report:?}");
    true
}

/// True while the subscriber `name` of `topic` runs.
fn running(bus: &Bus, topic: &str, name: &str) -> bool {
    bus.stats()
        .topics
        .iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| &t.subscribers)
        .any(|s| s.name == name && s.running)
}

/// A bounded close stops a subscriber after the handler call it is in, even in the middle of
/// what the subscriber took from its queue at once (see `subscriber::RUN`): here the handler
/// of message 0 blocks its thread while the close runs, with messages 1 to 3 taken in the
/// same batch; released, the subscriber handles nothing more.
#[test]
fn a_bounded_close_stops_a_subscriber_in_the_middle_of_what_it_took_at_once() {
    use std::sync::mpsc;
    let (runtime, release_worker) = common::runtime_with_held_worker();
    let bus = runtime.block_on(async { Bus::builder().capacity(8).build() });
    let (entered_tx, entered) = mpsc::channel::<u64>();
    let (release, released) = mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let sub = runtime
        .block_on(async {
            bus.subscribe("t", move |m: &u64| {
                let _ = entered_tx.send(*m);
                if *m == 0 {
                    let _ = released.lock().unwrap().recv();
                }
                std::future::ready(())
            })
        })
        .unwrap();
    for m in 0..4u64 {
        bus.try_publish("t", m).unwrap();
    }
    release_worker.send(()).unwrap();
    assert_eq!(entered.recv_timeout(Duration::from_secs(10)), Ok(0));

    // Closed from this thread (the worker is blocked in the handler). Its first poll stops
    // the subscriber and waits in the grace, on the grace's timer, which the blocked worker
    // does not drive: the handler is released only then, and the close goes on once the
    // subscriber's task ended.
    let token = CancellationToken::new();
    token.cancel();
    let ctx = Context::from(token);
    let report = runtime.block_on(async {
        let mut close = std::pin::pin!(bus.close_with(&ctx));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(close.as_mut(), cx))
        })
        .await;
        assert!(
            first.is_pending(),
            "the close did not wait for the handler's poll"
        );
        release.send(()).unwrap();
        close.await
    });
    assert!(!report.complete);
    runtime.block_on(sub.unsubscribe());

    assert_eq!(
        entered.try_iter().collect::<Vec<_>>(),
        Vec::<u64>::new(),
        "handled after the close stopped it"
    );
}

/// A handler may publish while *its own* bus drains (chains of topics finish), not into
/// another bus that is closed: a handler of bus X publishing to closed bus Y gets
/// `Closed(msg)` back, on a topic Y had and on one it never had.
#[tokio::test]
async fn a_handler_of_another_bus_cannot_publish_into_a_closed_bus() {
    let x = Bus::new();
    let y = Bus::new();
    let _old = y.subscribe("old", |_: &u64| async {}).unwrap();
    y.close().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let into = y.clone();
    let _relay = x
        .subscribe("go", move |_: &u64| {
            let (y, tx) = (into.clone(), tx.clone());
            async move {
                let _ = tx.send((y.publish("old", 1u64).await, y.publish("fresh", 2u64).await));
            }
        })
        .unwrap();
    x.publish("go", 0u64).await.unwrap();
    match rx.recv().await.expect("the handler ran") {
        (Err(PublishError::Closed(1)), Err(PublishError::Closed(2))) => {}
        other => panic!("expected Closed(1) and Closed(2), got {other:?}"),
    }
    x.close().await;
}

/// Only a handler of the bus itself cannot wait for its drain (it may be what the drain
/// waits for). A handler of another bus is an outsider: its `wait_idle` and `close_with` of
/// this bus wait for the drain as a task's would, and the report says it finished. (Both
/// used to return at once from any bus's handler: `wait_idle` before anything was handled,
/// `close_with` with `complete: false` and nothing listed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_of_another_bus_waits_for_this_bus_like_any_task() {
    let (x, y) = (Bus::new(), Bus::new());
    let gate = Gate::closed();
    let held = gated(&y, "t", "held", &gate);
    for m in 0..3u64 {
        y.publish("t", m).await.unwrap();
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (other, log) = (y.clone(), held.log.clone());
    let _closer = x
        .subscribe("go", move |_: &u64| {
            let (y, log, tx) = (other.clone(), log.clone(), tx.clone());
            async move {
                y.wait_idle().await;
                let handled_when_idle = log.len();
                let report = y
                    .close_with(&Context::new().with_timeout(Duration::from_secs(60)))
                    .await;
                let _ = tx.send((handled_when_idle, report));
            }
        })
        .unwrap();
    x.publish("go", 0u64).await.unwrap();
    gate.open();
    let (handled_when_idle, report) = rx.recv().await.expect("the handler ran");
    assert_eq!(handled_when_idle, 3, "wait_idle returned before y was idle");
    assert!(
        report.complete && report.unfinished.is_empty(),
        "{report:?}"
    );
    assert!(held.sub.is_finished());
    x.close().await;
}

/// `close` on a quiet bus while another task keeps making topics (nobody handles anything on
/// them) returns: a topic made during its look at the counts used to leave it waiting for a
/// subscriber's progress that never came. Counted rounds, each bounded by a watchdog. The
/// race is narrow (with the wake-up removed, fewer than one round in a hundred hangs on a
/// quiet machine), so the rounds are many; each takes a few milliseconds.
#[test]
fn close_returns_while_topics_are_being_made() {
    let runtime = common::multi_thread(2);
    for round in 0..1500 {
        runtime.block_on(async {
            let bus = Bus::builder().capacity(16).build();
            let subs: Vec<_> = (0..64)
                .map(|i| bus.subscribe(&format!("t{i}"), |_: &u64| async {}).unwrap())
                .collect();
            bus.publish("t0", 1u64).await.unwrap();
            let maker = {
                let bus = bus.clone();
                tokio::spawn(async move {
                    for i in 0..200u64 {
                        bus.topic::<u64>(&format!("new{i}")).unwrap();
                    }
                })
            };
            let closed = tokio::time::timeout(Duration::from_secs(10), bus.close()).await;
            maker.await.unwrap();
            assert!(closed.is_ok(), "round {round}: close never returned");
            drop(subs);
        });
    }
}

/// `wait_idle` while unrouted publishes (a topic nobody subscribes to) go on returns once
/// they stop: as for `close`, an unrouted publish seen moving a count during its look wakes
/// it to look again.
#[test]
fn wait_idle_returns_while_unrouted_publishes_go_on() {
    let runtime = common::multi_thread(2);
    for round in 0..200 {
        runtime.block_on(async {
            let bus = Bus::builder().capacity(16).build();
            let _a = bus.subscribe("a", |_: &u64| async {}).unwrap();
            bus.publish("a", 1u64).await.unwrap();
            let nobody = bus.topic::<u64>("nobody").unwrap();
            let publisher = tokio::spawn(async move {
                for i in 0..200u64 {
                    nobody.publish(i).await.unwrap();
                }
            });
            let idle = tokio::time::timeout(Duration::from_secs(10), bus.wait_idle()).await;
            publisher.await.unwrap();
            assert!(idle.is_ok(), "round {round}: wait_idle never returned");
            bus.close().await;
        });
    }
}

/// After `close` begins, every publish returns `Closed` (guarantee 5), also one that passed
/// the closed check before it and yielded on tokio's budget before it took the topic's
/// writer: the check that counts is made holding the writer (`admit`). The close is still
/// draining when the publish goes on, so the writer is still there to take.
#[tokio::test]
async fn a_publish_that_yielded_before_the_writer_is_refused_by_a_close_meanwhile() {
    let bus = Bus::new();
    let gate = Gate::closed();
    let mut slow = gated(&bus, "t", "slow", &gate);
    bus.publish("t", 0u64).await.unwrap();
    assert_eq!(slow.entered.recv().await, Some(0));

    let topic = bus.topic::<u64>("t").unwrap();
    let mut publishing = task::spawn(topic.publish(1));
    // With the task's budget spent, the publish passes the closed check and yields before
    // it takes the writer.
    std::future::poll_fn(|cx| {
        while tokio::task::coop::poll_proceed(cx)
            .map(|unit| unit.made_progress())
            .is_ready()
        {}
        assert_pending!(publishing.poll());
        std::task::Poll::Ready(())
    })
    .await;
    assert_eq!(topic.published(), 1);

    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    tokio::task::yield_now().await; // a fresh budget
    assert_closed(publishing.await, 1);
    assert_eq!(topic.published(), 1, "published after the close began");

    gate.open();
    close.await;
    assert_eq!(slow.log.snapshot(), [0]);
}

/// `unsubscribe` cuts at its call: a bounded close counts what a leaving subscriber owes as
/// what was queued for it at the cut, not what was published since (issue 34). Here it owes
/// 0..4, handles 0 and 1, and is stopped in the call on 2: 2 left, though 9 were published.
#[tokio::test(start_paused = true)]
async fn a_bounded_close_counts_a_leaving_subscriber_up_to_its_cut() {
    let bus = Bus::builder().capacity(16).build();
    let gate = Gate::closed();
    let mut leaving = gated(&bus, "t", "leaving", &gate);
    for m in 0..4u64 {
        bus.publish("t", m).await.unwrap();
    }
    // The first poll makes the cut: it owes 0..4.
    let mut unsubscribing = task::spawn(leaving.sub.unsubscribe());
    assert_pending!(unsubscribing.poll());
    // Published after the cut: not for it.
    for m in 4..9u64 {
        bus.publish("t", m).await.unwrap();
    }
    gate.release(2);
    assert_eq!(take(&mut leaving.entered, 3).await, [0, 1, 2]);
    let lag = bus.stats().topics[0].subscribers[0].lag;
    assert_eq!(
        lag, 2,
        "the lag of a leaving subscriber counts past its cut"
    );

    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_millis(20)))
        .await;
    assert!(!report.complete, "{report:?}");
    let left: Vec<_> = report
        .unfinished
        .iter()
        .map(|u| (u.subscriber.as_str(), u.messages, u.running))
        .collect();
    assert_eq!(left, [("leaving", 2, false)], "{report:?}");
    unsubscribing.await;
    assert_eq!(leaving.log.snapshot(), [0, 1]);
}

/// A handler that blocks its thread (`std::thread::sleep`) on a `current_thread` runtime
/// holds up every other task of that runtime, the close among them: the close's deadline
/// passes while the handler blocks, and the close can look only once the handler has
/// returned (issue 33). Its report says what is true then: here every message was handled,
/// so the drain is complete. It said `complete: false` with no subscriber listed ("not
/// drained: no subscriber listed"), which no reader can act on.
#[tokio::test(flavor = "current_thread")]
async fn a_bounded_close_held_up_by_a_blocking_handler_reports_what_is_true_then() {
    let bus = Bus::builder().capacity(8).build();
    let blocking = bus
        .subscribe_with("t", SubscribeOptions::new().name("blocking"), |_: &u64| {
            std::thread::sleep(Duration::from_millis(50));
            std::future::ready(())
        })
        .unwrap();
    for m in 0..4u64 {
        bus.publish("t", m).await.unwrap();
    }
    // The four calls take 200 ms, all in the subscriber's first poll: the close's 20 ms
    // pass meanwhile.
    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_millis(20)))
        .await;
    assert_eq!(blocking.stats().handled, 4);
    assert!(
        report.complete && report.unfinished.is_empty(),
        "{report:?}: {report}"
    );
    assert_eq!(
        report.to_string(),
        "drained: every accepted message was handled\n"
    );
    assert!(blocking.is_finished());
}
