//! Property test of the ring against a sequential model.
//!
//! The model is a `Vec` of the published values, the value each slot holds, and for each reader
//! its stage and expected position. Random sequences of publishes (single, batch, reserve with
//! and without commit; waiting and non-waiting), joins (into four stages: the first, a second
//! made with `then()`, a third after the second, and a sibling of the second), reads (single,
//! batch, stream; waiting and non-waiting), leaves and close run against both, and after every
//! step the ring must agree with the model:
//!
//! - each reader sees exactly the items published after it joined, in order, whole;
//! - `try_publish` is `Full` exactly when `capacity - (published - slowest position) == 0`,
//!   and `remaining()` is that room;
//! - a reader of a later stage is never ahead of the slowest reader of the nearest non-empty
//!   stage before it, and no reader is ahead of the writer;
//! - batches and reservations come as the two slices the ring's wrap-around implies.
//!
//! Waiting calls (`block_on(publish)`, `recv`, ...) are made only when the model says they
//! complete at once, so nothing hangs. Capacities are 1 to 8 so the ring wraps often.

use futures_util::StreamExt;
use proptest::prelude::*;
use ringbus_core::{
    block_on, Builder, Closed, Reader, ReserveError, Stage, TryRecvError, TryReserveError, Writer,
};

/// A payload that shows whether it was read whole: `check` is derived from `seq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Item {
    seq: u64,
    check: u64,
}

const SALT: u64 = 0x5a5a_1234_8765_a5a5;

impl Item {
    fn new(seq: u64) -> Self {
        Item {
            seq,
            check: !seq ^ SALT,
        }
    }

    fn is_whole(&self) -> bool {
        self.check == !self.seq ^ SALT
    }
}

/// The value published at `position` (seqs far from the junk range below).
fn value_at(position: u64) -> Item {
    Item::new(1_000 + position)
}

/// Values left in slots by reservations dropped without commit: never to be read.
fn junk(k: u64) -> Item {
    Item::new(u64::MAX / 2 + k)
}

/// Stages: 0 is the first; 1 follows 0; 2 follows 1; 3 follows 0 (a sibling of 1).
const UPSTREAM: [Option<usize>; 4] = [None, Some(0), Some(1), Some(0)];
const MAX_READERS: usize = 8;

#[derive(Clone, Copy, Debug)]
enum How {
    Try,
    Async,
    Blocking,
}

/// Which reader an operation is for: `pick % readers`.
type Pick = usize;

#[derive(Clone, Debug)]
enum Op {
    TryPublish,
    /// `block_on(publish)` when the model says there is room (else `try_publish`).
    Publish,
    /// `block_on(publish_batch)` when it all fits now (else `try_publish_batch`).
    PublishBatch(usize),
    TryPublishBatch(usize),
    Reserve {
        n: usize,
        commit: bool,
        how: How,
    },
    Join(usize),
    Recv(Pick, How),
    RecvBatch(Pick, usize, How),
    /// `Stream::next`, when it would not wait.
    Next(Pick),
    Leave(Pick),
    Remaining,
    Close,
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![Just(How::Try), Just(How::Async), Just(How::Blocking)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::TryPublish),
        3 => Just(Op::Publish),
        2 => (0..=10usize).prop_map(Op::PublishBatch),
        2 => (0..=10usize).prop_map(Op::TryPublishBatch),
        3 => (0..=9usize, any::<bool>(), how())
            .prop_map(|(n, commit, how)| Op::Reserve { n, commit, how }),
        3 => (0..4usize).prop_map(Op::Join),
        5 => (any::<Pick>(), how()).prop_map(|(i, h)| Op::Recv(i, h)),
        4 => (any::<Pick>(), 0..=9usize, how()).prop_map(|(i, m, h)| Op::RecvBatch(i, m, h)),
        1 => any::<Pick>().prop_map(Op::Next),
        2 => any::<Pick>().prop_map(Op::Leave),
        1 => Just(Op::Remaining),
        1 => Just(Op::Close),
    ]
}

struct ModelReader {
    stage: usize,
    position: u64,
}

struct Model {
    capacity: u64,
    lazy: bool,
    /// The first position (`Builder::start_at`).
    start: u64,
    /// Every published value, by position from `start`.
    published: Vec<Item>,
    /// What each slot holds now (`None`: nothing yet, in a lazy ring).
    slots: Vec<Option<Item>>,
    closed: bool,
    readers: Vec<ModelReader>,
    junk: u64,
}

