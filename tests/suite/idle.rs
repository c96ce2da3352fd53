//! A topic nobody has subscribed to has no ring: the first subscriber makes it. These tests
//! check what a user can see of that: the positions and counts go on from the messages
//! published before the ring was made, an idle topic closes like any other, and the one
//! subscribe the lazy ring cannot serve is refused with a clear error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ringbus::{Bus, Context, Error, PublishError};

fn published_and_unrouted(bus: &Bus, name: &str) -> (u64, u64) {
    let topic = bus.stats().topics.into_iter().find(|t| t.name == name);
    let topic = topic.unwrap_or_else(|| panic!("no topic {name}"));
    (topic.published, topic.unrouted)
}

#[tokio::test]
async fn the_first_subscriber_goes_on_from_the_count_published_before_it() {
    // Capacity 4 and 5 messages before the first subscriber: the ring starts at a position
    // that is not a multiple of its size, and the publishes after it fill it and wrap.
    let bus = Bus::builder().capacity(4).build();
    for i in 0..5u64 {
        bus.publish("t", i).await.unwrap();
    }
    assert_eq!(published_and_unrouted(&bus, "t"), (5, 5));
    assert_eq!(bus.stats().topics[0].subscribers.len(), 0);

    let mut stream = bus.stream::<u64>("t").unwrap();
    for i in 5..9u64 {
        bus.publish("t", i).await.unwrap();
    }
    for i in 5..9u64 {
        let message = stream.next_ref().await.unwrap();
        assert_eq!((message.position(), *message), (i, i));
    }
    let tracked = bus.topic::<u64>("t").unwrap();
    let delivery = tracked.publish_tracked(&Context::new(), 9).await.unwrap();
    assert_eq!(delivery.position(), 9);
    let message = stream.next_ref().await.unwrap();
    assert_eq!((message.position(), *message), (9, 9));
    drop(message);
    assert_eq!(published_and_unrouted(&bus, "t"), (10, 5));
    assert!(delivery.wait().await.is_ok());
    drop(stream);
    bus.close().await;
}

#[tokio::test]
async fn an_idle_topic_closes_and_gives_messages_back() {
    let bus = Bus::new();
    bus.publish("idle", 1u64).await.unwrap();
    bus.close().await;
    match bus.publish("idle", 2u64).await {
        Err(PublishError::Closed(back)) => assert_eq!(back, 2),
        other => panic!("expected Closed, got {other:?}"),
    }
    let refused = bus.subscribe("idle", async |_: &u64| {});
    assert!(
        matches!(refused, Err(Error::Closed)),
        "{:?}",
        refused.map(drop)
    );
    assert_eq!(published_and_unrouted(&bus, "idle"), (1, 1));
}

