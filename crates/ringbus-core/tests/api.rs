//! Edge cases of the public API: sizes, rounding, errors that give values back, `Debug` of every
//! public type, `try_*` results, and the `Stream` impl.

use std::error::Error as _;

use futures_util::StreamExt;
use ringbus_core::{
    block_on, Builder, Closed, Full, JoinError, ReserveError, TooLarge, TryRecvError,
    TryReserveError,
};

#[test]
fn capacity_rounds_up_to_a_power_of_two() {
    for (asked, got) in [
        (0, 1),
        (1, 1),
        (2, 2),
        (3, 4),
        (5, 8),
        (1000, 1024),
        (1024, 1024),
        (1025, 2048),
    ] {
        let (mut writer, _stage) = Builder::new(asked).build::<u8>();
        assert_eq!(writer.capacity(), got, "Builder::new({asked})");
        // With no reader, the whole ring is free.
        assert_eq!(writer.remaining(), got, "Builder::new({asked})");
    }
}

/// A ring whose slots cannot be allocated is an `AllocError` from `try_build*`, and a panic
/// naming the capacity and the bytes from `build*`: never an abort of the process (issue 34:
/// `build_lazy` of 2^30 slots of 64 bytes aborted with "memory allocation of 68719476736 bytes
/// failed"). Each size here is refused on every 64-bit machine, whatever it has and however
/// it overcommits: a capacity whose rounding overflows `usize`, slots past `isize::MAX` bytes,
/// and 1 PiB of slots, more than a process can map (x86-64 and AArch64 give it 128 or 256 TiB).
#[cfg(target_pointer_width = "64")]
#[test]
fn a_ring_that_cannot_be_allocated_is_an_error_not_an_abort() {
    type Kib = [u8; 1024];
    let rounding = Builder::new(usize::MAX).try_build_lazy::<u8>().unwrap_err();
    assert_eq!((rounding.capacity, rounding.bytes), (usize::MAX, 1 << 64));
    let past_isize = Builder::new((1 << 62) + 1).try_build::<u64>().unwrap_err();
    assert_eq!(
        (past_isize.capacity, past_isize.bytes),
        ((1 << 62) + 1, 1 << 66)
    );
    let refused = Builder::new(1 << 40).try_build_lazy::<Kib>().unwrap_err();
    assert_eq!((refused.capacity, refused.bytes), (1 << 40, 1 << 50));
    let mut made = 0;
    let with = Builder::new(1 << 40).try_build_with(|| {
        made += 1;
        [0u8; 1024]
    });
    assert_eq!(with.unwrap_err(), refused);
    assert_eq!(
        made, 0,
        "the factory ran for slots that were never allocated"
    );

    for (error, says) in [
        (
            rounding,
            "rounded up to a power of two, it is past usize::MAX",
        ),
        (
            past_isize,
            "takes 73786976294838206464 bytes, more than any allocation may",
        ),
        (
            refused,
            "takes 1125899906842624 bytes, which could not be allocated",
        ),
    ] {
        let message = error.to_string();
        assert!(
            message.contains(&error.capacity.to_string()) && message.contains(says),
            "{message}"
        );
    }

    // `build*` panic with the same message, where they aborted.
    let panic = std::panic::catch_unwind(|| Builder::new(1 << 40).build_lazy::<Kib>())
        .map(drop)
        .unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(message, refused.to_string());

    // A ring that can be had is had, by `try_build*` as by `build*`.
    let (writer, _stage) = Builder::new(5).try_build_lazy::<Kib>().unwrap();
    assert_eq!(writer.capacity(), 8);
}

