//! Concurrency stress: readers joining and leaving while a writer publishes, on a tokio
//! multi-thread runtime and on plain threads; a three-stage pipeline; a stage emptying while the
//! next one waits; and more than a thousand readers on one ring.
//!
//! Every item is its own position, so each reader checks that it receives a consecutive run
//! starting at its join position, and one that ends at the last item when it reads to the close.
//! Nothing here waits on time: each test ends when its items are through. Every test runs under
//! a [`watchdog`], so a lost wake-up is a failure that says where the ring stood, not a hang.
//! CI also runs this file in release mode, with more items.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ringbus_core::{block_on, Builder, Closed, JoinError, Reader, Stage, Writer};

/// Items per run: enough to wrap small rings many thousand times.
const ITEMS: u64 = if cfg!(debug_assertions) {
    200_000
} else {
    3_000_000
};

/// Runs `body` on a thread of its own and fails the test if its rings stop moving (no item
/// published, no reader joined or left, in any of `stages`) for `stall`: a lost wake-up (the
/// one failure that otherwise hangs) then fails with a message instead of timing CI out.
///
/// The watchdog looks every few milliseconds; that is polling, not synchronisation: the test's
/// outcome never depends on it, only how soon a stalled run is reported.
fn watchdog<R: Send + 'static>(
    name: &str,
    stall: Duration,
    stages: Vec<Stage<u64>>,
    body: impl FnOnce() -> R + Send + 'static,
) -> R {
    let progress = |stages: &[Stage<u64>]| -> Vec<(u64, usize)> {
        stages
            .iter()
            .map(|s| (s.published(), s.readers()))
            .collect()
    };
    let run = thread::spawn(body);
    let mut last = progress(&stages);
    let mut since = Instant::now();
    while !run.is_finished() {
        thread::sleep(Duration::from_millis(5));
        let now = progress(&stages);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() > stall {
            panic!(
                "{name}: no progress for {stall:?} (published, readers per stage: {now:?}): \
                 a lost wake-up?"
            );
        }
    }
    run.join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// How long a stress test may go without progress before its watchdog fails it: far longer
/// than any step takes, even on a loaded machine, and far shorter than CI's patience.
const STALL: Duration = Duration::from_secs(20);

/// A small deterministic generator, so a failing run can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one reader saw: where it joined and where it stopped (one past its last item).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
    closed: bool,
}

impl Run {
    fn check(&self, items: u64) {
        assert!(self.start <= self.end && self.end <= items, "{self:?}");
        if self.closed {
            assert_eq!(
                self.end, items,
                "read to the close but missed the end: {self:?}"
            );
        }
    }
}

/// Checks `value` is the next item of a run; moves the run on.
#[track_caller]
fn take(next: &mut u64, value: u64) {
    assert_eq!(value, *next, "skipped, repeated or torn item");
    *next += 1;
}

/// The writer's side: publishes `0..items` through every publishing method, asynchronously.
async fn write_all(mut writer: Writer<u64>, items: u64, seed: u64) {
    let mut rng = Lcg(seed);
    let capacity = writer.capacity() as u64;
    let mut next = 0;
    while next < items {
        let left = items - next;
        match rng.below(4) {
            0 => {
                writer.publish(next).await;
                next += 1;
            }
            1 => {
                let n = (1 + rng.below(3 * capacity)).min(left);
                assert_eq!(writer.publish_batch(next..next + n).await, n);
                next += n;
            }
            2 => {
                let n = (1 + rng.below(capacity)).min(left);
                let mut reservation = writer.reserve(n as usize).await.unwrap();
                let (a, b) = reservation.as_mut_slices();
                for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip(next..) {
                    *slot = value;
                }
                reservation.commit();
                next += n;
            }
            _ => match writer.try_publish(next) {
                Ok(()) => next += 1,
                Err(full) => {
                    writer.ready(1).await;
                    writer.try_publish(full.into_inner()).unwrap();
                    next += 1;
                }
            },
        }
    }
    assert_eq!(writer.published(), items);
}

