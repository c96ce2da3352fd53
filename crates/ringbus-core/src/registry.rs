//! Reader groups: the lock-free, growable set of reader cursors of one stage.
//!
//! # Structure
//!
//! A [`Group`] is one stage of readers. Its members live in [`Slot`]s, kept in a singly linked
//! list of [`Chunk`]s that only grows (chunks are freed with the ring). Chunks double in size
//! from [`FIRST_CHUNK`] slots to [`MAX_CHUNK`]: a ring nobody reads holds a few slots, not a
//! few kilobytes of them. A slot is free
//! when its `cursor` holds [`FREE`]; a reader joins by swapping `FREE` for a position with a
//! compare-and-swap and leaves by storing `FREE` back, so joins and leaves take no lock and never
//! make the writer wait. When every slot of every chunk is taken, the joiner appends a new chunk
//! with a compare-and-swap on the last `next` pointer.
//!
//! # Who writes what
//!
//! - `Slot::cursor`: the owning reader (stores with Release after it finished with the slots it
//!   passes); a joiner's CAS (a provisional claim, with [`PROVISIONAL`] set, until the joiner
//!   stores its start); read by the writer (gating), by downstream readers (their barrier) and
//!   downstream joiners (their start), and by nobody else.
//! - `Slot::parked_on`: the owning reader sets it when it parks; whoever wakes it clears it with
//!   a CAS (so each park is woken at most once), the reader clears it when it stops waiting.
//! - `Chunk::parked`: one bit per slot of the chunk, set by the owning reader when it parks and
//!   cleared by it when it stops waiting (never by anyone else, so a bit cannot be lost to a
//!   race). A set bit means "may be parked": wakers look only at those slots.
//! - `Group::epoch`: bumped by every joiner before its heavy fence; downstream readers validate
//!   their scans against it (see `Shared::barrier`).
//! - `Group::watchers`: readers *registered* as waiting on this group, and readers parked on
//!   it now (see
//!   `Shared`'s docs): while it is non-zero, every reader of this group that advances fences
//!   and looks for parked readers.
//!
//! # The join protocol
//!
//! See `Stage::reader`: claim a slot with a conservative position marked [`PROVISIONAL`], bump
//! `epoch`, heavy fence, read the *settled* barrier again and store the final start position.
//! Any scan of this group either sees the claimed slot (and is bounded by the conservative
//! position) or is ordered before the fence, in which case the final position is at least
//! anything that scan allowed. A joiner's start never comes from another joiner's provisional
//! claim (see `Group::min_settled_cursor`): that claim may be below what the writer already
//! overwrote.

use crossbeam_utils::CachePadded;
use std::ptr;

use crate::atomic_waker::AtomicWaker;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The value of a free slot's cursor. Never a real position (that would take centuries).
pub(crate) const FREE: u64 = u64::MAX;

/// Set in a slot's cursor while its reader is joining: the position below it is a provisional
/// claim (a barrier read before the joiner's fence), not yet the reader's start. Positions never
/// reach this bit (2^63 items would take millennia), and `FREE` has it set too.
pub(crate) const PROVISIONAL: u64 = 1 << 63;

/// The position bits of a cursor (`FREE` masked to this means "no position").
const POSITION: u64 = !PROVISIONAL;

/// `Slot::parked_on` of a reader that is not parked.
pub(crate) const NOT_PARKED: usize = 0;

/// Source id of the writer: readers of a stage with no non-empty upstream park on it.
pub(crate) const WRITER_SOURCE: usize = 1;

/// Slots in a group's first chunk. Every slot is cache-padded (128 bytes on x86-64), so this
/// is most of what an unread ring costs beyond its items: a bus with a million topics holds a
/// million first chunks (measured in `docs/scale.md`). Under loom, 2: models then grow a group
/// past its first chunk with three readers.
const FIRST_CHUNK: usize = if cfg!(ringbus_loom) { 2 } else { 4 };

/// The most slots in one chunk (one bit each in the chunk's `parked` word, a `u32`). Each new
/// chunk doubles the last one's size up to this. Under loom, 2 (every chunk the same size).
const MAX_CHUNK: usize = if cfg!(ringbus_loom) { 2 } else { 32 };

/// One registration in `Waiters::registered`.
pub(crate) const REGISTRATION: usize = 2;

