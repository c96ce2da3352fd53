//! Loom models of the ring's protocols. Run with
//! `RUSTFLAGS="--cfg ringbus_loom" cargo test -p ringbus-core --lib --release loom_`.
//!
//! Each model is small (capacity 1 or 2, one or two items) so that loom can explore every
//! interleaving within the preemption bound; the protocols do not depend on the sizes. Under
//! loom a group's chunk holds 2 readers and a waiter deregisters after 2 calm refreshes, so
//! chunk growth and deregistration are reached with a handful of readers and items.
//!
//! Two fence models:
//!
//! - **Symmetric** (`ring`): both halves of the asymmetric fence are `fence(SeqCst)`, as in
//!   production without `membarrier`. Registrations and joins may race with anything.
//! - **Asymmetric** (`asym_ring`, the `loom_asym_` models): the light half is only a compiler
//!   fence and spinning does not yield, as in production with `membarrier`. Every waiter
//!   registers (and every reader joins) before the threads fork, because loom's heavy half is
//!   weaker than `membarrier`. What is left is the handshake between the slow paths' full fences
//!   (`park` against `wake_source`, `poll_room` against `wake_writer`); each of these models
//!   asserts that some execution parked before the other side moved, so a model that never
//!   reaches the park-first path fails instead of passing vacuously.

use loom::future::block_on;
use loom::sync::atomic::Ordering;
use loom::thread;
use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};
use std::sync::Arc as StdArc;
use std::task::{Context, Poll};

use crate::{Builder, Closed};

fn ring(capacity: usize) -> (crate::Writer<u64>, crate::Stage<u64>) {
    // No spinning: every wait parks, which is the path under test.
    Builder::new(capacity).spin(0).build::<u64>()
}

/// A reader that caught up and parked is woken by the next publish: no lost wake-up.
#[test]
fn loom_publish_wakes_parked_reader() {
    loom::model(|| {
        let (mut writer, stage) = ring(2);
        let mut reader = stage.reader().unwrap();
        let t = thread::spawn(move || {
            block_on(writer.publish(1));
            block_on(writer.publish(2));
        });
        assert_eq!(*block_on(reader.recv()).unwrap(), 1);
        assert_eq!(*block_on(reader.recv()).unwrap(), 2);
        assert_eq!(block_on(reader.recv()).err(), Some(Closed));
        t.join().unwrap();
    });
}

/// A writer that would lap the reader parks, and is woken when the reader releases a slot;
/// the second wait runs on the registration the first one paid for.
#[test]
fn loom_full_writer_is_woken() {
    loom::model(|| {
        let (mut writer, stage) = ring(1);
        let mut reader = stage.reader().unwrap();
        let t = thread::spawn(move || {
            for i in 0..3 {
                assert_eq!(*block_on(reader.recv()).unwrap(), i);
            }
        });
        for i in 0..3 {
            block_on(writer.publish(i)); // full until the reader releases the one before
        }
        t.join().unwrap();
        assert!(!writer.writer_parked());
    });
}

/// A reader that joins while the writer publishes starts at the writer's position and never
/// sees a lapped or torn slot; one that leaves never holds the writer back.
#[test]
fn loom_join_and_leave_race_publishes() {
    loom::model(|| {
        let (mut writer, stage) = ring(1);
        let t = thread::spawn(move || {
            let mut reader = stage.reader().unwrap();
            let start = reader.position();
            // Read whatever is there without waiting, then leave.
            if let Ok(item) = reader.try_recv() {
                // Every slot holds its own position: a torn or lapped read would differ.
                assert_eq!(*item, item.position());
                assert_eq!(item.position(), start);
            }
            drop(reader);
        });
        // Capacity 1: the second publish needs the joined reader to read or leave.
        for i in 0..2 {
            block_on(writer.publish(i));
        }
        t.join().unwrap();
        assert_eq!(writer.published(), 2);
    });
}

/// Closing the writer wakes a parked reader, which drains and then sees `Closed`.
#[test]
fn loom_close_wakes_parked_reader() {
    loom::model(|| {
        let (mut writer, stage) = ring(2);
        let mut reader = stage.reader().unwrap();
        let t = thread::spawn(move || {
            let mut seen = Vec::new();
            loop {
                match block_on(reader.recv()) {
                    Ok(item) => seen.push(*item),
                    Err(Closed) => break,
                }
            }
            seen
        });
        writer.try_publish(0).unwrap();
        drop(writer);
        assert_eq!(t.join().unwrap(), vec![0]);
    });
}

