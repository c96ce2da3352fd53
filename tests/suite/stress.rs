//! Randomized stress of the bus: concurrent publishers (plain, `try_`, batches, contexts
//! cancelled at random, futures dropped at random), subscribers joining and leaving all the
//! time (single and batch), and a close at a random moment (from outside, or from inside a
//! handler).
//!
//! Seeded and bounded by counts, not time: each round runs a fixed number of operations
//! chosen by its seed (the interleaving is the scheduler's). A failing round prints its
//! seed; `RINGBUS_STRESS_SEED=<seed>` reruns just that round, `RINGBUS_STRESS_ROUNDS=<n>`
//! runs more rounds.
//!
//! Every event (publish begun / completed, subscribe called / returned, unsubscribe called /
//! returned, close called / returned) takes a stamp from one shared `SeqCst` counter, which
//! orders them. Each subscriber's received sequence is then checked against the contract:
//!
//! - it holds only messages whose publish returned `Ok`, each at most once;
//! - each publisher's messages come in that publisher's order, and a message whose publish
//!   completed before another's began comes first (guarantee 1);
//! - every `Ok` publish that began after `subscribe` returned and completed before
//!   `unsubscribe` was called (or at all, for subscribers that stay until the close) is in it
//!   (guarantees 2 and 8);
//! - nothing in it completed before `subscribe` was called or began after `unsubscribe`
//!   returned;
//! - any two subscribers agree on the order of the messages both received.
//!
//! And for the bus: no publish that began after `close` returned succeeded, and every
//! subscriber task has ended once everything is joined.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Log, Rng};
use ringbus::{
    Batch, Bus, CancellationToken, Context, Error, PublishError, SubscribeOptions, Topic,
};

const PUBLISHERS: u64 = 4;
const OPS_PER_PUBLISHER: u64 = 1_000;
const CHURNERS: u64 = 3;
/// A churner subscribes and unsubscribes until the bus is closed, at most this many times.
const MAX_CYCLES_PER_CHURNER: u64 = 2_000;
const DEFAULT_ROUNDS: u64 = 8;

/// A message: its publisher and its number in that publisher's sequence.
#[derive(Clone, Copy, Debug)]
struct Msg {
    id: u64,
}

fn id(publisher: u64, seq: u64) -> u64 {
    publisher << 32 | seq
}

fn publisher_of(id: u64) -> u64 {
    id >> 32
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Closed,
    Cancelled,
    Full,
    Dropped,
}

