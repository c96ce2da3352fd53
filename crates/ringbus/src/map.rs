//! The topic registry: a grow-only hash map whose lookups take no lock and touch no shared
//! counter.
//!
//! # Why
//!
//! `publish(topic, msg)` looks the topic up on every call. A `RwLock` read costs two atomic
//! read-modify-writes on a line that every publishing core fights over, and cloning an `Arc`
//! out costs two more. Topics are never removed from a bus, so their entries can live as long
//! as the map: a lookup returns a plain reference tied to the map's lifetime.
//!
//! # Algorithm
//!
//! Each shard is an open-addressing table (linear probing) of `AtomicPtr<Entry>`, at most half
//! full. Inserts take the shard's mutex, link the new entry with a Release store into an empty
//! slot, and when the table would pass half full, first copy every pointer into a table twice
//! the size and publish it with a Release store of `current`. Old tables are kept (in
//! `retired`) until the map drops, so a lookup that loaded an old table still walks valid
//! memory and finds every entry that table had. Lookups: Acquire load of `current`, then
//! Acquire loads of slots until the name or an empty slot.
//!
//! # Invariants
//!
//! - An entry, once linked, is never moved, changed or freed before the map drops.
//! - Every table has an empty slot (half full at most), so probes end.
//! - Only the holder of `grow` stores to slots or to `current`.

use std::hash::Hasher;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// FNV-1a: topic names are short and chosen by the program, so a fast hash beats SipHash.
#[derive(Clone, Copy)]
struct Fnv(u64);

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

    fn find(&self, hash: u64, name: &str) -> Option<&Node<V>> {
        let mut i = hash as usize & self.mask;
        loop {
            // Acquire: pairs with the Release store that linked the node.
            let p = self.slots[i].load(Ordering::Acquire);
            // SAFETY: linked nodes live until the map drops (see the invariants).
            let node = unsafe { p.as_ref()? };
            if node.hash == hash && &*node.name == name {
                return Some(node);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Links `node` into the first empty slot of its probe sequence. Caller holds `grow`.
    fn link(&self, node: *mut Node<V>, hash: u64) {
        let mut i = hash as usize & self.mask;
        while !self.slots[i].load(Ordering::Relaxed).is_null() {
            i = (i + 1) & self.mask;
        }
        // Release: the node's fields are visible to whoever loads the pointer.
        self.slots[i].store(node, Ordering::Release);
    }
}

#[derive(Debug)]
struct Shard<V> {
    /// The table lookups use.
    current: AtomicPtr<Table<V>>,
    /// Held by inserts; owns the tables (the last one is `current`) and the entry count.
    grow: Mutex<Grow<V>>,
}

#[derive(Debug)]
struct Grow<V> {
    tables: Vec<*mut Table<V>>,
    len: usize,
}

// SAFETY: the raw pointers are owned by the shard and only shared as `&Table`/`&Node`, whose
// contents are `V` (bounded below) and atomics.
unsafe impl<V: Send + Sync> Send for Shard<V> {}
// SAFETY: as above.
unsafe impl<V: Send + Sync> Sync for Shard<V> {}

/// The most shards a map has (a power of two).
pub(crate) const MAX_SHARDS: usize = 1 << 16;

/// A grow-only map from topic names to `V`, sharded by hash.
#[derive(Debug)]
pub(crate) struct TopicMap<V> {
    /// A power of two of them, so that picking one is a mask, not a division: every lookup
    /// by name picks a shard, and a division is slow on that path.
    shards: Box<[Shard<V>]>,
    /// `shards.len() - 1`.
    shard_mask: usize,
}

pub(crate) fn hash(name: &str) -> u64 {
    let mut h = Fnv::default();
    h.write(name.as_bytes());
    h.finish()
}

impl<V> TopicMap<V> {
    /// A map of `shards` shards, rounded up to a power of two, at most [`MAX_SHARDS`].
    pub(crate) fn new(shards: usize) -> Self {
        let shards: Box<[Shard<V>]> = (0..shards.clamp(1, MAX_SHARDS).next_power_of_two())
            .map(|_| {
                let table = Box::into_raw(Table::new(16));
                Shard {
                    current: AtomicPtr::new(table),
                    grow: Mutex::new(Grow {
                        tables: vec![table],
                        len: 0,
                    }),
                }
            })
            .collect();
        let shard_mask = shards.len() - 1;
        Self { shards, shard_mask }
    }

    fn shard(&self, hash: u64) -> &Shard<V> {
        // The low bits pick the slot; the shard comes from bits the multiply mixed all of the
        // hash into. FNV-1a's own high bits barely change with a name's last bytes: taken as
        // they were (bits 32 and up), the 200 names `topic-0` to `topic-199` all went to one
        // shard of 4.
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.shards[(mixed >> 40) as usize & self.shard_mask]
    }

    /// The value for `name`, without locking.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        let h = hash(name);
        // Acquire: pairs with the Release store of a grown table.
        let table = self.shard(h).current.load(Ordering::Acquire);
        // SAFETY: tables live until the map drops.
        unsafe { &*table }.find(h, name).map(|n| &n.value)
    }

    /// The value for `name`, inserting what `make()` returns if there is none; an `Err` of
    /// `make` inserts nothing.
    pub(crate) fn get_or_try_insert_with<E>(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<&V, E> {
        let h = hash(name);
        let shard = self.shard(h);
        // A panic in `make` cannot leave the tables inconsistent: nothing is linked before it.
        let mut grow = shard.grow.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: tables live until the map drops; we hold `grow`, so this is `current`.
        let table = unsafe { &*shard.current.load(Ordering::Relaxed) };
        if let Some(node) = table.find(h, name) {
            return Ok(&node.value);
        }
        let node = Box::into_raw(Box::new(Node {
            hash: h,
            name: name.into(),
            value: make()?,
        }));
        let table = if (grow.len + 1) * 2 > table.slots.len() {
            let bigger = Table::new(table.slots.len() * 2);
            for slot in table.slots.iter() {
                let p = slot.load(Ordering::Relaxed);
                if !p.is_null() {
                    // SAFETY: a linked node, alive until the map drops.
                    bigger.link(p, unsafe { (*p).hash });
                }
            }
            let bigger = Box::into_raw(bigger);
            grow.tables.push(bigger);
            // Release: the copied slots are visible to lookups that load the new table.
            shard.current.store(bigger, Ordering::Release);
            // SAFETY: just made; freed only with the map.
            unsafe { &*bigger }
        } else {
            table
        };
        table.link(node, h);
        grow.len += 1;
        // SAFETY: linked; alive until the map drops.
        Ok(unsafe { &(*node).value })
    }

    /// The value for `name`, inserting `make()` if there is none.
    pub(crate) fn get_or_insert_with(&self, name: &str, make: impl FnOnce() -> V) -> &V {
        match self.get_or_try_insert_with(name, || Ok::<V, std::convert::Infallible>(make())) {
            Ok(value) => value,
            Err(never) => match never {},
        }
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> Vec<&V> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            // SAFETY: tables live until the map drops.
            let table = unsafe { &*shard.current.load(Ordering::Acquire) };
            for slot in table.slots.iter() {
                // SAFETY: linked nodes live until the map drops.
                if let Some(node) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
                    all.push(&node.value);
                }
            }
        }
        all
    }
}