/// A reader that was parked and woken, but whose future is dropped before it runs again,
/// leaves no park behind and loses nothing: the next `recv` returns the item the wake-up was
/// for.
#[test]
fn loom_dropped_woken_future_passes_on() {
    loom::model(|| {
        let (mut writer, stage) = ring(2);
        let mut reader = stage.reader().unwrap();
        let t = thread::spawn(move || {
            writer.try_publish(7).unwrap();
            writer
        });
        {
            let mut fut = pin!(reader.recv());
            let waker = futures_noop_waker();
            let mut cx = Context::from_waker(&waker);
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                assert_eq!(*r.unwrap(), 7);
                let writer = t.join().unwrap();
                assert_eq!(writer.parked_readers(), 0);
                return;
            }
            // Pending and parked: dropped here, woken or not.
        }
        let writer = t.join().unwrap();
        assert_eq!(*block_on(reader.recv()).unwrap(), 7);
        assert_eq!(writer.parked_readers(), 0);
    });
}

/// A reader joining the first stage while a second-stage reader reads: the second stage never
/// reads a position at or past the joiner's start while the joiner is a member (it has not
/// released it yet).
#[test]
fn loom_stage_join_keeps_order() {
    loom::model(|| loom_stage_join_keeps_order_in(ring));
}

/// The same in the asymmetric fence model: joins pay only full fences (no heavy one), so they
/// may race there.
#[test]
fn loom_asym_stage_join_keeps_order() {
    loom::model(|| loom_stage_join_keeps_order_in(asym_ring));
}

fn loom_stage_join_keeps_order_in(ring: fn(usize) -> (crate::Writer<u64>, crate::Stage<u64>)) {
    {
        let (mut writer, first) = ring(4);
        let second = first.then();
        let mut late = second.reader().unwrap();
        writer.try_publish(0).unwrap();
        let t = thread::spawn(move || first.reader().unwrap());
        writer.try_publish(1).unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            if let Ok(item) = late.try_recv() {
                seen.push(item.position());
            }
        }
        let joiner = t.join().unwrap();
        for p in seen {
            assert!(
                p < joiner.position(),
                "second stage read {p}, joiner started at {}",
                joiner.position()
            );
        }
    }
}

/// A second-stage reader parks on the first stage just as the first stage's last reader
/// leaves: it must end up parked on the writer (which it now follows), so the next publish
/// wakes it. The writer stays open until the reader got the item, so a close cannot mask a
/// lost wake-up.
#[test]
fn loom_upstream_empties_while_downstream_parks() {
    loom::model(|| {
        let (mut writer, first) = ring(2);
        let second = first.then();
        let upstream = first.reader().unwrap();
        let mut downstream = second.reader().unwrap();
        let reader = thread::spawn(move || *block_on(downstream.recv()).unwrap());
        let leaver = thread::spawn(move || drop(upstream));
        leaver.join().unwrap();
        writer.try_publish(5).unwrap();
        assert_eq!(reader.join().unwrap(), 5);
    });
}

/// A second-stage reader joining while a first-stage reader joins never starts below what the
/// writer may already have overwritten: the first-stage joiner's provisional claim (an old
/// writer position, stored before its fence) must not become the second stage's start.
///
/// Ring of 2; a first-stage reader keeps up (drained by the main thread between two rounds of
/// publishing until full), so the writer laps positions 0 and 1 while the joiners run.
///
/// Three threads with many atomic steps: explored with at most 2 preemptions (every run of the
/// suite), which finds the unfixed bug in under a second; 3 preemptions take over ten minutes.
#[test]
fn loom_concurrent_stage_joins_never_read_lapped_slots() {
    bounded(2).check(|| loom_concurrent_stage_joins_never_read_lapped_slots_in(ring));
}

fn loom_concurrent_stage_joins_never_read_lapped_slots_in(
    ring: fn(usize) -> (crate::Writer<u64>, crate::Stage<u64>),
) {
    {
        let (mut writer, first) = ring(2);
        let second = first.then();
        let mut keeper = first.reader().unwrap();
        let joiner_stage = first.clone();
        let j = thread::spawn(move || joiner_stage.reader().unwrap());
        let k = thread::spawn(move || {
            let mut late = second.reader().unwrap();
            for _ in 0..3 {
                if let Ok(item) = late.try_recv() {
                    // Every slot holds its own position: a lapped read would differ.
                    assert_eq!(*item, item.position(), "second stage read a lapped slot");
                }
            }
            late
        });
        let mut next = 0;
        for _ in 0..2 {
            for _ in 0..2 {
                if writer.try_publish(next).is_ok() {
                    next += 1;
                }
            }
            for _ in 0..2 {
                let _ = keeper.try_recv();
            }
        }
        drop(j.join().unwrap());
        drop(k.join().unwrap());
    }
}