/// `Waiters::registered`'s low bit: a registrant ran the heavy fence since the count last
/// left zero (see `Shared::register`).
pub(crate) const ARMED: usize = 1;

/// Who waits on a source (the writer, or a group): see `Shared`'s docs.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// Readers registered as waiting on the source, times [`REGISTRATION`], plus [`ARMED`].
    /// Non-zero (some reader is registered): progress on the source takes the slow path.
    /// Read (Relaxed, after the light fence) on every publish or release; changed by
    /// registrants with read-modify-writes.
    pub(crate) registered: AtomicUsize,
    /// Readers parked on the source now, counted by themselves from park to unpark. The slow
    /// path reads it after its full fence and scans only when it is non-zero.
    pub(crate) parked: AtomicUsize,
}

/// One reader's shared state, alone on its cache line.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Next position the reader will read; everything below is released. `FREE` if unowned.
    pub(crate) cursor: AtomicU64,
    /// The source (a source id) this reader is parked on, or `NOT_PARKED`.
    pub(crate) parked_on: AtomicUsize,
    /// Where the reader's task waits.
    pub(crate) waker: AtomicWaker,
}

impl Slot {
    fn new() -> Self {
        Self {
            cursor: AtomicU64::new(FREE),
            parked_on: AtomicUsize::new(NOT_PARKED),
            waker: AtomicWaker::new(),
        }
    }
}

pub(crate) struct Chunk {
    /// Between [`FIRST_CHUNK`] and [`MAX_CHUNK`] slots; fixed once the chunk is made.
    slots: Box<[CachePadded<Slot>]>,
    /// Bit `i` set: the reader of `slots[i]` may be parked (see the module docs).
    pub(crate) parked: CachePadded<AtomicU32>,
    /// The next chunk, or null. Set once, by CAS, by the joiner that grew the group.
    next: AtomicPtr<Chunk>,
}

impl Chunk {
    /// A chunk of `len` free slots (`len <= MAX_CHUNK`, so each has a bit in `parked`).
    fn new(len: usize) -> Box<Self> {
        debug_assert!(len <= MAX_CHUNK && MAX_CHUNK <= u32::BITS as usize);
        Box::new(Self {
            slots: (0..len).map(|_| CachePadded::new(Slot::new())).collect(),
            parked: CachePadded::new(AtomicU32::new(0)),
            next: AtomicPtr::new(ptr::null_mut()),
        })
    }

    /// The size of the chunk that follows this one.
    fn next_len(&self) -> usize {
        (self.slots.len() * 2).min(MAX_CHUNK)
    }
}

/// One stage of readers.
pub(crate) struct Group {
    /// This group's source id (for `Slot::parked_on` of readers that wait on it).
    pub(crate) source: usize,
    /// The stage whose readers this one follows; null for the first stage (it follows the
    /// writer). Groups live as long as the ring that owns them.
    upstream: *const Group,
    /// Bumped by each joiner; downstream scans validate against it. See the module docs.
    pub(crate) epoch: CachePadded<AtomicU64>,
    /// Readers registered as waiting on this group (see the module docs).
    pub(crate) watchers: CachePadded<Waiters>,
    /// Current members (joins minus leaves).
    pub(crate) members: AtomicUsize,
    /// One past the highest slot index ever claimed: scans stop there. Raised (fetch_max)
    /// by a joiner before it bumps `epoch`.
    high: AtomicUsize,
    /// The first chunk; never null.
    head: Box<Chunk>,
    /// The next group in the ring's list of groups (set once, by CAS).
    pub(crate) next: AtomicPtr<Group>,
}

