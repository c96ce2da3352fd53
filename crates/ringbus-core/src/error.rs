//! Every error the ring returns. Errors that refuse a value give it back.

use std::fmt;

/// [`Writer::try_publish`](crate::Writer::try_publish) found no room: the slowest gating
/// reader would be lapped. The value comes back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// Takes the refused value back.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the ring is full: publishing would overwrite an unread slot")
    }
}

impl<T> std::error::Error for Full<T> {}

/// The writer is gone and this reader has read everything it published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the ring is closed and drained")
    }
}

impl std::error::Error for Closed {}

/// Why [`Reader::try_recv`](crate::Reader::try_recv) returned no item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing to read yet; the writer is still there.
    Empty,
    /// The writer is gone and everything it published has been read.
    Closed,
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("nothing to read yet"),
            TryRecvError::Closed => Closed.fmt(f),
        }
    }
}

impl std::error::Error for TryRecvError {}

/// A reservation asked for more slots than the ring has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The number of slots asked for.
    pub requested: usize,
    /// The ring's capacity.
    pub capacity: usize,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reserve {} slots in a ring of capacity {}",
            self.requested, self.capacity
        )
    }
}

impl std::error::Error for TooLarge {}

/// Why [`Writer::reserve`](crate::Writer::reserve) can give no reservation, now or later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveError {
    /// More than the capacity was asked for.
    TooLarge(TooLarge),
    /// The ring was made by [`Builder::build_lazy`](crate::Builder::build_lazy) and the
    /// reserved slots have never been published, so they hold no value to fill in place.
    /// Publish by value during the first lap, or build the ring with values.
    Empty,
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReserveError::TooLarge(e) => e.fmt(f),
            ReserveError::Empty => {
                f.write_str("cannot reserve slots that hold no value yet (a lazy ring's first lap)")
            }
        }
    }
}

impl std::error::Error for ReserveError {}

/// Why [`Writer::try_reserve`](crate::Writer::try_reserve) gave no reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryReserveError {
    /// Not enough room now; a later attempt may succeed.
    Full,
    /// More than the capacity was asked for: no attempt can succeed.
    TooLarge(TooLarge),
    /// See [`ReserveError::Empty`].
    Empty,
}

impl fmt::Display for TryReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryReserveError::Full => f.write_str("not enough free slots for the reservation"),
            TryReserveError::TooLarge(e) => e.fmt(f),
            TryReserveError::Empty => ReserveError::Empty.fmt(f),
        }
    }
}

impl std::error::Error for TryReserveError {}

impl From<ReserveError> for TryReserveError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::TooLarge(e) => TryReserveError::TooLarge(e),
            ReserveError::Empty => TryReserveError::Empty,
        }
    }
}

/// The slots of a ring could not be allocated: what
/// [`Builder::try_build`](crate::Builder::try_build) and its kin return where `build` panics.
///
/// The slots of a ring of `capacity` (rounded up to a power of two) take `bytes`: a capacity
/// whose rounding overflows `usize`, slots past `isize::MAX` bytes (the most any allocation
/// may be), or slots the allocator refuses (more than the machine has, or than the process
/// may map) cannot be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocError {
    /// The capacity asked for, before rounding.
    pub capacity: usize,
    /// The bytes its slots take: the slots (the capacity rounded up to a power of two) times
    /// the size of one item. A `u128`: it may be past `usize::MAX`.
    pub bytes: u128,
}

impl AllocError {
    /// The error of a ring of `capacity` slots of `T`.
    pub(crate) fn new<T>(capacity: usize) -> Self {
        // At most 2^64 slots of at most 2^63 bytes: within a `u128`.
        let slots = (capacity.max(1) as u128).next_power_of_two();
        Self {
            capacity,
            bytes: slots * std::mem::size_of::<T>() as u128,
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let capacity = self.capacity;
        if capacity.max(1).checked_next_power_of_two().is_none() {
            write!(
                f,
                "a ring of capacity {capacity} cannot be made: rounded up to a power of two, \
                 it is past usize::MAX"
            )
        } else if self.bytes > isize::MAX as u128 {
            write!(
                f,
                "a ring of capacity {capacity} takes {} bytes, more than any allocation may \
                 (isize::MAX bytes)",
                self.bytes
            )
        } else {
            write!(
                f,
                "a ring of capacity {capacity} takes {} bytes, which could not be allocated",
                self.bytes
            )
        }
    }
}

impl std::error::Error for AllocError {}

/// A reader could not join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinError {
    /// The ring already has its configured maximum of readers
    /// ([`Builder::max_readers`](crate::Builder::max_readers)).
    TooManyReaders {
        /// The configured maximum.
        max: usize,
    },
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::TooManyReaders { max } => write!(
                f,
                "the ring already has its maximum of {max} readers (see Builder::max_readers)"
            ),
        }
    }
}

impl std::error::Error for JoinError {}
