//! The ring scenarios: `ringbus-core` alone against the `disruptor` crate and, where a
//! channel can play the part, the channel peers (one channel per reader for the fan-outs),
//! wired by `common/ring_peers.rs` as `benches/ring.rs` wires them.
//!
//! The writer is the benchmark's main thread and publishes `0..n`; the clock (and the
//! allocation count) covers the writer from its first publish to its last. Then the writer
//! is dropped (closing the queue), every reader drains and returns its count and sum, and
//! the round checks each reader saw every item exactly once (the lossy `tokio-broadcast`:
//! received + told lost == published). A fresh queue and fresh readers every round.
//!
//! Readers: OS threads for 1 and 8 readers and for the stages; for 32 and 128, async tasks on
//! a tokio runtime with one worker (33 or 129 runnable threads on 2 cores would measure the
//! kernel's scheduler). The disruptor has no async consumer, so it is left out at 32 and 128.
//! Disruptor consumers busy-spin (`BusySpin`, the crate's design: a core per consumer); with
//! more consumers than cores its figure measures oversubscription as much as the crate.

use ringbus_core::{Builder, Writer};
use tokio::runtime::Runtime;

use crate::alloc::Window;
use crate::ring_peers::{self, buffer, laps, Channel, DisruptorOp, Mode, Run, Tally, TokioMpsc};
use crate::{Case, Outcome, Scenario, CAP};

/// Items per reservation in `reserve_fill`.
const RESERVE: usize = 100;

// ---------------------------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------------------------

/// Checks every reader's tally against `0..n`; returns (lost, deliveries).
fn check(system: &str, tallies: &[Tally], n: u64) -> (u64, u64) {
    let mut lost = 0;
    for (i, t) in tallies.iter().enumerate() {
        if t.lost == 0 {
            assert_eq!(
                (t.count, t.sum),
                (n, ring_peers::sum_below(n)),
                "{system}: reader {i} got {} of {n} items (or the wrong ones)",
                t.count
            );
        } else {
            assert_eq!(system, "tokio-broadcast", "{system}: reader {i} lost items");
            assert_eq!(
                t.count + t.lost,
                n,
                "{system}: reader {i}: received {} + lost {} != published {n}",
                t.count,
                t.lost
            );
            lost += t.lost;
        }
    }
    assert!(!tallies.is_empty(), "{system}: no reader");
    (lost, n * tallies.len() as u64)
}

/// A case of `system` whose run (the wiring of `common/ring_peers.rs`, timed in a [`Window`])
/// returns its readers' tallies; every round checks them.
fn case<'a>(system: &'static str, mut run: impl FnMut(u64) -> Run<Window> + 'a) -> Case<'a> {
    Case::new(system, move |n| {
        let (timed, tallies) = run(n);
        let (lost, deliveries) = check(system, &tallies, n);
        Outcome::new(timed, n, lost, deliveries)
    })
}

/// The ring with its defaults and `readers` readers; the writer runs `write(w, n)`.
fn ring_run(
    n: u64,
    readers: usize,
    mode: Mode<'_>,
    write: impl FnOnce(&mut Writer<u64>, u64),
) -> Run<Window> {
    ring_peers::ring_run::<Window>(n, readers, mode, Builder::DEFAULT_SPIN, write)
}

// ---------------------------------------------------------------------------------------------
// The fan-out's other channels (tokio's mpsc is in `common/ring_peers.rs`)
// ---------------------------------------------------------------------------------------------

/// A fan-out channel with the non-blocking send and receive of `read_batch`.
trait Peer: Channel {
    /// Non-blocking send into room known to be there.
    fn fill(tx: &Self::Tx, v: u64);
    /// Non-blocking: appends what is there.
    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>);
}

impl Peer for TokioMpsc {
    fn fill(tx: &Self::Tx, v: u64) {
        tx.try_send(v).expect("room");
    }

    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>) {
        while let Ok(v) = rx.try_recv() {
            buf.push(v);
        }
    }
}

struct Kanal;

impl Channel for Kanal {
    type Tx = kanal::Sender<u64>;
    type Rx = kanal::Receiver<u64>;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        kanal::bounded(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.send(v).expect("reader alive");
    }

    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        match rx.recv() {
            Ok(v) => buf.push(v),
            Err(_) => return false,
        }
        let _ = rx.drain_into(buf);
        true
    }

    async fn recv_some_async(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        let rx = rx.as_async();
        match rx.recv().await {
            Ok(v) => buf.push(v),
            Err(_) => return false,
        }
        let _ = rx.drain_into(buf);
        true
    }
}

impl Peer for Kanal {
    fn fill(tx: &Self::Tx, v: u64) {
        assert!(tx.try_send(v).expect("open"), "room");
    }

    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>) {
        let _ = rx.drain_into(buf);
    }
}

struct Flume;

impl Channel for Flume {
    type Tx = flume::Sender<u64>;
    type Rx = flume::Receiver<u64>;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        flume::bounded(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.send(v).expect("reader alive");
    }

    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        match rx.recv() {
            Ok(v) => buf.push(v),
            Err(_) => return false,
        }
        buf.extend(rx.try_iter());
        true
    }

    async fn recv_some_async(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        match rx.recv_async().await {
            Ok(v) => buf.push(v),
            Err(_) => return false,
        }
        buf.extend(rx.try_iter());
        true
    }
}