impl Group {
    /// A new, empty group.
    ///
    /// # Safety
    ///
    /// `upstream` is null or points to a group that outlives this one.
    pub(crate) unsafe fn new(source: usize, upstream: *const Group) -> Self {
        Self {
            source,
            upstream,
            high: AtomicUsize::new(0),
            epoch: CachePadded::new(AtomicU64::new(0)),
            watchers: CachePadded::new(Waiters::default()),
            members: AtomicUsize::new(0),
            head: Chunk::new(FIRST_CHUNK),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The upstream group, `None` for the first stage.
    pub(crate) fn upstream(&self) -> Option<&Group> {
        // SAFETY: `new`'s contract: the upstream outlives this group.
        unsafe { self.upstream.as_ref() }
    }

    /// Every slot that was ever claimed (and possibly some never claimed), in order.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        // Acquire: pairs with the joiner's fetch_max (AcqRel) so the chunks up to `high` are
        // linked and visible.
        let mut left = self.high.load(Ordering::Acquire);
        let mut chunk: *const Chunk = &*self.head;
        let mut i = 0;
        std::iter::from_fn(move || loop {
            if chunk.is_null() || left == 0 {
                return None;
            }
            // SAFETY: chunks are only freed when the group is dropped, which needs `&mut`.
            let c = unsafe { &*chunk };
            if i < c.slots.len() {
                i += 1;
                left -= 1;
                return Some(&*c.slots[i - 1]);
            }
            // Acquire: pairs with the Release CAS that linked the chunk, so its slots are
            // initialised before we read them.
            chunk = c.next.load(Ordering::Acquire);
            i = 0;
        })
    }

    /// The smallest cursor among the members, if there is any member, counting a joiner's
    /// provisional claim as its position (a lower bound of the start it will settle on).
    ///
    /// This is the conservative view the writer gates on and readers read up to: nothing
    /// below a provisional claim can be passed while the joiner settles.
    ///
    /// Acquire loads: pair with the readers' Release stores of their cursors, so whatever the
    /// caller does with the slots below the minimum happens after those readers finished.
    #[inline]
    pub(crate) fn min_cursor(&self) -> Option<u64> {
        let mut min = POSITION;
        for slot in self.slots() {
            // Masking maps a provisional claim to its position and `FREE` to `POSITION`.
            let c = slot.cursor.load(Ordering::Acquire) & POSITION;
            if c < min {
                min = c;
            }
        }
        (min != POSITION).then_some(min)
    }

    /// The smallest cursor among the members that have settled their start, ignoring joiners
    /// still holding a provisional claim; `None` if there is none.
    ///
    /// Only a joiner's start may use this view (see `Stage::reader`): a provisional claim is
    /// an old position the writer may already have lapped, because the writer's scan that set
    /// its limit may have missed the claim. A settled start never is.
    ///
    /// Acquire loads: as in [`min_cursor`](Self::min_cursor).
    #[inline]
    pub(crate) fn min_settled_cursor(&self) -> Option<u64> {
        let mut min = PROVISIONAL;
        for slot in self.slots() {
            // Provisional claims and `FREE` both have the bit set: at or above `PROVISIONAL`.
            let c = slot.cursor.load(Ordering::Acquire);
            if c < min {
                min = c;
            }
        }
        (min != PROVISIONAL).then_some(min)
    }

    /// Every slot whose `parked` bit is set (a snapshot of the bits; Relaxed loads: the caller
    /// fences first).
    pub(crate) fn parked_slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        // Acquire: as in `slots`. Slots at or past `high` were never claimed: the chunks
        // holding only those are not looked at.
        let mut left = self.high.load(Ordering::Acquire);
        let mut chunk: *const Chunk = &*self.head;
        let mut bits = 0u32;
        let mut current: *const Chunk = ptr::null();
        std::iter::from_fn(move || loop {
            if bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // SAFETY: `current` is a linked chunk, alive as long as the group.
                return Some(&*unsafe { &*current }.slots[i]);
            }
            if chunk.is_null() || left == 0 {
                return None;
            }
            // SAFETY: chunks are only freed when the group is dropped, which needs `&mut`.
            let c = unsafe { &*chunk };
            bits = c.parked.load(Ordering::Relaxed);
            current = chunk;
            left = left.saturating_sub(c.slots.len());
            // Acquire: as in `slots`.
            chunk = c.next.load(Ordering::Acquire);
        })
    }

    /// Claims a free slot, storing `position` in its cursor. Grows the group when full.
    pub(crate) fn claim(&self, position: u64) -> Claimed<'_> {
        let mut chunk: &Chunk = &self.head;
        let mut base = 0;
        loop {
            for (i, slot) in chunk.slots.iter().enumerate() {
                if slot.cursor.load(Ordering::Relaxed) == FREE
                    && slot
                        .cursor
                        // AcqRel: Acquire pairs with the Release store of the reader that left
                        // the slot (its last accesses to the waker happen before ours).
                        .compare_exchange(FREE, position, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.high.fetch_max(base + i + 1, Ordering::AcqRel);
                    return Claimed {
                        slot,
                        parked: &chunk.parked,
                        bit: 1 << i,
                    };
                }
            }
            base += chunk.slots.len();
            let next = chunk.next.load(Ordering::Acquire);
            if !next.is_null() {
                // SAFETY: linked chunks live as long as the group.
                chunk = unsafe { &*next };
                continue;
            }
            let fresh = Box::into_raw(Chunk::new(chunk.next_len()));
            match chunk.next.compare_exchange(
                ptr::null_mut(),
                fresh,
                // Release: publishes the initialised chunk to `slots()` (Acquire there).
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: just linked; lives as long as the group.
                Ok(_) => chunk = unsafe { &*fresh },
                Err(existing) => {
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    // SAFETY: linked chunks live as long as the group.
                    chunk = unsafe { &*existing };
                }
            }
        }
    }
}

