//! The topic registry: a hash map whose lookups take no lock, and, unless its entries can be
//! removed, touch no shared counter.
//!
//! # Why
//!
//! `publish(topic, msg)` looks the topic up on every call. A `RwLock` read costs two atomic
//! read-modify-writes on a line that every publishing core fights over, and cloning an `Arc`
//! out costs two more. On a map whose entries are never removed (the default bus), entries
//! live as long as the map: a lookup hands out a plain reference tied to the map's lifetime.
//!
//! # Algorithm
//!
//! Each shard is an open-addressing table (linear probing) of `AtomicPtr<Node>`, at most half
//! used. Inserts take the shard's mutex (`grow`), link the new node with a Release store into
//! an empty slot or a removed one's, and when the table would pass half used, first copy every
//! live pointer into a new table (twice the size, or the same size when removals made the
//! room) and publish it with a Release store of `current`. Lookups: Acquire load of
//! `current`, then Acquire loads of slots until the name or an empty slot.
//!
//! # Removal (a map made `removable`)
//!
//! A removed node's slot holds [`tombstone`]: lookups probe past it, inserts reuse it. Its
//! node, and the tables a rebuild replaced, are freed only after a grace period:
//! - A lookup first *reads* its shard (`Grace::read`): it adds one to one of the shard's two
//!   reader counters, then a SeqCst fence, and the `Reading` subtracts it again (Release) when
//!   dropped.
//! - `remove`, holding `grow`, unlinks the node, then `Grace::synchronize`: a SeqCst fence,
//!   then, for each counter in turn, steers new readers to the other one and waits until it
//!   reads zero. By the two fences, a reader the remover did not see counted unlinked-before
//!   sees the tombstone: so once both counters have read zero, no reader can reach the node.
//!   Two counters so that the wait ends while lookups keep coming.
//! - A reading lasts a lookup and the clone of what it found (the bus clones the topic's
//!   `Arc` and ends the reading before it does anything with the topic). No other code runs
//!   under a reading, so the wait is short, and it cannot be a deadlock: a reader never waits
//!   for a lock, for another thread, or for user code that might call `remove`.
//! - `remove` then asks `idle` again: what a reader took before the unlink is visible now
//!   (the Acquire load of the counter pairs with the reading's Release), so a value `idle`
//!   still accepts has no holder and can have none. Otherwise the node goes back in its slot.
//! - A lookup can miss a node for the moment a refused removal holds it out. A listing
//!   (`for_each`: the bus's list of topics, which a pattern subscription, `close` and `stats`
//!   go by) cannot: it lists each shard holding `grow`.
//!
//! A map that is not removable reads nothing and keeps its old tables until it drops (their
//! sizes sum to less than the current table's).
//!
//! # Invariants
//!
//! - A linked node is never moved or changed; it is freed only after it was unlinked and a
//!   grace period passed (removable), or with the map.
//! - Every table has an empty slot (half used at most), so probes end.
//! - Only the holder of `grow` stores to slots, to `current` or to a shard's epoch.
//! - Nothing but the map's own code and the caller's clone of a value runs under a reading,
//!   and a thread that holds one takes no lock (so `remove`, waiting under `grow`, never
//!   waits for itself or for a thread waiting for it).

use std::hash::Hasher;
use std::ptr;

use crate::sync::{fence, yield_now, AtomicPtr, AtomicUsize, Mutex, Ordering};

/// FNV-1a, for keys the program chooses rather than its input (topic names, ring positions):
/// they are short and need no defence against chosen collisions, so a fast hash beats SipHash.
#[derive(Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The byte whose address marks a removed node's slot: no node can have it.
static TOMBSTONE: u8 = 0;

fn tombstone<V>() -> *mut Node<V> {
    ptr::addr_of!(TOMBSTONE).cast_mut().cast()
}

struct Table<V> {
    slots: Box<[AtomicPtr<Node<V>>]>,
    mask: usize,
}

struct Node<V> {
    hash: u64,
    name: Box<str>,
    value: V,
}

