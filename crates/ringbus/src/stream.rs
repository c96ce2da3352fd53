//! [`Stream`]: a pull subscriber. The caller's task reads the topic's ring in place, instead of
//! a handler task spawned by the bus.
//!
//! # How it works
//!
//! A stream is a subscriber without a task: it owns one ring [`Reader`] and one
//! [`SubShared`], joined through the same `TopicInner::join` as a handler's subscriber. So it
//! gates publishers like any subscriber (the ring's writer waits for the slowest reader), it
//! is counted in `stats()` and in `Topic::subscriber_count`, and delivery receipts wait for
//! it. Each poll runs the subscriber loop's own wait (`subscriber::poll_next`): one unit of tokio's
//! cooperative budget per message, taken before looking and given back when it parks.
//!
//! A message counts as handled (`SubShared::handled`, Release, as a task stores it after its
//! handler) when the stream lets go of it: for [`Stream::next`], once it is cloned; for
//! [`Stream::next_ref`], when the [`StreamRef`] is dropped. The slot is released first, then
//! the count stored, then the bus's progress watchers told (`SubShared::handled_to`).
//!
//! # Close
//!
//! A stream is pulled at its reader's pace, which the bus cannot set: a stream nobody polls
//! must not hold up `close` forever. So `close` neither waits for streams nor stops them
//! (`SubShared::pull`: `AnyTopic::subscribers`, which the drain and the bounded close read,
//! leaves them out). The stream keeps its place in the ring: once the ring is closed it yields
//! everything that was published before, then ends (`None`), as a
//! `tokio::sync::broadcast::Receiver` does once its senders are gone. The ring's memory lives
//! as long as its last reader, so nothing is lost. While the bus drains, a stream still gates:
//! a handler publishing (a chain) into a topic whose stream's queue is full waits for that
//! stream, as for any slow subscriber; `close_with` bounds that.
//!
//! # Invariants
//!
//! - `reader` is `Some` until the stream ends (the ring closed and drained) or is dropped;
//!   then it is dropped at once (the writer stops waiting for it), and `SubShared::end` marks
//!   the subscriber done.
//! - `handled == reader.position() - sub.start` whenever no [`StreamRef`] is out.

use std::fmt;
use std::future::poll_fn;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use ringbus_core::{ReadGuard, Reader};

use crate::bus::Bus;
use crate::error::Error;
use crate::shared::SubShared;
use crate::stats::SubscriberStats;
use crate::subscriber;
use crate::topic::{AnyTopic, Topic};

/// A pull subscription to one topic: `while let Some(msg) = stream.next().await`.
///
/// Made by [`Bus::stream`] or [`Topic::stream`]. It sees every message published to its
/// topic after it was made, in order, and it is a subscriber like any other: it **gates
/// publishers** (a `publish` waits while this stream's queue is full; nothing is dropped, so
/// there is no "lagged" error), it is counted in [`Bus::stats`] and
/// [`Topic::subscriber_count`], and [`Topic::publish_tracked`] receipts wait for it.
///
/// Messages are read in place, as a handler's are:
/// - [`next`](Self::next) (and the [`futures_core::Stream`] impl) clones each one out of the
///   ring, for `T: Clone`. A topic of `Arc<M>` makes that a reference-count increment.
/// - [`next_ref`](Self::next_ref) lends it in place as a [`StreamRef`], with no `Clone`
///   bound and no copy; the slot is released when the `StreamRef` is dropped.
///
/// Polling needs no tokio runtime, but each message spends one unit of tokio's cooperative
/// budget when there is one (guarantee 11), as a subscriber task does: a stream that always
/// finds a message still lets the other tasks of its worker run.
///
/// **Dropping the stream unsubscribes it**: it leaves the ring at once, and publishers stop
/// waiting for it. What it had not taken is dropped with it.
///
/// # Close
///
/// [`Bus::close`] does not wait for streams, and never stops one: a stream is pulled at its
/// caller's pace, and a stream nobody polls must not hold up the close. The stream keeps its
/// place: after the close it yields every message that was published before, then ends with
/// `None` (as a `tokio::sync::broadcast::Receiver` does once its senders are gone). A stream
/// consumer that publishes what it reads is outside the handlers: once the bus closes, its
/// publishes are refused with `Closed`, as any other publisher's. While the bus drains, a
/// stream still gates its topic: a handler that publishes (a chain) into a topic whose stream
/// is full and never polled waits for it, and so does the close; bound the close with
/// [`Bus::close_with`] if that can happen.
///
/// # Porting from `tokio::sync::broadcast`
///
/// A broadcast receiver's loop over `BroadcastStream` (or a `recv` loop) ports as it is:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
/// let bus = ringbus::Bus::new();
/// let mut stream = bus.stream::<String>("events")?; // was: let mut stream = BroadcastStream::new(tx.subscribe());
/// let consumer = tokio::spawn(async move {
///     let mut seen = Vec::new();
///     while let Some(event) = stream.next().await {
///         seen.push(event);
///     }
///     seen
/// });
/// bus.publish("events", "started".to_string()).await?;
/// bus.publish("events", "stopped".to_string()).await?;
/// bus.close().await; // the stream yields both, then ends
/// assert_eq!(consumer.await.unwrap(), ["started", "stopped"]);
/// # Ok(()) }
/// ```
///
/// The differences: a stream gates publishers instead of dropping what it has not read
/// (there is no `Lagged`), its items are the messages themselves (not `Result`s), and it
/// ends when the bus closes rather than when the last sender is dropped.
pub struct Stream<T> {
    /// `None` once the stream has ended (see the module docs).
    reader: Option<Reader<T>>,
    sub: Arc<SubShared>,
    topic: Arc<dyn AnyTopic>,
}

