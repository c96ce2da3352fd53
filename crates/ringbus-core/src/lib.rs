//! A lock-free single-writer, multi-reader ring in the LMAX Disruptor tradition, made async.
//!
//! One [`Writer`] publishes into a fixed ring of preallocated slots; any number of [`Reader`]s
//! join and leave at runtime, from any thread, without locks and without making the writer
//! wait. Each reader sees every item published after it joined, in order, read in place: no
//! clone, no copy, no allocation. A reader that has caught up parks on a waker and the writer
//! wakes only readers that are actually parked; a writer that would lap the slowest reader
//! waits for it (backpressure, never loss). Works under any executor, and from plain threads
//! through the `blocking_*` methods.
//!
//! ```
//! use ringbus_core::Builder;
//!
//! # ringbus_core::block_on(async {
//! let (mut writer, stage) = Builder::new(1024).build::<u64>();
//! let mut reader = stage.reader()?;
//! writer.publish(1).await;
//! writer.publish_batch([2, 3, 4]).await;
//! drop(writer); // closes the ring: the reader drains, then sees `Closed`
//!
//! assert_eq!(*reader.recv().await?, 1);
//! let batch = reader.recv_batch(16).await?;          // zero-copy: two slices into the ring
//! assert_eq!(batch.iter().sum::<u64>(), 9);
//! drop(batch);                                         // releases all three at once
//! assert!(reader.recv().await.is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # The types
//!
//! - [`Builder`]: capacity (rounded up to a power of two), spin before parking, reader limit;
//!   slots filled from `Default` or a factory so large payloads are reused in place.
//! - [`Writer`]: `publish`, `try_publish`, `publish_batch`, `reserve`/[`Reservation::commit`]
//!   (fill in place), `remaining`, `blocking_*`; dropping it closes the ring.
//! - [`Stage`]: a group of readers; [`Stage::reader`] joins one, [`Stage::then`] chains a
//!   stage that sees only what this one finished.
//! - [`Reader`]: `recv` ([`ReadGuard`], `&T` in place), `recv_batch` ([`Batch`], two slices),
//!   `try_*`, `blocking_*`, and `Stream` for `T: Clone`.
//! - Errors: [`Full`] (gives the value back), [`Closed`], [`TryRecvError`], [`TooLarge`],
//!   [`TryReserveError`], [`JoinError`], [`AllocError`] (the `try_build*` of [`Builder`]).
//!
//! # Guarantees
//!
//! - A reader never sees a slot the writer is writing, and is never lapped.
//! - The writer never waits for a reader that has left.
//! - No wake-up is lost: a parked reader is woken by the next publish (or close), a parked
//!   writer by the first release that gives it the room it waits for. These protocols are
//!   model-checked with loom (`--cfg ringbus_loom`), with the fences as they run in production
//!   (see `loom_tests.rs`), and raced on real threads by the ping-pong stress tests.
//! - Every value put in the ring is dropped exactly once.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod atomic_waker;
#[cfg(not(ringbus_loom))]
mod blocking;
mod error;
mod reader;
mod registry;
mod shared;
mod stage;
mod sync;
mod writer;

#[cfg(all(test, ringbus_loom))]
mod loom_tests;

#[cfg(not(ringbus_loom))]
pub use blocking::block_on;
pub use error::{
    AllocError, Closed, Full, JoinError, ReserveError, TooLarge, TryRecvError, TryReserveError,
};
pub use reader::{Batch, ReadGuard, Reader, Recv, RecvBatch};
pub use stage::Stage;
pub use writer::{Publish, Ready, Reservation, Writer};

/// The asymmetric fence pair this crate parks with, for layers built on it (the bus uses it
/// for its close protocol). Not a stable API.
#[doc(hidden)]
pub mod __private {
    /// The cheap half: a compiler fence where the process has `membarrier(2)`, else a full
    /// fence. Pairs with [`heavy_fence`] run by another thread.
    #[inline(always)]
    pub fn light_fence() {
        crate::sync::light_fence();
    }

    /// The expensive half: a process-wide barrier (or a full fence).
    pub fn heavy_fence() {
        crate::sync::init_fences();
        crate::sync::heavy_fence();
    }
}

/// Configures and builds a ring.
///
/// ```
/// let (writer, stage) = ringbus_core::Builder::new(1000) // rounded up to 1024
///     .spin(0)                                         // park at once when caught up
///     .max_readers(10_000)
///     .build_with(|| vec![0u8; 4096]);                 // reuse big buffers in place
/// assert_eq!(writer.capacity(), 1024);
/// # drop(stage);
/// ```
#[derive(Clone, Debug)]
#[must_use = "a Builder does nothing until `.build()` makes the ring"]
pub struct Builder {
    capacity: usize,
    spin: u32,
    max_readers: usize,
    start: u64,
    fences: sync::Fences,
}

