//! Pattern subscriptions (`Bus::subscribe_pattern`): every guarantee of a named subscriber,
//! per matched topic, for the topics that exist and those made later; types checked when a
//! pattern and a topic meet.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

use common::{Gate, Log};
use ringbus::{subscriber, Batch, Bus, Error, PublishError, SubscribeOptions, Subscription};
use tokio_test::{assert_pending, task};

/// A pattern subscriber that logs `(topic, message)`.
fn logging(bus: &Bus, pattern: &str) -> (Subscription, Log<(String, u64)>) {
    let log = Log::new();
    let logged = log.clone();
    let sub = bus
        .subscribe_pattern(pattern, move |topic: &str, m: &u64| {
            logged.push((topic.to_string(), *m));
            async {}
        })
        .expect("subscribe_pattern");
    (sub, log)
}

/// What each topic delivered, in order.
fn by_topic(log: &[(String, u64)]) -> BTreeMap<String, Vec<u64>> {
    let mut topics = BTreeMap::<String, Vec<u64>>::new();
    for (topic, m) in log {
        topics.entry(topic.clone()).or_default().push(*m);
    }
    topics
}

/// Topics that exist and topics made later are both followed, each in its publish order;
/// topics that do not match are not, and the subscription lists what it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_follows_present_and_later_topics_in_order_per_topic() {
    const N: u64 = 500;
    let bus = Bus::builder().capacity(8).build();
    let before = bus.topic::<u64>("orders.created").unwrap();
    let (sub, log) = logging(&bus, "orders.*");
    let publishers: Vec<_> = [
        "orders.created",
        "orders.paid",
        "orders.eu.paid",
        "billing.paid",
    ]
    .into_iter()
    .map(|name| {
        let bus = bus.clone();
        tokio::spawn(async move {
            for i in 0..N {
                bus.publish(name, i).await.unwrap();
            }
        })
    })
    .collect();
    for p in publishers {
        p.await.unwrap();
    }
    bus.close().await;
    let topics = by_topic(&log.snapshot());
    let expected: Vec<u64> = (0..N).collect();
    assert_eq!(
        topics.keys().collect::<Vec<_>>(),
        ["orders.created", "orders.paid"]
    );
    for (topic, got) in &topics {
        assert_eq!(got, &expected, "{topic}: lost, repeated or reordered");
    }
    let mut followed = sub.topics();
    followed.sort();
    assert_eq!(followed, ["orders.created", "orders.paid"]);
    let stats = sub.stats();
    assert_eq!((stats.handled, stats.lag, stats.running), (2 * N, 0, false));
    assert!(sub.is_finished());
    // Each topic's follower goes by the pattern subscription's name.
    for topic in bus
        .stats()
        .topics
        .iter()
        .filter(|t| t.name.starts_with("orders."))
    {
        let names: Vec<_> = topic.subscribers.iter().map(|s| s.name.as_str()).collect();
        if topic.name == "orders.eu.paid" {
            assert!(names.is_empty(), "{names:?}");
        } else {
            assert_eq!(names, [sub.name()], "{}", topic.name);
        }
    }
    drop(before);
}

/// `>` takes every token left (at least one); `*` exactly one, anywhere.
#[tokio::test]
async fn wildcards_match_as_in_nats() {
    let bus = Bus::new();
    let (rest, rest_log) = logging(&bus, "orders.>");
    let (middle, middle_log) = logging(&bus, "*.eu.*");
    for (i, name) in [
        "orders",
        "orders.eu.paid",
        "orders.created",
        "users.eu.joined",
        "eu.x",
    ]
    .into_iter()
    .enumerate()
    {
        bus.publish(name, i as u64).await.unwrap();
    }
    bus.close().await;
    let names = |log: &Log<(String, u64)>| -> Vec<String> {
        log.snapshot().into_iter().map(|(t, _)| t).collect()
    };
    let mut got = names(&rest_log);
    got.sort();
    assert_eq!(got, ["orders.created", "orders.eu.paid"]);
    let mut got = names(&middle_log);
    got.sort();
    assert_eq!(got, ["orders.eu.paid", "users.eu.joined"]);
    drop((rest, middle));
}