impl<V> Table<V> {
    fn new(capacity: usize) -> Box<Self> {
        Box::new(Self {
            slots: (0..capacity)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            mask: capacity - 1,
        })
    }

    /// The slot holding `name`'s node, and the node.
    fn find(&self, hash: u64, name: &str) -> Option<(usize, &Node<V>)> {
        let mut i = hash as usize & self.mask;
        loop {
            // Acquire: pairs with the Release store that linked the node.
            let p = self.slots[i].load(Ordering::Acquire);
            if p != tombstone() {
                // SAFETY: a linked node lives until it is unlinked and a grace period passed,
                // which the caller's reading (or `grow`) holds off (see the invariants).
                let node = unsafe { p.as_ref()? };
                if node.hash == hash && &*node.name == name {
                    return Some((i, node));
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Links `node` into the first empty or removed slot of its probe sequence; true if that
    /// slot was empty. Caller holds `grow`.
    fn link(&self, node: *mut Node<V>, hash: u64) -> bool {
        let mut i = hash as usize & self.mask;
        loop {
            let p = self.slots[i].load(Ordering::Relaxed);
            if p.is_null() || p == tombstone() {
                // Release: the node's fields are visible to whoever loads the pointer.
                self.slots[i].store(node, Ordering::Release);
                return p.is_null();
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The live nodes, in no particular order. Caller holds `grow` or a reading.
    fn nodes(&self) -> impl Iterator<Item = *mut Node<V>> + '_ {
        self.slots.iter().filter_map(|slot| {
            let p = slot.load(Ordering::Acquire);
            (!p.is_null() && p != tombstone()).then_some(p)
        })
    }

    /// A table of `capacity` slots holding this one's live nodes.
    fn rebuilt(&self, capacity: usize) -> Box<Self> {
        let table = Table::new(capacity);
        for p in self.nodes() {
            // SAFETY: a live node; the caller holds `grow`, so none is freed meanwhile.
            table.link(p, unsafe { (*p).hash });
        }
        table
    }
}

/// The readers of one shard of a removable map (module docs, "Removal").
#[derive(Debug)]
struct Grace {
    /// Which counter new readers add to (its low bit). Written under `grow`.
    epoch: AtomicUsize,
    readers: [AtomicUsize; 2],
}

/// A lookup's hold on its shard of a removable map: until it drops, nothing it found is freed.
#[derive(Debug)]
pub(crate) struct Reading<'m> {
    counter: &'m AtomicUsize,
}

impl Grace {
    fn new() -> Self {
        Self {
            epoch: AtomicUsize::new(0),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
        }
    }

    #[inline]
    fn read(&self) -> Reading<'_> {
        let counter = &self.readers[self.epoch.load(Ordering::Relaxed) & 1];
        counter.fetch_add(1, Ordering::Relaxed);
        // SeqCst: pairs with `synchronize`'s fence. Either that remover sees this reader
        // counted, or this reader's loads of the table see what it unlinked.
        fence(Ordering::SeqCst);
        Reading { counter }
    }

    /// Returns once no reader can still be looking at what was unlinked before the call.
    /// Caller holds `grow` (and, as every thread, no reading: see the invariants).
    fn synchronize(&self) {
        // SeqCst: see `read`.
        fence(Ordering::SeqCst);
        for _ in 0..2 {
            let epoch = self.epoch.load(Ordering::Relaxed);
            // New readers go to the other counter, so this one drains.
            self.epoch.store(epoch.wrapping_add(1), Ordering::Relaxed);
            // Acquire: pairs with `Reading::drop`: what the reader did is visible here.
            while self.readers[epoch & 1].load(Ordering::Acquire) != 0 {
                yield_now();
            }
        }
    }
}

impl Drop for Reading<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: everything this reader did with what it found happens before a remover
        // that waits for the count to fall frees it.
        self.counter.fetch_sub(1, Ordering::Release);
    }
}

/// A value a lookup found. In a removable map it stays valid while the `Found` lives.
#[derive(Debug)]
pub(crate) struct Found<'m, V> {
    value: &'m V,
    reading: Option<Reading<'m>>,
}

impl<'m, V> Found<'m, V> {
    /// The value.
    #[inline]
    pub(crate) fn get(&self) -> &V {
        self.value
    }