impl<V> Drop for TopicMap<V> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            let grow = shard.grow.get_mut().unwrap_or_else(|e| e.into_inner());
            if let Some(&last) = grow.tables.last() {
                // SAFETY: the last table holds every node exactly once; `&mut self` means no
                // lookup is left.
                for slot in unsafe { &*last }.slots.iter() {
                    let p = slot.load(Ordering::Relaxed);
                    if !p.is_null() {
                        // SAFETY: made by `Box::into_raw`, freed once, here.
                        drop(unsafe { Box::from_raw(p) });
                    }
                }
            }
            for &table in &grow.tables {
                // SAFETY: made by `Box::into_raw`, freed once, here.
                drop(unsafe { Box::from_raw(table) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TopicMap, MAX_SHARDS};

    #[test]
    fn grows_and_finds_everything() {
        let map = TopicMap::new(4);
        for i in 0..1000 {
            let v = map.get_or_insert_with(&format!("topic-{i}"), || i);
            assert_eq!(*v, i);
        }
        for i in 0..1000 {
            assert_eq!(map.get(&format!("topic-{i}")), Some(&i));
            // A second insert finds the first value.
            assert_eq!(*map.get_or_insert_with(&format!("topic-{i}"), || 0), i);
        }
        assert_eq!(map.get("missing"), None);
        assert_eq!(map.values().len(), 1000);
    }

    #[test]
    fn concurrent_inserts_and_lookups_agree() {
        let map = TopicMap::new(2);
        std::thread::scope(|s| {
            for t in 0..4 {
                let map = &map;
                s.spawn(move || {
                    for i in 0..500 {
                        let name = format!("t{}", (i * 7 + t) % 300);
                        let v = map.get_or_insert_with(&name, || name.clone());
                        assert_eq!(v, &name);
                        assert_eq!(map.get(&name), Some(&name));
                    }
                });
            }
        });
        assert_eq!(map.values().len(), 300);
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
            let map = TopicMap::new(asked);
            assert_eq!(map.shards.len(), made, "asked for {asked}");
            if asked == usize::MAX {
                continue; // 65,536 shards: the count is what this case checks
            }
            for i in 0..200 {
                map.get_or_insert_with(&format!("topic-{i}"), || i);
            }
            for i in 0..200 {
                assert_eq!(map.get(&format!("topic-{i}")), Some(&i), "{asked} shards");
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
        use std::sync::Arc;
        let counter = Arc::new(());
        {
            let map = TopicMap::new(3);
            for i in 0..100 {
                map.get_or_insert_with(&i.to_string(), || counter.clone());
            }
            assert_eq!(Arc::strong_count(&counter), 101);
        }
        assert_eq!(Arc::strong_count(&counter), 1);
    }
}