/// The same on a plain thread, with the `blocking_*` methods.
fn write_all_blocking(mut writer: Writer<u64>, items: u64, seed: u64) {
    let mut rng = Lcg(seed);
    let capacity = writer.capacity() as u64;
    let mut next = 0;
    while next < items {
        let left = items - next;
        match rng.below(4) {
            0 => {
                writer.blocking_publish(next);
                next += 1;
            }
            1 => {
                let n = (1 + rng.below(3 * capacity)).min(left);
                assert_eq!(writer.blocking_publish_batch(next..next + n), n);
                next += n;
            }
            2 => {
                let n = (1 + rng.below(capacity)).min(left);
                let mut reservation = writer.blocking_reserve(n as usize).unwrap();
                let (a, b) = reservation.as_mut_slices();
                for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip(next..) {
                    *slot = value;
                }
                reservation.commit();
                next += n;
            }
            _ => {
                let mut rest = next..next + (1 + rng.below(8)).min(left);
                let n = writer.try_publish_batch(&mut rest);
                next += n;
                if n == 0 {
                    writer.blocking_publish(next);
                    next += 1;
                }
            }
        }
    }
    assert_eq!(writer.published(), items);
}

/// Reads up to `quota` items (or to the close), varying the method; returns what it saw.
async fn read_async(mut reader: Reader<u64>, quota: u64, seed: u64) -> Run {
    let mut rng = Lcg(seed);
    let start = reader.position();
    let mut next = start;
    let closed = loop {
        if next - start >= quota {
            break false;
        }
        match rng.below(3) {
            0 => match reader.recv().await {
                Ok(guard) => {
                    assert_eq!(guard.position(), next);
                    take(&mut next, *guard);
                }
                Err(Closed) => break true,
            },
            1 => match reader.recv_batch(1 + rng.below(100) as usize).await {
                Ok(batch) => {
                    assert_eq!(batch.position(), next);
                    for &value in batch.iter() {
                        take(&mut next, value);
                    }
                }
                Err(Closed) => break true,
            },
            _ => match reader.next().await {
                Some(value) => take(&mut next, value),
                None => break true,
            },
        }
    };
    Run {
        start,
        end: next,
        closed,
    }
}

/// [`read_async`] for plain threads.
fn read_blocking(mut reader: Reader<u64>, quota: u64, seed: u64) -> Run {
    let mut rng = Lcg(seed);
    let start = reader.position();
    let mut next = start;
    let closed = loop {
        if next - start >= quota {
            break false;
        }
        match rng.below(3) {
            0 => match reader.blocking_recv() {
                Ok(guard) => take(&mut next, *guard),
                Err(Closed) => break true,
            },
            1 => match reader.blocking_recv_batch(1 + rng.below(100) as usize) {
                Ok(batch) => {
                    for &value in batch.iter() {
                        take(&mut next, value);
                    }
                }
                Err(Closed) => break true,
            },
            _ => match block_on(reader.next()) {
                Some(value) => take(&mut next, value),
                None => break true,
            },
        }
    };
    Run {
        start,
        end: next,
        closed,
    }
}

#[test]
fn tokio_readers_join_and_leave_while_the_writer_publishes() {
    let (writer, first) = Builder::new(128).build::<u64>();
    let second = first.then();
    let stages = vec![first.clone(), second.clone()];
    watchdog("tokio join/leave", STALL, stages, move || {
        tokio_join_and_leave(writer, first, second)
    });
}

fn tokio_join_and_leave(writer: Writer<u64>, first: Stage<u64>, second: Stage<u64>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .build()
        .unwrap();
    runtime.block_on(async {
        // Readers from the start to the close, one per stage.
        let whole: Vec<_> = [&first, &second]
            .into_iter()
            .enumerate()
            .map(|(k, stage)| {
                let reader = stage.reader().unwrap();
                tokio::spawn(read_async(reader, u64::MAX, 100 + k as u64))
            })
            .collect();
        let writer = tokio::spawn(write_all(writer, ITEMS, 1));

        // Readers joining either stage, reading a while, leaving; up to four at a time.
        let mut rng = Lcg(2);
        let mut churn = tokio::task::JoinSet::new();
        let mut runs = Vec::new();
        while !first.is_closed() {
            let stage = if rng.below(3) == 0 { &second } else { &first };
            let reader = stage.reader().unwrap();
            let quota = rng.below(2_000);
            churn.spawn(read_async(reader, quota, rng.next()));
            if churn.len() >= 4 {
                runs.push(churn.join_next().await.unwrap().unwrap());
            }
        }
        writer.await.unwrap();
        while let Some(run) = churn.join_next().await {
            runs.push(run.unwrap());
        }
        for run in runs {
            run.check(ITEMS);
        }
        for reader in whole {
            let run = reader.await.unwrap();
            assert_eq!((run.start, run.end, run.closed), (0, ITEMS, true));
        }
        assert_eq!(first.published(), ITEMS);
        assert_eq!((first.readers(), second.readers()), (0, 0));
    });
}

