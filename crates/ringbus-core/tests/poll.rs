//! Poll-level behaviour of every waiting operation, driven by hand with `tokio-test`: what is
//! `Pending`, which event wakes it, and what a dropped (cancelled) future leaves behind.
//!
//! Every ring here is built with `spin(0)`, so a future that cannot complete parks on its first
//! poll instead of busy-polling first.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use ringbus_core::{Builder, Closed, Stage, Writer};
use tokio_test::task::spawn;
use tokio_test::{assert_pending, assert_ready};

fn ring(capacity: usize) -> (Writer<u64>, Stage<u64>) {
    Builder::new(capacity).spin(0).build()
}

/// A waker that counts its wake-ups, to check who is (not) woken after a future is dropped.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountingWaker {
    fn wakes(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn caught_up_recv_is_pending_until_the_next_publish() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    let mut recv = spawn(reader.recv());
    assert_pending!(recv.poll());
    // Polling again while nothing happened stays pending and keeps the registration.
    assert_pending!(recv.poll());
    assert!(!recv.is_woken());

    writer.try_publish(7).unwrap();
    assert!(recv.is_woken());
    let guard = assert_ready!(recv.poll()).unwrap();
    assert_eq!((*guard, guard.position()), (7, 0));
}

#[test]
fn every_kind_of_publish_wakes_a_parked_reader() {
    let (mut writer, stage) = ring(8);
    let mut reader = stage.reader().unwrap();
    for kind in 0..5 {
        let mut recv = spawn(reader.recv_batch(8));
        assert_pending!(recv.poll(), "kind {kind}");
        let expected: Vec<u64> = match kind {
            0 => {
                writer.try_publish(10).unwrap();
                vec![10]
            }
            1 => {
                assert_eq!(writer.try_publish_batch(&mut [20, 21].into_iter()), 2);
                vec![20, 21]
            }
            2 => {
                let mut publish = spawn(writer.publish_batch([30, 31, 32]));
                assert_eq!(assert_ready!(publish.poll()), 3);
                vec![30, 31, 32]
            }
            3 => {
                let mut reservation = writer.try_reserve(2).unwrap();
                let (a, b) = reservation.as_mut_slices();
                for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip([40, 41]) {
                    *slot = value;
                }
                reservation.commit();
                vec![40, 41]
            }
            _ => {
                let mut publish = spawn(writer.publish(50));
                assert_ready!(publish.poll());
                vec![50]
            }
        };
        assert!(recv.is_woken(), "kind {kind}");
        let batch = assert_ready!(recv.poll()).unwrap();
        assert_eq!(
            batch.iter().copied().collect::<Vec<_>>(),
            expected,
            "kind {kind}"
        );
    }
}

#[test]
fn poll_ready_and_stream_are_woken_by_publish() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    {
        let mut ready = spawn(poll_fn(|cx| reader.poll_ready(cx)));
        assert_pending!(ready.poll());
        writer.try_publish(1).unwrap();
        assert!(ready.is_woken());
        assert_ready!(ready.poll()).unwrap();
    }
    // `poll_ready` consumed nothing.
    assert_eq!(*reader.try_recv().unwrap(), 1);

    let mut stream = spawn(reader);
    assert_pending!(stream.poll_next());
    writer.try_publish(2).unwrap();
    assert!(stream.is_woken());
    assert_eq!(assert_ready!(stream.poll_next()), Some(2));
    assert_pending!(stream.poll_next());
    drop(writer);
    assert!(stream.is_woken());
    assert_eq!(assert_ready!(stream.poll_next()), None);
}

#[test]
fn later_stage_is_woken_when_the_earlier_stage_releases() {
    let (mut writer, first) = ring(4);
    let second = first.then();
    let mut a = first.reader().unwrap();
    let mut b = first.reader().unwrap();
    let mut z = second.reader().unwrap();

    writer.try_publish(1).unwrap();
    let mut recv = spawn(z.recv());
    assert_pending!(recv.poll());
    // Publishing more does not make it ready: the first stage has released nothing.
    writer.try_publish(2).unwrap();
    assert_pending!(recv.poll());
    // One of two first-stage readers releasing is not enough either.
    drop(a.try_recv().unwrap());
    assert_pending!(recv.poll());

    drop(b.try_recv().unwrap());
    assert!(recv.is_woken());
    let guard = assert_ready!(recv.poll()).unwrap();
    assert_eq!(*guard, 1);
    drop(guard);
    drop(recv);

    // Position 1 is still held by `b` (and `a`). When the last first-stage reader that holds it
    // leaves, the second stage is released as well.
    drop(a.try_recv().unwrap());
    let mut recv = spawn(z.recv());
    assert_pending!(recv.poll());
    drop(b);
    assert!(recv.is_woken());
    assert_eq!(*assert_ready!(recv.poll()).unwrap(), 2);
}