    /// The value, for the map's life, unless the map is removable (then `Err(self)`).
    #[inline]
    pub(crate) fn lasting(self) -> Result<&'m V, Self> {
        match self.reading {
            None => Ok(self.value),
            Some(_) => Err(self),
        }
    }
}

#[derive(Debug)]
struct Shard<V> {
    /// The table lookups use.
    current: AtomicPtr<Table<V>>,
    grace: Grace,
    /// Held by inserts and removals; owns the tables (the last one is `current`) and counts.
    grow: Mutex<Grow<V>>,
}

#[derive(Debug)]
struct Grow<V> {
    tables: Vec<*mut Table<V>>,
    /// Live nodes.
    len: usize,
    /// Live nodes and tombstones in `current`.
    used: usize,
}

// SAFETY: the raw pointers are owned by the shard and only shared as `&Table`/`&Node`, whose
// contents are `V` (bounded below) and atomics.
unsafe impl<V: Send + Sync> Send for Shard<V> {}
// SAFETY: as above.
unsafe impl<V: Send + Sync> Sync for Shard<V> {}

/// The most shards a map has (a power of two).
pub(crate) const MAX_SHARDS: usize = 1 << 16;

/// The fewest slots a table has.
const MIN_SLOTS: usize = 16;

/// Where [`TopicMap::visit`] goes on from.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Cursor {
    shard: usize,
    slot: usize,
}

/// Why `remove` removed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// No entry has the name.
    Missing,
    /// `idle` refused the value.
    InUse,
}

/// A map from topic names to `V`, sharded by hash.
#[derive(Debug)]
pub(crate) struct TopicMap<V> {
    /// A power of two of them, so that picking one is a mask, not a division: every lookup
    /// by name picks a shard, and a division is slow on that path.
    shards: Box<[Shard<V>]>,
    /// `shards.len() - 1`.
    shard_mask: usize,
    /// Whether entries can be removed (and so lookups read their shard).
    removable: bool,
}

pub(crate) fn hash(name: &str) -> u64 {
    let mut h = Fnv::default();
    h.write(name.as_bytes());
    h.finish()
}

impl<V> TopicMap<V> {
    /// A map of `shards` shards, rounded up to a power of two, at most [`MAX_SHARDS`];
    /// `removable` allows `remove`, at the price of a reading per lookup.
    pub(crate) fn new(shards: usize, removable: bool) -> Self {
        let shards: Box<[Shard<V>]> = (0..shards.clamp(1, MAX_SHARDS).next_power_of_two())
            .map(|_| {
                let table = Box::into_raw(Table::new(MIN_SLOTS));
                Shard {
                    current: AtomicPtr::new(table),
                    grace: Grace::new(),
                    grow: Mutex::new(Grow {
                        tables: vec![table],
                        len: 0,
                        used: 0,
                    }),
                }
            })
            .collect();
        let shard_mask = shards.len() - 1;
        Self {
            shards,
            shard_mask,
            removable,
        }
    }

    fn shard(&self, hash: u64) -> &Shard<V> {
        // The low bits pick the slot; the shard comes from bits the multiply mixed all of the
        // hash into. FNV-1a's own high bits barely change with a name's last bytes: taken as
        // they were (bits 32 and up), the 200 names `topic-0` to `topic-199` all went to one
        // shard of 4.
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.shards[(mixed >> 40) as usize & self.shard_mask]
    }

    #[inline]
    fn read<'m>(&'m self, shard: &'m Shard<V>) -> Option<Reading<'m>> {
        self.removable.then(|| shard.grace.read())
    }