#[test]
fn reserve_beyond_capacity_is_too_large() {
    let (mut writer, stage) = Builder::new(3).build::<u32>(); // capacity 4
    let _reader = stage.reader().unwrap();
    let expected = TooLarge {
        requested: 5,
        capacity: 4,
    };

    assert_eq!(
        writer.try_reserve(5).unwrap_err(),
        TryReserveError::TooLarge(expected)
    );
    assert_eq!(
        block_on(writer.reserve(5)).unwrap_err(),
        ReserveError::TooLarge(expected)
    );
    assert_eq!(
        writer.blocking_reserve(5).unwrap_err(),
        ReserveError::TooLarge(expected)
    );
    assert_eq!(
        block_on(writer.reserve(usize::MAX)).unwrap_err(),
        ReserveError::TooLarge(TooLarge {
            requested: usize::MAX,
            capacity: 4
        })
    );

    let message = expected.to_string();
    assert!(message.contains('5') && message.contains('4'), "{message}");
    assert_eq!(ReserveError::TooLarge(expected).to_string(), message);
    let wrapped = TryReserveError::from(ReserveError::TooLarge(expected));
    assert_eq!(wrapped, TryReserveError::TooLarge(expected));
    assert_eq!(wrapped.to_string(), message);

    // Exactly the capacity is fine on an empty ring, and nothing was published by the failures.
    assert_eq!(writer.published(), 0);
    let r = writer.try_reserve(4).unwrap();
    assert_eq!(r.len(), 4);
    assert!(!r.is_empty()); // and dropped here, uncommitted
    assert_eq!(
        writer.published(),
        0,
        "a dropped reservation publishes nothing"
    );
}

#[test]
fn try_reserve_full_is_not_too_large() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    let mut reader = stage.reader().unwrap();
    writer.try_publish(1).unwrap();
    assert_eq!(writer.try_reserve(4).unwrap_err(), TryReserveError::Full);
    assert!(!TryReserveError::Full.to_string().is_empty());
    let mut r = writer.try_reserve(3).unwrap();
    let (a, b) = r.as_mut_slices();
    assert_eq!((a.len(), b.len()), (3, 0));
    a.copy_from_slice(&[2, 3, 4]);
    r.commit();
    assert_eq!(writer.remaining(), 0);
    let batch = reader.try_recv_batch(usize::MAX).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
}

#[test]
fn zero_sized_reservation_publishes_nothing() {
    let (mut writer, stage) = Builder::new(2).build::<u32>();
    let mut reader = stage.reader().unwrap();
    let mut r = writer.try_reserve(0).unwrap();
    assert!(r.is_empty());
    let (a, b) = r.as_mut_slices();
    assert!(a.is_empty() && b.is_empty());
    r.commit();
    assert_eq!(writer.published(), 0);
    assert_eq!(reader.try_recv().unwrap_err(), TryRecvError::Empty);
}

#[test]
#[should_panic(expected = "exceeds the ring's capacity")]
fn ready_beyond_capacity_panics() {
    let (mut writer, _stage) = Builder::new(4).build::<u32>();
    drop(writer.ready(5));
}

/// A payload without `Debug`, `Clone` or `PartialEq`.
struct Opaque(String);

#[test]
fn full_gives_the_value_back() {
    let (mut writer, stage) = Builder::new(1).build_lazy::<Opaque>();
    let mut reader = stage.reader().unwrap();
    assert!(writer.try_publish(Opaque("first".into())).is_ok());

    let err: Full<Opaque> = writer.try_publish(Opaque("second".into())).unwrap_err();
    // `Debug` and `Display` do not need `T: Debug`.
    assert_eq!(format!("{err:?}"), "Full(..)");
    assert!(err.to_string().contains("full"), "{err}");
    assert!(err.source().is_none());
    assert_eq!(err.into_inner().0, "second");

    let err = writer.try_publish(Opaque("third".into())).unwrap_err();
    assert_eq!(err.0 .0, "third");

    // Not published: the reader sees the first value only.
    assert_eq!(reader.try_recv().ok().unwrap().0, "first");
    assert!(matches!(reader.try_recv(), Err(TryRecvError::Empty)));
    // And once the reader released its slot, there is room again.
    assert!(writer.try_publish(Opaque("fourth".into())).is_ok());
    assert_eq!(reader.try_recv().ok().unwrap().0, "fourth");
}