#[test]
fn full_writer_is_woken_when_the_slowest_reader_advances() {
    let (mut writer, stage) = ring(2);
    let mut fast = stage.reader().unwrap();
    let mut slow = stage.reader().unwrap();
    writer.try_publish(0).unwrap();
    writer.try_publish(1).unwrap();
    drop(fast.try_recv_batch(2).unwrap());
    assert_eq!(writer.remaining(), 0);

    let mut publish = spawn(writer.publish(2));
    assert_pending!(publish.poll());
    assert_pending!(publish.poll());
    assert!(!publish.is_woken());

    // The guard holds position 0 until it drops.
    let guard = slow.try_recv().unwrap();
    assert_eq!(*guard, 0);
    assert_pending!(publish.poll());
    drop(guard);
    assert!(publish.is_woken());
    assert_ready!(publish.poll());
    drop(publish);

    assert_eq!(*fast.try_recv().unwrap(), 2);
    assert_eq!(*slow.try_recv().unwrap(), 1);
    assert_eq!(*slow.try_recv().unwrap(), 2);
}

/// In a big ring, the release of the one slot a parked writer needs wakes it: the wake-up is
/// not held back to batch several releases, which would strand a writer whose reader then
/// pauses (say, until the writer's next message arrives by another way).
#[test]
fn full_big_ring_writer_is_woken_by_the_first_release_it_needs() {
    let (mut writer, stage) = ring(1024);
    let mut reader = stage.reader().unwrap();
    for i in 0..1024 {
        writer.try_publish(i).unwrap();
    }
    let mut publish = spawn(writer.publish(1024));
    assert_pending!(publish.poll());
    drop(reader.try_recv().unwrap());
    assert!(
        publish.is_woken(),
        "releasing the slot the writer needs left it parked"
    );
    assert_ready!(publish.poll());
    drop(publish);

    // The same for a batch: `ready(n)` wakes once exactly `n` slots are free.
    let mut ready = spawn(writer.ready(3));
    assert_pending!(ready.poll());
    drop(reader.try_recv_batch(2).unwrap());
    assert!(
        !ready.is_woken(),
        "woken with 2 of the 3 slots it waits for"
    );
    drop(reader.try_recv().unwrap());
    assert!(ready.is_woken(), "not woken once its 3 slots were free");
    assert_ready!(ready.poll());
}

#[test]
fn full_writer_waits_for_the_slowest_reader_of_a_later_stage() {
    let (mut writer, first) = ring(2);
    let mut a = first.reader().unwrap();
    let mut z = first.then().reader().unwrap();
    writer.try_publish(0).unwrap();
    writer.try_publish(1).unwrap();
    drop(a.try_recv_batch(2).unwrap());

    let mut publish = spawn(writer.publish(2));
    assert_pending!(publish.poll());
    drop(z.try_recv().unwrap());
    assert!(publish.is_woken());
    assert_ready!(publish.poll());
}

#[test]
fn ready_and_reserve_wait_for_enough_room() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    assert_eq!(writer.try_publish_batch(&mut (0..4)), 4);

    let mut ready = spawn(writer.ready(2));
    assert_pending!(ready.poll());
    drop(reader.try_recv().unwrap());
    // One free slot is not enough for two: pending again (a wake-up is allowed, not required).
    assert_pending!(ready.poll());
    drop(reader.try_recv().unwrap());
    assert!(ready.is_woken());
    assert_ready!(ready.poll());
    drop(ready);

    assert_eq!(writer.try_publish_batch(&mut (4..6)), 2);
    let mut reserve = spawn(writer.reserve(3));
    assert_pending!(reserve.poll());
    drop(reader.try_recv_batch(3).unwrap());
    assert!(reserve.is_woken());
    let mut reservation = assert_ready!(reserve.poll()).unwrap();
    let (a, b) = reservation.as_mut_slices();
    assert_eq!((a.len(), b.len()), (2, 1));
    a.copy_from_slice(&[6, 7]);
    b.copy_from_slice(&[8]);
    reservation.commit();
    drop(reserve);

    let batch = reader.try_recv_batch(8).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [5, 6, 7, 8]);
}

