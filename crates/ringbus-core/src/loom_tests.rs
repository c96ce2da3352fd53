//! Loom models of the ring's protocols. Run with
//! `RUSTFLAGS="--cfg ringbus_loom" cargo test -p ringbus-core --lib --release loom_`.
//!
//! Each model is small (capacity 1 or 2, one or two items) so that loom can explore every
//! interleaving within the preemption bound; the protocols do not depend on the sizes.

use loom::future::block_on;
use loom::sync::atomic::Ordering;
use loom::thread;
use std::future::Future;
use std::pin::pin;
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
    loom::model(|| {
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
    });
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
