//! The single writer: publish one, many or in place, waiting for the slowest reader when full.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Full, ReserveError, TooLarge, TryReserveError};
use crate::shared::Shared;
use crate::stage::Stage;
use crate::sync::{Arc, Ordering};

/// The one writer of a ring.
///
/// Publishing takes `&mut self`: the single-writer contract of the Disruptor is enforced by the
/// type system. `Writer` is `Send` (move it to the task or thread that publishes) but not
/// `Clone`. Dropping it (or calling [`close`](Self::close)) closes the ring: readers drain what
/// was published, then see [`Closed`](crate::Closed).
///
/// # Examples
///
/// ```
/// # ringbus_core::block_on(async {
/// let (mut writer, stage) = ringbus_core::Builder::new(8).build::<u64>();
/// let mut reader = stage.reader().unwrap();
/// writer.publish(7).await;
/// assert_eq!(*reader.recv().await.unwrap(), 7);
/// # });
/// ```
pub struct Writer<T> {
    shared: Arc<Shared<T>>,
    /// Next position to write; equals `shared.cursor` between calls.
    next: u64,
    /// Positions below this may be written without looking at the readers again: the gate
    /// (slowest reader) seen at the last scan, plus the capacity.
    limit: u64,
    /// Whether we hold the sticky registration `Shared::writer_registered`.
    registered: bool,
    /// Room waits in a row that found room without parking.
    calm: u32,
}