#[test]
fn batch_publish_waits_between_chunks_and_its_cancellation_keeps_what_was_published() {
    let (mut writer, stage) = ring(2);
    let mut reader = stage.reader().unwrap();
    {
        let mut publish = spawn(writer.publish_batch(0..7));
        assert_pending!(publish.poll());
        // The first chunk is visible while the rest waits.
        let batch = reader.try_recv_batch(8).unwrap();
        assert_eq!(batch.as_slices(), (&[0, 1][..], &[][..]));
        drop(batch);
        assert!(publish.is_woken());
        assert_pending!(publish.poll()); // 2 and 3 went out
        drop(reader.try_recv().unwrap());
        assert!(publish.is_woken());
        assert_pending!(publish.poll()); // 4 went out; 5 and 6 wait
    } // cancelled: 5 and 6 are dropped with the future
    let batch = reader.try_recv_batch(8).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [3, 4]);
    drop(batch);
    assert_eq!(
        reader.try_recv().unwrap_err(),
        ringbus_core::TryRecvError::Empty
    );
    assert_eq!(writer.published(), 5);
}

#[test]
fn a_reader_leaving_releases_a_pending_writer() {
    let (mut writer, first) = ring(1);
    let a = first.reader().unwrap();
    let b = first.reader().unwrap();
    let z = first.then().reader().unwrap();
    writer.try_publish(0).unwrap();

    let mut publish = spawn(writer.publish(1));
    assert_pending!(publish.poll());
    drop(a);
    assert!(publish.is_woken());
    assert_pending!(publish.poll(), "b and z still hold position 0");
    drop(z);
    assert!(publish.is_woken());
    assert_pending!(publish.poll(), "b still holds position 0");
    drop(b);
    assert!(publish.is_woken());
    assert_ready!(publish.poll());
}

#[test]
fn close_wakes_a_pending_reader_which_then_sees_closed() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    writer.try_publish(1).unwrap();
    assert_eq!(*reader.try_recv().unwrap(), 1);

    let mut recv = spawn(reader.recv());
    assert_pending!(recv.poll());
    drop(writer);
    assert!(recv.is_woken());
    assert_eq!(assert_ready!(recv.poll()).unwrap_err(), Closed);
}

#[test]
fn close_lets_readers_drain_before_closed() {
    let (mut writer, first) = ring(4);
    let mut a = first.reader().unwrap();
    let mut z = first.then().reader().unwrap();
    writer.try_publish(1).unwrap();
    writer.try_publish(2).unwrap();

    let mut recv = spawn(z.recv_batch(4));
    assert_pending!(recv.poll());
    drop(writer);
    // The second stage has nothing released yet: closing does not end its wait.
    assert_pending!(recv.poll());

    // The first stage drains without waiting.
    let mut first_recv = spawn(a.recv_batch(4));
    let batch = assert_ready!(first_recv.poll()).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [1, 2]);
    drop(batch);
    drop(first_recv);
    assert_eq!(assert_ready!(spawn(a.recv()).poll()).unwrap_err(), Closed);

    assert!(recv.is_woken());
    let batch = assert_ready!(recv.poll()).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [1, 2]);
    drop(batch);
    drop(recv);
    assert_eq!(assert_ready!(spawn(z.recv()).poll()).unwrap_err(), Closed);
}

#[test]
fn a_dropped_pending_recv_leaves_the_reader_able_to_receive() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    {
        let mut recv = spawn(reader.recv());
        assert_pending!(recv.poll());
    }
    writer.try_publish(5).unwrap();
    assert_eq!(reader.position(), 0);
    assert_eq!(*reader.try_recv().unwrap(), 5);

    {
        let mut recv = spawn(reader.recv_batch(4));
        assert_pending!(recv.poll());
    }
    // A fresh wait after a cancelled one parks and is woken as usual.
    let mut recv = spawn(reader.recv());
    assert_pending!(recv.poll());
    writer.try_publish(6).unwrap();
    assert!(recv.is_woken());
    assert_eq!(*assert_ready!(recv.poll()).unwrap(), 6);
}

