//! The ring scenarios: `ringbus-core` alone against the `disruptor` crate and, where a
//! channel can play the part, the channel peers (one channel per reader for the fan-outs),
//! wired as in `benches/ring.rs`.
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use disruptor::{BusySpin, Producer};
use ringbus_core::{Builder, Reader, Writer};
use tokio::runtime::Runtime;

use crate::alloc::Window;
use crate::{Case, Outcome, Scenario, CAP};

/// Items per reservation in `reserve_fill`.
const RESERVE: usize = 100;

// ---------------------------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------------------------

/// What one reader saw.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    count: u64,
    sum: u64,
    /// Items the queue told this reader it lost (the lossy peer only).
    lost: u64,
}

impl Tally {
    #[inline]
    fn add(&mut self, v: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
    }
}

fn sum_below(n: u64) -> u64 {
    let n = u128::from(n);
    (n * n.saturating_sub(1) / 2) as u64
}

/// Checks every reader's tally against `0..n`; returns (lost, deliveries).
fn check(system: &str, tallies: &[Tally], n: u64) -> (u64, u64) {
    let mut lost = 0;
    for (i, t) in tallies.iter().enumerate() {
        if t.lost == 0 {
            assert_eq!(
                (t.count, t.sum),
                (n, sum_below(n)),
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

fn outcome(system: &str, timed: (Duration, u64), tallies: &[Tally], n: u64) -> Outcome {
    let (lost, deliveries) = check(system, tallies, n);
    Outcome {
        elapsed: timed.0,
        ops: n,
        allocations: timed.1,
        lost,
        deliveries,
    }
}

// ---------------------------------------------------------------------------------------------
// Where readers run
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Mode<'a> {
    Threads,
    Tasks(&'a Runtime),
}

impl Mode<'_> {
    fn for_readers(n: usize, rt: &Runtime) -> Mode<'_> {
        if n > 8 {
            Mode::Tasks(rt)
        } else {
            Mode::Threads
        }
    }
}

enum Handle {
    Thread(thread::JoinHandle<Tally>),
    Task(tokio::task::JoinHandle<Tally>),
}

fn join_all(mode: Mode<'_>, handles: Vec<Handle>) -> Vec<Tally> {
    handles
        .into_iter()
        .map(|h| match h {
            Handle::Thread(h) => h.join().expect("reader thread panicked"),
            Handle::Task(h) => match mode {
                Mode::Tasks(rt) => rt.block_on(h).expect("reader task panicked"),
                Mode::Threads => unreachable!("task handle without a runtime"),
            },
        })
        .collect()
}

/// A reader that runs `read` on a thread, or `read_async` as a task.
fn spawn_reader<R, F, Fut>(mode: Mode<'_>, rx: R, read: F, read_async: fn(R) -> Fut) -> Handle
where
    R: Send + 'static,
    F: FnOnce(R) -> Tally + Send + 'static,
    Fut: std::future::Future<Output = Tally> + Send + 'static,
{
    match mode {
        Mode::Threads => Handle::Thread(thread::spawn(move || read(rx))),
        Mode::Tasks(rt) => Handle::Task(rt.spawn(read_async(rx))),
    }
}

// ---------------------------------------------------------------------------------------------
// ringbus-core
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum RingOp {
    /// `blocking_publish`, one item at a time.
    Single,
    /// `blocking_publish_batch` of `n` items at a time.
    Batch(usize),
    /// `blocking_reserve(n)`, fill both segments in place, `commit`.
    Reserve(usize),
}

fn ring_write(w: &mut Writer<u64>, n: u64, op: RingOp) {
    match op {
        RingOp::Single => {
            for i in 0..n {
                w.blocking_publish(i);
            }
        }
        RingOp::Batch(k) => {
            let mut base = 0;
            while base < n {
                let end = (base + k as u64).min(n);
                w.blocking_publish_batch(base..end);
                base = end;
            }
        }
        RingOp::Reserve(k) => {
            let mut base = 0;
            while base < n {
                let len = (n - base).min(k as u64) as usize;
                let mut r = w.blocking_reserve(len).expect("len <= capacity");
                let (a, b) = r.as_mut_slices();
                for (j, slot) in a.iter_mut().chain(b.iter_mut()).enumerate() {
                    *slot = base + j as u64;
                }
                r.commit();
                base += len as u64;
            }
        }
    }
}

fn read_ring(mut r: Reader<u64>) -> Tally {
    let mut t = Tally::default();
    while let Ok(batch) = r.blocking_recv_batch(CAP) {
        for &v in batch.iter() {
            t.add(v);
        }
    }
    t
}

async fn read_ring_async(mut r: Reader<u64>) -> Tally {
    let mut t = Tally::default();
    while let Ok(batch) = r.recv_batch(CAP).await {
        for &v in batch.iter() {
            t.add(v);
        }
    }
    t
}

fn ring_run(n: u64, readers: usize, mode: Mode<'_>, op: RingOp) -> Outcome {
    let (mut w, stage) = Builder::new(CAP).build::<u64>();
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let r = stage.reader().expect("join");
            spawn_reader(mode, r, read_ring, read_ring_async)
        })
        .collect();
    drop(stage);
    let window = Window::start();
    ring_write(&mut w, n, op);
    let timed = window.stop();
    drop(w);
    outcome("ringbus", timed, &join_all(mode, handles), n)
}

/// A pipeline of `stages` chained stages (`Stage::then`), one reader thread each.
fn ring_stages(n: u64, stages: usize) -> Outcome {
    let (mut w, mut stage) = Builder::new(CAP).build::<u64>();
    let mut handles = Vec::new();
    for k in 0..stages {
        if k > 0 {
            stage = stage.then();
        }
        let r = stage.reader().expect("join");
        handles.push(spawn_reader(Mode::Threads, r, read_ring, read_ring_async));
    }
    drop(stage);
    let window = Window::start();
    ring_write(&mut w, n, RingOp::Single);
    let timed = window.stop();
    drop(w);
    outcome("ringbus", timed, &join_all(Mode::Threads, handles), n)
}

// ---------------------------------------------------------------------------------------------
// disruptor
// ---------------------------------------------------------------------------------------------

/// Where a disruptor handler leaves its tally (it runs on the crate's thread).
#[derive(Default)]
struct Totals {
    count: AtomicU64,
    sum: AtomicU64,
}

impl Totals {
    fn tally(&self) -> Tally {
        // Read after the producer's drop joined the handler threads.
        Tally {
            count: self.count.load(Ordering::Acquire),
            sum: self.sum.load(Ordering::Acquire),
            lost: 0,
        }
    }
}

struct HandlerState {
    tally: Tally,
    out: Arc<Totals>,
}

fn handler_init(out: &Arc<Totals>) -> impl FnOnce() -> HandlerState + Send + 'static {
    let out = out.clone();
    move || HandlerState {
        tally: Tally::default(),
        out,
    }
}

