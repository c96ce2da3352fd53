//! Zero allocations in the steady state: after a warm-up, publishing and reading (single items,
//! batches, reservations, async through `block_on`, blocking, with parking across threads)
//! allocate nothing.
//!
//! This binary installs a counting global allocator. Counting is per thread and only while the
//! thread measures (a thread-local flag), so the test harness and tests running in parallel do
//! not disturb the counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::thread;

use futures_util::StreamExt;
use ringbus_core::{block_on, Builder, Reader, Writer};

struct Counting;

thread_local! {
    // `const` and without destructors: reading them never allocates, so the allocator may.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static BYTES: Cell<usize> = const { Cell::new(0) };
}

fn record(bytes: usize) {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    if MEASURING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + bytes));
    }
}

// SAFETY: every call is forwarded to `System` with its arguments unchanged; counting touches
// only const thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` counting this thread's allocations; returns (allocations, bytes).
fn allocations_in(f: impl FnOnce()) -> (usize, usize) {
    ALLOCATIONS.with(|c| c.set(0));
    BYTES.with(|c| c.set(0));
    MEASURING.with(|m| m.set(true));
    f();
    MEASURING.with(|m| m.set(false));
    (ALLOCATIONS.with(Cell::get), BYTES.with(Cell::get))
}

#[test]
fn the_counter_counts() {
    // Without this, a broken counter would make every other test pass.
    let (n, bytes) = allocations_in(|| drop(std::hint::black_box(vec![0u8; 100])));
    assert_eq!((n, bytes), (1, 100));
}

/// One round of every publishing method: 16 items.
fn publish_round(writer: &mut Writer<u64>, next: &mut u64) {
    let mut n = *next;
    writer.try_publish(n).unwrap();
    block_on(writer.publish(n + 1));
    writer.blocking_publish(n + 2);
    n += 3;
    assert_eq!(block_on(writer.publish_batch([n, n + 1, n + 2])), 3);
    n += 3;
    assert_eq!(writer.blocking_publish_batch([n, n + 1]), 2);
    n += 2;
    assert_eq!(writer.try_publish_batch(&mut (n..n + 2)), 2);
    n += 2;
    let mut reservation = writer.try_reserve(2).unwrap();
    let (a, b) = reservation.as_mut_slices();
    for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip(n..) {
        *slot = value;
    }
    reservation.commit();
    n += 2;
    let mut reservation = block_on(writer.reserve(2)).unwrap();
    let (a, b) = reservation.as_mut_slices();
    for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip(n..) {
        *slot = value;
    }
    reservation.commit();
    n += 2;
    let mut reservation = writer.blocking_reserve(2).unwrap();
    let (a, b) = reservation.as_mut_slices();
    for (slot, value) in a.iter_mut().chain(b.iter_mut()).zip(n..) {
        *slot = value;
    }
    reservation.commit();
    n += 2;
    *next = n;
}

/// Reads 16 items through every reading method, checking them.
fn read_round(reader: &mut Reader<u64>, next: &mut u64) {
    let mut n = *next;
    let mut check = |value: u64| {
        assert_eq!(value, n);
        n += 1;
    };
    check(*reader.try_recv().unwrap());
    check(*block_on(reader.recv()).unwrap());
    check(*reader.blocking_recv().unwrap());
    check(block_on(reader.next()).unwrap());
    for &v in reader.try_recv_batch(3).unwrap().iter() {
        check(v);
    }
    for &v in block_on(reader.recv_batch(4)).unwrap().iter() {
        check(v);
    }
    let batch = reader.blocking_recv_batch(5).unwrap();
    let (a, b) = batch.as_slices();
    for &v in a.iter().chain(b) {
        check(v);
    }
    drop(batch);
    *next = n;
}

#[test]
fn publishing_and_reading_on_one_thread_allocate_nothing() {
    // Capacity 64 and 16 items a round: every round wraps somewhere else.
    let (mut writer, first) = Builder::new(64).build::<u64>();
    let second = first.then();
    let mut head = first.reader().unwrap();
    let mut tail = second.reader().unwrap();
    let (mut written, mut head_read, mut tail_read) = (0, 0, 0);
    let mut round = |writer: &mut Writer<u64>, head: &mut Reader<u64>, tail: &mut Reader<u64>| {
        publish_round(writer, &mut written);
        read_round(head, &mut head_read);
        read_round(tail, &mut tail_read);
        assert_eq!((head.lag(), tail.lag()), (0, 0));
    };
    // Warm-up: `block_on`'s thread-local waker, lazily made things in std, first wrap-around.
    for _ in 0..10 {
        round(&mut writer, &mut head, &mut tail);
    }
    let (n, bytes) = allocations_in(|| {
        for _ in 0..2_000 {
            round(&mut writer, &mut head, &mut tail);
        }
    });
    assert_eq!(
        (n, bytes),
        (0, 0),
        "allocations in 32,000 publishes and 64,000 reads"
    );
}

#[test]
fn reserving_buffers_in_place_allocates_nothing() {
    // A ring of preallocated strings, filled in place: the buffers are reused lap after lap.
    let (mut writer, stage) = Builder::new(8).build_with(|| String::with_capacity(64));
    let mut reader = stage.reader().unwrap();
    let lap = |writer: &mut Writer<String>, reader: &mut Reader<String>, i: usize| {
        let mut reservation = writer.try_reserve(3).unwrap();
        let (a, b) = reservation.as_mut_slices();
        for (k, slot) in a.iter_mut().chain(b.iter_mut()).enumerate() {
            slot.clear();
            slot.push_str(["alpha", "beta", "gamma"][k]);
            slot.push_str(if i % 2 == 0 { " even" } else { " odd" });
        }
        reservation.commit();
        let batch = reader.try_recv_batch(8).unwrap();
        assert_eq!(batch.len(), 3);
        assert!(batch
            .iter()
            .all(|s| s.ends_with(if i % 2 == 0 { "even" } else { "odd" })));
    };
    for i in 0..8 {
        lap(&mut writer, &mut reader, i);
    }
    let (n, bytes) = allocations_in(|| {
        for i in 0..10_000 {
            lap(&mut writer, &mut reader, i);
        }
    });
    assert_eq!((n, bytes), (0, 0));
}

#[test]
fn parking_and_waking_across_threads_allocate_nothing() {
    // A small ring and `spin(0)`: the writer parks when full and the reader when caught up,
    // so the waker paths run all the time. Each thread counts its own allocations.
    const ITEMS: u64 = 50_000;
    const WARM_UP: u64 = 1_000;
    let (mut writer, stage) = Builder::new(4).spin(0).build::<u64>();
    let mut reader = stage.reader().unwrap();
    let consumer = thread::spawn(move || {
        let mut expected = 0;
        let mut read = |reader: &mut Reader<u64>, until: u64| {
            while expected < until {
                let batch = reader.blocking_recv_batch(3).unwrap();
                for &v in batch.iter() {
                    assert_eq!(v, expected);
                    expected += 1;
                }
            }
        };
        read(&mut reader, WARM_UP);
        let counts = allocations_in(|| read(&mut reader, ITEMS));
        assert!(reader.blocking_recv().is_err());
        counts
    });
    for i in 0..WARM_UP {
        writer.blocking_publish(i);
    }
    let counts = allocations_in(|| {
        for i in WARM_UP..ITEMS {
            if i % 2 == 0 {
                writer.blocking_publish(i);
            } else {
                block_on(writer.publish(i));
            }
        }
    });
    drop(writer);
    assert_eq!(counts, (0, 0), "writer thread");
    assert_eq!(consumer.join().unwrap(), (0, 0), "reader thread");
}
