//! Removing topics (`BusBuilder::removable_topics`, `Bus::remove`, `Bus::remove_unused`): a
//! topic goes only when nothing holds it, its memory and its messages go with it, and a name
//! removed is made anew by the next publish or subscribe. Every holder keeps its topic, and
//! removals racing subscribes and publishes by name lose nothing.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Waker};
use std::time::Duration;

use ringbus::{Bus, RemoveError};

use crate::common::{gated, Gate};

fn holders(bus: &Bus, name: &str) -> usize {
    match bus.remove(name) {
        Err(RemoveError::InUse { holders, .. }) => holders,
        other => panic!("expected InUse for {name}, got {other:?}"),
    }
}

fn names(bus: &Bus) -> Vec<String> {
    let mut names: Vec<String> = bus.stats().topics.into_iter().map(|t| t.name).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_topic_nothing_holds_is_removed_and_made_anew() {
    let bus = Bus::builder().removable_topics().build();
    bus.publish("order.1", 1u64).await.unwrap();
    bus.publish("order.2", 2u64).await.unwrap();
    bus.remove("order.1").unwrap();
    assert_eq!(names(&bus), ["order.2"]);
    assert_eq!(
        bus.remove("order.1"),
        Err(RemoveError::NoSuchTopic("order.1".into()))
    );
    // The name is free again, for any type: a new topic, its counts from zero.
    bus.publish("order.1", "now a string").await.unwrap();
    let stats = bus.stats();
    let made = stats.topics.iter().find(|t| t.name == "order.1").unwrap();
    assert_eq!(made.published, 1);
    assert_eq!(bus.remove_unused(), 2);
    assert!(names(&bus).is_empty());
    bus.close().await;
}

#[tokio::test]
async fn a_bus_not_built_for_it_refuses_and_says_how() {
    let bus = Bus::new();
    bus.publish("t", 1u64).await.unwrap();
    let e = bus.remove("t").unwrap_err();
    assert_eq!(e, RemoveError::NotRemovable("t".into()));
    assert_eq!(
        e.to_string(),
        "topic \"t\" was not removed: this bus's topics cannot be removed; build it with \
         Bus::builder().removable_topics()"
    );
    assert_eq!(bus.remove_unused(), 0);
    assert_eq!(names(&bus), ["t"]);
}

/// A subscriber, a `Topic` handle, a pattern subscription that follows the topic, and a
/// publish by name waiting for room each hold it; once each lets go, it can be removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_holder_keeps_its_topic() {
    let bus = Bus::builder().removable_topics().capacity(1).build();

    let handle = bus.topic::<u64>("a").unwrap();
    assert_eq!(holders(&bus, "a"), 1);
    drop(handle);
    bus.remove("a").unwrap();

    let gate = Gate::closed();
    let mut sub = gated(&bus, "b", "b", &gate);
    let with_sub = holders(&bus, "b");
    assert!(with_sub >= 1);
    // Message 0 in the handler holds the topic's one slot: message 1 waits for room.
    bus.publish("b", 0u64).await.unwrap();
    assert_eq!(sub.entered.recv().await, Some(0));
    let mut waiting = Box::pin(bus.publish("b", 1u64));
    let mut cx = TaskContext::from_waker(Waker::noop());
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        holders(&bus, "b"),
        with_sub + 1,
        "the waiting publish holds it"
    );
    drop(waiting);
    assert_eq!(holders(&bus, "b"), with_sub);
    gate.open();
    sub.sub.unsubscribe().await;
    assert_eq!(
        sub.log.snapshot(),
        [0],
        "the dropped publish reached no one"
    );
    bus.remove("b").unwrap();

    let pattern = bus
        .subscribe_pattern("c.*", async |_: &str, _: &u64| {})
        .unwrap();
    bus.publish("c.1", 1u64).await.unwrap();
    assert!(holders(&bus, "c.1") >= 1);
    assert_eq!(bus.remove_unused(), 0);
    pattern.unsubscribe().await;
    assert_eq!(bus.remove_unused(), 1);
    assert!(names(&bus).is_empty());
    bus.close().await;
}

/// Messages left in a removed topic's ring (handled, not yet overwritten) are dropped with
/// it, each once.
#[tokio::test]
async fn a_removed_topics_messages_are_dropped_with_it() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let bus = Bus::builder().removable_topics().capacity(16).build();
    let sub = bus.subscribe("t", async |_: &Counted| {}).unwrap();
    for _ in 0..5 {
        bus.publish("t", Counted(drops.clone())).await.unwrap();
    }
    sub.unsubscribe().await;
    assert_eq!(drops.load(Ordering::SeqCst), 0, "still in the ring's slots");
    bus.remove("t").unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 5);
    bus.close().await;
}