    /// The value for `name`, without locking.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<Found<'_, V>> {
        let h = hash(name);
        let shard = self.shard(h);
        let reading = self.read(shard);
        // Acquire: pairs with the Release store of a rebuilt table.
        let table = shard.current.load(Ordering::Acquire);
        // SAFETY: a table lives until the map drops or, removable, until a grace period
        // after it was replaced: `reading` holds that off.
        let (_, node) = unsafe { &*table }.find(h, name)?;
        Some(Found {
            value: &node.value,
            reading,
        })
    }

    /// The value for `name`, inserting what `make()` returns if there is none; an `Err` of
    /// `make` inserts nothing.
    pub(crate) fn get_or_try_insert_with<E>(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Found<'_, V>, E> {
        let h = hash(name);
        let shard = self.shard(h);
        // A panic in `make` cannot leave the tables inconsistent: nothing is linked before it.
        let mut grow = shard.grow.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: we hold `grow`, so this is `current`, and nothing is freed meanwhile.
        let table = unsafe { &*shard.current.load(Ordering::Relaxed) };
        if let Some((_, node)) = table.find(h, name) {
            // Taken before `grow` is let go, so that no removal comes between.
            let reading = self.read(shard);
            // SAFETY: linked; `reading` (or the map's life) keeps it.
            let value = unsafe { &*ptr::addr_of!(node.value) };
            return Ok(Found { value, reading });
        }
        let node = Box::into_raw(Box::new(Node {
            hash: h,
            name: name.into(),
            value: make()?,
        }));
        let table = if (grow.used + 1) * 2 > table.slots.len() {
            // Twice the size, unless removals left enough room to stay at this one.
            let slots = if (grow.len + 1) * 4 > table.slots.len() {
                table.slots.len() * 2
            } else {
                table.slots.len()
            };
            let table = self.replace(shard, &mut grow, table.rebuilt(slots));
            // SAFETY: just made `current`; freed only after it is replaced.
            unsafe { &*table }
        } else {
            table
        };
        if table.link(node, h) {
            grow.used += 1;
        }
        grow.len += 1;
        // Taken before `grow` is let go, so that no removal comes between.
        let reading = self.read(shard);
        // SAFETY: linked; `reading` (or the map's life) keeps it.
        let value = unsafe { &(*node).value };
        Ok(Found { value, reading })
    }

    /// Publishes `table` as the shard's `current`, keeping the old one for now.
    fn replace(&self, shard: &Shard<V>, grow: &mut Grow<V>, table: Box<Table<V>>) -> *mut Table<V> {
        grow.used = grow.len;
        let table = Box::into_raw(table);
        grow.tables.push(table);
        // Release: the copied slots are visible to lookups that load the new table.
        shard.current.store(table, Ordering::Release);
        table
    }

    /// The value for `name`, inserting `make()` if there is none.
    pub(crate) fn get_or_insert_with(&self, name: &str, make: impl FnOnce() -> V) -> Found<'_, V> {
        match self.get_or_try_insert_with(name, || Ok::<V, std::convert::Infallible>(make())) {
            Ok(value) => value,
            Err(never) => match never {},
        }
    }

    /// Removes `name`'s entry if `idle` accepts its value both before and after the grace
    /// period (module docs), and returns the value; it is no longer reachable, and the
    /// caller drops it (outside any lock: dropping may run user code that makes topics).
    ///
    /// # Panics
    ///
    /// If the map is not removable (the caller checks first).
    pub(crate) fn remove(&self, name: &str, idle: impl Fn(&V) -> bool) -> Result<V, Kept> {
        assert!(self.removable, "remove on a map made without `removable`");
        let h = hash(name);
        let shard = self.shard(h);
        let mut grow = shard.grow.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: we hold `grow`, so this is `current`, and nothing is freed meanwhile.
        let table = unsafe { &*shard.current.load(Ordering::Relaxed) };
        let (slot, node) = table.find(h, name).ok_or(Kept::Missing)?;
        if !idle(&node.value) {
            return Err(Kept::InUse);
        }
        let node = ptr::from_ref(node).cast_mut();
        table.slots[slot].store(tombstone(), Ordering::Relaxed);
        shard.grace.synchronize();
        // SAFETY: unlinked, but not freed: only this call frees it.
        if !idle(unsafe { &(*node).value }) {
            // Release: as when it was first linked.
            table.slots[slot].store(node, Ordering::Release);
            return Err(Kept::InUse);
        }
        grow.len -= 1;
        if table.slots.len() > MIN_SLOTS && grow.len * 8 < table.slots.len() {
            let slots = (grow.len * 4).next_power_of_two().max(MIN_SLOTS);
            self.replace(shard, &mut grow, table.rebuilt(slots));
            // The old tables are unreachable once this grace period ends.
            shard.grace.synchronize();
        }
        // Every table but `current` was replaced before a grace period that has ended.
        let current = grow.tables.len() - 1;
        if current > 0 {
            for table in grow.tables.drain(..current) {
                // SAFETY: made by `Box::into_raw`, unreachable (above), freed once, here.
                drop(unsafe { Box::from_raw(table) });
            }
            // A map whose topics all went returns to the memory it started with.
            grow.tables.shrink_to_fit();
        }
        drop(grow);
        // SAFETY: made by `Box::into_raw`, unreachable after the grace period, freed once,
        // here.
        let node = unsafe { Box::from_raw(node) };
        Ok(node.value)
    }

    /// Calls `f` with every value, in no particular order.
    ///
    /// Each shard is listed holding its `grow` lock, so `f` must not insert or remove. A
    /// removal holds that lock until its entry is unlinked for good or put back, so a listing
    /// never misses an entry that stays (a lookup, which only reads, can miss one for that
    /// moment).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&V)) {
        for shard in self.shards.iter() {
            let _grow = shard.grow.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: we hold `grow`, so this is `current`, and nothing is freed meanwhile.
            let table = unsafe { &*shard.current.load(Ordering::Relaxed) };
            for p in table.nodes() {
                // SAFETY: as above.
                f(unsafe { &(*p).value });
            }
        }
    }

    /// Calls `f` with the values in the next `slots` slots from `cursor` on (shard by shard,
    /// wrapping round), and moves `cursor` past them: for a sweep that looks at a few entries
    /// at a time. A table rebuilt meanwhile only makes the cursor skip or revisit a few.
    pub(crate) fn visit(&self, cursor: &mut Cursor, slots: usize, mut f: impl FnMut(&V)) {
        let mut left = slots;
        while left > 0 {
            let shard = &self.shards[cursor.shard & self.shard_mask];
            let reading = self.read(shard);
            // SAFETY: tables and nodes live while `reading` does (or for the map's life).
            let table = unsafe { &*shard.current.load(Ordering::Acquire) };
            let start = cursor.slot.min(table.slots.len());
            let end = (start + left).min(table.slots.len());
            for slot in &table.slots[start..end] {
                let p = slot.load(Ordering::Acquire);
                if !p.is_null() && p != tombstone() {
                    // SAFETY: as above.
                    f(unsafe { &(*p).value });
                }
            }
            drop(reading);
            left -= end - start;
            if end == table.slots.len() {
                *cursor = Cursor {
                    shard: (cursor.shard + 1) & self.shard_mask,
                    slot: 0,
                };
            } else {
                cursor.slot = end;
            }
        }
    }

    /// Whether entries can be removed.
    pub(crate) fn is_removable(&self) -> bool {
        self.removable
    }
}