impl Model {
    fn published(&self) -> u64 {
        self.start + self.published.len() as u64
    }

    fn slowest_in(&self, stage: usize) -> Option<u64> {
        self.readers
            .iter()
            .filter(|r| r.stage == stage)
            .map(|r| r.position)
            .min()
    }

    /// How far readers of `stage` may read: the slowest of the nearest non-empty stage before
    /// it, or the writer.
    fn barrier(&self, stage: usize) -> u64 {
        match UPSTREAM[stage] {
            None => self.published(),
            Some(up) => self.slowest_in(up).unwrap_or_else(|| self.barrier(up)),
        }
    }

    fn room(&self) -> u64 {
        let slowest = self
            .readers
            .iter()
            .map(|r| r.position)
            .min()
            .unwrap_or(self.published());
        self.capacity - (self.published() - slowest)
    }

    fn slot_of(&self, position: u64) -> usize {
        (position % self.capacity) as usize
    }

    /// Writes `value` at the next position (unpublished yet).
    fn write(&mut self, offset: u64, value: Item) {
        let slot = self.slot_of(self.published() + offset);
        self.slots[slot] = Some(value);
    }

    fn publish(&mut self, n: u64) {
        for _ in 0..n {
            let position = self.published();
            self.published.push(value_at(position));
            debug_assert_eq!(self.slots[self.slot_of(position)], Some(value_at(position)));
        }
    }

    /// What `reserve(n)` must answer, if it answers at once.
    fn reserve_error(&self, n: usize) -> Option<ReserveError> {
        if n as u64 > self.capacity {
            Some(ReserveError::TooLarge(ringbus_core::TooLarge {
                requested: n,
                capacity: self.capacity as usize,
            }))
        } else if n > 0 && self.lazy && self.published() - self.start < self.capacity {
            Some(ReserveError::Empty)
        } else {
            None
        }
    }
}

struct Ring {
    writer: Option<Writer<Item>>,
    stages: Vec<Stage<Item>>,
    readers: Vec<Reader<Item>>,
}

/// Checks one read item against the model and moves the model reader on.
fn check_item(model: &Model, position: u64, item: &Item) -> Result<(), TestCaseError> {
    prop_assert!(item.is_whole(), "torn item {:?} at {}", item, position);
    prop_assert!(
        (model.start..model.published()).contains(&position),
        "read unpublished position {}",
        position
    );
    prop_assert_eq!(
        *item,
        model.published[(position - model.start) as usize],
        "at position {}",
        position
    );
    Ok(())
}

/// Checks a batch's two slices and contents; returns its length.
fn check_batch(
    model: &Model,
    position: u64,
    first: &[Item],
    second: &[Item],
) -> Result<u64, TestCaseError> {
    let len = (first.len() + second.len()) as u64;
    let start = position % model.capacity;
    prop_assert_eq!(first.len() as u64, len.min(model.capacity - start));
    for (k, item) in first.iter().chain(second).enumerate() {
        check_item(model, position + k as u64, item)?;
    }
    Ok(len)
}

fn run(
    capacity: usize,
    lazy: bool,
    spin: u32,
    start: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let builder = Builder::new(capacity)
        .spin(spin)
        .max_readers(MAX_READERS)
        .start_at(start);
    let (writer, first) = if lazy {
        builder.build_lazy::<Item>()
    } else {
        builder.build::<Item>()
    };
    let real_capacity = capacity.max(1).next_power_of_two();
    prop_assert_eq!(writer.capacity(), real_capacity);
    let second = first.then();
    let third = second.then();
    let sibling = first.then();
    let mut ring = Ring {
        writer: Some(writer),
        stages: vec![first, second, third, sibling],
        readers: Vec::new(),
    };
    let mut model = Model {
        capacity: real_capacity as u64,
        lazy,
        start,
        published: Vec::new(),
        slots: vec![if lazy { None } else { Some(Item::default()) }; real_capacity],
        closed: false,
        readers: Vec::new(),
        junk: 0,
    };

    for op in ops {
        step(&mut ring, &mut model, op)?;
        check_invariants(&mut ring, &model)?;
    }

    // Close, then drain every reader, earlier stages first (so nobody waits), and check they
    // saw everything up to the end.
    drop(ring.writer.take());
    model.closed = true;
    for stage in [0, 1, 3, 2] {
        for i in 0..ring.readers.len() {
            if model.readers[i].stage != stage {
                continue;
            }
            loop {
                let position = model.readers[i].position;
                match ring.readers[i].try_recv_batch(3) {
                    Ok(batch) => {
                        prop_assert_eq!(batch.position(), position);
                        let (a, b) = batch.as_slices();
                        let len = check_batch(&model, position, a, b)?;
                        prop_assert!(len > 0);
                        model.readers[i].position += len;
                    }
                    Err(TryRecvError::Closed) => break,
                    Err(TryRecvError::Empty) => {
                        prop_assert!(false, "reader {} of stage {} not drained", i, stage)
                    }
                }
            }
            prop_assert_eq!(model.readers[i].position, model.published());
        }
    }
    Ok(())
}

