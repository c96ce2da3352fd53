//! Stages: groups of readers, chained so that each stage sees only what the one before it
//! finished.

use std::fmt;

use crate::error::JoinError;
use crate::reader::Reader;
use crate::registry::{Group, PROVISIONAL};
use crate::shared::Shared;
use crate::sync::{Arc, Ordering};

/// A group of readers of one ring; a handle to let readers join it, from any thread.
///
/// [`Writer::stage`](crate::Writer::stage) (or the builder) gives the first stage, whose
/// readers see items as soon as they are published. [`then`](Self::then) makes a stage whose
/// readers see an item only once *every* reader of this stage has released it, as in a
/// Disruptor pipeline (journal, then replicate, then business logic). The writer waits for the
/// slowest reader of any stage. An empty stage is transparent: its followers read what its own
/// upstream finished.
///
/// `Stage` is cheap to clone and `Send + Sync`.
///
/// # Examples
///
/// ```
/// # ringbus_core::block_on(async {
/// let (mut writer, journal) = ringbus_core::Builder::new(64).build::<u64>();
/// let logic = journal.then();
/// let mut j = journal.reader().unwrap();
/// let mut l = logic.reader().unwrap();
/// writer.publish(1).await;
/// assert!(l.try_recv().is_err()); // the journal has not finished with it yet
/// drop(j.recv().await.unwrap());   // releasing it lets the next stage see it
/// assert_eq!(*l.recv().await.unwrap(), 1);
/// # });
/// ```
pub struct Stage<T> {
    shared: Arc<Shared<T>>,
    /// Lives as long as `shared`.
    group: *const Group,
}

// SAFETY: a stage only joins readers (see `Reader`'s bounds) and reads atomics of its group,
// which lives as long as the ring that `shared` keeps alive.
unsafe impl<T: Send + Sync> Send for Stage<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Stage<T> {}

impl<T> Stage<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>, group: &Group) -> Self {
        Self { shared, group }
    }

    fn group(&self) -> &Group {
        // SAFETY: groups live as long as the ring, which `self.shared` keeps alive.
        unsafe { &*self.group }
    }

    /// A new stage after this one: its readers see only what every reader of this stage has
    /// released.
    pub fn then(&self) -> Stage<T> {
        let group = self.shared.add_group(self.group());
        Stage::new(self.shared.clone(), group)
    }

    /// How many items the writer has published so far (a snapshot).
    pub fn published(&self) -> u64 {
        self.shared.cursor.load(Ordering::Acquire)
    }

    /// True once the writer is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Wakes the writer if it is parked waiting for room, so that its task polls again.
    ///
    /// For a writer that waits on something else as well (a shutdown flag, say): set the
    /// flag, then call this; the writer checks the flag after each poll of
    /// [`Writer::ready`](crate::Writer::ready) that found no room, and so either sees it
    /// there or is woken here. The wait itself goes on if it still has no room.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::task::Poll;
    /// # ringbus_core::block_on(async {
    /// let (mut writer, stage) = ringbus_core::Builder::new(1).build::<u64>();
    /// let _reader = stage.reader().unwrap(); // never releases: the ring stays full
    /// writer.try_publish(1).unwrap();
    /// let stop = Arc::new(AtomicBool::new(false));
    /// let (flag, waker) = (stop.clone(), stage.clone());
    /// std::thread::spawn(move || {
    ///     flag.store(true, Ordering::Release);
    ///     waker.wake_writer();
    /// });
    /// let mut ready = std::pin::pin!(writer.ready(1));
    /// let room = std::future::poll_fn(|cx| match ready.as_mut().poll(cx) {
    ///     Poll::Ready(()) => Poll::Ready(true),
    ///     Poll::Pending if stop.load(Ordering::Acquire) => Poll::Ready(false),
    ///     Poll::Pending => Poll::Pending,
    /// })
    /// .await;
    /// assert!(!room, "stopped, still full");
    /// # });
    /// ```
    pub fn wake_writer(&self) {
        self.shared.writer_waker.wake();
    }

    /// The number of readers in this stage now.
    pub fn readers(&self) -> usize {
        self.group().members.load(Ordering::Relaxed)
    }

    /// Joins a new reader to this stage. Lock-free, and never makes the writer wait.
    ///
    /// The reader starts at the current end of what this stage may read: for the first stage,
    /// the writer's position, so it sees exactly the items published after `reader` returns
    /// (and possibly some published while it ran).
    ///
    /// # Errors
    ///
    /// [`JoinError::TooManyReaders`] past the ring's
    /// [`max_readers`](crate::Builder::max_readers).
    pub fn reader(&self) -> Result<Reader<T>, JoinError> {
        let shared = &*self.shared;
        let group = self.group();
        if shared.readers.fetch_add(1, Ordering::Relaxed) >= shared.max_readers {
            shared.readers.fetch_sub(1, Ordering::Relaxed);
            return Err(JoinError::TooManyReaders {
                max: shared.max_readers,
            });
        }
        // 1. Claim a slot with a position that is safe but possibly stale (too low): while we
        //    hold it, neither the writer nor a downstream stage can pass it. It is marked
        //    provisional: the writer may already have lapped it (its last gate scan may have
        //    missed the claim), so no downstream joiner may start from it (step 4).
        let (claimed, _) = shared.barrier(group.upstream());
        let claim = group.claim(claimed | PROVISIONAL);
        group.members.fetch_add(1, Ordering::Relaxed);
        // 2. Tell downstream scans that a member arrived (they validate against `epoch`).
        group.epoch.fetch_add(1, Ordering::AcqRel);
        // 3. Pairs with the full fence of the writer's gate scan and of downstream barrier
        //    scans: a scan that missed our slot is ordered before this fence, so the barrier we
        //    read next is at least everything that scan allowed. (A plain full fence on both
        //    sides, not the asymmetric pair: scans are rare enough, and a `membarrier` per join
        //    cost microseconds.)
        crate::sync::full_fence();
        // 4. Read the barrier again, from settled members only. A writer scan that missed our
        //    slot let the writer lap positions below its gate; every settled upstream cursor
        //    (and the writer's cursor) we read now is at least that gate: the scan either saw
        //    that reader's cursor, or missed it and is then ordered before that reader's fence,
        //    after which the reader read the writer's cursor. A provisional claim has no such
        //    bound.
        let barrier = shared.settled_barrier(group.upstream());
        let start = barrier.max(claimed);
        // Release: pairs with the Acquire loads of cursors in the scans.
        claim.slot.cursor.store(start, Ordering::Release);
        // Raising the position from `claimed` is progress for whoever waited on it.
        shared.notify_progress(group, start);
        Ok(Reader::new(self.shared.clone(), group, claim, start))
    }
}

impl<T> Clone for Stage<T> {
    fn clone(&self) -> Self {
        Stage::new(self.shared.clone(), self.group())
    }
}

impl<T> fmt::Debug for Stage<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stage")
            .field("readers", &self.readers())
            .finish_non_exhaustive()
    }
}