impl<V> Drop for TopicMap<V> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            let grow = shard.grow.get_mut().unwrap_or_else(|e| e.into_inner());
            if let Some(&last) = grow.tables.last() {
                // SAFETY: the last table holds every live node exactly once (removed nodes
                // were freed by `remove`); `&mut self` means no lookup is left.
                for p in unsafe { &*last }.nodes() {
                    // SAFETY: made by `Box::into_raw`, freed once, here.
                    drop(unsafe { Box::from_raw(p) });
                }
            }
            for &table in &grow.tables {
                // SAFETY: made by `Box::into_raw`, freed once, here.
                drop(unsafe { Box::from_raw(table) });
            }
        }
    }
}

#[cfg(all(test, not(ringbus_loom)))]
mod tests {
    use std::sync::Arc;

    use super::{Kept, TopicMap, MAX_SHARDS, MIN_SLOTS};

    fn value<V: Copy>(map: &TopicMap<V>, name: &str) -> Option<V> {
        map.get(name).map(|found| *found.get())
    }

    #[test]
    fn grows_and_finds_everything() {
        for removable in [false, true] {
            let map = TopicMap::new(4, removable);
            for i in 0..1000 {
                let v = map.get_or_insert_with(&format!("topic-{i}"), || i);
                assert_eq!(*v.get(), i);
            }
            for i in 0..1000 {
                assert_eq!(value(&map, &format!("topic-{i}")), Some(i));
                // A second insert finds the first value.
                assert_eq!(
                    *map.get_or_insert_with(&format!("topic-{i}"), || 0).get(),
                    i
                );
            }
            assert_eq!(value(&map, "missing"), None);
            let mut n = 0;
            map.for_each(|_| n += 1);
            assert_eq!(n, 1000);
        }
    }