fn handler(s: &mut HandlerState, e: &u64, _seq: i64, end_of_batch: bool) {
    s.tally.add(*e);
    if end_of_batch {
        s.out.count.store(s.tally.count, Ordering::Release);
        s.out.sum.store(s.tally.sum, Ordering::Release);
    }
}

#[derive(Clone, Copy)]
enum DisruptorOp {
    Single,
    /// `batch_publish(n, ..)`, filling the events through the batch iterator.
    Batch(usize),
}

fn disruptor_write<P: Producer<u64>>(p: &mut P, n: u64, op: DisruptorOp) {
    match op {
        DisruptorOp::Single => {
            for i in 0..n {
                p.publish(|e| *e = i);
            }
        }
        DisruptorOp::Batch(k) => {
            let mut base = 0;
            while base < n {
                let len = (n - base).min(k as u64) as usize;
                p.batch_publish(len, |events| {
                    for (j, e) in events.enumerate() {
                        *e = base + j as u64;
                    }
                });
                base += len as u64;
            }
        }
    }
}

/// Times the writer, drops the producer (which joins the handler threads once they processed
/// everything) and checks every handler's tally.
fn disruptor_finish<P: Producer<u64>>(
    mut p: P,
    n: u64,
    op: DisruptorOp,
    totals: &[Arc<Totals>],
) -> Outcome {
    let window = Window::start();
    disruptor_write(&mut p, n, op);
    let timed = window.stop();
    drop(p);
    let tallies: Vec<_> = totals.iter().map(|t| t.tally()).collect();
    outcome("disruptor", timed, &tallies, n)
}