/// A ring in loom's asymmetric fence model (see the module docs).
fn asym_ring(capacity: usize) -> (crate::Writer<u64>, crate::Stage<u64>) {
    Builder::new(capacity)
        .spin(0)
        .asymmetric_fences()
        .build::<u64>()
}

/// Polls `future` once with a no-op waker and drops it; true if it completed. Used before a
/// model forks, to make a reader or the writer register as a waiter (a pending wait registers,
/// and the registration outlives the dropped future).
fn poll_once<F: Future>(future: F) -> bool {
    let waker = futures_noop_waker();
    pin!(future)
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
}

/// `block_on`, also saying whether the future returned `Pending` (parked) at least once.
fn block_on_parked<F: Future>(future: F) -> (F::Output, bool) {
    let parked = Cell::new(false);
    let mut future = pin!(future);
    let out = block_on(poll_fn(|cx| {
        let poll = future.as_mut().poll(cx);
        if poll.is_pending() {
            parked.set(true);
        }
        poll
    }));
    (out, parked.get())
}

/// Counts model executions that took the park-first path; `check` asserts there was one.
#[derive(Clone, Default)]
struct ParkFirst(StdArc<StdAtomicUsize>);

impl ParkFirst {
    fn saw(&self, parked: bool) {
        if parked {
            self.0.fetch_add(1, StdOrdering::Relaxed);
        }
    }

    fn check(&self, model: &str) {
        let n = self.0.load(StdOrdering::Relaxed);
        assert!(
            n > 0,
            "{model}: no execution parked first; the model checks nothing"
        );
    }
}

/// A registered reader that parks before the writer publishes is woken by the publish, with
/// the light fence only a compiler fence: the handshake is `Shared::park`'s full fence against
/// `Shared::wake_source`'s. Removing the latter loses the wake-up (a deadlock, to loom). The
/// writer lives until the reader has its items, so closing cannot hide a lost wake-up.
#[test]
fn loom_asym_publish_wakes_parked_reader() {
    let parked_first = ParkFirst::default();
    let seen = parked_first.clone();
    loom::model(move || {
        let (mut writer, stage) = asym_ring(2);
        let mut reader = stage.reader().unwrap();
        assert!(!poll_once(reader.recv())); // registers on the writer
        let t = thread::spawn(move || {
            writer.try_publish(1).unwrap();
            writer.try_publish(2).unwrap();
            writer
        });
        for expected in 1..=2 {
            let (item, parked) = block_on_parked(reader.recv());
            assert_eq!(*item.unwrap(), expected);
            seen.saw(parked);
        }
        drop(t.join().unwrap());
        assert_eq!(block_on(reader.recv()).err(), Some(Closed));
    });
    parked_first.check("loom_asym_publish_wakes_parked_reader");
}

/// A registered writer that parks for room is woken by the reader's release, with the light
/// fence only a compiler fence: `Writer::poll_room`'s full fence against
/// `Shared::wake_writer`'s. The reader stays joined until the writer is done, so leaving (also
/// a wake-up) cannot hide a lost one.
#[test]
fn loom_asym_full_writer_is_woken() {
    let parked_first = ParkFirst::default();
    let seen = parked_first.clone();
    loom::model(move || {
        let (mut writer, stage) = asym_ring(1);
        let mut reader = stage.reader().unwrap();
        assert!(!poll_once(reader.recv())); // the reader registers on the writer
        writer.try_publish(0).unwrap();
        assert!(!poll_once(writer.publish(u64::MAX))); // the writer registers for room
        let t = thread::spawn(move || {
            for i in 0..3 {
                assert_eq!(*block_on(reader.recv()).unwrap(), i);
            }
            reader
        });
        for i in 1..3 {
            let ((), parked) = block_on_parked(writer.publish(i));
            seen.saw(parked);
        }
        drop(t.join().unwrap());
        assert!(!writer.writer_parked());
    });
    parked_first.check("loom_asym_full_writer_is_woken");
}