#[test]
fn a_dropped_recv_ready_but_not_taken_consumes_nothing() {
    let (mut writer, stage) = ring(4);
    let mut reader = stage.reader().unwrap();
    writer.try_publish(1).unwrap();
    // Never polled.
    drop(reader.recv());
    // Polled to completion, but the guard dropped at once: that consumes it, as documented.
    assert_eq!(reader.position(), 0);
    assert_eq!(*reader.try_recv().unwrap(), 1);
    assert_eq!(reader.position(), 1);
}

#[test]
fn cancelled_waits_are_not_woken_later() {
    let (mut writer, stage) = ring(1);
    let mut reader = stage.reader().unwrap();

    // A reader's cancelled wait.
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(counter.clone());
    {
        let mut recv = pin!(reader.recv());
        assert!(recv
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    writer.try_publish(1).unwrap();
    assert_eq!(
        counter.wakes(),
        0,
        "the publish woke a reader that stopped waiting"
    );

    // A writer's cancelled wait.
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(counter.clone());
    {
        let mut ready = writer.ready(1);
        assert!(std::pin::Pin::new(&mut ready)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    drop(reader.try_recv().unwrap());
    assert_eq!(
        counter.wakes(),
        0,
        "the release woke a writer that stopped waiting"
    );
    assert_eq!(writer.remaining(), 1);
}

#[test]
fn a_reader_that_joins_late_is_woken_by_the_next_publish() {
    let (mut writer, first) = ring(2);
    let second = first.then();
    writer.try_publish(0).unwrap();
    // The first stage is empty: the second follows the writer, and parks on it.
    let mut z = second.reader().unwrap();
    assert_eq!(z.position(), 1);
    let mut recv = spawn(z.recv());
    assert_pending!(recv.poll());
    writer.try_publish(1).unwrap();
    assert!(recv.is_woken());
    assert_eq!(*assert_ready!(recv.poll()).unwrap(), 1);
    drop(recv);

    // Now a first-stage reader joins: the second stage waits for it from here on.
    let mut a = first.reader().unwrap();
    let mut recv = spawn(z.recv());
    assert_pending!(recv.poll());
    writer.try_publish(2).unwrap();
    // Woken or not by the publish, it must not be ready before `a` released position 2.
    assert_pending!(recv.poll());
    drop(a.try_recv().unwrap());
    assert!(recv.is_woken());
    assert_eq!(*assert_ready!(recv.poll()).unwrap(), 2);
}

#[test]
fn blocking_publish_is_released_by_a_reader_on_another_thread() {
    // The `blocking_*` methods park the thread; the reader thread's release must unpark it.
    let (mut writer, stage) = ring(2);
    let mut reader = stage.reader().unwrap();
    writer.try_publish(0).unwrap();
    writer.try_publish(1).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(guard) = reader.blocking_recv() {
            seen.push(*guard);
        }
        seen
    });
    for i in 2..100 {
        writer.blocking_publish(i);
    }
    drop(writer);
    assert_eq!(consumer.join().unwrap(), (0..100).collect::<Vec<_>>());
}

/// A reader whose waker panics when cloned (at registration) leaves its slot to the next
/// reader in working order: that reader parks and is woken like any other.
#[test]
fn a_waker_that_panics_when_cloned_does_not_break_the_slot_for_the_next_reader() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, RawWaker, RawWakerVTable, Waker};

    fn panicking_clone(_: *const ()) -> RawWaker {
        panic!("this waker cannot be cloned");
    }
    fn nothing(_: *const ()) {}
    static PANICKING: RawWakerVTable =
        RawWakerVTable::new(panicking_clone, nothing, nothing, nothing);
    // SAFETY: the vtable's functions ignore the data pointer.
    let bad = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &PANICKING)) };

    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let woken = Arc::new(Count(AtomicUsize::new(0)));
    let good = Waker::from(woken.clone());

    let (mut writer, stage) = ringbus_core::Builder::new(4).spin(0).build::<u64>();
    let mut first = stage.reader().unwrap();
    let registered = catch_unwind(AssertUnwindSafe(|| {
        first.poll_ready(&mut Context::from_waker(&bad))
    }));
    assert!(registered.is_err(), "the waker's clone did not panic");
    drop(first);

    // The next reader takes the same slot (the only free one it could reuse first).
    let mut next = stage.reader().unwrap();
    assert!(next
        .poll_ready(&mut Context::from_waker(&good))
        .is_pending());
    writer.try_publish(1).unwrap();
    assert!(
        woken.0.load(Ordering::SeqCst) >= 1,
        "the next reader was never woken"
    );
    assert!(next.try_recv().is_ok());
}