fn disruptor_run(n: u64, consumers: usize, op: DisruptorOp) -> Outcome {
    let totals: Vec<Arc<Totals>> = (0..consumers).map(|_| Arc::default()).collect();
    let builder = disruptor::build_single_producer(CAP, || 0u64, BusySpin);
    if consumers == 1 {
        let p = builder
            .handle_events_and_state_with(handler, handler_init(&totals[0]))
            .build();
        disruptor_finish(p, n, op, &totals)
    } else {
        let mut b = builder.with_multi_consumer();
        for t in &totals {
            b = b.handle_events_and_state_with(handler, handler_init(t));
        }
        disruptor_finish(b.build(), n, op, &totals)
    }
}

fn disruptor_stages(n: u64, stages: usize) -> Outcome {
    let totals: Vec<Arc<Totals>> = (0..stages).map(|_| Arc::default()).collect();
    let b = disruptor::build_single_producer(CAP, || 0u64, BusySpin)
        .handle_events_and_state_with(handler, handler_init(&totals[0]));
    let p = match stages {
        1 => b.build(),
        2 => b
            .and_then()
            .handle_events_and_state_with(handler, handler_init(&totals[1]))
            .build(),
        3 => b
            .and_then()
            .handle_events_and_state_with(handler, handler_init(&totals[1]))
            .and_then()
            .handle_events_and_state_with(handler, handler_init(&totals[2]))
            .build(),
        // Each `and_then` changes the builder's type, so the pipelines are written out.
        _ => panic!("the disruptor pipeline is written out for 1 to 3 stages, not {stages}"),
    };
    disruptor_finish(p, n, DisruptorOp::Single, &totals)
}

// ---------------------------------------------------------------------------------------------
// tokio::sync::broadcast (lossy) and async-broadcast (backpressure)
// ---------------------------------------------------------------------------------------------

fn tokio_broadcast_run(n: u64, readers: usize, mode: Mode<'_>) -> Outcome {
    use tokio::sync::broadcast::{self, error::RecvError, Receiver};
    fn read(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        loop {
            match rx.blocking_recv() {
                Ok(v) => t.add(v),
                Err(RecvError::Lagged(k)) => t.lost += k,
                Err(RecvError::Closed) => return t,
            }
        }
    }
    async fn read_async(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        loop {
            match rx.recv().await {
                Ok(v) => t.add(v),
                Err(RecvError::Lagged(k)) => t.lost += k,
                Err(RecvError::Closed) => return t,
            }
        }
    }
    let (tx, _) = broadcast::channel::<u64>(CAP);
    let handles: Vec<_> = (0..readers)
        .map(|_| spawn_reader(mode, tx.subscribe(), read, read_async))
        .collect();
    let window = Window::start();
    for i in 0..n {
        tx.send(i).expect("receivers exist");
    }
    let timed = window.stop();
    drop(tx);
    outcome("tokio-broadcast", timed, &join_all(mode, handles), n)
}

fn async_broadcast_run(n: u64, readers: usize, mode: Mode<'_>) -> Outcome {
    use async_broadcast::Receiver;
    fn read(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        while let Ok(v) = rx.recv_blocking() {
            t.add(v);
        }
        t
    }
    async fn read_async(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        while let Ok(v) = rx.recv_direct().await {
            t.add(v);
        }
        t
    }
    let (tx, rx) = async_broadcast::broadcast::<u64>(CAP);
    let handles: Vec<_> = (0..readers)
        .map(|_| spawn_reader(mode, rx.new_receiver(), read, read_async))
        .collect();
    drop(rx); // an undrained receiver would hold the writer back
    let window = Window::start();
    for i in 0..n {
        tx.broadcast_blocking(i).expect("receivers exist");
    }
    let timed = window.stop();
    drop(tx);
    outcome("async-broadcast", timed, &join_all(mode, handles), n)
}