fn step(ring: &mut Ring, model: &mut Model, op: Op) -> Result<(), TestCaseError> {
    let room = model.room();
    match op {
        Op::TryPublish | Op::Publish => {
            let Some(writer) = ring.writer.as_mut() else {
                return Ok(());
            };
            let value = value_at(model.published());
            if matches!(op, Op::Publish) && room > 0 {
                block_on(writer.publish(value));
            } else {
                match writer.try_publish(value) {
                    Ok(()) => prop_assert!(room > 0, "published into a full ring"),
                    Err(full) => {
                        prop_assert_eq!(room, 0, "Full with room {}", room);
                        prop_assert_eq!(full.into_inner(), value, "Full gives the value back");
                        return Ok(());
                    }
                }
            }
            model.write(0, value);
            model.publish(1);
        }
        Op::PublishBatch(n) | Op::TryPublishBatch(n) => {
            let Some(writer) = ring.writer.as_mut() else {
                return Ok(());
            };
            let start = model.published();
            let values: Vec<Item> = (start..start + n as u64).map(value_at).collect();
            let expected = (n as u64).min(room);
            if matches!(op, Op::PublishBatch(_)) && n as u64 <= room {
                prop_assert_eq!(block_on(writer.publish_batch(values)), n as u64);
            } else {
                let mut iter = values.into_iter();
                prop_assert_eq!(writer.try_publish_batch(&mut iter), expected);
                prop_assert_eq!(iter.len() as u64, n as u64 - expected, "the rest stays");
            }
            for k in 0..expected {
                model.write(k, value_at(start + k));
            }
            model.publish(expected);
        }
        Op::Reserve { n, commit, how } => {
            let Some(writer) = ring.writer.as_mut() else {
                return Ok(());
            };
            let error = model.reserve_error(n);
            let fits = n as u64 <= room;
            let result = match how {
                How::Async if error.is_some() || fits => {
                    block_on(writer.reserve(n)).map_err(TryReserveError::from)
                }
                How::Blocking if error.is_some() || fits => {
                    writer.blocking_reserve(n).map_err(TryReserveError::from)
                }
                _ => writer.try_reserve(n),
            };
            let mut reservation = match (result, error) {
                (Err(got), Some(want)) => {
                    prop_assert_eq!(got, TryReserveError::from(want));
                    return Ok(());
                }
                (Err(got), None) => {
                    prop_assert!(!fits, "reserve({}) refused with room {}", n, room);
                    prop_assert_eq!(got, TryReserveError::Full);
                    return Ok(());
                }
                (Ok(_), Some(want)) => {
                    prop_assert!(false, "reserve({}) should fail with {:?}", n, want);
                    unreachable!()
                }
                (Ok(r), None) => {
                    prop_assert!(fits, "reserve({}) granted with room {}", n, room);
                    r
                }
            };
            prop_assert_eq!(reservation.len(), n);
            let start = model.published();
            let (a, b) = reservation.as_mut_slices();
            let first_len = (n as u64).min(model.capacity - start % model.capacity);
            prop_assert_eq!(a.len() as u64, first_len);
            prop_assert_eq!(b.len(), n - a.len());
            for (k, slot) in a.iter_mut().chain(b.iter_mut()).enumerate() {
                // The slots hold what they last held.
                let held = model.slots[model.slot_of(start + k as u64)];
                prop_assert_eq!(Some(*slot), held, "reserved slot {}", k);
                let value = if commit {
                    value_at(start + k as u64)
                } else {
                    model.junk += 1;
                    junk(model.junk)
                };
                *slot = value;
                model.write(k as u64, value);
            }
            if commit {
                reservation.commit();
                model.publish(n as u64);
            } // else the reservation is dropped here, uncommitted
        }
        Op::Join(stage) => {
            let result = ring.stages[stage].reader();
            if model.readers.len() == MAX_READERS {
                prop_assert_eq!(
                    result.unwrap_err(),
                    ringbus_core::JoinError::TooManyReaders { max: MAX_READERS }
                );
                return Ok(());
            }
            let reader = result.unwrap();
            let position = model.barrier(stage);
            prop_assert_eq!(reader.position(), position, "join into stage {}", stage);
            ring.readers.push(reader);
            model.readers.push(ModelReader { stage, position });
        }
        Op::Recv(index, how) => {
            if ring.readers.is_empty() {
                return Ok(());
            }
            let i = index % ring.readers.len();
            let position = model.readers[i].position;
            let available = model.barrier(model.readers[i].stage) - position;
            let drained = model.closed && position >= model.published();
            let reader = &mut ring.readers[i];
            let result = match how {
                How::Async if available > 0 || drained => {
                    block_on(reader.recv()).map_err(|Closed| TryRecvError::Closed)
                }
                How::Blocking if available > 0 || drained => reader
                    .blocking_recv()
                    .map_err(|Closed| TryRecvError::Closed),
                _ => reader.try_recv(),
            };
            match result {
                Ok(guard) => {
                    prop_assert!(available > 0, "read with nothing available");
                    prop_assert_eq!(guard.position(), position);
                    check_item(model, position, &guard)?;
                    drop(guard);
                    model.readers[i].position += 1;
                }
                Err(e) => {
                    prop_assert_eq!(available, 0, "{:?} with {} available", e, available);
                    let want = if drained {
                        TryRecvError::Closed
                    } else {
                        TryRecvError::Empty
                    };
                    prop_assert_eq!(e, want);
                }
            }
        }
        Op::RecvBatch(index, max, how) => {
            if ring.readers.is_empty() {
                return Ok(());
            }
            let i = index % ring.readers.len();
            let position = model.readers[i].position;
            let available = model.barrier(model.readers[i].stage) - position;
            let drained = model.closed && position >= model.published();
            let reader = &mut ring.readers[i];
            let result = match how {
                How::Async if available > 0 || drained => {
                    block_on(reader.recv_batch(max)).map_err(|Closed| TryRecvError::Closed)
                }
                How::Blocking if available > 0 || drained => reader
                    .blocking_recv_batch(max)
                    .map_err(|Closed| TryRecvError::Closed),
                _ => reader.try_recv_batch(max),
            };
            match result {
                Ok(batch) => {
                    prop_assert!(available > 0, "batch with nothing available");
                    prop_assert_eq!(batch.position(), position);
                    let (a, b) = batch.as_slices();
                    let len = check_batch(model, position, a, b)?;
                    prop_assert_eq!(len, available.min(max as u64), "everything, up to max");
                    prop_assert_eq!(batch.len() as u64, len);
                    prop_assert_eq!(batch.is_empty(), len == 0);
                    prop_assert!(batch.iter().eq(a.iter().chain(b)));
                    drop(batch);
                    model.readers[i].position += len;
                }
                Err(e) => {
                    prop_assert_eq!(available, 0, "{:?} with {} available", e, available);
                    let want = if drained {
                        TryRecvError::Closed
                    } else {
                        TryRecvError::Empty
                    };
                    prop_assert_eq!(e, want);
                }
            }
        }
        Op::Next(index) => {
            if ring.readers.is_empty() {
                return Ok(());
            }
            let i = index % ring.readers.len();
            let position = model.readers[i].position;
            let available = model.barrier(model.readers[i].stage) - position;
            let drained = model.closed && position >= model.published();
            if available == 0 && !drained {
                return Ok(()); // it would wait
            }
            match block_on(ring.readers[i].next()) {
                Some(item) => {
                    prop_assert!(available > 0);
                    check_item(model, position, &item)?;
                    model.readers[i].position += 1;
                }
                None => prop_assert!(drained, "stream ended early"),
            }
        }
        Op::Leave(index) => {
            if ring.readers.is_empty() {
                return Ok(());
            }
            let i = index % ring.readers.len();
            ring.readers.remove(i);
            model.readers.remove(i);
        }
        Op::Remaining => {
            if let Some(writer) = ring.writer.as_mut() {
                prop_assert_eq!(writer.remaining() as u64, room);
            }
        }
        Op::Close => {
            if let Some(writer) = ring.writer.take() {
                writer.close();
                model.closed = true;
            }
        }
    }
    Ok(())
}