/// Two registered readers in one chunk (sharing its `parked` word) both park, and one publish
/// wakes both: setting and clearing their bits never loses the other's.
#[test]
fn loom_asym_readers_sharing_a_parked_word_are_all_woken() {
    let parked_first = ParkFirst::default();
    let seen = parked_first.clone();
    loom::model(move || {
        let (mut writer, stage) = asym_ring(2);
        let mut readers = [stage.reader().unwrap(), stage.reader().unwrap()];
        for reader in &mut readers {
            assert!(!poll_once(reader.recv()));
        }
        let threads = readers.map(|mut reader| {
            let seen = seen.clone();
            thread::spawn(move || {
                let (item, parked) = block_on_parked(reader.recv());
                assert_eq!(*item.unwrap(), 9);
                seen.saw(parked);
                reader
            })
        });
        writer.try_publish(9).unwrap();
        for t in threads {
            drop(t.join().unwrap());
        }
        assert_eq!(writer.parked_readers(), 0);
    });
    parked_first.check("loom_asym_readers_sharing_a_parked_word_are_all_woken");
}

/// A registered second-stage reader parked on the first stage is woken when the first-stage
/// reader releases: `notify_progress` on a group, with the light fence only a compiler fence.
#[test]
fn loom_asym_upstream_release_wakes_downstream() {
    let parked_first = ParkFirst::default();
    let seen = parked_first.clone();
    loom::model(move || {
        let (mut writer, first) = asym_ring(2);
        let mut upstream = first.reader().unwrap();
        let mut downstream = first.then().reader().unwrap();
        assert!(!poll_once(downstream.recv())); // registers on the first stage
        writer.try_publish(5).unwrap();
        let t = thread::spawn(move || {
            drop(upstream.try_recv().unwrap());
            upstream
        });
        let (item, parked) = block_on_parked(downstream.recv());
        assert_eq!(*item.unwrap(), 5);
        seen.saw(parked);
        drop(t.join().unwrap());
        drop(writer);
    });
    parked_first.check("loom_asym_upstream_release_wakes_downstream");
}

/// Two readers join a stage whose first chunk has one free slot (chunks hold 2 under loom):
/// one of them grows the group, racing the other, while the writer laps the ring past a
/// keep-up reader. The writer must gate on a reader in the new chunk: none reads a lapped slot.
#[test]
fn loom_joins_that_grow_the_group_race_the_writer() {
    bounded(2).check(|| loom_joins_that_grow_the_group_race_the_writer_in(ring));
}

fn loom_joins_that_grow_the_group_race_the_writer_in(
    ring: fn(usize) -> (crate::Writer<u64>, crate::Stage<u64>),
) {
    {
        let (mut writer, stage) = ring(2);
        let mut keeper = stage.reader().unwrap();
        let joiners = [stage.clone(), stage.clone()].map(|stage| {
            thread::spawn(move || {
                let mut reader = stage.reader().unwrap();
                for _ in 0..2 {
                    if let Ok(item) = reader.try_recv() {
                        assert_eq!(*item, item.position(), "a joiner read a lapped slot");
                    }
                }
                reader
            })
        });
        let mut next = 0;
        for _ in 0..2 {
            for _ in 0..2 {
                if writer.try_publish(next).is_ok() {
                    next += 1;
                }
            }
            for _ in 0..2 {
                let _ = keeper.try_recv();
            }
        }
        for t in joiners {
            drop(t.join().unwrap());
        }
        assert_eq!(stage.readers(), 1);
    }
}

/// A reader that stopped waiting long enough deregisters (the writer goes back to its
/// fence-free path), then parks again and registers anew while the writer publishes: the
/// publish still wakes it.
#[test]
fn loom_calm_reader_deregisters_and_registers_again() {
    loom::model(|| {
        let (mut writer, stage) = ring(4);
        let mut reader = stage.reader().unwrap();
        assert!(!poll_once(reader.recv())); // registered
                                            // Two refreshes in a row that find data without parking: calm enough to deregister.
        for i in 0..2 {
            writer.try_publish(i).unwrap();
            assert_eq!(*block_on(reader.recv()).unwrap(), i);
        }
        assert!(!reader.is_registered(), "a calm reader stayed registered");
        let t = thread::spawn(move || {
            // Parks and registers again, racing the publish.
            assert_eq!(*block_on(reader.recv()).unwrap(), 2);
            reader
        });
        writer.try_publish(2).unwrap();
        drop(t.join().unwrap());
    });
}

