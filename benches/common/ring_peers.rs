//! The ring and its peers as the ring benchmarks wire them, shared by the criterion bench
//! (`ring.rs`) and the comparison runner (`compare/ring.rs`): readers that count, where they
//! run, and one run of each system — the writer publishing `0..n` in a timed window
//! ([`Stopwatch`]), then every reader joined and its [`Tally`] returned for the caller to check.
//!
//! Included as `#[path = "common/ring_peers.rs"] mod ring_peers;` next to
//! `#[path = "common/stopwatch.rs"] mod stopwatch;`; the includer defines `CAP`, the queue
//! capacity of every system. What only one of them runs stays there: the ring's other write
//! paths and the `read_batch` of tokio's mpsc in `ring.rs`, the `kanal` and `flume` channels in
//! `compare/ring.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use disruptor::{BusySpin, Producer};
use ringbus_core::{Builder, Reader, Writer};
use tokio::runtime::Runtime;

use crate::stopwatch::Stopwatch;
use crate::CAP;

// ---------------------------------------------------------------------------------------------
// Readers that count
// ---------------------------------------------------------------------------------------------

/// What one reader saw.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub(crate) count: u64,
    pub(crate) sum: u64,
    /// Items the queue told this reader it lost (the lossy peer only).
    pub(crate) lost: u64,
}

impl Tally {
    #[inline]
    pub(crate) fn add(&mut self, v: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
    }
}

/// The sum of `0..n`, wrapping like the readers' sums.
pub(crate) fn sum_below(n: u64) -> u64 {
    let n = u128::from(n);
    (n * n.saturating_sub(1) / 2) as u64
}

// ---------------------------------------------------------------------------------------------
// Where readers run
// ---------------------------------------------------------------------------------------------

/// How the readers of one run are scheduled.
#[derive(Clone, Copy)]
pub(crate) enum Mode<'a> {
    /// One OS thread per reader.
    Threads,
    /// One async task per reader on this runtime.
    Tasks(&'a Runtime),
}

impl Mode<'_> {
    /// Threads for up to 8 readers, tasks on `rt` (one worker) beyond: 33 or 129 runnable
    /// threads on 2 cores would measure the kernel's scheduler rather than the queues.
    pub(crate) fn for_readers(n: usize, rt: &Runtime) -> Mode<'_> {
        if n > 8 {
            Mode::Tasks(rt)
        } else {
            Mode::Threads
        }
    }
}

/// A running reader.
pub(crate) enum Handle {
    Thread(thread::JoinHandle<Tally>),
    Task(tokio::task::JoinHandle<Tally>),
}

/// Waits for every reader and collects what each saw.
pub(crate) fn join_all(mode: Mode<'_>, handles: Vec<Handle>) -> Vec<Tally> {
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
    Fut: Future<Output = Tally> + Send + 'static,
{
    match mode {
        Mode::Threads => Handle::Thread(thread::spawn(move || read(rx))),
        Mode::Tasks(rt) => Handle::Task(rt.spawn(read_async(rx))),
    }
}

/// What a run returns: what its window measured and every reader's tally, for the caller to
/// check.
pub(crate) type Run<W> = (<W as Stopwatch>::Reading, Vec<Tally>);

/// Times `write` (the writer's side of a run), then drops what it wrote through (closing the
/// queue) and joins the readers.
fn timed_run<W: Stopwatch, T>(
    mut tx: T,
    mode: Mode<'_>,
    handles: Vec<Handle>,
    write: impl FnOnce(&mut T),
) -> Run<W> {
    let window = W::start();
    write(&mut tx);
    let timed = window.stop();
    drop(tx);
    (timed, join_all(mode, handles))
}

// ---------------------------------------------------------------------------------------------
// ringbus-core
// ---------------------------------------------------------------------------------------------

/// `blocking_publish`, one item at a time.
pub(crate) fn write_single(w: &mut Writer<u64>, n: u64) {
    for i in 0..n {
        w.blocking_publish(i);
    }
}

/// `blocking_publish_batch` of `k` items at a time.
pub(crate) fn write_batch(w: &mut Writer<u64>, n: u64, k: usize) {
    let mut base = 0;
    while base < n {
        let end = (base + k as u64).min(n);
        let published = w.blocking_publish_batch(base..end);
        debug_assert_eq!(published, end - base);
        base = end;
    }
}

/// `blocking_reserve(k)`, fill both segments in place, `commit`.
pub(crate) fn write_reserve(w: &mut Writer<u64>, n: u64, k: usize) {
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

/// The ring with `readers` first-stage readers (`blocking_recv_batch`, or `recv_batch().await`
/// as tasks) and `spin` polls before a side parks; the writer runs `write(w, n)`.
pub(crate) fn ring_run<W: Stopwatch>(
    n: u64,
    readers: usize,
    mode: Mode<'_>,
    spin: u32,
    write: impl FnOnce(&mut Writer<u64>, u64),
) -> Run<W> {
    let (w, stage) = Builder::new(CAP).spin(spin).build::<u64>();
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let r = stage.reader().expect("join");
            spawn_reader(mode, r, read_ring, read_ring_async)
        })
        .collect();
    drop(stage);
    timed_run::<W, _>(w, mode, handles, |w| write(w, n))
}