impl<T> Writer<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        let (next, limit) = (shared.start, shared.start + shared.capacity as u64);
        Self {
            shared,
            next,
            limit,
            registered: false,
            calm: 0,
        }
    }

    #[cfg(all(test, ringbus_loom))]
    pub(crate) fn shared(&self) -> &Shared<T> {
        &self.shared
    }

    /// The ring's capacity (a power of two).
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// How many items have been published so far.
    pub fn published(&self) -> u64 {
        self.next
    }

    /// A handle to the first stage of readers, to let readers join from anywhere.
    pub fn stage(&self) -> Stage<T> {
        Stage::new(self.shared.clone(), self.shared.root())
    }

    /// How many items can be published now without waiting (rescans the readers).
    pub fn remaining(&mut self) -> usize {
        self.rescan();
        (self.limit.saturating_sub(self.next)) as usize
    }

    /// Rescans the readers and moves `limit`.
    #[inline(never)]
    fn rescan(&mut self) {
        let gate = self.shared.gate(self.next);
        self.limit = gate + self.shared.capacity as u64;
    }

    /// True when `n` more positions can be written now.
    #[inline(always)]
    fn has_room(&mut self, n: usize) -> bool {
        if self.next + n as u64 <= self.limit {
            return true;
        }
        self.rescan();
        self.next + n as u64 <= self.limit
    }

    /// Makes positions up to `self.next + n` visible and wakes readers that wait for them.
    #[inline(always)]
    fn commit(&mut self, n: usize) {
        self.next += n as u64;
        // Release: pairs with the Acquire load of `cursor` in `Shared::barrier`; the slot
        // writes above happen before any reader reads them.
        self.shared.cursor.store(self.next, Ordering::Release);
        self.shared.fences.light();
        if self
            .shared
            .writer_watchers
            .registered
            .load(Ordering::Relaxed)
            != 0
        {
            self.shared.wake_source(crate::registry::WRITER_SOURCE);
        }
    }

    /// Publishes `value` if there is room now; gives it back in `Full` otherwise.
    ///
    /// Never waits. `Full` means the slowest gating reader would be lapped.
    ///
    /// ```
    /// let (mut writer, stage) = ringbus_core::Builder::new(1).build::<u32>();
    /// let _reader = stage.reader().unwrap();
    /// writer.try_publish(1).unwrap();
    /// assert_eq!(writer.try_publish(2).unwrap_err().into_inner(), 2);
    /// ```
    #[inline]
    pub fn try_publish(&mut self, value: T) -> Result<(), Full<T>> {
        if !self.has_room(1) {
            return Err(Full(value));
        }
        self.write_one(value);
        Ok(())
    }

    /// Writes and publishes `value` at `next`. The caller has just seen `has_room(1)`.
    #[inline(always)]
    fn write_one(&mut self, value: T) {
        debug_assert!(self.next < self.limit, "write_one without room");
        // SAFETY: the caller saw `has_room(1)` under `&mut self`: no reader can read position
        // `next` (it is at or past every cursor's barrier) and every reader finished with the
        // value a lap ago.
        unsafe { self.shared.write(self.next, value) };
        self.commit(1);
    }

    /// Publishes `value`, waiting while the slowest gating reader would be lapped.
    ///
    /// The returned future publishes on its first poll when there is room (no waiting, no
    /// allocation); otherwise it parks until the slowest reader releases a slot.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, `value` was not published (no reader will
    /// see it) and is dropped with the future. To keep the value on cancellation, wait with
    /// [`ready`](Self::ready) and then call [`try_publish`](Self::try_publish).
    pub fn publish(&mut self, value: T) -> Publish<'_, T> {
        Publish {
            writer: self,
            value: Some(value),
            parked: false,
        }
    }

    /// Publishes every item of `items`, in order, each chunk that fits with one cursor store.
    /// Returns how many were published.
    ///
    /// # Cancel safety
    ///
    /// Items already published stay published (every reader will see them); the rest of the
    /// iterator is dropped with the future.
    pub async fn publish_batch<I: IntoIterator<Item = T>>(&mut self, items: I) -> u64 {
        let mut items = items.into_iter().peekable();
        let mut total = 0;
        loop {
            if !self.has_room(1) {
                if items.peek().is_none() {
                    return total;
                }
                self.ready(1).await;
            }
            let room = self.limit - self.next;
            let n = self.write_available(&mut items);
            total += n;
            if n < room {
                return total; // the iterator ran dry
            }
        }
    }

    /// Publishes as many of `items` as fit now, with one cursor store. Never waits.
    /// Returns how many were published; the rest stay in the iterator.
    pub fn try_publish_batch<I: Iterator<Item = T>>(&mut self, items: &mut I) -> u64 {
        if !self.has_room(1) {
            return 0;
        }
        self.write_available(items)
    }

    fn write_available<I: Iterator<Item = T>>(&mut self, items: &mut I) -> u64 {
        let room = self.limit - self.next;
        // If `items.next()` panics, the values written so far stay unpublished. Where they
        // filled a slot that was empty (a lazy ring's first lap), nothing else would ever drop
        // them: the guard does, leaving those slots empty again.
        let mut written = Unpublished {
            shared: &self.shared,
            from: self.next,
            n: 0,
        };
        while written.n < room {
            let Some(value) = items.next() else { break };
            // SAFETY: positions below `limit` are the writer's (see `try_publish`), and they
            // stay unpublished until the `commit` below.
            unsafe { self.shared.write(written.from + written.n, value) };
            written.n += 1;
        }
        let n = written.n;
        std::mem::forget(written);
        if n > 0 {
            self.commit(n as usize);
        }
        n
    }

    /// Waits until `n` items can be published without waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing but the writer's cached view of the readers.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the capacity (it could never complete); use [`reserve`](Self::reserve)
    /// for a checked form.
    pub fn ready(&mut self, n: usize) -> Ready<'_, T> {
        assert!(
            n <= self.shared.capacity,
            "Writer::ready({n}) exceeds the ring's capacity of {}",
            self.shared.capacity
        );
        Ready {
            writer: self,
            n,
            parked: false,
        }
    }

    /// Reserves `n` slots to fill in place (no move, no allocation), waiting for room.
    ///
    /// The reservation hands out the slots as two mutable segments (the second non-empty only
    /// when the range wraps) holding whatever values they last held;
    /// [`commit`](Reservation::commit) publishes all `n` with one cursor store.
    ///
    /// # Errors
    ///
    /// [`ReserveError::TooLarge`] if `n` exceeds the capacity; [`ReserveError::Empty`] during
    /// the first lap of a ring made by [`Builder::build_lazy`](crate::Builder::build_lazy),
    /// whose slots hold no value to fill in place until they are first published.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is published until `commit`.
    ///
    /// ```
    /// # ringbus_core::block_on(async {
    /// let (mut writer, stage) = ringbus_core::Builder::new(4).build::<u64>();
    /// let mut reader = stage.reader().unwrap();
    /// let mut r = writer.reserve(3).await.unwrap();
    /// let (a, b) = r.as_mut_slices();
    /// for (i, slot) in a.iter_mut().chain(b.iter_mut()).enumerate() { *slot = i as u64; }
    /// r.commit();
    /// let batch = reader.recv_batch(8).await.unwrap();
    /// assert_eq!(batch.iter().copied().collect::<Vec<_>>(), [0, 1, 2]);
    /// # });
    /// ```
    pub async fn reserve(&mut self, n: usize) -> Result<Reservation<'_, T>, ReserveError> {
        self.check_size(n)?;
        self.ready(n).await;
        Ok(Reservation { writer: self, n })
    }

    /// Reserves `n` slots if they are free now. See [`reserve`](Self::reserve).
    pub fn try_reserve(&mut self, n: usize) -> Result<Reservation<'_, T>, TryReserveError> {
        self.check_size(n)?;
        if !self.has_room(n) {
            return Err(TryReserveError::Full);
        }
        Ok(Reservation { writer: self, n })
    }

    fn check_size(&self, n: usize) -> Result<(), ReserveError> {
        if n > self.shared.capacity {
            return Err(ReserveError::TooLarge(TooLarge {
                requested: n,
                capacity: self.shared.capacity,
            }));
        }
        if n > 0 && !self.shared.holds_value(self.next) {
            return Err(ReserveError::Empty);
        }
        Ok(())
    }

    /// Polls for room for `n` items, parking the task when there is none.
    ///
    /// The protocol is the readers' (see `Shared`'s docs): a sticky registration paid for
    /// with the heavy fence once, then a cheap park per wait.
    fn poll_room(&mut self, cx: &mut Context<'_>, n: usize, parked: &mut bool) -> Poll<()> {
        for _ in 0..=self.shared.spin {
            if self.has_room(n) {
                self.unpark(parked);
                self.calm_down();
                return Poll::Ready(());
            }
            self.shared.fences.spin_hint();
        }
        self.calm = 0;
        if !self.registered {
            self.shared.writer_registered.store(true, Ordering::SeqCst);
            // Pairs with the readers' light fence after they store their cursor: from here on
            // they see the registration and take the slow path.
            crate::sync::heavy_fence();
            self.registered = true;
        }
        self.shared.writer_waker.register(cx.waker());
        // Wake us once the slowest reader released what we need: no later. Waiting for more
        // (to batch wake-ups on a full ring) would strand the writer whenever a reader pauses
        // inside that window, e.g. a consumer that waits for the producer's next step. `n` is
        // at most the capacity (see `ready`), so `needed <= next`, and 0 means "not parked".
        let capacity = self.shared.capacity as u64;
        let needed = (self.next + n as u64).saturating_sub(capacity).max(1);
        self.shared.writer_wants.store(needed, Ordering::SeqCst);
        *parked = true;
        // Pairs with the full fence in `Shared::wake_writer`: either the reader sees
        // `writer_wants`, or our rescan below sees its cursor.
        crate::sync::full_fence();
        if self.has_room(n) {
            self.unpark(parked);
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Stops waiting for room, if we were parked (woken or not).
    fn unpark(&mut self, parked: &mut bool) {
        if std::mem::take(parked) {
            self.shared.writer_wants.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a room wait that did not park; after enough in a row, drops the registration so
    /// readers go back to their fence-free release path.
    #[inline]
    fn calm_down(&mut self) {
        if self.registered {
            self.calm += 1;
            if self.calm >= self.shared.calm_before_leaving() {
                self.shared
                    .writer_registered
                    .store(false, Ordering::Relaxed);
                self.registered = false;
                self.calm = 0;
            }
        }
    }

    /// [`publish`](Self::publish) for plain threads: blocks the thread (after a short spin)
    /// while the ring is full.
    #[cfg(not(ringbus_loom))]
    pub fn blocking_publish(&mut self, value: T) {
        if let Err(Full(value)) = self.try_publish(value) {
            crate::blocking::block_on(self.publish(value));
        }
    }

    /// [`publish_batch`](Self::publish_batch) for plain threads.
    #[cfg(not(ringbus_loom))]
    pub fn blocking_publish_batch<I: IntoIterator<Item = T>>(&mut self, items: I) -> u64 {
        // Inline while there is room: no future, no executor (which cost a small batch more
        // than the batch itself); only what does not fit waits, through the async form.
        let mut items = items.into_iter().peekable();
        let published = self.try_publish_batch(&mut items);
        if items.peek().is_none() {
            return published;
        }
        published + crate::blocking::block_on(self.publish_batch(items))
    }

    /// [`reserve`](Self::reserve) for plain threads.
    #[cfg(not(ringbus_loom))]
    pub fn blocking_reserve(&mut self, n: usize) -> Result<Reservation<'_, T>, ReserveError> {
        self.check_size(n)?;
        if !self.has_room(n) {
            crate::blocking::block_on(self.ready(n));
        }
        Ok(Reservation { writer: self, n })
    }

    /// Closes the ring: readers read what was published, then see [`Closed`](crate::Closed).
    /// The same as dropping the writer.
    pub fn close(self) {
        drop(self);
    }
}

impl<T> Drop for Writer<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl<T> fmt::Debug for Writer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("capacity", &self.shared.capacity)
            .field("published", &self.next)
            .finish_non_exhaustive()
    }
}