#[test]
fn threads_readers_join_and_leave_while_the_writer_publishes() {
    let (writer, first) = Builder::new(64).build::<u64>();
    let second = first.then();
    let stages = vec![first.clone(), second.clone()];
    watchdog("threads join/leave", STALL, stages, move || {
        threads_join_and_leave(writer, first, second)
    });
}

fn threads_join_and_leave(writer: Writer<u64>, first: Stage<u64>, second: Stage<u64>) {
    let whole: Vec<_> = [&first, &second]
        .into_iter()
        .enumerate()
        .map(|(k, stage)| {
            let reader = stage.reader().unwrap();
            thread::spawn(move || read_blocking(reader, u64::MAX, 200 + k as u64))
        })
        .collect();
    let writer = thread::spawn(move || write_all_blocking(writer, ITEMS, 3));

    // Two threads that join, read a while (sometimes nothing), leave, and join again, until
    // they join a closed ring.
    let churners: Vec<_> = (0..2)
        .map(|k| {
            let (first, second) = (first.clone(), second.clone());
            thread::spawn(move || {
                let mut rng = Lcg(300 + k);
                let mut runs = Vec::new();
                loop {
                    let stage = if rng.below(3) == 0 { &second } else { &first };
                    let reader = stage.reader().unwrap();
                    let run = read_blocking(reader, rng.below(1_500), rng.next());
                    runs.push(run);
                    if run.closed {
                        return runs;
                    }
                }
            })
        })
        .collect();

    writer.join().unwrap();
    for churner in churners {
        let runs = churner.join().unwrap();
        assert!(runs.last().unwrap().closed);
        for run in runs {
            run.check(ITEMS);
        }
    }
    for reader in whole {
        let run = reader.join().unwrap();
        assert_eq!((run.start, run.end, run.closed), (0, ITEMS, true));
    }
    assert_eq!((first.readers(), second.readers()), (0, 0));
}

/// A pipeline stage's reader: before releasing items it records how far it got, so a later
/// stage can check it only ever sees items every reader of this stage has finished.
fn pipeline_reader(
    mut reader: Reader<u64>,
    done: Arc<AtomicU64>,
    upstream: Vec<Arc<AtomicU64>>,
    seed: u64,
) -> u64 {
    let mut rng = Lcg(seed);
    let mut next = 0;
    loop {
        let Ok(batch) = reader.blocking_recv_batch(1 + rng.below(50) as usize) else {
            break;
        };
        for &value in batch.iter() {
            for up in &upstream {
                // Relaxed is enough, and is the point: the ring's release of `value` by the
                // upstream reader happens after its store below, and our read of `value`
                // happens after that release, so coherence makes the store visible here.
                assert!(
                    up.load(Ordering::Relaxed) > value,
                    "item {value} reached this stage before an upstream reader finished it"
                );
            }
            take(&mut next, value);
        }
        done.store(next, Ordering::Relaxed);
        drop(batch);
    }
    next
}

#[test]
fn three_stage_pipeline() {
    let (writer, first) = Builder::new(64).build::<u64>();
    let second = first.then();
    let third = second.then();
    let stages = vec![first.clone(), second.clone(), third.clone()];
    watchdog("three-stage pipeline", STALL, stages, move || {
        pipeline(writer, first, second, third)
    });
}