#[test]
fn full_batch_leaves_the_rest_in_the_iterator() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    let mut reader = stage.reader().unwrap();
    let mut items = 0..10;
    assert_eq!(writer.try_publish_batch(&mut items), 4);
    assert_eq!(
        items.clone().collect::<Vec<_>>(),
        (4..10).collect::<Vec<_>>()
    );
    assert_eq!(writer.try_publish_batch(&mut items), 0);
    assert_eq!(items.start, 4, "a full ring takes nothing");
    drop(reader.try_recv_batch(2).unwrap());
    assert_eq!(writer.try_publish_batch(&mut items), 2);
    assert_eq!(items.start, 6);
}

#[test]
fn try_recv_empty_then_items_then_closed() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    let mut reader = stage.reader().unwrap();
    assert_eq!(reader.try_recv().unwrap_err(), TryRecvError::Empty);
    assert_eq!(reader.try_recv_batch(4).unwrap_err(), TryRecvError::Empty);
    assert!(!reader.is_closed());

    writer.try_publish(1).unwrap();
    writer.try_publish(2).unwrap();
    writer.close();
    assert!(reader.is_closed());

    // Closed but not drained: the items come first, from either method.
    let guard = reader.try_recv().unwrap();
    assert_eq!((*guard, guard.position()), (1, 0));
    drop(guard);
    let batch = reader.try_recv_batch(4).unwrap();
    assert_eq!((batch.len(), batch.position()), (1, 1));
    assert_eq!(batch.as_slices(), (&[2][..], &[][..]));
    drop(batch);

    assert_eq!(reader.try_recv().unwrap_err(), TryRecvError::Closed);
    assert_eq!(reader.try_recv_batch(4).unwrap_err(), TryRecvError::Closed);
    assert_eq!(block_on(reader.recv()).unwrap_err(), Closed);
    assert_eq!(block_on(reader.recv_batch(4)).unwrap_err(), Closed);
    assert_eq!(reader.blocking_recv().unwrap_err(), Closed);
    assert_eq!(reader.blocking_recv_batch(4).unwrap_err(), Closed);
    assert_ne!(
        TryRecvError::Empty.to_string(),
        TryRecvError::Closed.to_string()
    );
    assert_eq!(TryRecvError::Closed.to_string(), Closed.to_string());
}

#[test]
fn reader_joining_a_closed_ring_is_closed_at_once() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    writer.try_publish(1).unwrap();
    drop(writer);
    let mut reader = stage.reader().unwrap();
    assert_eq!(
        reader.position(),
        1,
        "a new reader starts at the writer's position"
    );
    assert_eq!(reader.lag(), 0);
    assert_eq!(reader.try_recv().unwrap_err(), TryRecvError::Closed);
    let mut late = stage.then().reader().unwrap();
    assert_eq!(late.try_recv().unwrap_err(), TryRecvError::Closed);
}

#[test]
fn reader_sees_only_what_was_published_after_it_joined() {
    let (mut writer, stage) = Builder::new(8).build::<u32>();
    writer.try_publish(1).unwrap();
    writer.try_publish(2).unwrap();
    let mut reader = writer.stage().reader().unwrap();
    assert_eq!(reader.position(), 2);
    writer.try_publish(3).unwrap();
    assert_eq!(reader.lag(), 1);
    let guard = reader.try_recv().unwrap();
    assert_eq!((*guard, guard.position()), (3, 2));
    drop(guard);
    assert_eq!((reader.position(), reader.lag()), (3, 0));
    assert_eq!(stage.readers(), 1);
    drop(reader);
    assert_eq!(stage.readers(), 0);
}