/// Values written by [`Writer::write_available`] and not yet committed; see there.
struct Unpublished<'a, T> {
    shared: &'a Shared<T>,
    from: u64,
    n: u64,
}

impl<T> Drop for Unpublished<'_, T> {
    /// Runs only on unwind (the normal path forgets the guard).
    fn drop(&mut self) {
        for position in self.from..self.from + self.n {
            if !self.shared.holds_value(position) {
                // SAFETY: the writer (still the only one to touch this unpublished position)
                // has just moved a value into this slot, which held none before; dropping it
                // makes the slot empty again, as `holds_value` says it is.
                unsafe { std::ptr::drop_in_place(self.shared.slot(position)) };
            }
        }
    }
}

/// Future of [`Writer::publish`].
#[must_use = "futures do nothing unless polled"]
pub struct Publish<'a, T> {
    writer: &'a mut Writer<T>,
    /// `None` once published.
    value: Option<T>,
    parked: bool,
}

// The value is only ever moved out whole, never pinned: `Publish` is `Unpin` whatever `T` is.
impl<T> Unpin for Publish<'_, T> {}

impl<T> Future for Publish<'_, T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(value) = this.value.take() else {
            return Poll::Ready(()); // already published
        };
        // `poll_room` looks for room first and only parks without it: one check on the fast path.
        if this.writer.poll_room(cx, 1, &mut this.parked).is_pending() {
            this.value = Some(value);
            return Poll::Pending;
        }
        this.writer.write_one(value);
        Poll::Ready(())
    }
}