    #[test]
    fn concurrent_inserts_and_lookups_agree() {
        let map = TopicMap::new(2, false);
        std::thread::scope(|s| {
            for t in 0..4 {
                let map = &map;
                s.spawn(move || {
                    for i in 0..500 {
                        let name = format!("t{}", (i * 7 + t) % 300);
                        let v = map.get_or_insert_with(&name, || name.clone());
                        assert_eq!(v.get(), &name);
                        assert_eq!(map.get(&name).map(|f| f.get().clone()), Some(name));
                    }
                });
            }
        });
        let mut n = 0;
        map.for_each(|_| n += 1);
        assert_eq!(n, 300);
    }

    /// Any shard count works: rounded up to a power of two (the shard is picked with a mask),
    /// at most `MAX_SHARDS`, and every name is found again whichever shard it went to.
    #[test]
    fn shard_counts_are_rounded_up_to_a_power_of_two() {
        for (asked, made) in [
            (0, 1),
            (1, 1),
            (3, 4),
            (64, 64),
            (65, 128),
            (usize::MAX, MAX_SHARDS),
        ] {
            let map = TopicMap::new(asked, false);
            assert_eq!(map.shards.len(), made, "asked for {asked}");
            if asked == usize::MAX {
                continue; // 65,536 shards: the count is what this case checks
            }
            for i in 0..200 {
                map.get_or_insert_with(&format!("topic-{i}"), || i);
            }
            for i in 0..200 {
                assert_eq!(
                    value(&map, &format!("topic-{i}")),
                    Some(i),
                    "{asked} shards"
                );
            }
            let used = map
                .shards
                .iter()
                .filter(|s| s.grow.lock().map_or(0, |g| g.len) > 0)
                .count();
            // 200 names in `made` shards, spread by the hash: nearly every shard holds some.
            assert!(
                used * 4 >= made.min(200) * 3,
                "{used} of {made} shards used"
            );
        }
    }

    #[test]
    fn drops_every_value_once() {
        let counter = Arc::new(());
        for removable in [false, true] {
            {
                let map = TopicMap::new(3, removable);
                for i in 0..100 {
                    map.get_or_insert_with(&i.to_string(), || counter.clone());
                }
                assert_eq!(Arc::strong_count(&counter), 101);
                if removable {
                    for i in (0..100).step_by(3) {
                        drop(map.remove(&i.to_string(), |_| true).expect("removed"));
                    }
                    assert_eq!(Arc::strong_count(&counter), 101 - 34);
                }
            }
            assert_eq!(Arc::strong_count(&counter), 1);
        }
    }

    /// A listing made while a removal is refused (its entry held out of the table between
    /// its two looks) still lists the entry, which stays. The listing runs on another thread
    /// during the removal's second look; that look waits for it a while, so a listing that
    /// did not wait for the removal would run to its end there and miss the entry.
    #[test]
    fn a_listing_during_a_refused_removal_lists_the_entry() {
        use std::cell::Cell;
        use std::sync::mpsc;
        use std::time::Duration;

        let map = TopicMap::new(1, true);
        map.get_or_insert_with("kept", || 7u64);
        let (done, listed) = mpsc::channel();
        let during = Cell::new(None);
        std::thread::scope(|s| {
            let looks = Cell::new(0);
            let kept = map.remove("kept", |_| {
                looks.set(looks.get() + 1);
                if looks.get() < 2 {
                    return true;
                }
                let (map, done) = (&map, done.clone());
                s.spawn(move || {
                    let mut entries = 0;
                    map.for_each(|_| entries += 1);
                    done.send(entries).unwrap();
                });
                // Long enough for a listing that does not wait to finish meanwhile.
                during.set(listed.recv_timeout(Duration::from_millis(200)).ok());
                false // a holder came in the race: the entry stays
            });
            assert!(matches!(kept, Err(Kept::InUse)));
        });
        let entries = during.get().or_else(|| listed.try_recv().ok());
        assert_eq!(entries, Some(1), "the listing missed an entry that stayed");
        assert_eq!(value(&map, "kept"), Some(7));
    }