#[test]
fn empty_batch_only_from_max_zero() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    let mut reader = stage.reader().unwrap();
    writer.try_publish(7).unwrap();
    let batch = reader.try_recv_batch(0).unwrap();
    assert!(batch.is_empty());
    assert_eq!(batch.len(), 0);
    drop(batch);
    assert_eq!(reader.position(), 0, "an empty batch releases nothing");
    assert_eq!(*reader.try_recv().unwrap(), 7);
}

#[test]
fn max_readers_counts_every_stage() {
    let (_writer, first) = Builder::new(4).max_readers(3).build::<u32>();
    let second = first.then();
    let a = first.reader().unwrap();
    let _b = second.reader().unwrap();
    let _c = second.then().reader().unwrap();
    let err = first.reader().unwrap_err();
    assert_eq!(err, JoinError::TooManyReaders { max: 3 });
    assert!(err.to_string().contains('3'), "{err}");
    assert_eq!(
        second.reader().unwrap_err(),
        JoinError::TooManyReaders { max: 3 }
    );
    drop(a);
    let _d = second.reader().unwrap();

    let (_writer, stage) = Builder::new(4).max_readers(0).build::<u32>();
    assert_eq!(
        stage.reader().unwrap_err(),
        JoinError::TooManyReaders { max: 0 }
    );
}

#[test]
fn later_stage_waits_for_every_reader_of_the_earlier_one() {
    let (mut writer, first) = Builder::new(4).build::<u32>();
    let second = first.then();
    let mut a = first.reader().unwrap();
    let mut b = first.reader().unwrap();
    let mut z = second.reader().unwrap();
    writer.try_publish(1).unwrap();
    assert_eq!(z.try_recv().unwrap_err(), TryRecvError::Empty);
    drop(a.try_recv().unwrap());
    assert_eq!(z.try_recv().unwrap_err(), TryRecvError::Empty);
    drop(b.try_recv().unwrap());
    assert_eq!(*z.try_recv().unwrap(), 1);
    // Closed: the second stage drains what the first released, then is closed.
    writer.try_publish(2).unwrap();
    drop(writer);
    assert_eq!(z.try_recv().unwrap_err(), TryRecvError::Empty);
    drop(a); // leaving releases as well
    assert_eq!(z.try_recv().unwrap_err(), TryRecvError::Empty);
    drop(b.try_recv().unwrap());
    assert_eq!(*z.try_recv().unwrap(), 2);
    assert_eq!(z.try_recv().unwrap_err(), TryRecvError::Closed);
}

#[test]
fn debug_output_for_every_public_type() {
    fn shows<D: std::fmt::Debug>(value: &D, needle: &str) {
        let text = format!("{value:?}");
        assert!(text.contains(needle), "{text:?} should contain {needle:?}");
    }

    let builder = Builder::new(4).spin(0).max_readers(9);
    shows(&builder, "Builder");
    let (mut writer, stage) = builder.build::<u32>();
    shows(&writer, "Writer");
    shows(&stage, "Stage");
    let mut reader = stage.reader().unwrap();
    shows(&reader, "Reader");

    {
        let ready = writer.ready(1);
        shows(&ready, "Ready");
    }
    {
        let reservation = writer.try_reserve(2).unwrap();
        shows(&reservation, "Reservation");
    }
    writer.try_publish(41).unwrap();
    writer.try_publish(42).unwrap();
    {
        let recv = reader.recv();
        shows(&recv, "Recv");
    }
    {
        let recv = reader.recv_batch(3);
        shows(&recv, "RecvBatch");
    }
    {
        let guard = reader.try_recv().unwrap();
        shows(&guard, "41");
    }
    {
        let batch = reader.try_recv_batch(3).unwrap();
        shows(&batch, "[42]");
    }

    shows(&Full(Opaque(String::new())), "Full");
    shows(&Closed, "Closed");
    shows(&TryRecvError::Empty, "Empty");
    shows(&TryRecvError::Closed, "Closed");
    shows(
        &TooLarge {
            requested: 5,
            capacity: 4,
        },
        "TooLarge",
    );
    shows(&TryReserveError::Full, "Full");
    shows(&TryReserveError::Empty, "Empty");
    shows(&ReserveError::Empty, "Empty");
    shows(
        &ReserveError::TooLarge(TooLarge {
            requested: 2,
            capacity: 1,
        }),
        "TooLarge",
    );
    shows(&JoinError::TooManyReaders { max: 9 }, "TooManyReaders");
}

