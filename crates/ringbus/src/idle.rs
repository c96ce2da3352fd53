//! [`Bus::wait_idle`]: wait for the quiescence `close` waits for, without closing.
//!
//! # How it works
//!
//! It is step 1 of the close's drain (`Bus::drain`), and nothing else: count itself among the
//! progress watchers (so subscribers notify after each message), then look at
//! `Bus::quiescent` after every progress, with the heavy fence before each look (`progress.rs`:
//! the watch begins while subscribers run). `quiescent` holds when one pass over the
//! subscriber tasks, between two reads of every topic's count, found each caught up with its
//! topic and no count moved: every message published so far has been handled, including what
//! handlers published meanwhile (chains). The watch is taken back when the wait ends or is
//! dropped, so subscribers go back to their one relaxed load per message.
//!
//! Streams are not waited for, as `close` does not wait for them (`stream.rs`): a test that
//! polls a stream from the task that calls `wait_idle` would otherwise wait for itself.

use crate::bus::Bus;
use crate::progress::Progress;

impl Bus {
    /// Waits until every message published so far has been handled by every subscriber of
    /// its topic, without closing the bus: the quiescence [`close`](Self::close) waits for
    /// before it closes the rings.
    ///
    /// "Handled" includes what the handlers publish while it waits: with a chain
    /// (`#[subscriber("orders", publish("receipts"))]`), it returns once the receipts of
    /// the orders published before the call were handled too. It returns at a moment when
    /// every subscriber task has caught up with its topic and none is in a handler; while
    /// other tasks keep publishing it waits for a pause, and a handler that never finishes
    /// (with no stall timeout) keeps it waiting. Subscribers that ended (unsubscribed,
    /// detached) are not waited for, and neither are [`Stream`](crate::Stream)s, which are
    /// pulled at their caller's pace (as `close` does not wait for them).
    ///
    /// Its main use is in tests (see [`testing`](crate::testing)): publish, `wait_idle`, then
    /// assert on what the handlers did, with no sleep. While it waits, each subscriber
    /// notifies it after every message (a `Notify::notify_waiters`): it costs the
    /// subscribers something only then.
    ///
    /// Called from inside one of this bus's handlers, it returns at once: a handler cannot
    /// wait for its own subscriber, which is busy running it (as `close` and `unsubscribe`
    /// do there). From a handler of another bus it waits, as from any task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let total = Arc::new(AtomicU64::new(0));
    /// let _sum = bus.subscribe("amounts", {
    ///     let total = total.clone();
    ///     move |cents: &u64| {
    ///         total.fetch_add(*cents, Ordering::Relaxed);
    ///         async {}
    ///     }
    /// })?;
    /// for cents in [100u64, 250, 5] {
    ///     bus.publish("amounts", cents).await?;
    /// }
    /// bus.wait_idle().await; // all three handled; the bus stays open
    /// assert_eq!(total.load(Ordering::Relaxed), 355);
    /// bus.publish("amounts", 1u64).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches. Dropping the future takes its watch back.
    pub async fn wait_idle(&self) {
        if self.in_own_handler() {
            return;
        }
        let watch = Watch::new(self.progress());
        // Fenced: the watch begins while subscribers run (see `progress.rs`).
        watch
            .0
            .wait_for(true, || self.quiescent().then_some(()))
            .await;
    }
}

/// A progress watch, taken back when dropped (the wait ended or its future was dropped).
struct Watch<'a>(&'a Progress);

impl<'a> Watch<'a> {
    fn new(progress: &'a Progress) -> Self {
        progress.watch();
        Self(progress)
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.0.unwatch();
    }
}