impl<T: Send + Sync + 'static> Topic<T> {
    /// A [`Stream`] of the messages published to this topic from now on.
    ///
    /// Needs no tokio runtime. Allocates (the subscriber's shared state), as `subscribe`
    /// does; receiving allocates nothing (besides what `T::clone` may).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let prices = bus.topic::<u64>("prices")?;
    /// let mut stream = prices.stream()?;
    /// assert_eq!(prices.subscriber_count(), 1);
    /// prices.publish(42).await?;
    /// assert_eq!(stream.next().await, Some(42));
    /// drop(stream); // unsubscribes
    /// assert_eq!(prices.subscriber_count(), 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once the bus is closing, [`Error::TooManySubscribers`] past the bus's
    /// [`max_subscribers`](crate::BusBuilder::max_subscribers); for the topic's first
    /// subscriber, [`Error::RingTooLarge`] if its ring could not be allocated, and
    /// [`Error::Unsupported`] from code a publish to the topic runs (a message's `Drop`, a
    /// `publish_batch` iterator).
    pub fn stream(&self) -> Result<Stream<T>, Error> {
        let (reader, sub) = self.inner.join(None, None, true)?;
        tracing::debug!(topic = %self.inner.name, subscriber = %sub.name, "ringbus stream started");
        Ok(Stream {
            reader: Some(reader),
            sub,
            topic: self.inner.clone(),
        })
    }

    /// How many subscribers (handler tasks and streams) would see a message published now:
    /// those that gate this topic's publishers. A subscriber that was unsubscribed, detached
    /// after a stall, or has ended is no longer counted; a stream is counted until it is
    /// dropped or has ended.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let jobs = bus.topic::<u32>("jobs")?;
    /// assert_eq!(jobs.subscriber_count(), 0);
    /// let worker = bus.subscribe("jobs", async |_: &u32| {})?;
    /// let stream = jobs.stream()?;
    /// assert_eq!(jobs.subscriber_count(), 2);
    /// worker.unsubscribe().await;
    /// drop(stream);
    /// assert_eq!(jobs.subscriber_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn subscriber_count(&self) -> usize {
        self.inner.subscriber_count()
    }
}

impl Bus {
    /// A [`Stream`] of the messages published to `topic` from now on: the pull counterpart of
    /// [`subscribe`](Self::subscribe), for loops such as
    /// `while let Some(msg) = stream.next().await`.
    ///
    /// The topic is made if it does not exist. Needs no tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let mut ticks = bus.stream::<u64>("ticks")?;
    /// bus.publish("ticks", 1u64).await?;
    /// bus.publish("ticks", 2u64).await?;
    /// assert_eq!(ticks.next().await, Some(1));
    /// assert_eq!(ticks.next().await, Some(2));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::TypeMismatch`] if the topic carries another type, and as
    /// [`Topic::stream`].
    pub fn stream<T: Send + Sync + 'static>(&self, topic: &str) -> Result<Stream<T>, Error> {
        self.topic::<T>(topic)?.stream()
    }
}

impl<T> Stream<T> {
    /// The subscriber's id, unique within the process.
    pub fn id(&self) -> u64 {
        self.sub.id
    }

    /// The subscriber's name, as in logs and stats: `<topic>#<id>`.
    pub fn name(&self) -> &str {
        &self.sub.name
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.sub.topic
    }

    /// A snapshot of this stream's counters (`handled` counts the messages it has yielded).
    pub fn stats(&self) -> SubscriberStats {
        self.sub.stats(self.topic.published())
    }

    /// Messages published to the topic and not yet taken from this stream (a snapshot, as
    /// `tokio::sync::broadcast::Receiver::len`). 0 once it has ended.
    pub fn len(&self) -> usize {
        self.reader.as_ref().map_or(0, |r| r.lag() as usize)
    }

    /// True when [`len`](Self::len) is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the stream has ended: the bus closed and every message published before was
    /// taken. It then yields `None` for good.
    pub fn is_terminated(&self) -> bool {
        self.reader.is_none()
    }

