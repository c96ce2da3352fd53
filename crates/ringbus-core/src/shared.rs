//! The ring's shared state: slots, the writer's cursor, the reader groups, and the
//! wake-up protocol between them.
//!
//! # Algorithm
//!
//! This is the LMAX Disruptor's single-producer ring. Positions are `u64` sequence numbers
//! that never wrap; position `p` lives in slot `p & mask`. The writer owns every slot from its
//! cursor up to `gate + capacity`, where `gate` is the smallest cursor of any reader (or the
//! writer's own position when there is none); readers own nothing and borrow the slots between
//! their cursor and their *barrier*: the writer's cursor for the first stage, the smallest
//! cursor of the upstream stage for later stages (falling through empty stages).
//!
//! The writer caches `gate + capacity` and rescans the readers only when it reaches it, so with
//! keep-up readers a rescan happens once per lap. The writer gates on the readers of *every*
//! stage, not only the last: in steady state the minimum is the same (each stage is behind the
//! one before it), and it keeps a reader that joins an upstream stage safe from being lapped
//! without relying on the downstream stages having seen it.
//!
//! # Waiting
//!
//! A reader that caught up parks on its *source*: the writer, or the upstream group whose
//! readers bound it. Whoever makes progress on a source (the writer publishing, a reader
//! releasing) must wake the readers parked on it, without a lost wake-up and, in the common
//! case where nobody waits, without a store-load fence or a read-modify-write.
//!
//! Waiting is *registered* per source, and registrations are sticky:
//!
//! - **Registering** (rare): the reader adds itself to the source's `watchers` count, then runs
//!   [`heavy_fence`]. From then on, whoever makes progress on that source sees `watchers != 0`
//!   (their [`light_fence`](crate::sync::light_fence) after the cursor store pairs with that heavy fence) and takes the
//!   slow path: a full fence, then a look at the parked bits.
//! - **Parking** (often, once registered): register the waker, swap `Slot::parked_on` to the
//!   source, set the slot's bit in its chunk's `parked` word, count itself in the source's
//!   parked readers, full fence, look at the barrier once more. (The slow path scans the
//!   parked bits only while that count is non-zero.) With the slow path's full fence on the other side, this is a plain Dekker
//!   handshake: either the progress maker sees the bit and `parked_on`, or the parker sees the
//!   progress. So only the first park after registering pays for `membarrier`.
//! - **Deregistering**: a reader that found data without parking for [`CALM_BEFORE_LEAVING`]
//!   refreshes in a row leaves `watchers`, so a ring whose readers keep up returns to the
//!   fence-free publish path.
//!
//! The writer waits for room the same way: `writer_registered` is its sticky registration
//! (readers that advance fence and look at `writer_wants` while it is set), and
//! `writer_wants` the position the slowest reader must reach for the writer to have the room it
//! asked for: the first release that reaches it wakes the writer.
//!
//! # Invariants
//!
//! - Only the writer stores to `cursor` and to the slots (through `&mut Writer`).
//! - A reader's cursor never exceeds its barrier; the writer never writes position
//!   `p + capacity` while a reader's cursor is at or below `p`.
//! - `closed` is set (Release) after the writer's last cursor store.

use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;

use crate::atomic_waker::AtomicWaker;
use crate::registry::{Group, Slot, Waiters, ARMED, NOT_PARKED, REGISTRATION, WRITER_SOURCE};
use crate::sync::{
    full_fence, heavy_fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Fences, Ordering,
};

/// Refreshes in a row that found data without parking before a reader (or the writer) drops
/// its registration as a waiter.
/// Under loom, 2: models then reach deregistration (and the re-registration after it) in a
/// few items.
pub(crate) const CALM_BEFORE_LEAVING: u32 = if cfg!(ringbus_loom) { 2 } else { 64 };