fn pipeline(writer: Writer<u64>, first: Stage<u64>, second: Stage<u64>, third: Stage<u64>) {
    let stages: [(&Stage<u64>, usize); 3] = [(&first, 2), (&second, 2), (&third, 1)];

    let mut upstream: Vec<Arc<AtomicU64>> = Vec::new();
    let mut threads = Vec::new();
    for (s, (stage, members)) in stages.into_iter().enumerate() {
        let mut this_stage = Vec::new();
        for m in 0..members {
            let done = Arc::new(AtomicU64::new(0));
            let reader = stage.reader().unwrap();
            let up = upstream.clone();
            let d = done.clone();
            threads.push(thread::spawn(move || {
                pipeline_reader(reader, d, up, (10 * s + m) as u64)
            }));
            this_stage.push(done);
        }
        upstream = this_stage;
    }
    // A reader of the middle stage that joins and leaves all along: the third stage must wait
    // for it while it is there, and not after it left.
    let churner = {
        let second = second.clone();
        thread::spawn(move || {
            let mut rng = Lcg(77);
            let mut runs = 0;
            loop {
                let run = read_blocking(second.reader().unwrap(), rng.below(500), rng.next());
                run.check(ITEMS);
                runs += 1;
                if run.closed {
                    return runs;
                }
            }
        })
    };

    write_all_blocking(writer, ITEMS, 4);
    for t in threads {
        assert_eq!(t.join().unwrap(), ITEMS);
    }
    assert!(churner.join().unwrap() >= 1);
}

#[test]
fn an_upstream_stage_that_empties_does_not_strand_the_next_stage() {
    // The second stage's reader waits on the first stage while that stage's last reader may be
    // leaving: it must then follow the writer (a lost wake-up here used to hang this test).
    // `spin(0)` makes every wait park.
    let (writer, first) = Builder::new(8).spin(0).build::<u64>();
    let second = first.then();
    let stages = vec![first.clone(), second.clone()];
    watchdog("upstream empties", STALL, stages, move || {
        upstream_empties(writer, first, second)
    });
}

fn upstream_empties(writer: Writer<u64>, first: Stage<u64>, second: Stage<u64>) {
    let tail = second.reader().unwrap();
    let tail = thread::spawn(move || read_blocking(tail, u64::MAX, 5));
    let churner = {
        let first = first.clone();
        thread::spawn(move || {
            let mut rng = Lcg(6);
            loop {
                // Mostly short visits: the first stage is empty much of the time.
                let run = read_blocking(first.reader().unwrap(), rng.below(4), rng.next());
                run.check(ITEMS);
                if run.closed {
                    return;
                }
            }
        })
    };
    write_all_blocking(writer, ITEMS, 7);
    churner.join().unwrap();
    let run = tail.join().unwrap();
    assert_eq!((run.start, run.end, run.closed), (0, ITEMS, true));
}

#[test]
fn the_last_upstream_reader_leaving_while_the_next_stage_parks() {
    // Each round: the first stage's only reader leaves just as the second stage's reader parks
    // on it, then one item is published. The second-stage reader must get it: had it stayed
    // parked on the now empty first stage, nothing would ever wake it and this test would hang
    // (it did, before `poll_refresh` re-parked on a changed source). The spins only vary the
    // interleaving; no outcome depends on them.
    let rounds: u64 = if cfg!(debug_assertions) {
        5_000
    } else {
        20_000
    };
    let (writer, first) = Builder::new(4).spin(0).build::<u64>();
    let stages = vec![first.clone()];
    watchdog("last upstream reader leaving", STALL, stages, move || {
        last_upstream_leaving(writer, first, rounds)
    });
}