impl Builder {
    /// Default iterations of busy polling before a waiter parks (each one a look at the
    /// other side and a spin hint: a few microseconds in all).
    pub const DEFAULT_SPIN: u32 = 128;
    /// Default limit on readers per ring.
    pub const DEFAULT_MAX_READERS: usize = 65_536;

    /// A ring of at least `capacity` slots (rounded up to a power of two; 0 counts as 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            spin: Self::DEFAULT_SPIN,
            max_readers: Self::DEFAULT_MAX_READERS,
            start: 0,
            fences: sync::Fences::default(),
        }
    }

    /// Iterations of busy polling (each one looks at the writer or upstream again) before a
    /// waiting reader or writer parks. 0 parks at once. Spinning trades a little CPU for not
    /// paying a park and a wake-up when the other side is only slightly behind.
    ///
    /// A reader spins only while spinning pays off: after 4 spins in a row that ended in a
    /// park anyway it parks at once, spinning again before one park in 16 to notice when
    /// items come close together again (a reader polled by an async runtime holds up the
    /// other tasks of its worker while it spins).
    pub fn spin(mut self, iterations: u32) -> Self {
        self.spin = iterations;
        self
    }

    /// The most readers the ring admits, over all its stages; past it
    /// [`Stage::reader`] returns [`JoinError::TooManyReaders`].
    pub fn max_readers(mut self, max: usize) -> Self {
        self.max_readers = max;
        self
    }

    /// The position of the first item published (0 unless set): a ring that goes on with
    /// the count of items published before it existed. Positions ([`Writer::published`],
    /// [`Reader::position`](crate::Reader::position)) start there.
    ///
    /// ```
    /// let (mut writer, stage) = ringbus_core::Builder::new(4).start_at(10).build_lazy::<u32>();
    /// let mut reader = stage.reader().unwrap();
    /// writer.try_publish(1).ok().unwrap();
    /// assert_eq!((stage.published(), reader.try_recv().unwrap().position()), (11, 10));
    /// ```
    pub fn start_at(mut self, position: u64) -> Self {
        self.start = position;
        self
    }

    /// `Ok` if the allocator gives a ring of this capacity of `T` now; otherwise the
    /// [`AllocError`] the `try_build` methods would return. It asks for the slots' memory
    /// and hands it straight back untouched, so a ring can be refused where it is planned
    /// and made later, when it is needed (the allocator may refuse it then all the same).
    ///
    /// ```
    /// use ringbus_core::Builder;
    ///
    /// assert!(Builder::new(1024).probe::<u64>().is_ok());
    /// assert_eq!(Builder::new(1 << 62).probe::<u64>().unwrap_err().bytes, 1 << 65);
    /// ```
    pub fn probe<T>(&self) -> Result<(), AllocError> {
        let refused = AllocError::new::<T>(self.capacity);
        let capacity = self.capacity.max(1).checked_next_power_of_two();
        let mut slots = Vec::<std::mem::MaybeUninit<T>>::new();
        match capacity.map(|capacity| slots.try_reserve_exact(capacity)) {
            Some(Ok(())) => Ok(()),
            _ => Err(refused),
        }
    }

    /// Loom only: run the cheap side of the fences as production runs it with `membarrier`
    /// (see `sync::Fences`). Models using it register every waiter before they fork.
    #[cfg(all(test, ringbus_loom))]
    pub(crate) fn asymmetric_fences(mut self) -> Self {
        self.fences.asymmetric = true;
        self
    }

    /// Builds a ring whose slots start as `T::default()`.
    ///
    /// # Panics
    ///
    /// If the slots cannot be allocated: the capacity rounded up to a power of two overflows
    /// `usize`, the slots would take more than `isize::MAX` bytes, or the allocator refuses
    /// them. [`try_build`](Self::try_build) returns that as an [`AllocError`] instead.
    #[track_caller]
    pub fn build<T: Default>(self) -> (Writer<T>, Stage<T>) {
        self.build_with(T::default)
    }

    /// [`build`](Self::build), or an [`AllocError`] if the slots cannot be allocated (where
    /// `build` panics).
    ///
    /// ```
    /// use ringbus_core::Builder;
    ///
    /// let (writer, _stage) = Builder::new(1024).try_build::<u64>()?;
    /// assert_eq!(writer.capacity(), 1024);
    /// // 2^62 slots of 8 bytes: past what any allocation may be (isize::MAX bytes).
    /// let error = Builder::new(1 << 62).try_build::<u64>().unwrap_err();
    /// assert_eq!(error.bytes, 1 << 65);
    /// # Ok::<(), ringbus_core::AllocError>(())
    /// ```
    pub fn try_build<T: Default>(self) -> Result<(Writer<T>, Stage<T>), AllocError> {
        self.try_build_with(T::default)
    }

    /// Builds a ring whose slots start empty: no `Default`, no factory, and nothing to drop
    /// for slots never published.
    ///
    /// The price: [`Writer::reserve`] has no values to lend in place until every slot has been
    /// published once, and returns [`ReserveError::Empty`] until then. `publish` and the rest
    /// work from the start.
    ///
    /// ```
    /// struct Order { id: u64 } // no Default
    /// let (mut writer, stage) = ringbus_core::Builder::new(4).build_lazy::<Order>();
    /// let mut reader = stage.reader().unwrap();
    /// writer.try_publish(Order { id: 1 }).ok().unwrap();
    /// assert_eq!(reader.try_recv().unwrap().id, 1);
    /// ```
    ///
    /// Its slots are allocated and left as they are: a ring far larger than the messages it
    /// will hold costs address space, not memory, until its slots are used (as the operating
    /// system commits memory when it is first written).
    ///
    /// # Panics
    ///
    /// As [`build`](Self::build); [`try_build_lazy`](Self::try_build_lazy) does not.
    #[track_caller]
    pub fn build_lazy<T>(self) -> (Writer<T>, Stage<T>) {
        self.finish(None)
    }

    /// [`build_lazy`](Self::build_lazy), or an [`AllocError`] if the slots cannot be
    /// allocated (where `build_lazy` panics).
    ///
    /// ```
    /// use ringbus_core::Builder;
    ///
    /// // 2^40 slots of 1 KiB: 1 PiB, more than a 64-bit process can map.
    /// let error = Builder::new(1 << 40).try_build_lazy::<[u8; 1024]>().unwrap_err();
    /// assert_eq!((error.capacity, error.bytes), (1 << 40, 1 << 50));
    /// ```
    pub fn try_build_lazy<T>(self) -> Result<(Writer<T>, Stage<T>), AllocError> {
        self.try_finish(None)
    }

    /// Builds a ring whose slots start as values from `factory` (called once per slot).
    ///
    /// With [`Writer::reserve`], those values are reused in place lap after lap: a ring of
    /// `Vec`s or buffers allocates only here.
    ///
    /// # Panics
    ///
    /// As [`build`](Self::build); [`try_build_with`](Self::try_build_with) does not.
    #[track_caller]
    pub fn build_with<T>(self, mut factory: impl FnMut() -> T) -> (Writer<T>, Stage<T>) {
        self.finish(Some(&mut factory))
    }

    /// [`build_with`](Self::build_with), or an [`AllocError`] if the slots cannot be
    /// allocated (where `build_with` panics). The factory is not called then.
    ///
    /// ```
    /// let built = ringbus_core::Builder::new(usize::MAX).try_build_with(|| 0u8);
    /// let error = built.unwrap_err(); // rounded up to a power of two, past usize::MAX
    /// assert_eq!(error.capacity, usize::MAX);
    /// ```
    pub fn try_build_with<T>(
        self,
        mut factory: impl FnMut() -> T,
    ) -> Result<(Writer<T>, Stage<T>), AllocError> {
        self.try_finish(Some(&mut factory))
    }

    /// [`try_finish`](Self::try_finish), panicking with its error.
    #[track_caller]
    fn finish<T>(self, factory: Option<&mut dyn FnMut() -> T>) -> (Writer<T>, Stage<T>) {
        match self.try_finish(factory) {
            Ok(ring) => ring,
            Err(error) => panic!("{error}"),
        }
    }

    fn try_finish<T>(
        self,
        factory: Option<&mut dyn FnMut() -> T>,
    ) -> Result<(Writer<T>, Stage<T>), AllocError> {
        let refused = AllocError::new::<T>(self.capacity);
        // The capacity rounded up to a power of two (0 counts as 1).
        let capacity = self.capacity.max(1).checked_next_power_of_two();
        let shared = capacity
            .and_then(|capacity| {
                shared::Shared::new(
                    capacity,
                    self.spin,
                    self.max_readers,
                    self.fences,
                    self.start,
                    factory,
                )
            })
            .ok_or(refused)?;
        let shared = sync::Arc::new(shared);
        let stage = Stage::new(shared.clone(), shared.root());
        Ok((Writer::new(shared), stage))
    }
}

/// The crate's README (shown on crates.io), its Rust examples compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