pub(crate) struct Shared<T> {
    /// One past the last published position. Written only by the writer (Release, after the
    /// slot write); read with Acquire by first-stage readers.
    pub(crate) cursor: CachePadded<AtomicU64>,
    /// Readers registered as waiting on the writer. Read (Relaxed, after `light_fence`) on
    /// every publish.
    pub(crate) writer_watchers: CachePadded<Waiters>,
    /// The writer's sticky registration as a waiter for room; read (Relaxed, after
    /// `light_fence`) on every reader advance. Set and cleared by the writer only.
    pub(crate) writer_registered: CachePadded<AtomicBool>,
    /// While the writer is parked: the position the slowest reader must reach to wake it;
    /// 0 when it is not parked. Set by the writer, cleared by whoever wakes it (CAS).
    pub(crate) writer_wants: CachePadded<AtomicU64>,
    /// The writer's task, while it waits for room.
    pub(crate) writer_waker: AtomicWaker,
    /// Set (Release) once the writer is gone, after its last cursor store.
    pub(crate) closed: AtomicBool,
    /// The first stage; the head of the list of groups (linked through `Group::next`).
    pub(crate) root: *const Group,
    /// Groups made so far (source ids are handed out from it).
    groups: AtomicUsize,
    /// Readers currently joined, in every group.
    pub(crate) readers: AtomicUsize,
    pub(crate) max_readers: usize,
    /// Iterations of busy polling before a waiter parks.
    pub(crate) spin: u32,
    /// The cheap side of the fences (a stand-in for loom's asymmetric model, see `Fences`).
    pub(crate) fences: Fences,
    pub(crate) mask: u64,
    pub(crate) capacity: usize,
    /// The first position (`Builder::start_at`): the cursor starts here.
    pub(crate) start: u64,
    /// The slots start empty (`Builder::build_lazy`): the slot of position `p` holds a value
    /// once `p` has been published. Otherwise every slot holds a value from the start.
    pub(crate) lazy: bool,
    /// The slots. See the module docs for who may touch which, and `lazy` for which hold a
    /// value.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: values move from the writer's thread into the ring (`T: Send`) and are read by
// reference from many threads at once (`T: Sync`). Everything else is atomics and groups.
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// A ring of `capacity` slots (a power of two), or `None` if its slots cannot be
    /// allocated: their size is past `isize::MAX` bytes, or the allocator refused them.
    pub(crate) fn new(
        capacity: usize,
        spin: u32,
        max_readers: usize,
        fences: Fences,
        start: u64,
        fill: Option<&mut dyn FnMut() -> T>,
    ) -> Option<Self> {
        crate::sync::init_fences();
        let lazy = fill.is_none();
        let slots = Self::slots(capacity, fill)?;
        // SAFETY: the root has no upstream.
        let root = Box::into_raw(Box::new(unsafe {
            Group::new(WRITER_SOURCE + 1, ptr::null())
        }));
        Some(Self {
            cursor: CachePadded::new(AtomicU64::new(start)),
            writer_watchers: CachePadded::new(Waiters::default()),
            writer_registered: CachePadded::new(AtomicBool::new(false)),
            writer_wants: CachePadded::new(AtomicU64::new(0)),
            writer_waker: AtomicWaker::new(),
            closed: AtomicBool::new(false),
            root,
            groups: AtomicUsize::new(1),
            readers: AtomicUsize::new(0),
            max_readers,
            spin,
            fences,
            mask: capacity as u64 - 1,
            capacity,
            start,
            lazy,
            slots,
        })
    }

    /// `capacity` slots, holding values from `fill` or (without it) nothing yet; `None` if
    /// they cannot be allocated. The allocation is asked for with `try_reserve_exact`, never
    /// with what aborts the process when the allocator refuses (`with_capacity`, `collect`).
    /// Empty slots are not written: a ring far larger than the messages it will hold costs
    /// address space, not memory, until its slots are used.
    fn slots(
        capacity: usize,
        fill: Option<&mut dyn FnMut() -> T>,
    ) -> Option<Box<[UnsafeCell<MaybeUninit<T>>]>> {
        match fill {
            // Made into a `Vec<T>` first, so that a factory that panics partway has the values
            // it already made dropped as the panic unwinds (a `MaybeUninit` would leak them).
            // The `Vec`'s buffer is reused for the cells, which have `T`'s layout.
            Some(f) => {
                let mut values = Vec::new();
                values.try_reserve_exact(capacity).ok()?;
                values.extend((0..capacity).map(|_| f()));
                let cells = values.into_iter();
                Some(
                    cells
                        .map(|value| UnsafeCell::new(MaybeUninit::new(value)))
                        .collect(),
                )
            }
            None => {
                let mut cells = Vec::<UnsafeCell<MaybeUninit<T>>>::new();
                cells.try_reserve_exact(capacity).ok()?;
                // SAFETY: the capacity is reserved, and an uninitialised
                // `UnsafeCell<MaybeUninit<T>>` is a valid one (`MaybeUninit` needs no
                // initialisation, and `UnsafeCell` is `repr(transparent)`).
                unsafe { cells.set_len(capacity) };
                Some(cells.into_boxed_slice())
            }
        }
    }