/// Guarantee 2 for topics made while the pattern subscribes: every topic made by racing
/// threads, before or after, is followed from the moment `subscribe_pattern` returns.
/// Run many times: a topic whose insert slipped between the pattern's walk of the topics and
/// its place in the list would miss the message published to it afterwards. One shard, so
/// that the makers and the walk queue on one lock, and a maker that looked at the patterns
/// may wait there while the walk goes by.
#[test]
fn topics_made_while_a_pattern_subscribes_are_all_followed() {
    const ROUNDS: usize = 200;
    const PER_THREAD: usize = 64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for round in 0..ROUNDS {
        let bus = Bus::builder().shards(1).build();
        let start = Arc::new(Barrier::new(3));
        let makers: Vec<_> = (0..2)
            .map(|t| {
                let (bus, start) = (bus.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..PER_THREAD {
                        bus.topic::<u64>(&format!("race.{t}-{i}")).unwrap();
                    }
                })
            })
            .collect();
        let (sub, log) = runtime.block_on(async {
            start.wait();
            logging(&bus, "race.*")
        });
        for m in makers {
            m.join().unwrap();
        }
        runtime.block_on(async {
            for t in 0..2 {
                for i in 0..PER_THREAD {
                    bus.publish(&format!("race.{t}-{i}"), 1u64).await.unwrap();
                }
            }
            bus.close().await;
        });
        let got = by_topic(&log.snapshot());
        assert_eq!(
            got.len(),
            2 * PER_THREAD,
            "round {round}: {} topics missed",
            2 * PER_THREAD - got.len()
        );
        assert_eq!(sub.topics().len(), 2 * PER_THREAD, "round {round}");
    }
}

/// A topic made where no runtime is reachable (a plain thread) is followed on the runtime
/// the pattern subscribed on.
#[test]
fn topics_made_outside_a_runtime_are_followed_on_the_patterns_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bus = Bus::new();
    let (sub, log) = runtime.block_on(async { logging(&bus, "jobs.*") });
    let made = bus.clone();
    std::thread::spawn(move || made.topic::<u64>("jobs.import").unwrap())
        .join()
        .unwrap();
    runtime.block_on(async {
        bus.publish("jobs.import", 7u64).await.unwrap();
        bus.close().await;
    });
    assert_eq!(log.snapshot(), [("jobs.import".to_string(), 7)]);
    assert!(sub.is_finished());
}

/// Guarantee 5: close drains what was queued on every matched topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_drains_every_matched_topic() {
    const N: u64 = 1_000;
    let bus = Bus::builder().capacity(2_048).build();
    let gate = Gate::closed();
    let log = Log::new();
    let (held, logged) = (gate.clone(), log.clone());
    let sub = bus
        .subscribe_pattern("q.*", move |topic: &str, m: &u64| {
            let (held, logged, entry) = (held.clone(), logged.clone(), (topic.to_string(), *m));
            async move {
                held.pass().await;
                logged.push(entry);
            }
        })
        .unwrap();
    for topic in ["q.a", "q.b", "q.c"] {
        assert_eq!(bus.publish_batch(topic, 0..N).await.unwrap(), N);
    }
    let close = tokio::spawn({
        let bus = bus.clone();
        async move { bus.close().await }
    });
    gate.open();
    close.await.unwrap();
    let topics = by_topic(&log.snapshot());
    assert_eq!(topics.len(), 3);
    for (topic, got) in topics {
        assert!(
            got.iter().copied().eq(0..N),
            "{topic} was not drained in order"
        );
    }
    assert!(sub.is_finished());
    // A topic made after the close is not followed, and publishing to it is refused.
    assert!(matches!(
        bus.publish("q.late", 1u64).await,
        Err(PublishError::Closed(1))
    ));
}

/// Guarantee 6: a handler that fails or panics on one topic goes on, there and elsewhere,
/// and the subscription's counters sum its topics'.
#[tokio::test]
async fn failures_stay_local_to_the_message() {
    let bus = Bus::new();
    let log = Log::new();
    let logged = log.clone();
    let sub = bus
        .subscribe_pattern("f.*", move |topic: &str, m: &u64| {
            let (logged, entry) = (logged.clone(), (topic.to_string(), *m));
            async move {
                match entry.1 {
                    1 => panic!("planted panic"),
                    2 => Err("planted error"),
                    _ => {
                        logged.push(entry);
                        Ok(())
                    }
                }
            }
        })
        .unwrap();
    for topic in ["f.a", "f.b"] {
        for m in 0..4u64 {
            bus.publish(topic, m).await.unwrap();
        }
    }
    bus.close().await;
    let topics = by_topic(&log.snapshot());
    assert_eq!(topics["f.a"], [0, 3]);
    assert_eq!(topics["f.b"], [0, 3]);
    let stats = sub.stats();
    assert_eq!((stats.handled, stats.errors, stats.panics), (8, 2, 2));
}