    /// Removed names are gone, the others stay, names come back, and a table emptied by
    /// removals shrinks back to its first size, the tables it replaced freed.
    #[test]
    fn removes_reinserts_and_shrinks() {
        let map = TopicMap::new(1, true);
        for i in 0..1000 {
            map.get_or_insert_with(&format!("topic-{i}"), || i);
        }
        for i in (0..1000).filter(|i| i % 2 == 0) {
            assert_eq!(map.remove(&format!("topic-{i}"), |_| true), Ok(i));
        }
        for i in 0..1000 {
            let found = value(&map, &format!("topic-{i}"));
            assert_eq!(found, (i % 2 == 1).then_some(i), "topic-{i}");
        }
        assert_eq!(map.remove("topic-0", |_| true), Err(Kept::Missing));
        // Reinserted names reuse the removed slots and are found again.
        for i in (0..1000).filter(|i| i % 2 == 0) {
            assert_eq!(
                *map.get_or_insert_with(&format!("topic-{i}"), || i + 1)
                    .get(),
                i + 1
            );
        }
        for i in 0..1000 {
            let want = if i % 2 == 0 { i + 1 } else { i };
            assert_eq!(value(&map, &format!("topic-{i}")), Some(want));
        }
        let peak = map.shards[0].grow.lock().unwrap().tables.last().map(|&t| {
            // SAFETY: `current`, alive while the map is.
            unsafe { &*t }.slots.len()
        });
        assert_eq!(peak, Some(2048));
        for i in 0..1000 {
            assert!(map.remove(&format!("topic-{i}"), |_| true).is_ok());
        }
        let grow = map.shards[0].grow.lock().unwrap();
        assert_eq!((grow.len, grow.tables.len()), (0, 1));
        // SAFETY: `current`, alive while the map is.
        assert_eq!(unsafe { &*grow.tables[0] }.slots.len(), MIN_SLOTS);
    }

    /// `idle` is asked before and after the grace period; a refusal keeps the entry.
    #[test]
    fn a_refused_removal_keeps_the_entry() {
        let map = TopicMap::new(2, true);
        map.get_or_insert_with("a", || 7);
        assert_eq!(map.remove("a", |_| false), Err(Kept::InUse));
        let asked = std::cell::Cell::new(0);
        // Accepted before the grace period, refused after it: the entry goes back.
        let second = |_: &i32| {
            asked.set(asked.get() + 1);
            asked.get() == 1
        };
        assert_eq!(map.remove("a", second), Err(Kept::InUse));
        assert_eq!(asked.get(), 2);
        assert_eq!(value(&map, "a"), Some(7));
        assert_eq!(map.remove("a", |_| true), Ok(7));
        assert_eq!(value(&map, "a"), None);
    }

    /// A removable map's lookups read; the others hand out lasting values.
    #[test]
    fn only_a_removable_map_reads() {
        let map = TopicMap::new(2, true);
        map.get_or_insert_with("a", || 1);
        let found = map.get("a").expect("a");
        assert!(found.lasting().is_err());
        let lasting = TopicMap::new(1, false);
        let found = lasting.get_or_insert_with("a", || 1);
        assert_eq!(found.lasting().ok(), Some(&1));
    }

