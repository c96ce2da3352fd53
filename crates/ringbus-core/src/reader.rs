//! Readers: read in place, one item or a zero-copy batch at a time, parking when caught up.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Closed, TryRecvError};
use crate::registry::{Claimed, Group, Slot, FREE};
use crate::shared::Shared;
use crate::sync::{Arc, AtomicU32, Ordering};

/// Spins in a row that ended in a park after which a reader stops spinning (see
/// `Reader::spin_limit`).
const QUIET_AFTER: u32 = 4;
/// A reader that stopped spinning still spins before one park in this many, to notice when
/// spinning would pay off again.
const PROBE_EVERY: u32 = 16;

/// One reader of a ring: sees every item published after it joined, in order.
///
/// Made by [`Stage::reader`](crate::Stage::reader). Items are read in place: a
/// [`ReadGuard`] derefs to `&T` in the ring and releases the slot when dropped; a [`Batch`]
/// lends everything available as two slices and releases them all with one cursor store.
/// Dropping the reader leaves the ring: the writer stops waiting for it at once.
///
/// # Examples
///
/// ```
/// # ringbus_core::block_on(async {
/// let (mut writer, stage) = ringbus_core::Builder::new(16).build::<String>();
/// let mut reader = stage.reader().unwrap();
/// writer.publish("hello".to_string()).await;
/// drop(writer);
/// assert_eq!(reader.recv().await.unwrap().as_str(), "hello");
/// assert!(reader.recv().await.is_err()); // closed and drained
/// # });
/// ```
pub struct Reader<T> {
    shared: Arc<Shared<T>>,
    /// This reader's stage; lives as long as `shared`.
    group: *const Group,
    /// This reader's slot in its group; lives as long as `shared`.
    slot: *const Slot,
    /// The `parked` word of the slot's chunk, and the slot's bit in it.
    parked_bits: *const AtomicU32,
    bit: u32,
    /// Next position to read (the local copy of `slot.cursor`).
    cursor: u64,
    /// Positions below this are readable without looking at the barrier again.
    available: u64,
    /// The source we are parked on (and counted in), while `slot.parked_on` or our parked bit
    /// may be set.
    parked: Option<usize>,
    /// The source we are registered on as a waiter (see `Shared`'s docs), if any.
    registered: Option<usize>,
    /// Refreshes in a row that found data without parking.
    calm: u32,
    /// Spins in a row that ended in a park anyway (see [`spin_limit`](Self::spin_limit)).
    missed: u32,
}

// SAFETY: a reader hands out `&T` (so `T: Sync`) to values moved in from the writer's thread
// (so `T: Send`). The raw pointers point into the ring that `shared` keeps alive.
unsafe impl<T: Send + Sync> Send for Reader<T> {}
// SAFETY: `&Reader` only reads the reader's own atomics.
unsafe impl<T: Send + Sync> Sync for Reader<T> {}