    /// The slot of `position`. It holds a value unless `!self.holds_value(position)`.
    #[inline(always)]
    pub(crate) fn slot(&self, position: u64) -> *mut T {
        // SAFETY: the mask keeps the index in bounds.
        let cell = unsafe { self.slots.get_unchecked((position & self.mask) as usize) };
        // `UnsafeCell<MaybeUninit<T>>` has the layout of `T`.
        cell.get().cast()
    }

    /// A pointer to the slots from index `start` on (no wrapping); `UnsafeCell` and
    /// `MaybeUninit` are both `repr(transparent)`, so the cells are a `[T]` in memory.
    #[inline(always)]
    pub(crate) fn slots_ptr(&self, start: usize) -> *mut T {
        debug_assert!(start < self.capacity);
        self.slots.as_ptr().wrapping_add(start) as *mut T
    }

    /// Whether the slot that `position` will occupy holds a value before `position` is
    /// written: always, except during the first lap of a lazy ring.
    #[inline(always)]
    pub(crate) fn holds_value(&self, position: u64) -> bool {
        !self.lazy || position - self.start >= self.capacity as u64
    }

    /// Writes `value` at `position`, dropping the value the slot held a lap ago, if any.
    ///
    /// # Safety
    ///
    /// Only the writer calls this, for a position it owns (below its gate limit and not yet
    /// published): no reader can be reading the slot.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, position: u64, value: T) {
        let slot = self.slot(position);
        if self.holds_value(position) {
            // SAFETY: the caller owns the slot, and it holds a value (see `holds_value`).
            unsafe { *slot = value };
        } else {
            // SAFETY: the caller owns the slot, and it is empty: nothing to drop.
            unsafe { slot.write(value) };
        }
    }

    pub(crate) fn root(&self) -> &Group {
        // SAFETY: the root lives as long as the ring.
        unsafe { &*self.root }
    }

    /// Every group, the root first.
    pub(crate) fn groups(&self) -> impl Iterator<Item = &Group> + '_ {
        let mut next: *const Group = self.root;
        std::iter::from_fn(move || {
            // SAFETY: groups live as long as the ring.
            let g = unsafe { next.as_ref()? };
            // Acquire: pairs with the Release CAS in `add_group`.
            next = g.next.load(Ordering::Acquire);
            Some(g)
        })
    }

    /// Makes a new group following `upstream` and links it into the list.
    pub(crate) fn add_group(&self, upstream: &Group) -> &Group {
        let source = WRITER_SOURCE + 1 + self.groups.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `upstream` belongs to this ring, which frees all its groups together.
        let fresh = Box::into_raw(Box::new(unsafe { Group::new(source, upstream) }));
        let mut last = self.root();
        loop {
            match last.next.compare_exchange(
                ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: linked groups live as long as the ring.
                Ok(_) => return unsafe { &*fresh },
                // SAFETY: as above.
                Err(next) => last = unsafe { &*next },
            }
        }
    }

    /// The smallest cursor of any reader of any stage, or `own` if smaller (or no readers).
    ///
    /// The caller (the writer) has stored its cursor before; the full fence here pairs with
    /// the joiner's (see `Stage::reader`): either this scan sees the joiner's claimed slot, or
    /// the joiner's start position is at least `own`. A full fence, not the light half of the
    /// asymmetric pair: the writer scans once per lap (or per publish when the ring is full,
    /// next to a scan of every reader), while a `membarrier` per join made joining cost
    /// microseconds.
    pub(crate) fn gate(&self, own: u64) -> u64 {
        full_fence();
        let mut min = own;
        for g in self.groups() {
            if let Some(m) = g.min_cursor() {
                min = min.min(m);
            }
        }
        min
    }

    /// What a reader of a group following `upstream` may read up to, and the source it waits on.
    ///
    /// A scan of an upstream group is validated against its `epoch`: the full fence after the
    /// scan pairs with a joiner's after its epoch bump. If the epoch did not move, the scan is
    /// ordered before the joiner's fence, so the joiner's start position is at least every
    /// position this scan allowed and we can never run ahead of it. (Only later stages scan;
    /// the first stage's barrier is the writer's cursor.)
    pub(crate) fn barrier(&self, upstream: Option<&Group>) -> (u64, usize) {
        self.scan_barrier::<false>(upstream)
    }

    /// The position a joiner of a group following `upstream` may *start* at, read after its
    /// fence: as [`barrier`](Self::barrier), but upstream members still joining are skipped
    /// (see `Group::min_settled_cursor`), so a start never comes from another joiner's stale
    /// claim.
    pub(crate) fn settled_barrier(&self, upstream: Option<&Group>) -> u64 {
        self.scan_barrier::<true>(upstream).0
    }

    /// [`barrier`](Self::barrier) (`SETTLED = false`) or
    /// [`settled_barrier`](Self::settled_barrier) (`SETTLED = true`).
    #[inline]
    fn scan_barrier<const SETTLED: bool>(&self, upstream: Option<&Group>) -> (u64, usize) {
        let Some(g) = upstream else {
            // Acquire: pairs with the writer's Release store after its slot writes.
            return (self.cursor.load(Ordering::Acquire), WRITER_SOURCE);
        };
        loop {
            let epoch = g.epoch.load(Ordering::Acquire);
            let min = if SETTLED {
                g.min_settled_cursor()
            } else {
                g.min_cursor()
            };
            let found = match min {
                Some(min) => (min, g.source),
                None => self.scan_barrier::<SETTLED>(g.upstream()),
            };
            full_fence();
            if g.epoch.load(Ordering::Relaxed) == epoch {
                return found;
            }
        }
    }

    /// Refreshes (or room waits) in a row without parking before a waiter deregisters.
    ///
    /// In loom's asymmetric model registrations are sticky instead: a re-registration would
    /// pay its heavy fence while the threads run, which that model cannot stand for (see
    /// `Fences`). Deregistering and registering again are modelled with symmetric fences.
    #[inline(always)]
    pub(crate) fn calm_before_leaving(&self) -> u32 {
        #[cfg(ringbus_loom)]
        if self.fences.asymmetric {
            return u32::MAX;
        }
        CALM_BEFORE_LEAVING
    }

    /// Who waits on a source.
    fn watchers(&self, source: usize) -> Option<&Waiters> {
        if source == WRITER_SOURCE {
            return Some(&self.writer_watchers);
        }
        self.groups()
            .find(|g| g.source == source)
            .map(|g| &*g.watchers)
    }

    /// Registers a reader as waiting on `source` (see the module docs). Pays the heavy fence
    /// unless the source is armed.
    pub(crate) fn register(&self, source: usize) {
        let Some(w) = self.watchers(source) else {
            return;
        };
        // AcqRel: Acquire pairs with the Release that armed the source (so the armer's heavy
        // fence happens before our park and our look at the barrier).
        let was = w.registered.fetch_add(REGISTRATION, Ordering::AcqRel);
        if was & ARMED != 0 {
            // Armed: since the count last left zero, a registrant ran the heavy fence, and the
            // count has not been zero since (the deregistration that empties it disarms in the
            // same step). Whoever makes progress on `source` and could miss our registration
            // is either ordered after that fence, and reads a count that cannot be zero until
            // we leave, or before it, and then its progress is visible to our look (through
            // the armer's Release and our Acquire).
            return;
        }
        // Pairs with the light fence of whoever makes progress on `source`: from here on, they
        // see the count and take the slow path.
        heavy_fence();
        // Release: pairs with the Acquire of later registrants (above). We are counted, so
        // the count has not been zero since our increment.
        w.registered.fetch_or(ARMED, Ordering::Release);
    }

    /// Takes back a registration; the last one out disarms the source.
    pub(crate) fn deregister(&self, source: usize) {
        if let Some(w) = self.watchers(source) {
            let _ = w
                .registered
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                    let r = r - REGISTRATION;
                    Some(if r < REGISTRATION { 0 } else { r })
                });
        }
    }

    /// Marks `slot` parked on `source`, with its bit, then fences. The caller is registered on
    /// `source` and looks at the barrier once more next.
    ///
    /// `counted`: the reader is still counted in `source`'s parked readers from an earlier
    /// park (a waker may have cleared `parked_on` since, so it is armed again all the same).
    pub(crate) fn park(
        &self,
        slot: &Slot,
        parked: &AtomicU32,
        bit: u32,
        source: usize,
        counted: bool,
    ) {
        slot.parked_on.swap(source, Ordering::SeqCst);
        parked.fetch_or(bit, Ordering::SeqCst);
        if !counted {
            if let Some(w) = self.watchers(source) {
                w.parked.fetch_add(1, Ordering::SeqCst);
            }
        }
        // Pairs with the full fence in `wake_source`: either the waker sees our bit and
        // `parked_on`, or our next look sees its progress.
        full_fence();
    }

    /// Stops waiting on `source`: clears `parked_on` (if no waker did), the slot's bit and
    /// our count in `source`'s parked readers.
    pub(crate) fn unpark(&self, slot: &Slot, parked: &AtomicU32, bit: u32, source: usize) {
        slot.parked_on.store(NOT_PARKED, Ordering::Relaxed);
        parked.fetch_and(!bit, Ordering::Relaxed);
        if let Some(w) = self.watchers(source) {
            w.parked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Wakes every reader parked on `source`. The slow path of publish and advance, taken
    /// while some reader is registered on `source`.
    #[cold]
    pub(crate) fn wake_source(&self, source: usize) {
        // Pairs with the full fence in `park` (see there).
        full_fence();
        if self
            .watchers(source)
            .is_none_or(|w| w.parked.load(Ordering::Relaxed) == 0)
        {
            return;
        }
        for g in self.groups() {
            for slot in g.parked_slots() {
                if slot.parked_on.load(Ordering::Relaxed) == source
                    && slot
                        .parked_on
                        .compare_exchange(source, NOT_PARKED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    slot.waker.wake();
                }
            }
        }
    }

    /// After a reader's cursor moved to `cursor` (or it left: `u64::MAX`): wakes the writer
    /// if it waits for that, and the readers parked on `group`.
    #[inline]
    pub(crate) fn notify_progress(&self, group: &Group, cursor: u64) {
        self.fences.light();
        if self.writer_registered.load(Ordering::Relaxed) {
            self.wake_writer(cursor);
        }
        if group.watchers.registered.load(Ordering::Relaxed) != 0 {
            self.wake_source(group.source);
        }
    }

    #[cold]
    fn wake_writer(&self, cursor: u64) {
        // Pairs with the full fence in `Writer::poll_room` after it set `writer_wants`.
        full_fence();
        let wants = self.writer_wants.load(Ordering::Relaxed);
        if wants != 0
            && cursor >= wants
            && self
                .writer_wants
                .compare_exchange(wants, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.writer_waker.wake();
        }
    }

    /// Marks the ring closed and wakes every parked reader, whatever it waits on.
    pub(crate) fn close(&self) {
        // Release: pairs with the Acquire load in `Reader::is_drained`, after which the final
        // cursor is visible.
        self.closed.store(true, Ordering::Release);
        // Pairs with the parkers' fences: either they see `closed`, or we see them parked.
        full_fence();
        for g in self.groups() {
            for slot in g.slots() {
                if slot.parked_on.swap(NOT_PARKED, Ordering::AcqRel) != NOT_PARKED {
                    slot.waker.wake();
                }
            }
        }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let mut next = self.root as *mut Group;
        while !next.is_null() {
            // SAFETY: each group was made by `Box::into_raw` and is linked exactly once; with
            // `&mut self` nobody else can reach it.
            let g = unsafe { Box::from_raw(next) };
            next = g.next.load(Ordering::Relaxed);
        }
        // Drop every value the slots hold, exactly once: all of them, or in a lazy ring only
        // those of the positions published in the first lap, from the slot of `start` on,
        // wrapping to the front.
        let held = if self.lazy {
            ((self.cursor.load(Ordering::Relaxed) - self.start) as usize).min(self.capacity)
        } else {
            self.capacity
        };
        let first = (self.start & self.mask) as usize;
        let (front, back) = self.slots.split_at_mut(first);
        let in_back = held.min(back.len());
        // A value whose drop panics does not leak the rest: as with a `Vec`, they are dropped
        // while that panic unwinds (`HeldValues`'s drop).
        let mut held = HeldValues(
            back[..in_back]
                .iter_mut()
                .chain(front[..held - in_back].iter_mut()),
        );
        held.drop_all();
    }
}

/// The slots of a dropped ring that still hold a value; see `Shared::drop`.
struct HeldValues<'a, T, I: Iterator<Item = &'a mut UnsafeCell<MaybeUninit<T>>>>(I)
where
    T: 'a;

impl<'a, T: 'a, I: Iterator<Item = &'a mut UnsafeCell<MaybeUninit<T>>>> HeldValues<'a, T, I> {
    fn drop_all(&mut self) {
        for cell in &mut self.0 {
            // SAFETY: `Shared::drop` passes exactly the slots holding a value (see `lazy`),
            // each once (the iterator moves past a slot before its value is dropped), and
            // with `&mut Shared` no reader or writer is left.
            unsafe { cell.get_mut().assume_init_drop() };
        }
    }
}

impl<'a, T: 'a, I: Iterator<Item = &'a mut UnsafeCell<MaybeUninit<T>>>> Drop
    for HeldValues<'a, T, I>
{
    /// Runs only if a value's drop panicked in `drop_all` (otherwise nothing is left): drops
    /// the values after it. A second panic there aborts, as it would in a `Vec`.
    fn drop(&mut self) {
        self.drop_all();
    }
}

impl<T> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity)
            .field("start", &self.start)
            .field("published", &self.cursor.load(Ordering::Relaxed))
            .field("readers", &self.readers.load(Ordering::Relaxed))
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