impl<T> From<&PublishError<T>> for Outcome {
    fn from(e: &PublishError<T>) -> Self {
        match e {
            PublishError::Closed(_) => Outcome::Closed,
            PublishError::Cancelled(_) => Outcome::Cancelled,
            PublishError::Full(_) => Outcome::Full,
            PublishError::TypeMismatch(..) => panic!("type mismatch in the stress test"),
            other => panic!("unexpected {other} in the stress test"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Publish {
    begin: u64,
    end: u64,
    outcome: Outcome,
}

#[derive(Debug)]
struct Window {
    name: String,
    subscribe_called: u64,
    subscribe_returned: u64,
    /// `u64::MAX` for subscribers that stay until the close.
    unsubscribe_called: u64,
    unsubscribe_returned: u64,
    received: Vec<u64>,
}

struct Round {
    bus: Bus,
    topic: Topic<Msg>,
    clock: AtomicU64,
    /// Publish operations done so far, over all publishers (to trigger the close).
    ops: AtomicU64,
    close_at: u64,
    close_signal: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Round {
    fn stamp(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst)
    }
}

async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// One publisher: `OPS_PER_PUBLISHER` operations of random kinds. Returns what happened to
/// every message it tried to publish.
async fn publisher(round: Arc<Round>, p: u64, seed: u64) -> HashMap<u64, Publish> {
    let mut rng = Rng::new(seed);
    let mut records = HashMap::new();
    let mut seq = 0;
    for _ in 0..OPS_PER_PUBLISHER {
        let kind = rng.below(100);
        if kind < 10 {
            // A batch under a context that may be cancelled.
            let n = 1 + rng.below(4);
            let msgs: Vec<Msg> = (seq..seq + n).map(|s| Msg { id: id(p, s) }).collect();
            let token = CancellationToken::new();
            let ctx = Context::from(token.clone());
            canceller(&mut rng, token);
            let begin = round.stamp();
            let result = round.topic.publish_batch(&ctx, msgs).await;
            let end = round.stamp();
            let refused: Vec<u64> = match &result {
                Ok(sent) => {
                    assert_eq!(*sent, n);
                    Vec::new()
                }
                Err(e) => {
                    let outcome = Outcome::from(e);
                    let rest: Vec<u64> = match result {
                        Err(e) => e.into_inner().map(|m| m.id).collect(),
                        Ok(_) => unreachable!(),
                    };
                    for &r in &rest {
                        records.insert(
                            r,
                            Publish {
                                begin,
                                end,
                                outcome,
                            },
                        );
                    }
                    rest
                }
            };
            for s in seq..seq + n {
                if !refused.contains(&id(p, s)) {
                    let outcome = Outcome::Ok;
                    records.insert(
                        id(p, s),
                        Publish {
                            begin,
                            end,
                            outcome,
                        },
                    );
                }
            }
            seq += n;
        } else {
            let m = Msg { id: id(p, seq) };
            seq += 1;
            let begin = round.stamp();
            let outcome = match kind {
                10..=24 => outcome_of(round.topic.try_publish(m), m),
                25..=39 => {
                    let token = CancellationToken::new();
                    canceller(&mut rng, token.clone());
                    let ctx = Context::from(token);
                    outcome_of(round.bus.publish_with(&ctx, "s", m).await, m)
                }
                40..=47 => {
                    let ctx = Context::new().with_timeout(Duration::from_micros(rng.below(300)));
                    outcome_of(round.topic.publish_with(&ctx, m).await, m)
                }
                48..=59 => {
                    // Dropped after a few polls unless it completed by then.
                    let give_up = 1 + rng.below(4);
                    let publish = round.topic.publish(m);
                    tokio::select! {
                        biased;
                        r = publish => outcome_of(r, m),
                        _ = yields(give_up) => Outcome::Dropped,
                    }
                }
                60..=79 => outcome_of(round.bus.publish("s", m).await, m),
                _ => outcome_of(round.topic.publish(m).await, m),
            };
            let end = round.stamp();
            records.insert(
                m.id,
                Publish {
                    begin,
                    end,
                    outcome,
                },
            );
        }
        if round.ops.fetch_add(1, SeqCst) + 1 == round.close_at {
            if let Some(tx) = round.close_signal.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
        if rng.chance(20) {
            yields(rng.below(3)).await;
        }
    }
    records
}

fn outcome_of(result: Result<(), PublishError<Msg>>, sent: Msg) -> Outcome {
    match result {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            assert_eq!(e.message().id, sent.id, "another message came back");
            Outcome::from(&e)
        }
    }
}

/// Cancels `token` at a random moment: at once, or after a few yields of another task.
fn canceller(rng: &mut Rng, token: CancellationToken) {
    match rng.below(4) {
        0 => token.cancel(),
        1 => {} // never
        _ => {
            let after = rng.below(6);
            tokio::spawn(async move {
                yields(after).await;
                token.cancel();
            });
        }
    }
}

/// Subscribes a logging subscriber, single or batch, whose handler yields now and then.
fn subscribe(
    bus: &Bus,
    name: &str,
    batch: bool,
    log: &Log<u64>,
) -> Result<ringbus::Subscription, Error> {
    let logged = log.clone();
    let options = SubscribeOptions::new().name(name);
    if batch {
        bus.subscribe_batch("s", options, move |b: Batch<'_, Msg>| {
            let mut last = 0;
            for m in b.iter() {
                logged.push(m.id);
                last = m.id;
            }
            async move { yields(u64::from(last % 5 == 0)).await }
        })
    } else {
        bus.subscribe_with("s", options, move |m: &Msg| {
            logged.push(m.id);
            let slow = Rng::new(m.id ^ 0x5eed).below(6);
            async move { yields(slow.saturating_sub(3)).await }
        })
    }
}

/// Subscribes and unsubscribes until the bus is closed (or `MAX_CYCLES_PER_CHURNER` times).
async fn churner(round: Arc<Round>, c: u64, seed: u64) -> Vec<Window> {
    let mut rng = Rng::new(seed);
    let mut windows = Vec::new();
    for cycle in 0..MAX_CYCLES_PER_CHURNER {
        yields(rng.below(20)).await;
        let name = format!("churn{c}.{cycle}");
        let log = Log::new();
        let subscribe_called = round.stamp();
        let sub = match subscribe(&round.bus, &name, rng.chance(40), &log) {
            Ok(sub) => sub,
            Err(Error::Closed) => break,
            Err(e) => panic!("subscribe: {e}"),
        };
        let subscribe_returned = round.stamp();
        yields(rng.below(60)).await;
        let unsubscribe_called = round.stamp();
        sub.unsubscribe().await;
        let unsubscribe_returned = round.stamp();
        windows.push(Window {
            name,
            subscribe_called,
            subscribe_returned,
            unsubscribe_called,
            unsubscribe_returned,
            received: log.snapshot(),
        });
    }
    windows
}

fn run_round(seed: u64) {
    let mut rng = Rng::new(seed);
    let capacity = [1, 2, 4, 8, 64][rng.below(5) as usize];
    let total_ops = PUBLISHERS * OPS_PER_PUBLISHER;
    let close_at = total_ops / 4 + rng.below(total_ops - total_ops / 4);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(capacity).build();
        let (close_tx, close_rx) = tokio::sync::oneshot::channel();
        let round = Arc::new(Round {
            topic: bus.topic::<Msg>("s").unwrap(),
            bus: bus.clone(),
            clock: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            close_at,
            close_signal: Mutex::new(Some(close_tx)),
        });
        // A lost wake-up would park some task for good: the watchdog turns that into a
        // failure naming the round, instead of a hang.
        let watched = round.clone();
        let body = async {
            // Two subscribers that stay until the close.
            let mut stayers = Vec::new();
            for (i, batch) in [false, true].into_iter().enumerate() {
                let log = Log::new();
                let name = format!("stays{i}");
                let subscribe_called = round.stamp();
                let sub = subscribe(&bus, &name, batch, &log).unwrap();
                let subscribe_returned = round.stamp();
                stayers.push((sub, log, name, subscribe_called, subscribe_returned));
            }

            // The close comes from outside, or (every other round) from inside a handler.
            let from_handler = rng.chance(50);
            let (stamps_tx, stamps_rx) = tokio::sync::oneshot::channel();
            let stamps_tx = Mutex::new(Some(stamps_tx));
            let r = round.clone();
            let _control = bus
                .subscribe("ctl", move |_: &()| {
                    let (round, tx) = (r.clone(), stamps_tx.lock().unwrap().take());
                    async move {
                        let called = round.stamp();
                        round.bus.close().await;
                        let returned = round.stamp();
                        if let Some(tx) = tx {
                            let _ = tx.send((called, returned));
                        }
                    }
                })
                .unwrap();
            let closer = {
                let round = round.clone();
                tokio::spawn(async move {
                    close_rx.await.unwrap();
                    if from_handler {
                        round.bus.publish("ctl", ()).await.unwrap();
                        stamps_rx.await.unwrap()
                    } else {
                        let called = round.stamp();
                        round.bus.close().await;
                        (called, round.stamp())
                    }
                })
            };
            let publishers: Vec<_> = (0..PUBLISHERS)
                .map(|p| tokio::spawn(publisher(round.clone(), p, rng.next_u64())))
                .collect();
            let churners: Vec<_> = (0..CHURNERS)
                .map(|c| tokio::spawn(churner(round.clone(), c, rng.next_u64())))
                .collect();

            let mut publishes = HashMap::new();
            for p in publishers {
                publishes.extend(p.await.unwrap());
            }
            let (_close_called, close_returned) = closer.await.unwrap();
            let mut windows = Vec::new();
            for c in churners {
                windows.extend(c.await.unwrap());
            }
            if from_handler {
                // A close from inside a handler returns at once and drains in the background; a
                // close from outside waits for that drain.
                bus.close().await;
            }
            for (sub, log, name, subscribe_called, subscribe_returned) in stayers {
                assert!(sub.is_finished(), "{name} outlived the close");
                windows.push(Window {
                    name,
                    subscribe_called,
                    subscribe_returned,
                    unsubscribe_called: u64::MAX,
                    unsubscribe_returned: u64::MAX,
                    received: log.snapshot(),
                });
            }
            // Waits for the control subscriber too, after a close from its handler.
            bus.close().await;
            let stats = bus.stats();
            let topic = stats.topics.iter().find(|t| t.name == "s").unwrap();
            for s in &topic.subscribers {
                assert!(
                    !s.running,
                    "{} still running after everything ended",
                    s.name
                );
                assert_eq!((s.errors, s.panics, s.detached), (0, 0, false), "{s:?}");
            }
            check(&publishes, &windows, close_returned);
            summary(seed, capacity, from_handler, &publishes, &windows);
        };
        tokio::select! {
            () = body => {}
            events = stalled(&watched) => panic!(
                "stress round {seed} (capacity {capacity}): no event for {STALL:?} after \
                 {events} events (a lost wake-up?); {:?}",
                watched.bus.stats()
            ),
        }
    });
}

/// How long a round may go without any event (publish, subscribe, close...) before its
/// watchdog fails it: far longer than any step takes on a loaded machine.
const STALL: Duration = Duration::from_secs(30);

/// Returns (with the event count) once `round` has gone `STALL` without a new event. Polls
/// the count every few milliseconds: a watchdog, not synchronisation.
async fn stalled(round: &Round) -> u64 {
    let mut last = round.clock.load(SeqCst);
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = round.clock.load(SeqCst);
        if now != last {
            (last, since) = (now, tokio::time::Instant::now());
        } else if since.elapsed() > STALL {
            return now;
        }
    }
}