// ---------------------------------------------------------------------------------------------
// Fan-outs: one bounded channel per reader (tokio mpsc, kanal, flume)
// ---------------------------------------------------------------------------------------------

/// A bounded channel used from plain threads (and, for its readers, from tasks). Readers
/// take what is there in one go after waiting for the first item, the batch receive each
/// crate offers (`recv_many`, `drain_into`, `try_iter`).
trait Channel: 'static {
    type Tx: Send + 'static;
    type Rx: Send + 'static;
    const NAME: &'static str;
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx);
    /// Blocking send (the receiver is alive).
    fn send(tx: &Self::Tx, v: u64);
    /// Non-blocking send into room known to be there.
    fn fill(tx: &Self::Tx, v: u64);
    /// Waits for at least one item, appends it and whatever else is there to `buf`; false
    /// once the channel is closed and empty.
    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool;
    /// [`recv_some`](Self::recv_some) for a reader task.
    fn recv_some_async(
        rx: &mut Self::Rx,
        buf: &mut Vec<u64>,
    ) -> impl std::future::Future<Output = bool> + Send;
    /// Non-blocking: appends what is there.
    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>);
}

struct TokioMpsc;

impl Channel for TokioMpsc {
    type Tx = tokio::sync::mpsc::Sender<u64>;
    type Rx = tokio::sync::mpsc::Receiver<u64>;
    const NAME: &'static str = "tokio-mpsc-fanout";

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        tokio::sync::mpsc::channel(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.blocking_send(v).expect("reader alive");
    }

    fn fill(tx: &Self::Tx, v: u64) {
        tx.try_send(v).expect("room");
    }

    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        rx.blocking_recv_many(buf, CAP) > 0
    }

    async fn recv_some_async(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        rx.recv_many(buf, CAP).await > 0
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
    const NAME: &'static str = "kanal-fanout";

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        kanal::bounded(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.send(v).expect("reader alive");
    }

    fn fill(tx: &Self::Tx, v: u64) {
        assert!(tx.try_send(v).expect("open"), "room");
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

    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>) {
        let _ = rx.drain_into(buf);
    }
}

struct Flume;

impl Channel for Flume {
    type Tx = flume::Sender<u64>;
    type Rx = flume::Receiver<u64>;
    const NAME: &'static str = "flume-fanout";

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        flume::bounded(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.send(v).expect("reader alive");
    }

    fn fill(tx: &Self::Tx, v: u64) {
        tx.try_send(v).expect("room");
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

    fn drain(rx: &mut Self::Rx, buf: &mut Vec<u64>) {
        buf.extend(rx.drain());
    }
}

/// A reader's buffer: room for a full queue plus a waiting sender's item, so no receive
/// ever grows it.
fn buffer() -> Vec<u64> {
    Vec::with_capacity(2 * CAP)
}

/// Reads until closed; forwards every item to `next` if there is one.
fn read_channel<C: Channel>(mut rx: C::Rx, next: Option<C::Tx>) -> Tally {
    let mut t = Tally::default();
    let mut buf = buffer();
    while C::recv_some(&mut rx, &mut buf) {
        for v in buf.drain(..) {
            t.add(v);
            if let Some(next) = &next {
                C::send(next, v);
            }
        }
    }
    t
}

async fn read_channel_async<C: Channel>(mut rx: C::Rx) -> Tally {
    let mut t = Tally::default();
    let mut buf = buffer();
    while C::recv_some_async(&mut rx, &mut buf).await {
        for v in buf.drain(..) {
            t.add(v);
        }
    }
    t
}

fn fanout_run<C: Channel>(n: u64, readers: usize, mode: Mode<'_>) -> Outcome {
    let mut senders = Vec::with_capacity(readers);
    let mut handles = Vec::with_capacity(readers);
    for _ in 0..readers {
        let (tx, rx) = C::channel(CAP);
        senders.push(tx);
        handles.push(spawn_reader(
            mode,
            rx,
            |rx| read_channel::<C>(rx, None),
            read_channel_async::<C>,
        ));
    }
    let window = Window::start();
    for i in 0..n {
        for tx in &senders {
            C::send(tx, i);
        }
    }
    let timed = window.stop();
    drop(senders);
    outcome(C::NAME, timed, &join_all(mode, handles), n)
}

/// A pipeline of `stages` threads linked by channels, each forwarding to the next.
fn channel_stages<C: Channel>(n: u64, stages: usize) -> Outcome {
    let (tx, mut rx) = C::channel(CAP);
    let mut handles = Vec::new();
    for k in 0..stages {
        let (next_tx, next_rx) = C::channel(CAP);
        let next_tx = (k + 1 < stages).then_some(next_tx);
        let input = std::mem::replace(&mut rx, next_rx);
        handles.push(thread::spawn(move || read_channel::<C>(input, next_tx)));
    }
    drop(rx);
    let window = Window::start();
    for i in 0..n {
        C::send(&tx, i);
    }
    let timed = window.stop();
    drop(tx);
    let tallies: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("stage panicked"))
        .collect();
    outcome(C::NAME, timed, &tallies, n)
}