impl<T> Reader<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        group: &Group,
        claim: Claimed<'_>,
        start: u64,
    ) -> Self {
        Self {
            shared,
            group,
            slot: claim.slot,
            parked_bits: claim.parked,
            bit: claim.bit,
            cursor: start,
            available: start,
            parked: None,
            registered: None,
            calm: 0,
            missed: 0,
        }
    }

    fn parked_bits(&self) -> &AtomicU32 {
        // SAFETY: chunks live as long as the ring, which `self.shared` keeps alive.
        unsafe { &*self.parked_bits }
    }

    fn group(&self) -> &Group {
        // SAFETY: groups live as long as the ring, which `self.shared` keeps alive.
        unsafe { &*self.group }
    }

    fn slot(&self) -> &Slot {
        // SAFETY: slots live as long as the ring, which `self.shared` keeps alive.
        unsafe { &*self.slot }
    }

    /// The position of the next item this reader will read.
    pub fn position(&self) -> u64 {
        self.cursor
    }

    /// Items published but not yet read by this reader (a snapshot).
    pub fn lag(&self) -> u64 {
        self.shared
            .cursor
            .load(Ordering::Acquire)
            .saturating_sub(self.cursor)
    }

    /// True once the writer is gone (there may still be items to read).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Whether this reader holds a registration as a waiter (for the loom models).
    #[cfg(all(test, ringbus_loom))]
    pub(crate) fn is_registered(&self) -> bool {
        self.registered.is_some()
    }

    /// Looks at the barrier; true if there is something to read.
    #[inline]
    fn refresh(&mut self) -> (bool, usize) {
        let (barrier, source) = self.shared.barrier(self.group().upstream());
        if barrier > self.available {
            self.available = barrier;
        }
        (self.cursor < self.available, source)
    }

    /// True when the writer is gone and this reader has read all it published.
    fn is_drained(&self) -> bool {
        // Acquire: pairs with the Release store in `Shared::close`, which follows the
        // writer's last cursor store.
        self.shared.closed.load(Ordering::Acquire)
            && self.cursor >= self.shared.cursor.load(Ordering::Acquire)
    }

    /// Polls until there is at least one item to read (`Ok`) or the ring is closed and drained.
    ///
    /// When it returns `Pending`, the task is woken once there is something new. This is the
    /// building block of [`recv`](Self::recv); use it to write your own futures.
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        if self.cursor < self.available {
            return Poll::Ready(Ok(()));
        }
        self.poll_refresh(cx)
    }

    /// How many times to look again, with a spin hint between, before parking: the ring's
    /// `spin` while spinning pays off; none once [`QUIET_AFTER`] spins in a row ended in a park
    /// anyway, except one spin in [`PROBE_EVERY`] parks, which notices when items come close
    /// together again.
    ///
    /// Items that come further apart than a spin lasts (a few microseconds) make every spin a
    /// loss, and not only of this thread's time: a reader polled by an async runtime keeps the
    /// other tasks of its worker waiting while it spins (on a machine with as many workers as
    /// cores, the very tasks that would publish what it waits for).
    #[inline]
    fn spin_limit(&self) -> u32 {
        if self.missed < QUIET_AFTER || self.missed % PROBE_EVERY == 0 {
            self.shared.spin
        } else {
            0
        }
    }

    #[inline(never)]
    fn poll_refresh(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        let mut source = 0;
        let limit = self.spin_limit();
        for spun in 0..=limit {
            let (ready, s) = self.refresh();
            if ready {
                if spun > 0 {
                    self.missed = 0; // spinning paid off
                }
                self.cancel_park();
                self.calm_down();
                return Poll::Ready(Ok(()));
            }
            if self.is_drained() {
                self.cancel_park();
                return Poll::Ready(Err(Closed));
            }
            source = s;
            if spun < limit {
                self.shared.fences.spin_hint();
            }
        }
        // A spin that missed, or a park without one (counting towards the next probe).
        self.missed = self.missed.wrapping_add(1);
        self.calm = 0;
        self.slot().waker.register(cx.waker());
        loop {
            if self.registered != Some(source) {
                if let Some(old) = self.registered.take() {
                    self.shared.deregister(old);
                }
                self.shared.register(source);
                self.registered = Some(source);
            }
            let counted = self.parked == Some(source);
            if !counted {
                self.cancel_park();
            }
            self.shared
                .park(self.slot(), self.parked_bits(), self.bit, source, counted);
            self.parked = Some(source);
            let (ready, now) = self.refresh();
            if ready {
                self.cancel_park();
                return Poll::Ready(Ok(()));
            }
            if self.is_drained() {
                self.cancel_park();
                return Poll::Ready(Err(Closed));
            }
            if now == source {
                return Poll::Pending;
            }
            // Our barrier now comes from another source: typically the last reader of the
            // upstream stage left after we looked, without seeing our park, and we now follow
            // the writer (or a stage further up). Parked on the old source, nobody would wake
            // us: register and park on the new one and look again.
            source = now;
        }
    }

    /// Counts a refresh that found data without parking; after enough in a row, drops the
    /// registration as a waiter so the source goes back to its fence-free fast path.
    #[inline]
    fn calm_down(&mut self) {
        if self.registered.is_some() {
            self.calm += 1;
            if self.calm >= self.shared.calm_before_leaving() {
                if let Some(source) = self.registered.take() {
                    self.shared.deregister(source);
                }
                self.calm = 0;
            }
        }
    }

    /// Stops waiting, if we were parked (woken or not).
    #[inline]
    fn cancel_park(&mut self) {
        if let Some(source) = self.parked.take() {
            self.shared
                .unpark(self.slot(), self.parked_bits(), self.bit, source);
        }
    }

    /// Releases `n` items: stores the cursor once and wakes whoever waits on it.
    #[inline]
    fn advance(&mut self, n: usize) {
        self.cursor += n as u64;
        // Release: pairs with the Acquire loads of our cursor by the writer (before it
        // overwrites these slots) and by downstream readers (before they read them).
        self.slot().cursor.store(self.cursor, Ordering::Release);
        self.shared.notify_progress(self.group(), self.cursor);
    }

    /// The item at the cursor. Only valid while `cursor < available`.
    #[inline]
    fn current(&self) -> &T {
        debug_assert!(self.cursor < self.available);
        // SAFETY: positions in `cursor..available` are published (Acquire on the barrier) and
        // the writer will not overwrite them before our cursor passes them (it gates on us).
        unsafe { &*self.shared.slot(self.cursor) }
    }

    /// Waits for the next item and lends it in place.
    ///
    /// Returns `Err(Closed)` once the writer is gone and every item it published was read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is consumed until the returned guard is dropped; a dropped future
    /// leaves the reader exactly where it was (the next `recv` returns the same item).
    pub fn recv(&mut self) -> Recv<'_, T> {
        Recv { reader: Some(self) }
    }

    /// The next item if there is one now. Never waits.
    pub fn try_recv(&mut self) -> Result<ReadGuard<'_, T>, TryRecvError> {
        self.try_ready()?;
        Ok(ReadGuard { reader: self })
    }

    /// `Ok` if an item is available now (looking at the writer again if the cached view is
    /// used up), else whether the ring is drained or only empty.
    #[inline]
    fn try_ready(&mut self) -> Result<(), TryRecvError> {
        if self.cursor >= self.available && !self.refresh().0 {
            return Err(if self.is_drained() {
                TryRecvError::Closed
            } else {
                TryRecvError::Empty
            });
        }
        Ok(())
    }

    /// Waits for at least one item, then lends everything available (at most `max`) as a
    /// zero-copy [`Batch`], released with one cursor store when dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`recv`](Self::recv).
    pub fn recv_batch(&mut self, max: usize) -> RecvBatch<'_, T> {
        RecvBatch {
            reader: Some(self),
            max,
        }
    }

    /// Everything available now (at most `max`), without waiting.
    pub fn try_recv_batch(&mut self, max: usize) -> Result<Batch<'_, T>, TryRecvError> {
        self.try_ready()?;
        Ok(self.batch(max))
    }

    fn batch(&mut self, max: usize) -> Batch<'_, T> {
        // `available` may be a stale view (a cached barrier, not yet used up): look again so the
        // batch holds everything available now, as documented, not only what was seen before.
        if self.available - self.cursor < max as u64 {
            self.refresh();
        }
        let len = ((self.available - self.cursor) as usize).min(max);
        Batch { reader: self, len }
    }

    /// [`recv`](Self::recv) for plain threads: blocks the thread (after a short spin and a few
    /// yields of the thread).
    #[cfg(not(ringbus_loom))]
    pub fn blocking_recv(&mut self) -> Result<ReadGuard<'_, T>, Closed> {
        crate::blocking::block_on(std::future::poll_fn(|cx| self.poll_ready(cx)))?;
        Ok(ReadGuard { reader: self })
    }

    /// [`recv_batch`](Self::recv_batch) for plain threads: blocks the thread.
    #[cfg(not(ringbus_loom))]
    pub fn blocking_recv_batch(&mut self, max: usize) -> Result<Batch<'_, T>, Closed> {
        crate::blocking::block_on(std::future::poll_fn(|cx| self.poll_ready(cx)))?;
        Ok(self.batch(max))
    }
}