#[tokio::test]
async fn the_first_subscriber_cannot_join_from_a_publish_to_its_topic() {
    let bus = Bus::new();
    let seen = Arc::new(Mutex::new(None));
    let (inner, record) = (bus.clone(), seen.clone());
    let batch = (0..3u64).inspect(move |&i| {
        if i == 1 {
            let joined = inner.subscribe("loop", async |_: &u64| {}).map(drop);
            *record.lock().unwrap() = Some(joined);
        }
    });
    assert_eq!(bus.publish_batch("loop", batch).await.unwrap(), 3);
    match seen.lock().unwrap().take() {
        Some(Err(Error::Unsupported(why))) => assert!(why.contains("first subscriber"), "{why}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Outside the publish the same subscribe joins, and sees what comes next.
    let mut stream = bus.stream::<u64>("loop").unwrap();
    bus.publish("loop", 3u64).await.unwrap();
    assert_eq!(stream.next_ref().await.unwrap().position(), 3);
    drop(stream);
    bus.close().await;
}

/// Publishers on two threads race the first subscriber of a fresh topic, round after round:
/// the ring starts at the exact count of the messages published before it was made, so no
/// position is given twice, `published` counts every message, and the subscriber sees every
/// message from where it joined to the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_join_racing_publishers_keeps_every_position_once() {
    const PUBLISHERS: u64 = 2;
    const EACH: u64 = 300;
    let watchdog = std::time::Duration::from_secs(120);
    let bus = Bus::builder().capacity(64).build();
    let rounds = async {
        // Rounds whose subscriber joined while the publishers were under way.
        let mut raced = 0;
        for round in 0..100 {
            let name = format!("race{round}");
            // Set just before the join: each publisher waits for it halfway, so that the join
            // lands among the publishes even when the machine is loaded (a publish to a topic
            // nobody joined never waits, so the publishers would otherwise often finish first).
            let joining = Arc::new(AtomicBool::new(false));
            let publishers: Vec<_> = (0..PUBLISHERS)
                .map(|_| {
                    let (bus, name, joining) = (bus.clone(), name.clone(), joining.clone());
                    tokio::spawn(async move {
                        for i in 0..EACH {
                            if i == EACH / 2 {
                                while !joining.load(Ordering::Acquire) {
                                    tokio::task::yield_now().await;
                                }
                            }
                            bus.publish(&name, i).await.unwrap();
                        }
                    })
                })
                .collect();
            // Joins once the publishers are under way (yield loops, not sleeps: they wait for
            // a count or a flag, and the watchdog bounds them).
            while bus.stats().topics.iter().all(|t| t.name != name) {
                tokio::task::yield_now().await;
            }
            joining.store(true, Ordering::Release);
            let mut stream = bus.stream::<u64>(&name).unwrap();
            let reader = tokio::spawn(async move {
                let mut positions = Vec::new();
                while let Some(message) = stream.next_ref().await {
                    positions.push(message.position());
                    if message.position() + 1 == PUBLISHERS * EACH {
                        break;
                    }
                }
                positions
            });
            for p in publishers {
                p.await.unwrap();
            }
            let (published, unrouted) = published_and_unrouted(&bus, &name);
            assert_eq!(published, PUBLISHERS * EACH, "round {round}");
            raced += u64::from(0 < unrouted && unrouted < published);
            let positions = if unrouted < published {
                reader.await.unwrap()
            } else {
                reader.abort();
                Vec::new()
            };
            // From where it joined, the subscriber sees every message. Where that is, against
            // the unrouted count, is not fixed: the first join makes the ring, then joins it
            // as any join does, and a publish running meanwhile may count the joiner (and so
            // not count itself unrouted) while the joiner starts after it: guarantee 8 covers
            // the messages published after `subscribe` returned, not those racing it.
            let contiguous = positions.windows(2).all(|w| w[1] == w[0] + 1);
            assert!(contiguous, "round {round}: a position skipped or repeated");
            if let Some(&last) = positions.last() {
                assert_eq!(last + 1, published, "round {round}");
            }
        }
        raced
    };
    let raced = tokio::time::timeout(watchdog, rounds)
        .await
        .expect("watchdog: a round hung");
    assert!(
        raced > 0,
        "no round joined while the publishers ran: nothing raced"
    );
    bus.close().await;
}

/// A message whose `Drop` makes a topic, dropped by a publish to an idle topic (which holds
/// the topic's writer meanwhile), while a pattern subscription that matches the idle topic
/// makes its ring. Making a topic waits for the pattern list, and making a ring waits for the
/// writer: the pattern must not wait for the ring holding the list. The order of the two is
/// not forced (nothing outside shows when the pattern holds its list), so the test runs many
/// rounds, and a deadlock fails it at the watchdog.
#[test]
fn a_pattern_making_rings_and_a_publish_making_a_topic_do_not_wait_for_each_other() {
    struct MakesATopic {
        bus: Bus,
        round: u64,
        dropping: std::sync::mpsc::Sender<()>,
        go: Mutex<std::sync::mpsc::Receiver<()>>,
    }
    impl Drop for MakesATopic {
        fn drop(&mut self) {
            let _ = self.dropping.send(());
            let _ = self.go.lock().unwrap().recv();
            let made = self.bus.try_publish(&format!("audit{}", self.round), 1u64);
            assert!(made.is_ok(), "{made:?}");
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let bus = Bus::new();
    let (done_tx, done) = std::sync::mpsc::channel();
    let rounds = {
        let bus = bus.clone();
        let handle = runtime.handle().clone();
        std::thread::spawn(move || {
            for round in 0..200u64 {
                let (dropping_tx, dropping) = std::sync::mpsc::channel();
                let (go, go_rx) = std::sync::mpsc::channel();
                let message = MakesATopic {
                    bus: bus.clone(),
                    round,
                    dropping: dropping_tx,
                    go: Mutex::new(go_rx),
                };
                let publisher = {
                    let bus = bus.clone();
                    std::thread::spawn(move || bus.try_publish(&format!("x{round}.a"), message))
                };
                dropping.recv().unwrap();
                let pattern = {
                    let (bus, handle) = (bus.clone(), handle.clone());
                    std::thread::spawn(move || {
                        let _runtime = handle.enter();
                        let handler = |_: &str, _: &MakesATopic| async {};
                        bus.subscribe_pattern(&format!("x{round}.*"), handler)
                    })
                };
                // Gives the pattern's thread a head start (not synchronisation: any order
                // must finish; this one is the order that deadlocked).
                for _ in 0..round % 50 {
                    std::thread::yield_now();
                }
                go.send(()).unwrap();
                assert!(publisher.join().unwrap().is_ok());
                assert!(pattern.join().unwrap().is_ok());
            }
            done_tx.send(()).unwrap();
        })
    };
    let finished = done.recv_timeout(std::time::Duration::from_secs(60));
    assert!(finished.is_ok(), "watchdog: a round deadlocked");
    rounds.join().unwrap();
    runtime.block_on(bus.close());
}

/// An unbuffered publish waits for its message to be handled holding the writer, marked
/// parked, and a `try_publish` meeting a parked holder says `Full` at once. On a topic
/// without a ring nobody handles anything: such a publish returns without marking the writer
/// parked, so a `try_publish` beside it never says `Full` (nor a first join a false error).
#[test]
fn an_unbuffered_idle_topic_never_looks_parked() {
    const EACH: u64 = 200_000;
    let bus = Bus::builder().capacity(0).build();
    let publisher = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async {
                for i in 0..EACH {
                    bus.publish("u", i).await.unwrap();
                }
            });
        })
    };
    let mut full = 0;
    for i in 0..EACH {
        match bus.try_publish("u", i) {
            Ok(()) => {}
            Err(PublishError::Full(_)) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    publisher.join().unwrap();
    assert_eq!(
        full, 0,
        "try_publish said Full {full} times on a topic without subscribers"
    );
    assert_eq!(published_and_unrouted(&bus, "u"), (2 * EACH, 2 * EACH));
}