impl<T> Drop for Publish<'_, T> {
    fn drop(&mut self) {
        self.writer.unpark(&mut self.parked);
    }
}

impl<T> fmt::Debug for Publish<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publish")
            .field("published", &self.value.is_none())
            .finish_non_exhaustive()
    }
}

/// Future of [`Writer::ready`]: completes when the writer has room.
#[must_use = "futures do nothing unless polled"]
pub struct Ready<'a, T> {
    writer: &'a mut Writer<T>,
    n: usize,
    parked: bool,
}

impl<T> Future for Ready<'_, T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.writer.poll_room(cx, this.n, &mut this.parked)
    }
}

impl<T> Drop for Ready<'_, T> {
    fn drop(&mut self) {
        self.writer.unpark(&mut self.parked);
    }
}

impl<T> fmt::Debug for Ready<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ready")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

/// Slots reserved by [`Writer::reserve`], to fill in place and [`commit`](Self::commit).
///
/// Dropping it without committing publishes nothing.
pub struct Reservation<'a, T> {
    writer: &'a mut Writer<T>,
    n: usize,
}

impl<T> Reservation<'_, T> {
    /// The number of reserved slots.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for a reservation of zero slots.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The reserved slots as two segments, in publishing order; the second is non-empty only
    /// when the range wraps. They hold whatever they last held (a value published a lap ago,
    /// or the initial value).
    pub fn as_mut_slices(&mut self) -> (&mut [T], &mut [T]) {
        let shared = &self.writer.shared;
        let start = (self.writer.next & shared.mask) as usize;
        let first = self.n.min(shared.capacity - start);
        // SAFETY: the reserved positions are the writer's alone (see `Writer::try_publish`),
        // and this `&mut self` keeps anyone else from them; the two ranges are disjoint and in
        // bounds because `n <= capacity`.
        unsafe {
            (
                std::slice::from_raw_parts_mut(shared.slots_ptr(start), first),
                std::slice::from_raw_parts_mut(shared.slots_ptr(0), self.n - first),
            )
        }
    }

    /// Publishes every reserved slot, with one cursor store.
    pub fn commit(self) {
        let n = self.n;
        self.writer.commit(n);
    }
}

impl<T> fmt::Debug for Reservation<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("len", &self.n)
            .finish_non_exhaustive()
    }
}