impl<T> Drop for Reader<T> {
    fn drop(&mut self) {
        self.cancel_park();
        if let Some(source) = self.registered.take() {
            self.shared.deregister(source);
        }
        // Drop our waker now rather than when the slot is reused.
        drop(self.slot().waker.take());
        // Release: our reads of the slots happen before the writer reuses them.
        self.slot().cursor.store(FREE, Ordering::Release);
        self.group().members.fetch_sub(1, Ordering::Relaxed);
        self.shared.readers.fetch_sub(1, Ordering::Relaxed);
        // Leaving is progress: the writer or a downstream stage may be waiting on us.
        self.shared.notify_progress(self.group(), u64::MAX);
    }
}

impl<T> fmt::Debug for Reader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("position", &self.cursor)
            .field("available", &self.available)
            .finish_non_exhaustive()
    }
}

#[cfg(not(ringbus_loom))]
impl<T: Clone> futures_core::Stream for Reader<T> {
    type Item = T;

    /// Clones each item out of the ring. Ends when the ring is closed and drained.
    ///
    /// If `clone` panics, the item is released all the same (the guard releases it while
    /// unwinding): the stream goes on with the next item instead of cloning the same one again
    /// on every later poll.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        match this.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                let guard = ReadGuard { reader: this };
                Poll::Ready(Some(T::clone(&guard)))
            }
            Poll::Ready(Err(Closed)) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// One item, borrowed in place from the ring. Dropping it releases the slot.
