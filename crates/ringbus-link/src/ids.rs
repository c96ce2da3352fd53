//! Message ids unique across processes: a random tag for this process and a counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A random tag for this process (16 hex digits), so ids and link ids made here never collide
/// with another process's.
pub fn process_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        format!("{:016x}", h.finish())
    })
}

/// Relaxed: a counter whose only promise is that no two calls get the same value.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh message id: the process tag and a counter.
///
/// ```
/// let (a, b) = (ringbus_link::ids::next_id(), ringbus_link::ids::next_id());
/// assert_ne!(a, b);
/// assert!(a.starts_with(ringbus_link::ids::process_tag()));
/// ```
pub fn next_id() -> String {
    tagged(NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// `<process tag>-<n>`, written straight into a string of the right size rather than through
/// `format!`: every export without an id of its own makes one.
fn tagged(n: u64) -> String {
    let tag = process_tag();
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut id = String::with_capacity(tag.len() + 1 + digits.len());
    id.push_str(tag);
    id.push('-');
    id.push_str(digits);
    id
}

/// Relaxed: as [`NEXT_ID`], a counter whose only promise is that no two calls get the same
/// value.
static NEXT_LINK: AtomicU64 = AtomicU64::new(1);

/// A fresh link id: the process tag and a counter of the links made in this process, by
/// every engine. An engine writes it as the origin of its exports, which its imports use to
/// tell their own link's messages from others.
///
/// ```
/// let (a, b) = (ringbus_link::ids::next_link_id(), ringbus_link::ids::next_link_id());
/// assert_ne!(a, b);
/// assert!(a.starts_with(ringbus_link::ids::process_tag()));
/// ```
pub fn next_link_id() -> String {
    tagged(NEXT_LINK.fetch_add(1, Ordering::Relaxed))
}