#[test]
fn stream_of_a_clone_type_ends_at_close() {
    let (mut writer, stage) = Builder::new(4).build::<String>();
    let reader = stage.reader().unwrap();
    let collector = std::thread::spawn(move || block_on(reader.collect::<Vec<String>>()));
    let words: Vec<String> = (0..20).map(|i| format!("word {i}")).collect();
    for word in &words {
        writer.blocking_publish(word.clone());
    }
    drop(writer);
    assert_eq!(collector.join().unwrap(), words);
}

#[test]
fn stream_of_a_stage_later_than_the_first() {
    let (mut writer, first) = Builder::new(2).build::<u64>();
    let mut head = first.reader().unwrap();
    let tail = first.then().reader().unwrap();
    let collector = std::thread::spawn(move || block_on(tail.collect::<Vec<u64>>()));
    let mut released = Vec::new();
    for i in 0..10u64 {
        writer.blocking_publish(i);
        released.push(*head.blocking_recv().unwrap());
    }
    drop(writer);
    drop(head);
    assert_eq!(collector.join().unwrap(), released);
    assert_eq!(released, (0..10).collect::<Vec<_>>());
}

#[test]
fn reservations_wrap_as_two_segments() {
    let (mut writer, stage) = Builder::new(4).build::<u32>();
    let mut reader = stage.reader().unwrap();
    writer.try_publish_batch(&mut [0, 1, 2].into_iter());
    drop(reader.try_recv_batch(3).unwrap());

    let mut r = writer.try_reserve(3).unwrap();
    let (a, b) = r.as_mut_slices();
    assert_eq!((a.len(), b.len()), (1, 2));
    // They hold whatever they last held: slot 3 its initial value, slots 0 and 1 a lap ago.
    assert_eq!((&*a, &*b), (&[0][..], &[0, 1][..]));
    a[0] = 3;
    b.copy_from_slice(&[4, 5]);
    r.commit();

    let batch = reader.try_recv_batch(8).unwrap();
    assert_eq!(batch.as_slices(), (&[3][..], &[4, 5][..]));
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [3, 4, 5]);
}

#[test]
fn build_with_uses_the_factory_once_per_slot() {
    let mut made = 0;
    let (mut writer, stage) = Builder::new(5).build_with(|| {
        made += 1;
        vec![0u8; made]
    });
    assert_eq!(made, 8);
    let mut reader = stage.reader().unwrap();
    let mut r = writer.try_reserve(8).unwrap();
    let (a, b) = r.as_mut_slices();
    assert!(b.is_empty());
    let lens: Vec<usize> = a.iter().map(Vec::len).collect();
    assert_eq!(lens, (1..=8).collect::<Vec<_>>());
    r.commit();
    assert_eq!(reader.try_recv_batch(8).unwrap().len(), 8);
}