pub struct ReadGuard<'a, T> {
    reader: &'a mut Reader<T>,
}

impl<T> ReadGuard<'_, T> {
    /// The item's position in the ring (0 for the first item ever published, unless the ring
    /// [started elsewhere](crate::Builder::start_at)).
    pub fn position(&self) -> u64 {
        self.reader.cursor
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.reader.current()
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.reader.advance(1);
    }
}

impl<T: fmt::Debug> fmt::Debug for ReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Items borrowed in place, as at most two slices. Dropping it releases them all at once.
pub struct Batch<'a, T> {
    reader: &'a mut Reader<T>,
    len: usize,
}

impl<T> Batch<'_, T> {
    /// The items, oldest first; the second slice is non-empty only when the range wraps.
    pub fn as_slices(&self) -> (&[T], &[T]) {
        let shared = &self.reader.shared;
        let start = (self.reader.cursor & shared.mask) as usize;
        let first = self.len.min(shared.capacity - start);
        // SAFETY: `cursor..cursor + len` is within `cursor..available` (see `Reader::current`)
        // and `len <= capacity`, so the two ranges are in bounds, disjoint and published.
        unsafe {
            (
                std::slice::from_raw_parts(shared.slots_ptr(start), first),
                std::slice::from_raw_parts(shared.slots_ptr(0), self.len - first),
            )
        }
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty batch (only from `max == 0`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The position of the first item.
    pub fn position(&self) -> u64 {
        self.reader.cursor
    }

    /// The items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        let (a, b) = self.as_slices();
        a.iter().chain(b.iter())
    }

    /// The item at `index` (0 is the oldest the batch still holds), if the batch holds it.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        // SAFETY: `cursor + index` is within `cursor..cursor + len`, published and not yet
        // released (see `as_slices`).
        Some(unsafe { &*self.reader.shared.slot(self.reader.cursor + index as u64) })
    }

    /// Releases the oldest `n` items now (at most the batch's length), with one cursor store,
    /// waking whoever waits for them; the batch keeps the rest (`get(0)` is then the first of
    /// those).
    ///
    /// For a reader that works through a batch item by item: it looks at the ring once for
    /// the batch, and releases each item as it is done with it, so a writer waiting for room
    /// gets it at once.
    ///
    /// ```
    /// let (mut writer, stage) = ringbus_core::Builder::new(2).build::<u32>();
    /// let mut reader = stage.reader().unwrap();
    /// writer.try_publish(1).unwrap();
    /// writer.try_publish(2).unwrap();
    /// let mut batch = reader.try_recv_batch(2).unwrap();
    /// assert!(writer.try_publish(3).is_err()); // full
    /// batch.release(1);
    /// assert_eq!(batch.get(0), Some(&2));
    /// writer.try_publish(3).unwrap(); // the released slot
    /// batch.truncate(0); // keep 2 for later
    /// drop(batch);
    /// assert_eq!(*reader.try_recv().unwrap(), 2);
    /// ```
    #[inline]
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.len);
        if n > 0 {
            self.len -= n;
            self.reader.advance(n);
        }
    }

    /// Shortens the batch to its oldest `n` items: dropping it then releases only those, and
    /// the reader reads the others again. Does nothing if the batch holds `n` or fewer.
    #[inline]
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Items published but not yet released by this reader: the batch's own and those after
    /// it (a snapshot).
    pub fn lag(&self) -> u64 {
        self.reader.lag()
    }
}

