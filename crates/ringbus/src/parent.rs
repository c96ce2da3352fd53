//! Parent spans for handler spans: a publish made with [`Context::with_parent`] makes the
//! `ringbus.handle` span of every handler call on its message a child of that span, although
//! the handlers run in other tasks, later.
//!
//! [`Context::with_parent`]: crate::Context::with_parent
//!
//! # The table
//!
//! One [`Parents`] per topic: the parent spans of the messages still to be taken, by
//! position, in the order they were published. It works as the delivery receipts do
//! (`delivery.rs`):
//! - The publish registers its parent under the topic's writer lock, *before* it writes the
//!   message, with the number of subscribers that will take it unknown yet; the ring's
//!   publication (release) carries the entry, and the raised `outstanding`, to any subscriber
//!   that reads the message (acquire). Once written, still under the writer lock, the
//!   publish sets that number (the topic's readers); a publish that does not write its
//!   message (refused, cancelled, dropped) removes the entry.
//! - A subscriber that is about to make a handler span (so only when some tracing subscriber
//!   listens at `DEBUG`: see `observe`) looks in the table only while
//!   `outstanding` is non-zero, and takes the entries of the positions it is about to handle;
//!   the last subscriber to take an entry removes it.
//! - An entry a subscriber never takes (it was lossy and skipped it, it left the topic, or it
//!   made no span because nobody listened when it got there) is dropped once the topic has
//!   published a whole ring's worth after it: every subscriber that gates the writer has
//!   passed it by then. Until then it keeps its span open.
//!
//! Nothing here runs on a publish without a parent, nor on a delivery when nobody listens.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tracing::Span;

/// A topic's table of parent spans (see the module docs).
#[derive(Debug)]
pub(crate) struct Parents {
    /// `entries.len()`, stored under the lock. Relaxed: a subscriber that reads a message
    /// sees the count raised for it through the ring's release/acquire; a stale non-zero
    /// only costs it a look under the lock.
    outstanding: AtomicUsize,
    entries: Mutex<VecDeque<Entry>>,
    /// The ring's size: an entry this far behind the newest one is dropped.
    lap: u64,
}

#[derive(Debug)]
struct Entry {
    position: u64,
    span: Span,
    /// Subscribers that took it.
    taken: usize,
    /// Subscribers that will take it: `usize::MAX` until the message is written.
    expected: usize,
}

impl Parents {
    pub(crate) fn new(lap: usize) -> Self {
        Self {
            outstanding: AtomicUsize::new(0),
            entries: Mutex::new(VecDeque::new()),
            lap: lap.max(1) as u64,
        }
    }

    fn entries(&self) -> MutexGuard<'_, VecDeque<Entry>> {
        // A panic cannot leave the queue inconsistent: each change is one push or remove.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `span` as the parent of the message about to be written at `position`,
    /// under the writer lock. The returned guard removes it unless [`Registered::written`]
    /// says the message was written.
    pub(crate) fn register(&self, position: u64, span: &Span) -> Registered<'_> {
        let mut entries = self.entries();
        while entries
            .front()
            .is_some_and(|e| e.position + self.lap <= position)
        {
            entries.pop_front();
        }
        entries.push_back(Entry {
            position,
            span: span.clone(),
            taken: 0,
            expected: usize::MAX,
        });
        self.outstanding.store(entries.len(), Ordering::Relaxed);
        Registered {
            parents: self,
            position,
        }
    }

    /// True while some entry is outstanding: the subscribers look at the table only then.
    #[inline]
    pub(crate) fn outstanding(&self) -> bool {
        self.outstanding.load(Ordering::Relaxed) != 0
    }

    /// The parent span of the messages at `start..start + len`, if any was given: the first
    /// one's (a batch handler's span has one parent). Taken once per subscriber.
    pub(crate) fn take(&self, start: u64, len: u64) -> Option<Span> {
        if !self.outstanding() {
            return None;
        }
        let mut entries = self.entries();
        let end = start.saturating_add(len);
        let mut parent = None;
        let mut i = entries.partition_point(|e| e.position < start);
        while i < entries.len() && entries[i].position < end {
            let entry = &mut entries[i];
            entry.taken += 1;
            if entry.taken >= entry.expected {
                let entry = entries.remove(i).expect("in range");
                parent.get_or_insert(entry.span);
            } else {
                parent.get_or_insert_with(|| entry.span.clone());
                i += 1;
            }
        }
        self.outstanding.store(entries.len(), Ordering::Relaxed);
        parent
    }

    /// Removes the entry at `position`, or sets how many subscribers take it, removing it
    /// if they all did already.
    fn settle(&self, position: u64, expected: Option<usize>) {
        let mut entries = self.entries();
        let Ok(i) = entries.binary_search_by_key(&position, |e| e.position) else {
            return;
        };
        match expected {
            Some(expected) if entries[i].taken < expected => entries[i].expected = expected,
            _ => drop(entries.remove(i)),
        }
        self.outstanding.store(entries.len(), Ordering::Relaxed);
    }
}

/// A parent registered for a publish in progress: removed if the publish does not write its
/// message.
pub(crate) struct Registered<'a> {
    parents: &'a Parents,
    position: u64,
}

impl Registered<'_> {
    /// The message was written, with `subscribers` readers on the topic (read under the
    /// writer lock, after the write): the entry stays until they took it.
    pub(crate) fn written(self, subscribers: usize) {
        self.parents.settle(self.position, Some(subscribers));
        std::mem::forget(self);
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.parents.settle(self.position, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span() -> Span {
        // A disabled span is still a value the table keeps and hands back.
        Span::none()
    }

    #[test]
    fn an_entry_is_removed_by_its_last_subscriber() {
        let parents = Parents::new(8);
        assert!(parents.take(0, 1).is_none());
        parents.register(3, &span()).written(2);
        assert!(parents.take(2, 1).is_none());
        assert!(parents.take(3, 1).is_some());
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 1);
        assert!(parents.take(0, 10).is_some(), "a batch over it");
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn taken_before_the_count_is_known() {
        let parents = Parents::new(8);
        let registered = parents.register(0, &span());
        assert!(parents.take(0, 1).is_some());
        registered.written(1);
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_unwritten_message_leaves_nothing() {
        let parents = Parents::new(8);
        drop(parents.register(0, &span()));
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 0);
        assert!(parents.take(0, 1).is_none());
    }

    #[test]
    fn an_entry_nobody_takes_goes_after_a_lap() {
        let parents = Parents::new(4);
        parents.register(0, &span()).written(1);
        parents.register(3, &span()).written(1);
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 2);
        parents.register(4, &span()).written(1);
        assert_eq!(parents.outstanding.load(Ordering::Relaxed), 2, "0 dropped");
        assert!(parents.take(0, 1).is_none());
    }
}
