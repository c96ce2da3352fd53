//! Every value that enters the ring is dropped exactly once: the initial slot values (from
//! `Default` or a factory), values overwritten a lap later, values refused (`Full`) or cancelled,
//! values written through reservations (committed or not), and whatever is still in the ring
//! when its last handle (writer, stage or reader, in any order) goes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ringbus_core::{block_on, Builder, Reader, Stage, TryReserveError, Writer};
use tokio_test::task::spawn;
use tokio_test::{assert_pending, assert_ready};

/// Makes values with unique ids and counts the drops of each.
#[derive(Clone, Default)]
struct Tracker(Arc<Mutex<Vec<u32>>>);

/// A value whose drops are counted by its [`Tracker`]. Cloning makes a new value (a new id).
struct Counted {
    id: usize,
    tracker: Tracker,
}

impl Tracker {
    fn make(&self) -> Counted {
        let mut drops = self.0.lock().unwrap();
        drops.push(0);
        Counted {
            id: drops.len() - 1,
            tracker: self.clone(),
        }
    }

    fn created(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn drops_of(&self, id: usize) -> u32 {
        self.0.lock().unwrap()[id]
    }

    /// Values made and not dropped yet. Panics if any was dropped twice.
    fn live(&self) -> usize {
        let drops = self.0.lock().unwrap();
        assert!(
            drops.iter().all(|&d| d <= 1),
            "dropped twice: {:?}",
            drops
                .iter()
                .enumerate()
                .filter(|(_, &d)| d > 1)
                .collect::<Vec<_>>()
        );
        drops.iter().filter(|&&d| d == 0).count()
    }

    fn assert_all_dropped_once(&self) {
        let drops = self.0.lock().unwrap();
        let wrong: Vec<(usize, u32)> = drops
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, d)| d != 1)
            .collect();
        assert!(
            wrong.is_empty(),
            "(id, drops) not dropped exactly once: {wrong:?}"
        );
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        // Never panic in drop: record, and let the assertions above report.
        if let Ok(mut drops) = self.tracker.0.lock() {
            drops[self.id] += 1;
        }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.tracker.make()
    }
}

fn counted_ring(capacity: usize, tracker: &Tracker) -> (Writer<Counted>, Stage<Counted>) {
    let t = tracker.clone();
    Builder::new(capacity).spin(0).build_with(move || t.make())
}

/// Only for `initial_values_from_default_are_dropped_with_the_ring` (tests run in parallel).
static DEFAULT_MADE: AtomicUsize = AtomicUsize::new(0);
static DEFAULT_DROPPED: AtomicUsize = AtomicUsize::new(0);