/// A slot claimed by a joining reader, with its bit in its chunk's `parked` word.
pub(crate) struct Claimed<'a> {
    pub(crate) slot: &'a Slot,
    pub(crate) parked: &'a AtomicU32,
    pub(crate) bit: u32,
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut next = self.head.next.load(Ordering::Relaxed);
        while !next.is_null() {
            // SAFETY: each chunk was made by `Box::into_raw` and is linked exactly once.
            let chunk = unsafe { Box::from_raw(next) };
            next = chunk.next.load(Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("source", &self.source)
            .field("members", &self.members.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw `upstream` pointer only ever gives `&Group`, and groups are shared between
// threads through their atomics alone.
unsafe impl Send for Group {}
// SAFETY: as above.
unsafe impl Sync for Group {}

#[cfg(all(test, not(ringbus_loom)))]
mod tests {
    use super::*;

    /// Claims `n` slots of `group` at positions `0..n`.
    fn claim_all(group: &Group, n: u64) -> Vec<Claimed<'_>> {
        (0..n).map(|p| group.claim(p)).collect()
    }

    #[test]
    fn chunks_double_from_the_first_size_to_the_largest() {
        // SAFETY: no upstream.
        let group = unsafe { Group::new(WRITER_SOURCE, ptr::null()) };
        let claims = claim_all(&group, 70);
        let mut sizes = Vec::new();
        let mut chunk: *const Chunk = &*group.head;
        while !chunk.is_null() {
            // SAFETY: linked chunks live as long as the group.
            let c = unsafe { &*chunk };
            sizes.push(c.slots.len());
            chunk = c.next.load(Ordering::Acquire);
        }
        assert_eq!(sizes, [4, 8, 16, 32, 32]);
        // Every claim is its own slot, each claimed slot is scanned once, in claim order.
        let scanned: Vec<*const Slot> = group.slots().map(|s| s as *const Slot).collect();
        let claimed: Vec<*const Slot> = claims.iter().map(|c| c.slot as *const Slot).collect();
        assert_eq!(scanned, claimed);
        assert_eq!(group.min_cursor(), Some(0));
        assert_eq!(group.min_settled_cursor(), Some(0));
    }

    #[test]
    fn parked_bits_find_their_slots_in_chunks_of_every_size() {
        // SAFETY: no upstream.
        let group = unsafe { Group::new(WRITER_SOURCE, ptr::null()) };
        let claims = claim_all(&group, 70);
        // One reader parked in each chunk (4, 8, 16, 32, 32 slots), at its chunk's edges.
        let parked = [0usize, 3, 4, 11, 12, 27, 28, 59, 60, 69];
        for &i in &parked {
            claims[i].parked.fetch_or(claims[i].bit, Ordering::Relaxed);
        }
        let found: Vec<*const Slot> = group.parked_slots().map(|s| s as *const Slot).collect();
        let expected: Vec<*const Slot> = parked
            .iter()
            .map(|&i| claims[i].slot as *const Slot)
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn a_freed_slot_is_claimed_again_before_the_group_grows() {
        // SAFETY: no upstream.
        let group = unsafe { Group::new(WRITER_SOURCE, ptr::null()) };
        let claims = claim_all(&group, 12); // fills the 4- and 8-slot chunks
        claims[9].slot.cursor.store(FREE, Ordering::Release);
        let again = group.claim(100);
        assert!(ptr::eq(again.slot, claims[9].slot));
        assert_eq!(group.slots().count(), 12, "the group did not grow");
        assert_eq!(group.min_cursor(), Some(0));
    }
}