/// A reader that registers on a source already armed by another registration (so it pays no
/// heavy fence) and parks is woken by the next publish, with the light fence only a compiler
/// fence. The first reader stays registered throughout, as an armed source needs.
#[test]
fn loom_asym_registrant_on_an_armed_source_is_woken() {
    let parked_first = ParkFirst::default();
    let seen = parked_first.clone();
    loom::model(move || {
        let (mut writer, stage) = asym_ring(2);
        let mut armer = stage.reader().unwrap();
        assert!(!poll_once(armer.recv())); // registers and arms the writer's source
        let mut late = stage.reader().unwrap();
        let seen = seen.clone();
        let t = thread::spawn(move || {
            let (item, parked) = block_on_parked(late.recv()); // registers: armed, no fence
            assert_eq!(*item.unwrap(), 3);
            seen.saw(parked);
            late
        });
        writer.try_publish(3).unwrap();
        drop(t.join().unwrap());
        assert!(armer.is_registered());
        drop(writer);
    });
    parked_first.check("loom_asym_registrant_on_an_armed_source_is_woken");
}

/// Two readers register on the writer's source at the same time (one arms it with the heavy
/// fence, the other may find it armed, or arming, or empty again after a deregistration)
/// while the writer publishes: both are woken.
#[test]
fn loom_concurrent_registrations_race_a_publish() {
    bounded(2).check(|| {
        let (mut writer, stage) = ring(2);
        let readers = [stage.reader().unwrap(), stage.reader().unwrap()].map(|mut reader| {
            thread::spawn(move || {
                assert_eq!(*block_on(reader.recv()).unwrap(), 4);
                reader
            })
        });
        writer.try_publish(4).unwrap();
        for t in readers {
            drop(t.join().unwrap());
        }
        drop(writer);
    });
}

/// A reader joins while the writer laps a ring of 1 with nobody else reading, in the
/// asymmetric fence model (the light fence after the writer's cursor store is nothing there):
/// the full fences of the writer's gate scan and of the join keep the joiner from starting at
/// a position the writer then overwrites. Removing the gate scan's fence fails this model
/// (the symmetric models pass, the light fence standing in for it).
#[test]
fn loom_asym_join_races_the_writers_lap() {
    loom::model(|| {
        let (mut writer, stage) = asym_ring(1);
        let t = thread::spawn(move || {
            let mut reader = stage.reader().unwrap();
            for _ in 0..2 {
                if let Ok(item) = reader.try_recv() {
                    assert_eq!(*item, item.position(), "a joiner read a lapped slot");
                }
            }
            reader
        });
        let mut next = 0;
        for _ in 0..3 {
            if writer.try_publish(next).is_ok() {
                next += 1;
            }
        }
        drop(t.join().unwrap());
    });
}

/// A model builder exploring at most `preemptions` preemptions per run (or fewer, when
/// `LOOM_MAX_PREEMPTIONS` asks for fewer), for models too large for the suite's default bound.
fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(
        builder
            .preemption_bound
            .map_or(preemptions, |b| b.min(preemptions)),
    );
    builder
}

fn futures_noop_waker() -> std::task::Waker {
    std::task::Waker::noop().clone()
}

impl<T> crate::Writer<T> {
    fn writer_parked(&self) -> bool {
        self.shared().writer_wants.load(Ordering::SeqCst) != 0
    }

    /// Readers whose slot says they are parked (none should be once nobody waits).
    fn parked_readers(&self) -> usize {
        self.shared()
            .groups()
            .flat_map(|g| g.slots())
            .filter(|slot| slot.parked_on.load(Ordering::SeqCst) != crate::registry::NOT_PARKED)
            .count()
    }
}

/// A full writer that also waits for a flag (the bus's close) learns of it: the other side
/// sets the flag, then wakes the writer through the stage; the writer checks the flag after
/// each poll that found no room. The flag's orderings are the bus's: `close` swaps `closed`
/// in with AcqRel, an unbuffered publish loads it with Acquire.
#[test]
fn loom_a_woken_writer_sees_the_flag_set_before_the_wake() {
    loom::model(|| {
        let (mut writer, stage) = ring(1);
        let _reader = stage.reader().unwrap(); // never releases
        writer.try_publish(0).unwrap();
        let flag = loom::sync::Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let t = {
            let (flag, stage) = (flag.clone(), stage.clone());
            thread::spawn(move || {
                flag.swap(true, Ordering::AcqRel);
                stage.wake_writer();
            })
        };
        let mut ready = pin!(writer.ready(1));
        let room = block_on(poll_fn(|cx| match ready.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(true),
            Poll::Pending if flag.load(Ordering::Acquire) => Poll::Ready(false),
            Poll::Pending => Poll::Pending,
        }));
        assert!(!room);
        t.join().unwrap();
    });
}