impl Peer for Flume {
    fn fill(tx: &Self::Tx, v: u64) {
        tx.try_send(v).expect("room");
    }

    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>) {
        buf.extend(rx.drain());
    }
}

/// `read_batch` of a fan-out channel: `fill`, then `drain` into a buffer.
fn read_batch_channel<C: Peer>(n: u64) -> Run<Window> {
    let (tx, mut rx) = C::channel(CAP);
    let mut t = Tally::default();
    let mut buf = buffer();
    let timed = laps::<Window>(
        n,
        |a, b| {
            for i in a..b {
                C::fill(&tx, i);
            }
        },
        |k| {
            let mut got = 0;
            while got < k {
                C::drain(&mut rx, &mut buf);
                for v in buf.drain(..) {
                    t.add(v);
                    got += 1;
                }
            }
            got
        },
    );
    (timed, vec![t])
}

// ---------------------------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------------------------

/// The fewest items a round may have: four laps of the queue.
const MIN_OPS: u64 = 4 * CAP as u64;

fn scenario<'a>(name: String, family: &'static str, cases: Vec<Case<'a>>) -> Scenario<'a> {
    Scenario {
        name,
        family,
        unit: "item",
        min_ops: MIN_OPS,
        cases,
    }
}

/// The publish cases of every system for `readers` readers.
fn readers_cases(readers: usize, rt: &Runtime) -> Vec<Case<'_>> {
    use ring_peers::{async_broadcast_run, disruptor_run, fanout_run, tokio_broadcast_run};
    let mode = Mode::for_readers(readers, rt);
    let mut cases = vec![case("ringbus", move |n| {
        ring_run(n, readers, mode, ring_peers::write_single)
    })];
    if readers <= 8 {
        cases.push(case("disruptor", move |n| {
            disruptor_run::<Window>(n, readers, DisruptorOp::Single)
        }));
    }
    cases.extend([
        case("tokio-broadcast", move |n| {
            tokio_broadcast_run::<Window>(n, readers, mode)
        }),
        case("async-broadcast", move |n| {
            async_broadcast_run::<Window>(n, readers, mode)
        }),
        case("tokio-mpsc-fanout", move |n| {
            fanout_run::<Window, TokioMpsc>(n, readers, mode)
        }),
        case("kanal-fanout", move |n| {
            fanout_run::<Window, Kanal>(n, readers, mode)
        }),
        case("flume-fanout", move |n| {
            fanout_run::<Window, Flume>(n, readers, mode)
        }),
    ]);
    cases
}

/// The ring scenarios; `rt` is the one-worker runtime for 32 and 128 reader tasks.
pub(crate) fn scenarios(rt: &Runtime) -> Vec<Scenario<'_>> {
    use ring_peers::{channel_stages, disruptor_run, disruptor_stages, ring_stages};
    let mut out = vec![scenario(
        "ring/publish".into(),
        "ring-publish",
        readers_cases(1, rt),
    )];
    for readers in [1, 8, 32, 128] {
        out.push(scenario(
            format!("ring/publish_readers/{readers}"),
            "ring-publish",
            readers_cases(readers, rt),
        ));
    }
    for batch in [1usize, 10, 100, 1000] {
        out.push(scenario(
            format!("ring/publish_batch/{batch}"),
            "ring-batch",
            vec![
                case("ringbus", move |n| {
                    ring_run(n, 1, Mode::Threads, |w, n| {
                        ring_peers::write_batch(w, n, batch)
                    })
                }),
                case("disruptor", move |n| {
                    disruptor_run::<Window>(n, 1, DisruptorOp::Batch(batch))
                }),
            ],
        ));
    }
    out.push(scenario(
        "ring/reserve_fill".into(),
        "ring-batch",
        vec![
            case("ringbus", |n| {
                ring_run(n, 1, Mode::Threads, |w, n| {
                    ring_peers::write_reserve(w, n, RESERVE)
                })
            }),
            case("disruptor", |n| {
                disruptor_run::<Window>(n, 1, DisruptorOp::Batch(RESERVE))
            }),
        ],
    ));
    out.push(scenario(
        "ring/read_batch".into(),
        "ring-read",
        vec![
            case("ringbus", |n| {
                ring_peers::read_batch_ring::<Window>(n, true)
            }),
            case("disruptor", ring_peers::read_batch_disruptor::<Window>),
            case(
                "tokio-broadcast",
                ring_peers::read_batch_tokio_broadcast::<Window>,
            ),
            case(
                "async-broadcast",
                ring_peers::read_batch_async_broadcast::<Window>,
            ),
            case("tokio-mpsc-fanout", read_batch_channel::<TokioMpsc>),
            case("kanal-fanout", read_batch_channel::<Kanal>),
            case("flume-fanout", read_batch_channel::<Flume>),
        ],
    ));
    for stages in [1usize, 2, 3] {
        out.push(scenario(
            format!("ring/stages/{stages}"),
            "ring-stages",
            vec![
                case("ringbus", move |n| ring_stages::<Window>(n, stages)),
                case("disruptor", move |n| disruptor_stages::<Window>(n, stages)),
                case("tokio-mpsc-fanout", move |n| {
                    channel_stages::<Window, TokioMpsc>(n, stages)
                }),
                case("kanal-fanout", move |n| {
                    channel_stages::<Window, Kanal>(n, stages)
                }),
                case("flume-fanout", move |n| {
                    channel_stages::<Window, Flume>(n, stages)
                }),
            ],
        ));
    }
    out
}