fn last_upstream_leaving(mut writer: Writer<u64>, first: Stage<u64>, rounds: u64) {
    let mut tail = first.then().reader().unwrap();
    let meet = Arc::new(AtomicU64::new(0));
    let (go, rounds_rx) = std::sync::mpsc::channel::<u64>();
    let (got_tx, got) = std::sync::mpsc::channel::<u64>();
    let rendezvous = |meet: &AtomicU64, round: u64| {
        meet.fetch_add(1, Ordering::SeqCst);
        let mut spins = 0u32;
        while meet.load(Ordering::SeqCst) < 2 * (round + 1) {
            // Spin briefly so both sides leave close together; then let the other side run
            // (the machine may have fewer cores than running threads).
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
    };
    let tail_thread = {
        let meet = meet.clone();
        thread::spawn(move || {
            let mut rng = Lcg(12);
            for round in rounds_rx {
                rendezvous(&meet, round);
                for _ in 0..rng.below(64) {
                    std::hint::spin_loop();
                }
                let guard = tail.blocking_recv().unwrap();
                got_tx.send(*guard).unwrap();
            }
        })
    };
    let mut rng = Lcg(13);
    for round in 0..rounds {
        let head = first.reader().unwrap();
        assert_eq!(head.position(), round);
        go.send(round).unwrap();
        rendezvous(&meet, round);
        for _ in 0..rng.below(256) {
            std::hint::spin_loop();
        }
        drop(head);
        for _ in 0..rng.below(8_192) {
            std::hint::spin_loop();
        }
        writer.try_publish(round).unwrap();
        assert_eq!(got.recv().unwrap(), round);
    }
    drop(go);
    tail_thread.join().unwrap();
}

/// Joins readers from four threads at once, thread `t` into `stages[t]`, 300 attempts each;
/// returns the readers and how many attempts were refused.
fn join_concurrently(stages: [&Stage<u64>; 4], max: usize) -> (Vec<Reader<u64>>, usize) {
    let joined: Vec<(Vec<Reader<u64>>, usize)> = thread::scope(|scope| {
        let handles: Vec<_> = stages
            .into_iter()
            .map(|stage| {
                scope.spawn(move || {
                    let mut readers = Vec::new();
                    let mut refused = 0;
                    for _ in 0..300 {
                        match stage.reader() {
                            Ok(reader) => readers.push(reader),
                            Err(JoinError::TooManyReaders { max: m }) => {
                                assert_eq!(m, max);
                                refused += 1;
                            }
                        }
                    }
                    (readers, refused)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let refused = joined.iter().map(|(_, r)| r).sum();
    (joined.into_iter().flat_map(|(r, _)| r).collect(), refused)
}

/// Fills the ring, spreads the readers' positions at random, then lets them leave one by one
/// in random order: the writer's room must follow the slowest reader still there. Two readers
/// sharing a registry slot would lose one position when the other left.
fn spread_and_leave(writer: &mut Writer<u64>, readers: Vec<Reader<u64>>, seed: u64) {
    let capacity = writer.capacity() as u64;
    let start = writer.published();
    assert_eq!(
        writer.try_publish_batch(&mut (start..start + capacity)),
        capacity
    );
    let mut rng = Lcg(seed);
    let mut readers: Vec<Option<Reader<u64>>> = readers.into_iter().map(Some).collect();
    for reader in readers.iter_mut().flatten() {
        let n = rng.below(capacity + 1) as usize;
        if n > 0 {
            let batch = reader.try_recv_batch(n).unwrap();
            assert_eq!(batch.len(), n);
            assert_eq!(batch.iter().next(), Some(&start));
        }
    }
    let mut order: Vec<usize> = (0..readers.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (left, &i) in order.iter().enumerate() {
        readers[i] = None;
        let slowest = readers
            .iter()
            .flatten()
            .map(Reader::position)
            .min()
            .unwrap_or(writer.published());
        assert_eq!(
            writer.remaining() as u64,
            capacity - (writer.published() - slowest),
            "after {} readers left",
            left + 1
        );
    }
}

#[test]
fn more_than_a_thousand_readers_on_one_ring() {
    const MAX: usize = 1_100;
    const CAPACITY: u64 = 16;
    let (writer, first) = Builder::new(CAPACITY as usize)
        .max_readers(MAX)
        .build::<u64>();
    let second = first.then();
    let stages = vec![first.clone(), second.clone()];
    watchdog("a thousand readers", STALL, stages, move || {
        thousand_readers(writer, first, second)
    });
}

fn thousand_readers(mut writer: Writer<u64>, first: Stage<u64>, second: Stage<u64>) {
    const MAX: usize = 1_100;
    const CAPACITY: u64 = 16;

    // Round 1: four threads join two stages at once, past the maximum. Exactly `MAX` get in,
    // and each group grows from its first chunk many times over, concurrently.
    let (readers, refused) = join_concurrently([&first, &first, &second, &second], MAX);
    assert_eq!(readers.len(), MAX);
    assert_eq!(refused, 4 * 300 - MAX);
    assert_eq!(first.readers() + second.readers(), MAX);
    assert_eq!(
        first.reader().unwrap_err(),
        JoinError::TooManyReaders { max: MAX }
    );
    assert_eq!(
        second.then().reader().unwrap_err(),
        JoinError::TooManyReaders { max: MAX }
    );

    // Every reader gates the writer, and sees every item in stage order.
    assert_eq!(writer.try_publish_batch(&mut (0..CAPACITY)), CAPACITY);
    assert!(writer.try_publish(CAPACITY).is_err());
    let (mut early, mut late) = (Vec::new(), Vec::new());
    for mut reader in readers {
        // An empty batch is granted only when something is readable: the first stage.
        if reader.try_recv_batch(0).is_ok() {
            early.push(reader);
        } else {
            late.push(reader);
        }
    }
    assert_eq!(
        (early.len(), late.len()),
        (first.readers(), second.readers())
    );
    for reader in late.iter_mut() {
        assert!(
            reader.try_recv().is_err(),
            "the first stage has released nothing yet"
        );
    }
    for reader in early.iter_mut().chain(late.iter_mut()) {
        let batch = reader.try_recv_batch(usize::MAX).unwrap();
        assert!(batch.iter().copied().eq(0..CAPACITY));
    }
    drop(late);
    spread_and_leave(&mut writer, early, 10);
    assert_eq!((first.readers(), second.readers()), (0, 0));

    // Round 2: the freed slots are reused, and the second stage (whose upstream is now empty)
    // grows again, from four threads.
    let (readers, refused) = join_concurrently([&second; 4], MAX);
    assert_eq!((readers.len(), refused), (MAX, 4 * 300 - MAX));
    assert_eq!(second.readers(), MAX);
    spread_and_leave(&mut writer, readers, 11);
    assert_eq!(second.readers(), 0);
    assert!(first.reader().is_ok());
}

#[test]
fn many_readers_keep_up_with_a_writer() {
    // A thousand and some readers, each a tokio task reading every item, so the writer's scans
    // and wake-ups cross every chunk of the reader registry.
    let items: u64 = ITEMS / 100;
    let (writer, stage) = Builder::new(256).build::<u64>();
    watchdog("many readers", STALL, vec![stage.clone()], move || {
        many_readers(writer, stage, items)
    });
}

fn many_readers(writer: Writer<u64>, stage: Stage<u64>, items: u64) {
    const READERS: usize = 1_030;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .build()
        .unwrap();
    runtime.block_on(async {
        let readers: Vec<_> = (0..READERS)
            .map(|k| tokio::spawn(read_async(stage.reader().unwrap(), u64::MAX, k as u64)))
            .collect();
        tokio::spawn(write_all(writer, items, 9)).await.unwrap();
        for reader in readers {
            let run = reader.await.unwrap();
            assert_eq!((run.start, run.end, run.closed), (0, items, true));
        }
    });
}

/// Rounds of the ping-pong tests: each one a race between a park and a wake-up.
const ROUNDS: u64 = if cfg!(debug_assertions) {
    20_000
} else {
    400_000
};

/// How long one ping-pong round may take: a round is microseconds, so this is only ever
/// reached when a wake-up was lost (the ring would never move again).
const STEP: Duration = Duration::from_secs(2);

/// Two threads meeting, so the moves that follow race each other within a few nanoseconds;
/// `meet(n)` is their `n`th meeting (from 0), and returns once both arrived. Each side spins briefly, then yields (the machine may have fewer
/// cores than running threads).
#[derive(Clone, Default)]
struct Rendezvous(Arc<AtomicU64>);

impl Rendezvous {
    fn meet(&self, n: u64) {
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.0.load(Ordering::SeqCst) < 2 * (n + 1) {
            spins += 1;
            if spins < 1_000 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
    }
}

/// Spins for a random few iterations: which side of a race goes first varies round by round.
fn dawdle(rng: &mut Lcg) {
    for _ in 0..rng.below(24) {
        std::hint::spin_loop();
    }
}

/// Reader ping-pong, `spin(0)`: every round the reader finds the ring empty and parks while
/// the writer publishes, both starting together: the park (`Shared::park`) and the publish
/// (`Writer::commit`, `Shared::wake_source`) race, in either order. A lost wake-up leaves the
/// reader parked for good; the watchdog reports it.
#[test]
fn reader_ping_pong_never_loses_a_wake_up() {
    let (mut writer, stage) = Builder::new(4).spin(0).build::<u64>();
    let mut reader = stage.reader().unwrap();
    watchdog("reader ping-pong", STEP, vec![stage], move || {
        let meet = Rendezvous::default();
        let other = {
            let meet = meet.clone();
            thread::spawn(move || {
                let mut rng = Lcg(31);
                for round in 0..ROUNDS {
                    meet.meet(round);
                    dawdle(&mut rng);
                    assert_eq!(*reader.blocking_recv().unwrap(), round);
                }
            })
        };
        let mut rng = Lcg(32);
        for round in 0..ROUNDS {
            meet.meet(round);
            dawdle(&mut rng);
            writer.try_publish(round).unwrap();
        }
        other.join().unwrap();
        drop(writer);
    });
}

/// Writer ping-pong, capacity 1, `spin(0)`: every round the writer finds the ring full and
/// parks while the reader releases the one slot, both starting together: the writer's park
/// (`Writer::poll_room`) and the release (`Shared::notify_progress`, `Shared::wake_writer`)
/// race, in either order.
#[test]
fn writer_ping_pong_never_loses_a_wake_up() {
    let (mut writer, stage) = Builder::new(1).spin(0).build::<u64>();
    let mut reader = stage.reader().unwrap();
    watchdog("writer ping-pong", STEP, vec![stage], move || {
        let meet = Rendezvous::default();
        writer.try_publish(0).unwrap();
        let other = {
            let meet = meet.clone();
            thread::spawn(move || {
                let mut rng = Lcg(41);
                for round in 0..ROUNDS {
                    let item = reader
                        .try_recv()
                        .expect("the writer published this round's item");
                    assert_eq!(*item, round);
                    meet.meet(2 * round);
                    dawdle(&mut rng);
                    drop(item);
                    meet.meet(2 * round + 1); // the writer's publish is through
                }
            })
        };
        let mut rng = Lcg(42);
        for round in 0..ROUNDS {
            meet.meet(2 * round);
            dawdle(&mut rng);
            writer.blocking_publish(round + 1);
            meet.meet(2 * round + 1);
        }
        other.join().unwrap();
    });
}

/// Readers joining every stage of a three-stage pipeline at once, from one thread per stage,
/// while the writer laps a small ring past a keep-up reader in each stage. A joiner must never
/// start below what the writer already overwrote: each checks the few items it reads (an item
/// is its own position). A second-stage joiner taking a concurrent first-stage joiner's
/// provisional claim as its start read lapped slots here.
#[test]
fn concurrent_joins_at_every_stage_depth() {
    let items = ITEMS / 100;
    let (writer, first) = Builder::new(4).build::<u64>();
    let second = first.then();
    let third = second.then();
    let stages = vec![first.clone(), second.clone(), third.clone()];
    watchdog("concurrent joins", STALL, stages.clone(), move || {
        let keepers: Vec<_> = stages
            .iter()
            .map(|stage| {
                let reader = stage.reader().unwrap();
                thread::spawn(move || read_blocking(reader, u64::MAX, 51))
            })
            .collect();
        let joiners: Vec<_> = stages
            .iter()
            .enumerate()
            .map(|(depth, stage)| {
                let stage = stage.clone();
                thread::spawn(move || {
                    let mut joins = 0u64;
                    while !stage.is_closed() {
                        let mut reader = stage.reader().unwrap();
                        joins += 1;
                        for _ in 0..3 {
                            if let Ok(item) = reader.try_recv() {
                                assert_eq!(
                                    *item,
                                    item.position(),
                                    "a reader joining stage {} read a lapped slot",
                                    depth + 1
                                );
                            }
                        }
                    }
                    joins
                })
            })
            .collect();
        write_all_blocking(writer, items, 52);
        for keeper in keepers {
            let run = keeper.join().unwrap();
            assert_eq!((run.start, run.end, run.closed), (0, items, true));
        }
        for joiner in joiners {
            assert!(joiner.join().unwrap() > 0);
        }
    });
}