fn check_invariants(ring: &mut Ring, model: &Model) -> Result<(), TestCaseError> {
    let published = model.published();
    if let Some(writer) = ring.writer.as_mut() {
        prop_assert_eq!(writer.published(), published);
        prop_assert_eq!(writer.remaining() as u64, model.room());
    }
    prop_assert!(model.room() <= model.capacity, "the writer lapped a reader");
    for (s, stage) in ring.stages.iter().enumerate() {
        prop_assert_eq!(stage.published(), published);
        prop_assert_eq!(stage.is_closed(), model.closed);
        let members = model.readers.iter().filter(|r| r.stage == s).count();
        prop_assert_eq!(stage.readers(), members, "members of stage {}", s);
    }
    for (reader, m) in ring.readers.iter().zip(&model.readers) {
        prop_assert_eq!(reader.position(), m.position);
        prop_assert_eq!(reader.lag(), published - m.position);
        prop_assert_eq!(reader.is_closed(), model.closed);
        prop_assert!(reader.position() <= published);
    }
    // Stage order, on the ring's own positions: a reader is never ahead of the slowest reader
    // of the nearest non-empty stage before its own.
    let slowest = |stage: usize| {
        ring.readers
            .iter()
            .zip(&model.readers)
            .filter(|(_, m)| m.stage == stage)
            .map(|(r, _)| r.position())
            .min()
    };
    for (reader, m) in ring.readers.iter().zip(&model.readers) {
        let mut up = UPSTREAM[m.stage];
        while let Some(u) = up {
            if let Some(bound) = slowest(u) {
                prop_assert!(
                    reader.position() <= bound,
                    "stage {} reader at {} is ahead of stage {} at {}",
                    m.stage,
                    reader.position(),
                    u,
                    bound
                );
                break;
            }
            up = UPSTREAM[u];
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    })]

    #[test]
    fn ring_matches_the_model(
        capacity in 0..=8usize,
        lazy in any::<bool>(),
        spin in 0..=2u32,
        start in prop_oneof![Just(0u64), 1..20u64, Just(u64::MAX >> 2)],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run(capacity, lazy, spin, start, ops)?;
    }
}