/// Guarantee 7, met either way: a pattern meeting a topic of another type is refused with
/// both names and both types; a topic of another type meeting a pattern is not made, and the
/// message comes back.
#[tokio::test]
async fn a_pattern_and_a_topic_of_another_type_are_an_error_where_they_meet() {
    let bus = Bus::new();
    bus.topic::<u64>("m.ok").unwrap();
    bus.topic::<String>("m.text").unwrap();
    match bus.subscribe_pattern("m.*", async |_: &str, _: &u64| {}) {
        Err(Error::PatternMismatch(e)) => {
            assert_eq!((&*e.pattern, &*e.topic), ("m.*", "m.text"));
            assert_eq!(e.topic_type, std::any::type_name::<String>());
            assert_eq!(e.pattern_type, std::any::type_name::<u64>());
        }
        other => panic!("{other:?}"),
    }
    // All or nothing: the topic of the right type got no subscriber either.
    let ok = bus
        .stats()
        .topics
        .into_iter()
        .find(|t| t.name == "m.ok")
        .unwrap();
    assert!(ok.subscribers.is_empty(), "{:?}", ok.subscribers);

    let (sub, log) = logging(&bus, "n.*");
    match bus.publish("n.text", "hello".to_string()).await {
        Err(PublishError::PatternMismatch(msg, e)) => {
            assert_eq!(msg, "hello");
            assert_eq!((&*e.pattern, &*e.topic), ("n.*", "n.text"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        bus.topic::<String>("n.text"),
        Err(Error::PatternMismatch(_))
    ));
    assert!(!bus.stats().topics.iter().any(|t| t.name == "n.text"));
    // The pattern's own type still makes the topic.
    bus.publish("n.text", 5u64).await.unwrap();
    bus.close().await;
    assert_eq!(log.snapshot(), [("n.text".to_string(), 5)]);
    drop(sub);
}

/// Guarantee 2's cut and guarantee 8: `unsubscribe` handles what was in each topic at the
/// call, and follows no topic made afterwards.
#[tokio::test]
async fn unsubscribe_cuts_every_topic_and_stops_following() {
    let bus = Bus::builder().capacity(64).build();
    let gate = Gate::closed();
    let log = Log::new();
    let (held, logged) = (gate.clone(), log.clone());
    let sub = bus
        .subscribe_pattern("u.*", move |topic: &str, m: &u64| {
            let (held, logged, entry) = (held.clone(), logged.clone(), (topic.to_string(), *m));
            async move {
                held.pass().await;
                logged.push(entry);
            }
        })
        .unwrap();
    for topic in ["u.a", "u.b"] {
        bus.publish_batch(topic, 0..10u64).await.unwrap();
    }
    // Its first poll cuts every topic (the gate holds every handler, so it then waits).
    let mut leaving = task::spawn(sub.unsubscribe());
    assert_pending!(leaving.poll());
    // Published after the call: not for it.
    for topic in ["u.a", "u.b", "u.c"] {
        bus.publish_batch(topic, 10..20u64).await.unwrap();
    }
    gate.open();
    // A watchdog: a follower that was never cut would keep the unsubscribe waiting for good.
    tokio::time::timeout(std::time::Duration::from_secs(10), leaving)
        .await
        .expect("unsubscribe did not end: a topic was not cut");
    let topics = by_topic(&log.snapshot());
    assert_eq!(topics.keys().collect::<Vec<_>>(), ["u.a", "u.b"]);
    for (topic, got) in topics {
        assert!(got.iter().copied().eq(0..10), "{topic}: {got:?}");
    }
    let c = bus
        .stats()
        .topics
        .into_iter()
        .find(|t| t.name == "u.c")
        .unwrap();
    assert!(
        c.subscribers.is_empty(),
        "u.c was followed after unsubscribe"
    );
}

/// A name with a wildcard token is never made into a topic (it is a pattern): `subscribe`,
/// `topic` and `publish` refuse it, the last with the message back. A malformed pattern says
/// what is wrong.
#[tokio::test]
async fn patterns_and_names_are_not_mixed_up() {
    let bus = Bus::new();
    match bus.subscribe("orders.*", async |_: &u64| {}) {
        Err(Error::WildcardTopic(name)) => assert_eq!(&*name, "orders.*"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        bus.topic::<u64>("orders.>"),
        Err(Error::WildcardTopic(_))
    ));
    match bus.publish("orders.*", 7u64).await {
        Err(e @ PublishError::WildcardTopic(7, _)) => {
            assert!(e.to_string().contains("subscribe_pattern"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(bus.stats().topics.is_empty());
    match bus.subscribe_pattern("orders.>.paid", async |_: &str, _: &u64| {}) {
        Err(Error::InvalidPattern { pattern, reason }) => {
            assert_eq!(&*pattern, "orders.>.paid");
            assert!(reason.contains("last"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    match bus.subscribe_pattern_with(
        "orders.*",
        SubscribeOptions::new().capacity(4),
        async |_: &str, _: &u64| {},
    ) {
        Err(Error::Unsupported(why)) => assert!(why.contains("capacity"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// Outside a runtime a pattern cannot subscribe (its followers would have nowhere to run).
#[test]
fn a_pattern_needs_a_runtime() {
    let bus = Bus::new();
    assert!(matches!(
        bus.subscribe_pattern("a.*", async |_: &str, _: &u64| {}),
        Err(Error::NoRuntime)
    ));
}

mod made_by_the_macro {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static SUM: AtomicU64 = AtomicU64::new(0);

    #[subscriber("sums.*")]
    async fn add(n: &u64) {
        SUM.fetch_add(*n, Ordering::Relaxed);
    }

    /// `#[subscriber("sums.*")]` registers a pattern subscription.
    #[tokio::test]
    async fn a_subscriber_function_with_a_pattern_follows_its_topics() {
        let bus = Bus::new();
        let sub = bus.register(add).unwrap();
        assert_eq!(sub.topic(), "sums.*");
        bus.publish("sums.a", 1u64).await.unwrap();
        bus.publish("sums.b", 2u64).await.unwrap();
        bus.publish("other", 4u64).await.unwrap();
        bus.close().await;
        assert_eq!(SUM.load(Ordering::Relaxed), 3);
        assert_eq!(sub.stats().handled, 2);
    }
}

/// A pattern subscription never unsubscribed leaves nothing behind once the bus is closed and
/// dropped: every message is dropped (the bus's list and the pattern do not keep each other).
#[tokio::test]
async fn a_dropped_bus_drops_its_patterns_and_their_messages() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
    let bus = Bus::new();
    let sub = bus
        .subscribe_pattern("d.*", async |_: &str, _: &Counted| {})
        .unwrap();
    for topic in ["d.a", "d.b"] {
        for _ in 0..5 {
            bus.publish(topic, Counted).await.ok().unwrap();
        }
    }
    drop(sub); // left running, as a dropped `Subscription` is
    bus.close().await;
    drop(bus);
    assert_eq!(DROPPED.load(Ordering::Relaxed), 10);
}

/// Options a topic would refuse, or a topic that refuses another subscriber, refuse the whole
/// subscription at once: nothing is followed, then or later.
#[tokio::test]
async fn a_pattern_that_cannot_follow_every_topic_is_refused_whole() {
    let bus = Bus::builder().max_subscribers(1).build();
    let dead = bus.topic::<ringbus::DeadLetter<String>>("dead").unwrap();
    match bus.subscribe_pattern_with(
        "r.*",
        SubscribeOptions::new().dead_letter(&dead),
        async |_: &str, _: &u64| {},
    ) {
        Err(Error::TypeMismatch(e)) => assert_eq!(&*e.topic, "dead"),
        other => panic!("{other:?}"),
    }
    let _full = bus.subscribe("r.full", async |_: &u64| {}).unwrap();
    bus.topic::<u64>("r.free").unwrap();
    match bus.subscribe_pattern("r.*", async |_: &str, _: &u64| {}) {
        Err(Error::TooManySubscribers { topic, max }) => {
            assert_eq!((&*topic, max), ("r.full", 1));
        }
        other => panic!("{other:?}"),
    }
    bus.topic::<u64>("r.later").unwrap();
    // A follower started on r.free before r.full refused was cut at once: it ends without
    // handling anything (a watchdog bounds the wait), and no later topic is followed.
    let running = |name: &str| {
        let stats = bus.stats();
        let topic = stats.topics.iter().find(|t| t.name == name).unwrap();
        topic.subscribers.iter().filter(|s| s.running).count()
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while running("r.free") > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the follower of a refused pattern kept running");
    assert_eq!((running("r.full"), running("r.later")), (1, 0));
    let stats = bus.stats();
    let later = stats.topics.iter().find(|t| t.name == "r.later").unwrap();
    assert!(later.subscribers.is_empty());
}

/// `unsubscribe` called from one of the pattern's own handlers returns at once, even while
/// another of its topics' handlers is held: it waits for none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_a_pattern_from_its_own_handler_returns() {
    use std::sync::Mutex;
    let bus = Bus::new();
    let gate = Gate::closed();
    let own: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let (done, returned) = tokio::sync::oneshot::channel::<()>();
    let done = Arc::new(Mutex::new(Some(done)));
    let (held, slot) = (gate.clone(), own.clone());
    let sub = bus
        .subscribe_pattern("h.*", move |topic: &str, _: &u64| {
            let (held, slot, done, held_topic) =
                (held.clone(), slot.clone(), done.clone(), topic == "h.held");
            async move {
                if held_topic {
                    held.pass().await;
                    return;
                }
                let sub = slot.lock().unwrap().take();
                if let Some(sub) = sub {
                    sub.unsubscribe().await;
                    if let Some(done) = done.lock().unwrap().take() {
                        let _ = done.send(());
                    }
                }
            }
        })
        .unwrap();
    *own.lock().unwrap() = Some(sub);
    bus.publish("h.held", 1u64).await.unwrap();
    bus.publish("h.leave", 1u64).await.unwrap();
    // A watchdog: waiting for the held topic's task would never return.
    tokio::time::timeout(std::time::Duration::from_secs(10), returned)
        .await
        .expect("unsubscribe from inside a handler waited for another topic's task")
        .unwrap();
    gate.open();
    bus.close().await;
}

/// Guarantee 4 for a pattern subscriber: a slow follower holds its topic's publishers (and
/// only its topic's), `try_publish` says `Full` at once, and room wakes the waiting publish.
#[tokio::test]
async fn a_slow_pattern_subscriber_holds_its_topics_publishers() {
    let bus = Bus::builder().capacity(4).build();
    let gate = Gate::closed();
    let (tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let passes = gate.clone();
    let _slow = bus
        .subscribe_pattern("jobs.*", move |topic: &str, m: &u64| {
            let _ = tx.send((topic.to_string(), *m));
            let gate = (topic == "jobs.a").then(|| passes.clone());
            async move {
                if let Some(gate) = gate {
                    gate.pass().await;
                }
            }
        })
        .unwrap();
    for m in 0..4u64 {
        bus.try_publish("jobs.a", m).unwrap();
    }
    assert_eq!(entered.recv().await, Some(("jobs.a".to_string(), 0)));
    match bus.try_publish("jobs.a", 4u64) {
        Err(PublishError::Full(4)) => {}
        other => panic!("expected Full(4), got {other:?}"),
    }
    let mut publish = task::spawn(bus.publish("jobs.a", 4u64));
    assert_pending!(publish.poll());
    // Another topic of the pattern has its own ring and follower: not held by this one.
    bus.try_publish("jobs.b", 0u64).unwrap();
    assert_eq!(entered.recv().await, Some(("jobs.b".to_string(), 0)));

    gate.release(1);
    assert_eq!(entered.recv().await, Some(("jobs.a".to_string(), 1)));
    assert!(publish.is_woken(), "room did not wake the waiting publish");
    assert!(matches!(publish.poll(), std::task::Poll::Ready(Ok(()))));
    gate.open();
    bus.close().await;
    let mut rest = Vec::new();
    while let Ok(seen) = entered.try_recv() {
        rest.push(seen);
    }
    let a = |m: u64| ("jobs.a".to_string(), m);
    assert_eq!(rest, [a(2), a(3), a(4)]);
}

/// A pattern batch subscriber: batches of present and later topics, each told its topic and
/// in order per topic; the options a batch subscriber cannot honour are refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_batch_subscriber_gets_each_topics_batches_in_order() {
    let bus = Bus::new();
    bus.topic::<u64>("jobs.early").unwrap();
    let log = Log::new();
    let logged = log.clone();
    let sub = bus
        .subscribe_pattern_batch(
            "jobs.*",
            SubscribeOptions::new(),
            move |topic: &str, batch: Batch<'_, u64>| {
                assert!(!batch.is_empty());
                for m in batch.iter() {
                    logged.push((topic.to_string(), *m));
                }
                async {}
            },
        )
        .unwrap();
    for m in 0..500u64 {
        bus.publish("jobs.early", m).await.unwrap();
        bus.publish("jobs.late", m).await.unwrap();
        bus.publish("other", m).await.unwrap();
    }
    bus.close().await;
    let topics = by_topic(&log.snapshot());
    assert_eq!(
        topics.keys().collect::<Vec<_>>(),
        ["jobs.early", "jobs.late"]
    );
    for (topic, ms) in &topics {
        assert_eq!(*ms, (0..500).collect::<Vec<_>>(), "{topic}");
    }
    assert_eq!(sub.stats().handled, 1_000);

    let bus = Bus::new();
    let retrying = SubscribeOptions::new().retry(ringbus::RetryPolicy::new(2));
    let refused =
        bus.subscribe_pattern_batch("jobs.*", retrying, |_: &str, _: Batch<'_, u64>| async {});
    assert!(matches!(refused, Err(Error::Unsupported(_))), "{refused:?}");
}