impl<T> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        if self.len > 0 {
            self.reader.advance(self.len);
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Batch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Future of [`Reader::recv`].
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'a, T> {
    reader: Option<&'a mut Reader<T>>,
}

impl<'a, T> Future for Recv<'a, T> {
    type Output = Result<ReadGuard<'a, T>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let reader = this.reader.as_mut().expect("Recv polled after completion");
        match reader.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                let reader = this.reader.take().expect("checked above");
                Poll::Ready(Ok(ReadGuard { reader }))
            }
            Poll::Ready(Err(e)) => {
                this.reader = None;
                Poll::Ready(Err(e))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for Recv<'_, T> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.as_mut() {
            reader.cancel_park();
        }
    }
}

impl<T> fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recv").finish_non_exhaustive()
    }
}

/// Future of [`Reader::recv_batch`].
#[must_use = "futures do nothing unless polled"]
pub struct RecvBatch<'a, T> {
    reader: Option<&'a mut Reader<T>>,
    max: usize,
}

impl<'a, T> Future for RecvBatch<'a, T> {
    type Output = Result<Batch<'a, T>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let reader = this
            .reader
            .as_mut()
            .expect("RecvBatch polled after completion");
        match reader.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                let reader = this.reader.take().expect("checked above");
                Poll::Ready(Ok(reader.batch(this.max)))
            }
            Poll::Ready(Err(e)) => {
                this.reader = None;
                Poll::Ready(Err(e))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for RecvBatch<'_, T> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.as_mut() {
            reader.cancel_park();
        }
    }
}

impl<T> fmt::Debug for RecvBatch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(ringbus_loom)))]
mod tests {
    use std::task::{Context, Poll, Waker};

    use crate::Builder;

    fn poll_once(reader: &mut super::Reader<u64>) -> Poll<Result<(), crate::Closed>> {
        reader.poll_ready(&mut Context::from_waker(Waker::noop()))
    }

    /// A reader whose spins keep ending in a park stops spinning after `QUIET_AFTER` of them,
    /// spins again before one park in `PROBE_EVERY`, and spins as configured again once a
    /// spin found an item.
    #[test]
    fn a_reader_stops_spinning_while_spinning_does_not_pay_and_starts_again_when_it_does() {
        const SPIN: u32 = 64;
        let (writer, stage) = Builder::new(4).spin(SPIN).build::<u64>();
        let mut reader = stage.reader().unwrap();
        for missed in 0..super::QUIET_AFTER {
            assert_eq!(reader.spin_limit(), SPIN, "after {missed} missed spins");
            assert!(poll_once(&mut reader).is_pending());
        }
        for parks in super::QUIET_AFTER..super::PROBE_EVERY {
            assert_eq!(reader.spin_limit(), 0, "after {parks} parks");
            assert!(poll_once(&mut reader).is_pending());
        }
        assert_eq!(reader.spin_limit(), SPIN, "the probe");

        drop(writer);

        // A spin that finds an item resets the count. The item must come while the reader
        // spins, not before its first look (which says nothing about spinning): a spin as
        // long as it takes, and a publisher thread that publishes once the reader is about
        // to poll. If the item was there at the first look, `missed` is left as it was, and
        // we try again.
        let (mut writer, stage) = Builder::new(4).spin(u32::MAX).build::<u64>();
        let mut reader = stage.reader().unwrap();
        let (go, went) = std::sync::mpsc::channel::<()>();
        let publisher = std::thread::spawn(move || {
            let mut next = 0;
            while went.recv().is_ok() {
                writer.blocking_publish(next);
                next += 1;
            }
        });
        let mut reset = false;
        for _ in 0..100 {
            reader.missed = super::PROBE_EVERY; // a probe: spins
            go.send(()).unwrap();
            assert!(poll_once(&mut reader).is_ready());
            drop(reader.try_recv());
            if reader.missed == 0 {
                reset = true;
                break;
            }
            assert_eq!(reader.missed, super::PROBE_EVERY, "found at the first look");
        }
        drop(go);
        publisher.join().unwrap();
        assert!(
            reset,
            "a spin that found an item never reset the missed count"
        );
    }
}