fn check(publishes: &HashMap<u64, Publish>, windows: &[Window], close_returned: u64) {
    let ok = publishes
        .values()
        .filter(|p| p.outcome == Outcome::Ok)
        .count();
    assert!(ok > 0, "nothing was published");
    for (&m, p) in publishes {
        if p.outcome == Outcome::Ok {
            assert!(
                p.begin < close_returned,
                "{m:#x} began after close and succeeded"
            );
        }
        if p.begin > close_returned {
            assert_eq!(
                p.outcome,
                Outcome::Closed,
                "{m:#x} began after close: {p:?}"
            );
        }
    }

    let mut positions: Vec<HashMap<u64, usize>> = Vec::new();
    for w in windows {
        let name = &w.name;
        let mut index = HashMap::new();
        let mut last_seq: HashMap<u64, u64> = HashMap::new();
        let mut latest_begin = 0;
        for (i, &m) in w.received.iter().enumerate() {
            let p = publishes
                .get(&m)
                .unwrap_or_else(|| panic!("{name} got {m:#x}, which nobody published"));
            assert_eq!(
                p.outcome,
                Outcome::Ok,
                "{name} got {m:#x}, whose publish was {p:?}"
            );
            assert!(index.insert(m, i).is_none(), "{name} got {m:#x} twice");
            if let Some(&prev) = last_seq.get(&publisher_of(m)) {
                assert!(
                    m > prev,
                    "{name}: {m:#x} after {prev:#x}, out of publisher order"
                );
            }
            last_seq.insert(publisher_of(m), m);
            assert!(
                p.end >= latest_begin,
                "{name}: {m:#x} completed before an earlier-handled message's publish began"
            );
            latest_begin = latest_begin.max(p.begin);
            assert!(
                p.end > w.subscribe_called,
                "{name} got {m:#x}, published before it subscribed"
            );
            assert!(
                p.begin < w.unsubscribe_returned,
                "{name} got {m:#x}, published after it unsubscribed"
            );
        }
        for (&m, p) in publishes {
            if p.outcome == Outcome::Ok
                && p.begin > w.subscribe_returned
                && p.end < w.unsubscribe_called
            {
                assert!(
                    index.contains_key(&m),
                    "{name} missed {m:#x}, published inside its window ({p:?}, window {}..{})",
                    w.subscribe_returned,
                    w.unsubscribe_called
                );
            }
        }
        positions.push(index);
    }
    // One ring: any two subscribers agree on the order of what both received.
    for (a, wa) in windows.iter().enumerate() {
        for b in a + 1..windows.len() {
            let mut last = None;
            for m in &wa.received {
                if let Some(&j) = positions[b].get(m) {
                    if let Some(prev) = last {
                        assert!(
                            j > prev,
                            "{} and {} disagree on the order of {m:#x}",
                            wa.name,
                            windows[b].name
                        );
                    }
                    last = Some(j);
                }
            }
        }
    }
}