/// A removal racing subscribes and publishes by name on other threads never takes a topic
/// from under a subscriber: each round's subscriber handles every message published after
/// it subscribed, while another thread keeps removing the name (and does remove it between
/// rounds, so that each round makes the topic anew).
#[test]
fn removals_racing_subscribes_and_publishes_lose_nothing() {
    const ROUNDS: u64 = 300;
    let runtime = crate::common::multi_thread(2);
    let bus = Bus::builder().removable_topics().build();
    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicUsize::new(0));
    let remover = {
        let (bus, stop, removed) = (bus.clone(), stop.clone(), removed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if bus.remove("t").is_ok() {
                    removed.fetch_add(1, Ordering::Relaxed);
                }
                removed.fetch_add(bus.remove_unused(), Ordering::Relaxed);
            }
        })
    };
    runtime.block_on(async {
        let watchdog = tokio::time::timeout(Duration::from_secs(120), async {
            for round in 0..ROUNDS {
                // Between rounds the topic has no holder: publishes by name land in whichever
                // topic is there, or make it; they reach nobody.
                bus.publish("t", u64::MAX).await.unwrap();
                let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
                let log = seen.clone();
                let sub = bus
                    .subscribe("t", move |m: &u64| {
                        log.lock().unwrap().push(*m);
                        async {}
                    })
                    .unwrap();
                let sent: Vec<u64> = (0..20).map(|i| round * 100 + i).collect();
                for &m in &sent {
                    if m % 2 == 0 {
                        bus.publish("t", m).await.unwrap();
                    } else {
                        bus.try_publish("t", m).unwrap();
                    }
                }
                // Read while the subscriber holds the topic, so that no removal of it is
                // counted yet.
                let before = removed.load(Ordering::Relaxed);
                sub.unsubscribe().await;
                assert_eq!(*seen.lock().unwrap(), sent, "round {round}");
                // Nothing holds the topic now: let the remover take it before the next round
                // makes it again (it keeps trying through the next subscribe too).
                while removed.load(Ordering::Relaxed) == before {
                    tokio::task::yield_now().await;
                }
            }
        });
        watchdog.await.expect("the rounds finished within 120 s");
    });
    stop.store(true, Ordering::Relaxed);
    remover.join().unwrap();
    assert!(removed.load(Ordering::Relaxed) >= ROUNDS as usize);
}

/// Topics made after them, each `n` a publish to a new name: enough for the idle policy's
/// sweeps to go round the registry several times.
async fn make_topics(bus: &Bus, prefix: &str, n: u64) {
    for i in 0..n {
        bus.publish(&format!("{prefix}.{i}"), i).await.unwrap();
    }
}

/// `remove_idle`: as topics are made, those nothing holds and nobody publishes to are
/// removed once their time is up (here at once: the second time a sweep sees them idle);
/// a topic with a subscriber, one with a handle and one publishes keep going to stay.
#[tokio::test]
async fn an_idle_policy_removes_what_nothing_holds_as_topics_are_made() {
    let bus = Bus::builder().remove_idle(Duration::ZERO).build();
    make_topics(&bus, "old", 100).await;
    let _handle = bus.topic::<u64>("held").unwrap();
    let sub = bus.subscribe("watched", async |_: &u64| {}).unwrap();
    let busy = bus.topic::<u64>("busy").unwrap();
    drop(busy); // held by nothing; kept by its publishes
    for round in 0..20u64 {
        bus.publish("busy", round).await.unwrap();
        make_topics(&bus, &format!("new{round}"), 50).await;
    }
    let names = names(&bus);
    assert!(
        !names.iter().any(|n| n.starts_with("old.")),
        "idle topics left: {names:?}"
    );
    for kept in ["busy", "held", "watched"] {
        assert!(
            names.iter().any(|n| n == kept),
            "{kept} was removed: {names:?}"
        );
    }
    // 1,100 topics made in all; the sweeps keep only the latest few.
    assert!(names.len() < 300, "{} topics left", names.len());
    sub.unsubscribe().await;
    bus.close().await;
}

/// A topic is not removed before its time, however many sweeps see it idle.
#[tokio::test]
async fn an_idle_policy_waits_for_its_time() {
    let bus = Bus::builder()
        .remove_idle(Duration::from_secs(3600))
        .build();
    make_topics(&bus, "old", 100).await;
    make_topics(&bus, "new", 1000).await;
    assert_eq!(names(&bus).len(), 1100);
    // The policy implies removable topics.
    assert_eq!(bus.remove_unused(), 1100);
}

/// User code the bus runs during a publish by name (here a message's `Drop`, as an unrouted
/// message is dropped) may make topics while another thread removes them: no lookup's
/// reading is held while it runs, so a removal (which holds its shard's lock while it waits
/// out readings) never waits for a thread that waits for that lock.
#[test]
fn code_run_by_a_publish_may_make_topics_while_another_thread_removes() {
    struct MakesATopic(Bus, u64);
    impl Drop for MakesATopic {
        fn drop(&mut self) {
            let _ = self.0.try_publish(&format!("new.{}", self.1), 0u8);
        }
    }
    // One shard: every topic shares the lock the remover holds.
    let bus = Bus::builder().removable_topics().shards(1).build();
    let stop = Arc::new(AtomicBool::new(false));
    let remover = {
        let (bus, stop) = (bus.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                removed += bus.remove_unused();
            }
            removed
        })
    };
    let (done, finished) = std::sync::mpsc::channel();
    let publisher = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            for i in 0..20_000 {
                let _ = bus.try_publish("x", MakesATopic(bus.clone(), i));
            }
            let _ = done.send(());
        })
    };
    let outcome = finished.recv_timeout(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    assert!(outcome.is_ok(), "the publisher made no progress for 60 s");
    publisher.join().unwrap();
    assert!(remover.join().unwrap() > 0);
}