// ---------------------------------------------------------------------------------------------
// read_batch: the reader's own cost, on one thread
// ---------------------------------------------------------------------------------------------
//
// The writer fills the queue (1024 items, untimed), then the reader drains it (timed), lap
// after lap: no cache-line transfers and no waiting, only the receive path. Allocations are
// counted over the drains only.

/// Runs laps of fill (untimed) then drain (timed) over `n` items; returns the summed window.
fn laps(
    n: u64,
    mut fill: impl FnMut(u64, u64),
    mut drain: impl FnMut(u64) -> u64,
) -> (Duration, u64) {
    let (mut elapsed, mut allocations) = (Duration::ZERO, 0);
    let mut base = 0;
    while base < n {
        let end = (base + CAP as u64).min(n);
        fill(base, end);
        let window = Window::start();
        let got = drain(end - base);
        let (e, a) = window.stop();
        elapsed += e;
        allocations += a;
        assert_eq!(got, end - base);
        base = end;
    }
    (elapsed, allocations)
}

fn read_batch_ring(n: u64) -> Outcome {
    let (mut w, stage) = Builder::new(CAP).build::<u64>();
    let mut r = stage.reader().expect("join");
    let mut t = Tally::default();
    let timed = laps(
        n,
        |a, b| {
            let mut items = a..b;
            w.try_publish_batch(&mut items);
            assert!(items.is_empty());
        },
        |k| {
            let mut got = 0;
            while got < k {
                let b = r.blocking_recv_batch(CAP).expect("open");
                for &v in b.iter() {
                    t.add(v);
                }
                got += b.len() as u64;
            }
            got
        },
    );
    outcome("ringbus", timed, &[t], n)
}

fn read_batch_disruptor(n: u64) -> Outcome {
    let (mut poller, b) =
        disruptor::build_single_producer(CAP, || 0u64, BusySpin).new_event_poller();
    let mut p = b.build();
    let mut t = Tally::default();
    let timed = laps(
        n,
        |a, b| {
            p.batch_publish((b - a) as usize, |events| {
                for (j, e) in events.enumerate() {
                    *e = a + j as u64;
                }
            })
        },
        |k| {
            let mut got = 0;
            while got < k {
                let mut events = poller.poll().expect("published");
                for &v in &mut events {
                    t.add(v);
                    got += 1;
                }
            }
            got
        },
    );
    outcome("disruptor", timed, &[t], n)
}

fn read_batch_tokio_broadcast(n: u64) -> Outcome {
    let (tx, mut rx) = tokio::sync::broadcast::channel::<u64>(CAP);
    let mut t = Tally::default();
    let timed = laps(
        n,
        |a, b| {
            for i in a..b {
                tx.send(i).expect("receiver alive");
            }
        },
        |k| {
            for _ in 0..k {
                t.add(rx.try_recv().expect("sent"));
            }
            k
        },
    );
    outcome("tokio-broadcast", timed, &[t], n)
}