/// One line per round (shown with `--nocapture`): what the round exercised.
fn summary(
    seed: u64,
    capacity: usize,
    from_handler: bool,
    publishes: &HashMap<u64, Publish>,
    windows: &[Window],
) {
    let count = |o: Outcome| publishes.values().filter(|p| p.outcome == o).count();
    let received: usize = windows.iter().map(|w| w.received.len()).sum();
    eprintln!(
        "seed {seed}: capacity {capacity}, close from a handler {from_handler}; ok {}, closed {}, cancelled {}, full {}, dropped {}; \
         {} subscriptions received {received}",
        count(Outcome::Ok),
        count(Outcome::Closed),
        count(Outcome::Cancelled),
        count(Outcome::Full),
        count(Outcome::Dropped),
        windows.len(),
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

#[test]
fn stress() {
    let seeds: Vec<u64> = match env_u64("RINGBUS_STRESS_SEED") {
        Some(seed) => vec![seed],
        None => {
            let rounds = env_u64("RINGBUS_STRESS_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
            // A different set of seeds per run, each printed on failure.
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            let mut rng = Rng::new(base);
            (0..rounds).map(|_| rng.next_u64()).collect()
        }
    };
    for seed in seeds {
        let round = std::panic::catch_unwind(|| run_round(seed));
        if let Err(panic) = round {
            eprintln!("stress round failed; rerun it with RINGBUS_STRESS_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}