    /// Waits until a message is available (`true`) or the stream has ended (`false`),
    /// spending the task's cooperative budget as a subscriber task does.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let Some(reader) = self.reader.as_mut() else {
            return Poll::Ready(false);
        };
        if ready!(subscriber::poll_next(reader, &self.sub, cx)) {
            return Poll::Ready(true);
        }
        self.end();
        Poll::Ready(false)
    }

    /// The message `poll_ready` found, lent in place. `None` only if there was none after
    /// all (it cannot happen: `poll_ready` saw the reader's cursor below what is available).
    fn take(&mut self) -> Option<StreamRef<'_, T>> {
        let Stream { reader, sub, .. } = self;
        let guard = reader.as_mut()?.try_recv().ok()?;
        Some(StreamRef::new(guard, sub))
    }

    /// Polls for the next message, lent in place: the poll form of
    /// [`next_ref`](Self::next_ref).
    pub fn poll_next_ref(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamRef<'_, T>>> {
        if !ready!(self.poll_ready(cx)) {
            return Poll::Ready(None);
        }
        match self.take() {
            Some(item) => Poll::Ready(Some(item)),
            None => {
                // Unreachable (see `take`); look again rather than end.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// Waits for the next message and lends it in place, with no `Clone` bound and no copy.
    /// `None` once the stream has ended.
    ///
    /// The message stays in the ring, and counts against this stream's queue (gating
    /// publishers), until the [`StreamRef`] is dropped: drop it before awaiting anything
    /// slow.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// struct Frame { pixels: Vec<u8> } // not Clone
    ///
    /// let bus = ringbus::Bus::new();
    /// let mut frames = bus.stream::<Frame>("frames")?;
    /// bus.publish("frames", Frame { pixels: vec![7; 1024] }).await?;
    /// let frame = frames.next_ref().await.expect("one frame");
    /// assert_eq!(frame.pixels.len(), 1024); // read in place
    /// drop(frame); // releases the slot
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message is taken only when the future completes with it. Dropped
    /// before that, the next call returns the same message.
    pub async fn next_ref(&mut self) -> Option<StreamRef<'_, T>> {
        if !poll_fn(|cx| self.poll_ready(cx)).await {
            return None;
        }
        // `None` is unreachable here (see `take`).
        self.take()
    }
}

impl<T: Clone> Stream<T> {
    /// Waits for the next message and returns a clone of it; `None` once the stream has
    /// ended (the bus closed and every message published before was taken).
    ///
    /// The same as `futures::StreamExt::next` on this stream, without the import, so a
    /// `while let Some(msg) = stream.next().await` loop needs no extra trait.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let mut stream = bus.stream::<u32>("jobs")?;
    /// bus.publish("jobs", 1u32).await?;
    /// bus.close().await; // does not wait for the stream
    /// assert_eq!(stream.next().await, Some(1)); // what was published before the close
    /// assert_eq!(stream.next().await, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message is taken only in the poll that returns it. Dropped before
    /// that (say, the other branch of a `tokio::select!` won), the next call returns the same
    /// message.
    pub async fn next(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_next_cloned(cx)).await
    }

    fn poll_next_cloned(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        // If `clone` panics, the `StreamRef` still releases the message and counts it while
        // unwinding: the stream goes on with the next one.
        self.poll_next_ref(cx)
            .map(|item| item.map(|item| T::clone(&item)))
    }
}

/// The stream of clones: [`Stream::next`] as a `futures_core::Stream`, for `StreamExt`
/// combinators and `tokio_stream` adapters.
impl<T: Clone> futures_core::Stream for Stream<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.get_mut().poll_next_cloned(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.reader {
            Some(_) => (self.len(), None),
            None => (0, Some(0)),
        }
    }
}

impl<T: Clone> futures_core::FusedStream for Stream<T> {
    fn is_terminated(&self) -> bool {
        self.reader.is_none()
    }
}

impl<T> Stream<T> {
    /// Leaves the ring and marks the subscriber ended, once.
    fn end(&mut self) {
        if let Some(reader) = self.reader.take() {
            drop(reader); // the writer stops waiting for us
            self.sub.end();
        }
    }
}

impl<T> Drop for Stream<T> {
    fn drop(&mut self) {
        self.end();
    }
}

impl<T> fmt::Debug for Stream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.sub.id)
            .field("name", &&*self.sub.name)
            .field("topic", &&*self.sub.topic)
            .field("terminated", &self.reader.is_none())
            .finish()
    }
}

/// One message lent in place by [`Stream::next_ref`]. Dropping it releases the slot and
/// counts the message handled.
pub struct StreamRef<'a, T> {
    // Dropped first: releases the slot (advances the reader).
    guard: ReadGuard<'a, T>,
    // Dropped second: counts the message handled.
    _count: Count<'a>,
}

impl<'a, T> StreamRef<'a, T> {
    fn new(guard: ReadGuard<'a, T>, sub: &'a SubShared) -> Self {
        let handled = guard.position() + 1 - sub.start;
        Self {
            guard,
            _count: Count { sub, handled },
        }
    }

    /// The message's position in its topic (0 for the first message ever published there).
    pub fn position(&self) -> u64 {
        self.guard.position()
    }
}

impl<T> Deref for StreamRef<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T: fmt::Debug> fmt::Debug for StreamRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Stores a stream's handled count when dropped, after the slot was released.
struct Count<'a> {
    sub: &'a SubShared,
    handled: u64,
}

impl Drop for Count<'_> {
    fn drop(&mut self) {
        self.sub.handled_to(self.handled);
    }
}