struct FromDefault(#[allow(dead_code)] u64);

impl Default for FromDefault {
    fn default() -> Self {
        DEFAULT_MADE.fetch_add(1, Ordering::SeqCst);
        FromDefault(0)
    }
}

impl Drop for FromDefault {
    fn drop(&mut self) {
        DEFAULT_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn initial_values_from_default_are_dropped_with_the_ring() {
    let made = || DEFAULT_MADE.load(Ordering::SeqCst);
    let dropped = || DEFAULT_DROPPED.load(Ordering::SeqCst);

    let (mut writer, stage) = Builder::new(8).build::<FromDefault>();
    assert_eq!((made(), dropped()), (8, 0));
    let reader = stage.reader().unwrap();
    for _ in 0..3 {
        assert!(writer.try_publish(FromDefault::default()).is_ok());
    }
    // Three initial values were overwritten.
    assert_eq!((made(), dropped()), (11, 3));
    drop(writer);
    drop(stage);
    assert_eq!(dropped(), 3, "the reader still holds the ring");
    drop(reader);
    assert_eq!((made(), dropped()), (11, 11));
}

#[test]
fn overwritten_refused_and_remaining_values_are_dropped_once() {
    let t = Tracker::default();
    let (mut writer, stage) = counted_ring(4, &t);
    assert_eq!((t.created(), t.live()), (4, 4)); // ids 0..4: the initial values
    let mut reader = stage.reader().unwrap();

    for _ in 0..4 {
        assert!(writer.try_publish(t.make()).is_ok()); // ids 4..8
    }
    for id in 0..4 {
        assert_eq!(t.drops_of(id), 1, "initial value {id} is overwritten");
    }
    assert_eq!(t.live(), 4);

    // Refused: the value comes back, untouched, and drops when we drop it.
    let refused = writer.try_publish(t.make()).unwrap_err().into_inner();
    assert_eq!((refused.id, t.drops_of(8)), (8, 0));
    drop(refused);
    assert_eq!(t.drops_of(8), 1);

    // Reading drops nothing; the next lap drops what was read.
    assert_eq!(reader.try_recv().ok().unwrap().id, 4);
    assert_eq!(reader.try_recv().ok().unwrap().id, 5);
    assert_eq!(t.live(), 4);
    assert!(writer.try_publish(t.make()).is_ok()); // id 9 over id 4
    assert!(writer.try_publish(t.make()).is_ok()); // id 10 over id 5
    assert_eq!((t.drops_of(4), t.drops_of(5), t.live()), (1, 1, 4));

    // The reader keeps its position (ids 6, 7, 9, 10 unread) and is the last handle.
    drop(writer);
    drop(stage);
    assert_eq!(t.live(), 4);
    assert_eq!(reader.position(), 2);
    drop(reader);
    t.assert_all_dropped_once();
}

enum Handle {
    Writer(#[allow(dead_code)] Writer<Counted>),
    Stage(#[allow(dead_code)] Stage<Counted>),
    Reader(#[allow(dead_code)] Reader<Counted>),
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut all = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            all.push(q);
        }
    }
    all
}

#[test]
fn the_last_handle_drops_the_values_whatever_the_order() {
    for order in permutations(5) {
        let t = Tracker::default();
        let (mut writer, first) = counted_ring(4, &t);
        let second = first.then();
        let mut a = first.reader().unwrap();
        let z = second.reader().unwrap();
        for _ in 0..3 {
            assert!(writer.try_publish(t.make()).is_ok());
        }
        drop(a.try_recv().ok().unwrap()); // `a` released one item, `z` holds all three
        let live = t.live();
        assert_eq!(live, 4);

        let mut handles: Vec<Option<Handle>> = vec![
            Some(Handle::Writer(writer)),
            Some(Handle::Stage(first)),
            Some(Handle::Stage(second)),
            Some(Handle::Reader(a)),
            Some(Handle::Reader(z)),
        ];
        for (k, &i) in order.iter().enumerate() {
            handles[i].take();
            if k + 1 < order.len() {
                assert_eq!(t.live(), live, "order {order:?}: dropped early at step {k}");
            }
        }
        t.assert_all_dropped_once();
    }
}

#[test]
fn reservations_fill_in_place_and_drop_each_value_once() {
    let t = Tracker::default();
    let (mut writer, stage) = counted_ring(4, &t); // ids 0..4
    let mut reader = stage.reader().unwrap();

    // Committed: one slot replaced (the old value drops), one kept as it was.
    let mut r = writer.try_reserve(2).unwrap();
    let (a, b) = r.as_mut_slices();
    assert_eq!((a.len(), b.len()), (2, 0));
    assert_eq!((a[0].id, a[1].id), (0, 1));
    a[0] = t.make(); // id 4
    r.commit();
    assert_eq!((t.drops_of(0), t.drops_of(1)), (1, 0));
    let batch = reader.try_recv_batch(4).ok().unwrap();
    assert_eq!(batch.iter().map(|c| c.id).collect::<Vec<_>>(), [4, 1]);
    drop(batch);

    // Not committed: the new values stay in the slots, unpublished, until overwritten.
    {
        let mut r = block_on(writer.reserve(2)).unwrap();
        let (a, _) = r.as_mut_slices();
        assert_eq!((a[0].id, a[1].id), (2, 3));
        a[0] = t.make(); // id 5
        a[1] = t.make(); // id 6
    } // dropped without commit
    assert_eq!((t.drops_of(2), t.drops_of(3)), (1, 1));
    assert_eq!((t.drops_of(5), t.drops_of(6)), (0, 0));
    assert!(
        reader.try_recv().is_err(),
        "an uncommitted reservation publishes nothing"
    );
    assert_eq!(writer.published(), 2);

    // The next reservation lends the same slots again, with what the dropped one left there.
    let mut r = writer.blocking_reserve(3).unwrap();
    let (a, b) = r.as_mut_slices();
    assert_eq!((a.len(), b.len()), (2, 1));
    assert_eq!((a[0].id, a[1].id, b[0].id), (5, 6, 4));
    b[0] = t.make(); // id 7, over id 4 (read already)
    r.commit();
    assert_eq!(t.drops_of(4), 1);

    // Refusals drop nothing.
    assert_eq!(writer.try_reserve(2).unwrap_err(), TryReserveError::Full);
    assert!(matches!(
        writer.try_reserve(5),
        Err(TryReserveError::TooLarge(_))
    ));
    assert_eq!(t.live(), 4);

    // Overwritten by value: the reserved-and-committed values drop once. Positions 5, 6, 7
    // are slots 1, 2, 3 (ids 1, 5, 6); id 7 in slot 0 stays.
    drop(reader.try_recv_batch(8).ok().unwrap());
    for _ in 0..3 {
        assert!(writer.try_publish(t.make()).is_ok()); // ids 8..11
    }
    assert_eq!(
        [1, 5, 6, 7].map(|id| t.drops_of(id)),
        [1, 1, 1, 0],
        "ids 1, 5, 6 overwritten"
    );

    drop((writer, stage, reader));
    t.assert_all_dropped_once();
}

#[test]
fn cancelled_publishes_drop_their_values_once() {
    let t = Tracker::default();
    let (mut writer, stage) = counted_ring(2, &t); // ids 0, 1
    let mut reader = stage.reader().unwrap();
    assert!(writer.try_publish(t.make()).is_ok()); // id 2
    assert!(writer.try_publish(t.make()).is_ok()); // id 3

    // A pending publish owns its value; dropping the future drops it.
    {
        let mut publish = spawn(writer.publish(t.make())); // id 4
        assert_pending!(publish.poll());
        assert_eq!(t.drops_of(4), 0);
    }
    assert_eq!(t.drops_of(4), 1);

    // A batch: what fits is published, the rest is dropped with the future.
    let batch: Vec<Counted> = (0..4).map(|_| t.make()).collect(); // ids 5..9
    drop(reader.try_recv().ok().unwrap()); // one free slot
    {
        let mut publish = spawn(writer.publish_batch(batch));
        assert_pending!(publish.poll());
    }
    assert_eq!(
        (5..9).map(|id| t.drops_of(id)).collect::<Vec<_>>(),
        [0, 1, 1, 1],
        "id 5 was published, 6..9 were cancelled"
    );

    // `try_publish_batch` leaves the rest in the iterator.
    drop(reader.try_recv_batch(2).ok().unwrap());
    let mut rest = (0..3).map(|_| t.make()).collect::<Vec<_>>().into_iter(); // ids 9..12
    assert_eq!(writer.try_publish_batch(&mut rest), 2);
    assert_eq!(t.drops_of(11), 0);
    drop(rest);
    assert_eq!(t.drops_of(11), 1);

    // A publish that completes moves its value into the ring.
    drop(reader.try_recv().ok().unwrap());
    let mut publish = spawn(writer.publish(t.make())); // id 12
    assert_ready!(publish.poll());
    drop(publish);
    assert_eq!(t.drops_of(12), 0);

    drop((writer, stage, reader));
    t.assert_all_dropped_once();
}

#[test]
fn lazy_ring_drops_exactly_what_was_published() {
    // Nothing published: nothing to drop (and nothing made).
    let t = Tracker::default();
    let (writer, stage) = Builder::new(4).build_lazy::<Counted>();
    drop((writer, stage));
    assert_eq!(t.created(), 0);

    // Part of the first lap.
    let (mut writer, stage) = Builder::new(4).build_lazy::<Counted>();
    let reader = stage.reader().unwrap();
    assert!(writer.try_publish(t.make()).is_ok());
    assert_eq!(writer.try_publish_batch(&mut [t.make()].into_iter()), 1);
    drop((writer, stage));
    assert_eq!(t.live(), 2);
    drop(reader);
    t.assert_all_dropped_once();

    // A ring started past 0 (`start_at`): its first lap begins mid-ring and wraps.
    for (start, published) in [(6, 3), (6, 4), (6, 9), (5, 1)] {
        let t = Tracker::default();
        let (mut writer, stage) = Builder::new(4).start_at(start).build_lazy::<Counted>();
        let mut reader = stage.reader().unwrap();
        for _ in 0..published {
            block_on(writer.publish(t.make()));
            drop(reader.try_recv().ok().unwrap());
        }
        assert_eq!(t.live(), published.min(4));
        drop((writer, stage, reader));
        t.assert_all_dropped_once();
    }

    // Several laps, with overwrites and reservations once the slots hold values.
    let t = Tracker::default();
    let (mut writer, stage) = Builder::new(4).build_lazy::<Counted>();
    let mut reader = stage.reader().unwrap();
    for round in 0..5 {
        for _ in 0..3 {
            block_on(writer.publish(t.make()));
        }
        if round >= 2 {
            let mut r = writer.try_reserve(1).unwrap();
            r.as_mut_slices().0[0] = t.make();
            r.commit();
        }
        drop(reader.try_recv_batch(8).ok().unwrap());
        // At most one value per slot is alive.
        assert!(t.live() <= 4, "round {round}: {} live", t.live());
    }
    drop((writer, stage, reader));
    t.assert_all_dropped_once();
}

#[test]
fn stream_clones_are_values_of_their_own() {
    let t = Tracker::default();
    let (mut writer, stage) = counted_ring(4, &t);
    let reader = stage.reader().unwrap();
    for _ in 0..3 {
        assert!(writer.try_publish(t.make()).is_ok());
    }
    drop(writer);
    let clones: Vec<Counted> = block_on(futures_util::StreamExt::collect(reader));
    assert_eq!(clones.len(), 3);
    drop(clones);
    // The originals are still in the ring, held by the stage.
    assert_eq!(t.live(), 4);
    drop(stage);
    t.assert_all_dropped_once();
}

#[test]
fn a_panicking_batch_iterator_loses_no_value() {
    // The iterator panics after yielding two values: those two were moved into the ring's
    // slots but never published. They must still be dropped exactly once.
    for lazy in [false, true] {
        let t = Tracker::default();
        let (mut writer, stage) = if lazy {
            Builder::new(4).build_lazy::<Counted>()
        } else {
            counted_ring(4, &t)
        };
        let mut reader = stage.reader().unwrap();
        let source = t.clone();
        let mut n = 0;
        let mut items = std::iter::from_fn(move || {
            n += 1;
            assert!(n <= 2, "the iterator fails");
            Some(source.make())
        });
        let result = catch_unwind(AssertUnwindSafe(|| {
            writer.try_publish_batch(&mut items);
        }));
        assert!(result.is_err());
        drop(items);
        // Nothing of the failed batch was published, and the ring goes on working.
        assert_eq!(writer.published(), 0);
        let value = t.make();
        let id = value.id;
        assert!(writer.try_publish(value).is_ok());
        assert_eq!(reader.try_recv().ok().unwrap().id, id);
        assert!(reader.try_recv().is_err());
        drop((writer, stage, reader));
        t.assert_all_dropped_once();
    }
}

#[test]
fn values_cross_threads_and_are_dropped_once() {
    let t = Tracker::default();
    let (mut writer, first) = counted_ring(8, &t);
    let second = first.then();
    let readers: Vec<Reader<Counted>> = vec![
        first.reader().unwrap(),
        first.reader().unwrap(),
        second.reader().unwrap(),
    ];
    let threads: Vec<_> = readers
        .into_iter()
        .map(|mut reader| {
            std::thread::spawn(move || {
                let mut last = None;
                let mut count = 0;
                while let Ok(batch) = reader.blocking_recv_batch(5) {
                    for c in batch.iter() {
                        assert!(last < Some(c.id), "ids go up");
                        last = Some(c.id);
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    for _ in 0..500 {
        writer.blocking_publish(t.make());
    }
    drop(writer);
    for th in threads {
        assert_eq!(th.join().unwrap(), 500);
    }
    assert_eq!(t.live(), 8, "one value per slot is left");
    drop((first, second));
    t.assert_all_dropped_once();
}

#[test]
fn a_panicking_factory_drops_the_values_it_already_made() {
    // The factory's third value panics: the ring is never built, and the two values made
    // before it are dropped as the panic unwinds, not leaked.
    let t = Tracker::default();
    let source = t.clone();
    let built = catch_unwind(AssertUnwindSafe(|| {
        Builder::new(4).build_with(move || {
            assert!(source.created() < 2, "the factory fails");
            source.make()
        })
    }));
    assert!(built.is_err());
    assert_eq!(t.created(), 2);
    t.assert_all_dropped_once();
}

/// A value whose drop panics the first time one of them is dropped (the rest are counted).
struct PanicsOnce {
    /// Held for its drop, which the tracker counts.
    _counted: Counted,
    first: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for PanicsOnce {
    fn drop(&mut self) {
        if self.first.swap(false, Ordering::SeqCst) {
            panic!("a value's drop fails");
        }
    }
}

#[test]
fn a_value_whose_drop_panics_does_not_leak_the_others() {
    // The ring's values are dropped with it; the first one's drop panics. As with a `Vec`,
    // the other slots' values are still dropped while that panic unwinds.
    let t = Tracker::default();
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (source, armed) = (t.clone(), first.clone());
    let (writer, stage) = Builder::new(4).build_with(move || PanicsOnce {
        _counted: source.make(),
        first: armed.clone(),
    });
    assert_eq!(t.created(), 4);
    let dropped = catch_unwind(AssertUnwindSafe(move || drop((writer, stage))));
    assert!(dropped.is_err(), "the value's drop did not panic");
    // Every value's `Counted` is dropped once: the panicking one's field too (drop glue
    // still drops the fields of a value whose `Drop::drop` panicked).
    t.assert_all_dropped_once();
}