/// A pipeline of `stages` chained stages (`Stage::then`), one reader thread each; the writer
/// publishes one item at a time.
pub(crate) fn ring_stages<W: Stopwatch>(n: u64, stages: usize) -> Run<W> {
    let (w, mut stage) = Builder::new(CAP).build::<u64>();
    let mut handles = Vec::new();
    for k in 0..stages {
        if k > 0 {
            stage = stage.then();
        }
        let r = stage.reader().expect("join");
        handles.push(spawn_reader(Mode::Threads, r, read_ring, read_ring_async));
    }
    drop(stage);
    timed_run::<W, _>(w, Mode::Threads, handles, |w| write_single(w, n))
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

/// A handler's private state: its tally, published to `out` at the end of every batch.
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

/// How the disruptor's producer publishes.
#[derive(Clone, Copy)]
pub(crate) enum DisruptorOp {
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
/// everything) and collects every handler's tally.
fn disruptor_finish<W: Stopwatch, P: Producer<u64>>(
    mut p: P,
    n: u64,
    op: DisruptorOp,
    totals: &[Arc<Totals>],
) -> Run<W> {
    let window = W::start();
    disruptor_write(&mut p, n, op);
    let timed = window.stop();
    drop(p);
    (timed, totals.iter().map(|t| t.tally()).collect())
}

/// `consumers` independent handlers (one thread each).
pub(crate) fn disruptor_run<W: Stopwatch>(n: u64, consumers: usize, op: DisruptorOp) -> Run<W> {
    let totals: Vec<Arc<Totals>> = (0..consumers).map(|_| Arc::default()).collect();
    let builder = disruptor::build_single_producer(CAP, || 0u64, BusySpin);
    if consumers == 1 {
        // The crate's single-consumer fast path, as a user with one consumer would get it.
        let p = builder
            .handle_events_and_state_with(handler, handler_init(&totals[0]))
            .build();
        disruptor_finish::<W, _>(p, n, op, &totals)
    } else {
        let mut b = builder.with_multi_consumer();
        for t in &totals {
            b = b.handle_events_and_state_with(handler, handler_init(t));
        }
        disruptor_finish::<W, _>(b.build(), n, op, &totals)
    }
}

/// A pipeline of `stages` handlers chained with `and_then`.
pub(crate) fn disruptor_stages<W: Stopwatch>(n: u64, stages: usize) -> Run<W> {
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
    disruptor_finish::<W, _>(p, n, DisruptorOp::Single, &totals)
}

// ---------------------------------------------------------------------------------------------
// tokio::sync::broadcast (lossy) and async-broadcast (overflow off: backpressure)
// ---------------------------------------------------------------------------------------------

/// `tokio::sync::broadcast`: a reader a lap behind is told how many it lost (`Lagged`), which
/// its tally counts.
pub(crate) fn tokio_broadcast_run<W: Stopwatch>(n: u64, readers: usize, mode: Mode<'_>) -> Run<W> {
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
    timed_run::<W, _>(tx, mode, handles, |tx| {
        for i in 0..n {
            tx.send(i).expect("receivers exist");
        }
    })
}

/// `async-broadcast` with overflow off (its default): the writer waits for room.
pub(crate) fn async_broadcast_run<W: Stopwatch>(n: u64, readers: usize, mode: Mode<'_>) -> Run<W> {
    use async_broadcast::Receiver;
    fn read(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        while let Ok(v) = rx.recv_blocking() {
            t.add(v);
        }
        t
    }
    // `recv_direct`: the allocation-free form of `recv`.
    async fn read_async(mut rx: Receiver<u64>) -> Tally {
        let mut t = Tally::default();
        while let Ok(v) = rx.recv_direct().await {
            t.add(v);
        }
        t
    }
    let (tx, rx) = async_broadcast::broadcast::<u64>(CAP);
    debug_assert!(!tx.overflow());
    let handles: Vec<_> = (0..readers)
        .map(|_| spawn_reader(mode, rx.new_receiver(), read, read_async))
        .collect();
    drop(rx); // an undrained receiver would hold the writer back
    timed_run::<W, _>(tx, mode, handles, |tx| {
        for i in 0..n {
            tx.broadcast_blocking(i).expect("receivers exist");
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Fan-outs: one bounded channel per reader
// ---------------------------------------------------------------------------------------------

/// A bounded channel used from plain threads (and, for its readers, from tasks). Readers
/// take what is there in one go after waiting for the first item, the batch receive each
/// crate offers (`recv_many`, `drain_into`, `try_iter`).
pub(crate) trait Channel: 'static {
    type Tx: Send + 'static;
    type Rx: Send + 'static;
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx);
    /// Blocking send (the receiver is alive).
    fn send(tx: &Self::Tx, v: u64);
    /// Waits for at least one item, appends it and whatever else is there to `buf`; false
    /// once the channel is closed and empty.
    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool;
    /// [`recv_some`](Self::recv_some) for a reader task.
    fn recv_some_async(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> impl Future<Output = bool> + Send;
}

/// `tokio::sync::mpsc`.
pub(crate) struct TokioMpsc;

impl Channel for TokioMpsc {
    type Tx = tokio::sync::mpsc::Sender<u64>;
    type Rx = tokio::sync::mpsc::Receiver<u64>;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        tokio::sync::mpsc::channel(capacity)
    }

    fn send(tx: &Self::Tx, v: u64) {
        tx.blocking_send(v).expect("reader alive");
    }

    fn recv_some(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        rx.blocking_recv_many(buf, CAP) > 0
    }

    async fn recv_some_async(rx: &mut Self::Rx, buf: &mut Vec<u64>) -> bool {
        rx.recv_many(buf, CAP).await > 0
    }
}

/// A reader's buffer: room for a full queue plus a waiting sender's item, so no receive
/// ever grows it.
pub(crate) fn buffer() -> Vec<u64> {
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

/// One channel per reader, the writer sending each item to every channel in turn (the
/// fan-out of Go-style buses).
pub(crate) fn fanout_run<W: Stopwatch, C: Channel>(
    n: u64,
    readers: usize,
    mode: Mode<'_>,
) -> Run<W> {
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
    timed_run::<W, _>(senders, mode, handles, |senders| {
        for i in 0..n {
            for tx in senders.iter() {
                C::send(tx, i);
            }
        }
    })
}

/// A pipeline of `stages` threads linked by channels, each forwarding to the next.
pub(crate) fn channel_stages<W: Stopwatch, C: Channel>(n: u64, stages: usize) -> Run<W> {
    let (tx, mut rx) = C::channel(CAP);
    let mut handles = Vec::new();
    for k in 0..stages {
        let (next_tx, next_rx) = C::channel(CAP);
        let next_tx = (k + 1 < stages).then_some(next_tx);
        let input = std::mem::replace(&mut rx, next_rx);
        handles.push(Handle::Thread(thread::spawn(move || {
            read_channel::<C>(input, next_tx)
        })));
    }
    drop(rx);
    timed_run::<W, _>(tx, Mode::Threads, handles, |tx| {
        for i in 0..n {
            C::send(tx, i);
        }
    })
}

// ---------------------------------------------------------------------------------------------
// read_batch: the reader's own cost, on one thread
// ---------------------------------------------------------------------------------------------
//
// The writer fills the queue (1024 items, untimed), then the reader drains it (timed), lap
// after lap: no cache-line transfers and no waiting, only the receive path. The reader's tally
// is returned for checking, so the reads cannot be optimised away.

/// Runs laps of `fill(from, to)` (untimed) then `drain(items)` (timed) over `n` items; returns
/// the summed windows.
pub(crate) fn laps<W: Stopwatch>(
    n: u64,
    mut fill: impl FnMut(u64, u64),
    mut drain: impl FnMut(u64) -> u64,
) -> W::Reading {
    let mut timed = W::Reading::default();
    let mut base = 0;
    while base < n {
        let end = (base + CAP as u64).min(n);
        fill(base, end);
        let window = W::start();
        let got = drain(end - base);
        timed += window.stop();
        assert_eq!(got, end - base);
        base = end;
    }
    timed
}

/// The ring's reader: `blocking_recv_batch` if `batch`, else `blocking_recv` one at a time.
pub(crate) fn read_batch_ring<W: Stopwatch>(n: u64, batch: bool) -> Run<W> {
    let (mut w, stage) = Builder::new(CAP).build::<u64>();
    let mut r = stage.reader().expect("join");
    let mut t = Tally::default();
    let timed = laps::<W>(
        n,
        |a, b| {
            let mut items = a..b;
            w.try_publish_batch(&mut items);
            assert!(items.is_empty());
        },
        |k| {
            let mut got = 0;
            while got < k {
                if batch {
                    let b = r.blocking_recv_batch(CAP).expect("open");
                    for &v in b.iter() {
                        t.add(v);
                    }
                    got += b.len() as u64;
                } else {
                    t.add(*r.blocking_recv().expect("open"));
                    got += 1;
                }
            }
            got
        },
    );
    (timed, vec![t])
}

/// The disruptor's event poller.
pub(crate) fn read_batch_disruptor<W: Stopwatch>(n: u64) -> Run<W> {
    let (mut poller, b) =
        disruptor::build_single_producer(CAP, || 0u64, BusySpin).new_event_poller();
    let mut p = b.build();
    let mut t = Tally::default();
    let timed = laps::<W>(
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
    (timed, vec![t])
}

/// A reader that takes one item at a time: `send(i)` fills, `recv()` takes the next.
fn read_batch_one_by_one<W: Stopwatch>(
    n: u64,
    mut send: impl FnMut(u64),
    mut recv: impl FnMut() -> u64,
) -> Run<W> {
    let mut t = Tally::default();
    let timed = laps::<W>(
        n,
        |a, b| {
            for i in a..b {
                send(i);
            }
        },
        |k| {
            for _ in 0..k {
                t.add(recv());
            }
            k
        },
    );
    (timed, vec![t])
}

/// `tokio::sync::broadcast`'s `try_recv`.
pub(crate) fn read_batch_tokio_broadcast<W: Stopwatch>(n: u64) -> Run<W> {
    let (tx, mut rx) = tokio::sync::broadcast::channel::<u64>(CAP);
    read_batch_one_by_one::<W>(
        n,
        |i| {
            tx.send(i).expect("receiver alive");
        },
        || rx.try_recv().expect("sent"),
    )
}

/// `async-broadcast`'s `try_recv`.
pub(crate) fn read_batch_async_broadcast<W: Stopwatch>(n: u64) -> Run<W> {
    let (tx, mut rx) = async_broadcast::broadcast::<u64>(CAP);
    read_batch_one_by_one::<W>(
        n,
        |i| {
            tx.try_broadcast(i).expect("room");
        },
        || rx.try_recv().expect("sent"),
    )
}