    /// Lookups, inserts and removals from several threads: every lookup finds the value its
    /// name was inserted with (a value freed under a reader would show another), and every
    /// value is dropped once (`Arc` counts).
    #[test]
    fn concurrent_removals_and_lookups_agree() {
        let counter = Arc::new(());
        {
            let map = TopicMap::new(2, true);
            std::thread::scope(|s| {
                for t in 0..3u64 {
                    let (map, counter) = (&map, &counter);
                    s.spawn(move || {
                        let mut x = t + 1;
                        for _ in 0..20_000 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let key = x % 64;
                            let name = format!("t{key}");
                            match x % 3 {
                                0 => {
                                    let _ = map.remove(&name, |_| true);
                                }
                                _ => {
                                    let found = map.get_or_insert_with(&name, || {
                                        (key, Box::new(key), counter.clone())
                                    });
                                    let (k, boxed, _) = found.get();
                                    assert_eq!((*k, **boxed), (key, key));
                                }
                            }
                        }
                    });
                }
            });
        }
        assert_eq!(Arc::strong_count(&counter), 1);
    }
}

/// Loom models of removal against lookups, with the orderings and fences the map runs with
/// (`just loom`). A value freed under a reader shows as a causality error on the cell both
/// touch.
#[cfg(all(test, ringbus_loom))]
mod loom_tests {
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    use super::{Kept, TopicMap};

    /// A value whose drop writes the cell that readers read.
    struct Token(UnsafeCell<u64>);

    impl Drop for Token {
        fn drop(&mut self) {
            // SAFETY: loom's cell checks that no read races this write.
            self.0.with_mut(|p| unsafe { *p = 0 });
        }
    }

    /// A thread that looks "a" up and, if found, reads its value.
    fn read_a(map: &Arc<TopicMap<Token>>) -> loom::thread::JoinHandle<()> {
        let map = map.clone();
        loom::thread::spawn(move || {
            if let Some(found) = map.get("a") {
                // SAFETY: loom's cell checks this read against the drop's write.
                let v = found.get().0.with(|p| unsafe { *p });
                assert_eq!(v, 7);
            }
        })
    }

    /// A reader that found the value reads it safely while a removal frees it.
    #[test]
    fn loom_remove_waits_for_readers() {
        loom::model(|| {
            let map = Arc::new(TopicMap::new(1, true));
            map.get_or_insert_with("a", || Token(UnsafeCell::new(7)));
            let reader = read_a(&map);
            let removed = map.remove("a", |_| true);
            assert!(removed.is_ok());
            drop(removed);
            reader.join().unwrap();
        });
    }

    /// A reader that chose its counter before an earlier removal's grace period, and counted
    /// itself only after that removal looked at the counter, is waited for by the next
    /// removal: why `synchronize` waits for both counters.
    #[test]
    fn loom_a_late_reader_is_waited_for_by_the_next_removal() {
        loom::model(|| {
            let map = Arc::new(TopicMap::new(1, true));
            map.get_or_insert_with("a", || Token(UnsafeCell::new(7)));
            map.get_or_insert_with("x", || Token(UnsafeCell::new(7)));
            let reader = read_a(&map);
            assert!(map.remove("x", |_| true).is_ok());
            assert!(map.remove("a", |_| true).is_ok());
            reader.join().unwrap();
        });
    }

    /// A reader that takes a holder (an `Arc` clone) of what it found keeps the entry: the
    /// removal sees the holder after the grace period and puts the entry back.
    #[test]
    fn loom_a_holder_taken_in_the_race_keeps_the_entry() {
        loom::model(|| {
            let map = Arc::new(TopicMap::new(1, true));
            map.get_or_insert_with("a", || Arc::new(7u64));
            let reader = {
                let map = map.clone();
                loom::thread::spawn(move || map.get("a").map(|found| found.get().clone()))
            };
            let removed = map.remove("a", |v| Arc::strong_count(v) == 1);
            let held = reader.join().unwrap();
            match (&removed, &held) {
                (Ok(_), None) => assert!(map.get("a").is_none()),
                (Err(Kept::InUse), Some(v)) => {
                    assert_eq!(**v, 7);
                    assert!(map.get("a").is_some(), "a refused removal lost the entry");
                }
                _ => panic!("removed {:?} while held {:?}", removed.is_ok(), held),
            }
        });
    }
}