/// A fixed sequence that wraps a capacity-4 ring with every kind of operation and stage, so
/// each path of the model runs at least once whatever the random cases do.
#[test]
fn fixed_sequence_through_every_operation() {
    use How::*;
    let ops = vec![
        Op::Join(0),
        Op::Join(1),
        Op::Join(3),
        Op::TryPublishBatch(3),
        Op::RecvBatch(0, 9, Try),
        Op::Recv(1, Async),
        Op::Recv(0, Blocking),
        Op::Recv(2, Try),
        Op::Reserve {
            n: 3,
            commit: true,
            how: Blocking,
        },
        Op::Reserve {
            n: 2,
            commit: false,
            how: Try,
        },
        Op::Join(2),
        Op::Publish,
        Op::TryPublish,
        Op::RecvBatch(0, 9, Blocking),
        Op::RecvBatch(1, 9, Async),
        Op::RecvBatch(2, 1, Try),
        Op::Next(3),
        Op::Leave(1),
        Op::PublishBatch(2),
        Op::Remaining,
        Op::Reserve {
            n: 5,
            commit: true,
            how: Async,
        },
        Op::Close,
        Op::Recv(0, Blocking),
        Op::Join(0),
        Op::Next(3),
    ];
    for lazy in [false, true] {
        for capacity in [1, 2, 4, 8] {
            for start in [0, 3] {
                run(capacity, lazy, 0, start, ops.clone()).unwrap();
            }
        }
    }
}