fn read_batch_async_broadcast(n: u64) -> Outcome {
    let (tx, mut rx) = async_broadcast::broadcast::<u64>(CAP);
    let mut t = Tally::default();
    let timed = laps(
        n,
        |a, b| {
            for i in a..b {
                tx.try_broadcast(i).expect("room");
            }
        },
        |k| {
            for _ in 0..k {
                t.add(rx.try_recv().expect("sent"));
            }
            k
        },
    );
    outcome("async-broadcast", timed, &[t], n)
}

fn read_batch_channel<C: Channel>(n: u64) -> Outcome {
    let (tx, mut rx) = C::channel(CAP);
    let mut t = Tally::default();
    let mut buf = buffer();
    let timed = laps(
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
    outcome(C::NAME, timed, &[t], n)
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
    let mode = Mode::for_readers(readers, rt);
    let mut cases = vec![Case::new("ringbus", move |n| {
        ring_run(n, readers, mode, RingOp::Single)
    })];
    if readers <= 8 {
        cases.push(Case::new("disruptor", move |n| {
            disruptor_run(n, readers, DisruptorOp::Single)
        }));
    }
    cases.extend([
        Case::new("tokio-broadcast", move |n| {
            tokio_broadcast_run(n, readers, mode)
        }),
        Case::new("async-broadcast", move |n| {
            async_broadcast_run(n, readers, mode)
        }),
        Case::new("tokio-mpsc-fanout", move |n| {
            fanout_run::<TokioMpsc>(n, readers, mode)
        }),
        Case::new("kanal-fanout", move |n| {
            fanout_run::<Kanal>(n, readers, mode)
        }),
        Case::new("flume-fanout", move |n| {
            fanout_run::<Flume>(n, readers, mode)
        }),
    ]);
    cases
}

/// The ring scenarios; `rt` is the one-worker runtime for 32 and 128 reader tasks.
pub(crate) fn scenarios(rt: &Runtime) -> Vec<Scenario<'_>> {
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
                Case::new("ringbus", move |n| {
                    ring_run(n, 1, Mode::Threads, RingOp::Batch(batch))
                }),
                Case::new("disruptor", move |n| {
                    disruptor_run(n, 1, DisruptorOp::Batch(batch))
                }),
            ],
        ));
    }
    out.push(scenario(
        "ring/reserve_fill".into(),
        "ring-batch",
        vec![
            Case::new("ringbus", |n| {
                ring_run(n, 1, Mode::Threads, RingOp::Reserve(RESERVE))
            }),
            Case::new("disruptor", |n| {
                disruptor_run(n, 1, DisruptorOp::Batch(RESERVE))
            }),
        ],
    ));
    out.push(scenario(
        "ring/read_batch".into(),
        "ring-read",
        vec![
            Case::new("ringbus", read_batch_ring),
            Case::new("disruptor", read_batch_disruptor),
            Case::new("tokio-broadcast", read_batch_tokio_broadcast),
            Case::new("async-broadcast", read_batch_async_broadcast),
            Case::new("tokio-mpsc-fanout", read_batch_channel::<TokioMpsc>),
            Case::new("kanal-fanout", read_batch_channel::<Kanal>),
            Case::new("flume-fanout", read_batch_channel::<Flume>),
        ],
    ));
    for stages in [1usize, 2, 3] {
        out.push(scenario(
            format!("ring/stages/{stages}"),
            "ring-stages",
            vec![
                Case::new("ringbus", move |n| ring_stages(n, stages)),
                Case::new("disruptor", move |n| disruptor_stages(n, stages)),
                Case::new("tokio-mpsc-fanout", move |n| {
                    channel_stages::<TokioMpsc>(n, stages)
                }),
                Case::new("kanal-fanout", move |n| channel_stages::<Kanal>(n, stages)),
                Case::new("flume-fanout", move |n| channel_stages::<Flume>(n, stages)),
            ],
        ));
    }
    out
}