#[test]
fn lazy_ring_refuses_reservations_until_every_slot_was_published() {
    let (mut writer, stage) = Builder::new(4).build_lazy::<String>();
    let mut reader = stage.reader().unwrap();

    assert_eq!(writer.try_reserve(1).unwrap_err(), TryReserveError::Empty);
    assert_eq!(
        block_on(writer.reserve(1)).unwrap_err(),
        ReserveError::Empty
    );
    assert_eq!(writer.blocking_reserve(4).unwrap_err(), ReserveError::Empty);
    // Too large wins over empty: it can never succeed.
    assert!(matches!(
        writer.try_reserve(5).unwrap_err(),
        TryReserveError::TooLarge(TooLarge {
            requested: 5,
            capacity: 4
        })
    ));
    // Nothing to lend is not an error.
    assert!(writer.try_reserve(0).unwrap().is_empty());
    let message = ReserveError::Empty.to_string();
    assert_eq!(TryReserveError::Empty.to_string(), message);
    assert_ne!(message, TryReserveError::Full.to_string());

    for i in 0..3 {
        writer.try_publish(format!("v{i}")).unwrap();
        assert_eq!(writer.try_reserve(1).unwrap_err(), TryReserveError::Empty);
    }
    writer.try_publish("v3".to_string()).unwrap();
    drop(reader.try_recv_batch(4).unwrap());

    // Every slot holds a value now: they are lent in place, holding what they held a lap ago.
    let mut r = writer.try_reserve(4).unwrap();
    let (a, b) = r.as_mut_slices();
    assert!(b.is_empty());
    assert_eq!(a, ["v0", "v1", "v2", "v3"]);
    for s in a.iter_mut() {
        s.push('!');
    }
    r.commit();
    let batch = reader.try_recv_batch(4).unwrap();
    assert_eq!(batch.as_slices().0, ["v0!", "v1!", "v2!", "v3!"]);
}

#[test]
fn stage_reports_published_and_closed() {
    let (mut writer, stage) = Builder::new(4).build::<u8>();
    let later = stage.then();
    assert_eq!((stage.published(), stage.is_closed()), (0, false));
    writer.try_publish(1).unwrap();
    writer.try_publish(2).unwrap();
    assert_eq!((later.published(), later.is_closed()), (2, false));
    drop(writer);
    assert_eq!((stage.published(), stage.is_closed()), (2, true));
    assert!(later.is_closed());
}

#[test]
fn batch_lends_everything_available_after_single_reads() {
    // A reader that read single items from an earlier view of the ring must still get every
    // available item in its next batch (regression: it used to get only the rest of that view).
    let (mut writer, first) = Builder::new(8).build::<u64>();
    let second = first.then();
    let mut reader = first.reader().unwrap();
    let mut next = second.reader().unwrap();
    writer.try_publish_batch(&mut (0..2));
    drop(reader.try_recv().unwrap());
    writer.try_publish_batch(&mut (2..6));
    assert_eq!(reader.lag(), 5);
    let batch = reader.try_recv_batch(16).unwrap();
    assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    drop(batch);

    drop(next.try_recv().unwrap());
    writer.try_publish_batch(&mut (6..8));
    drop(reader.try_recv_batch(16).unwrap());
    let batch = block_on(next.recv_batch(16)).unwrap();
    assert_eq!(
        batch.iter().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    drop(batch);
    // And `max` still bounds it.
    writer.try_publish_batch(&mut (8..12));
    assert_eq!(reader.blocking_recv_batch(3).unwrap().len(), 3);
}

/// A value whose `Clone` panics for one payload.
#[derive(Debug, Default, PartialEq)]
struct Fragile(u64);

impl Clone for Fragile {
    fn clone(&self) -> Self {
        assert_ne!(self.0, 13, "this one does not clone");
        Fragile(self.0)
    }
}

#[test]
fn a_stream_item_whose_clone_panics_is_released_and_skipped() {
    let (mut writer, stage) = Builder::new(4).build::<Fragile>();
    let mut reader = stage.reader().unwrap();
    for v in [12, 13, 14] {
        writer.try_publish(Fragile(v)).unwrap();
    }
    assert_eq!(block_on(reader.next()), Some(Fragile(12)));
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(reader.next())));
    assert!(panicked.is_err());
    // The item that failed to clone was released: the stream goes on, and the writer has room.
    assert_eq!(reader.position(), 2);
    assert_eq!(block_on(reader.next()), Some(Fragile(14)));
    assert_eq!(writer.remaining(), 4);
}
