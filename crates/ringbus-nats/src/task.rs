//! What `close` needs of a running export: its subscription (and, for a JetStream export,
//! its acker), below the link's shared state that keeps it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ringbus::Subscription;
use ringbus_link::engine::Export;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What `close` needs of a running export.
pub(crate) struct ExportTask {
    pub(crate) topic: String,
    pub(crate) subscription: Subscription,
    pub(crate) acker: Option<(JoinHandle<()>, Arc<AtomicU64>)>,
}

impl ExportTask {
    /// An export whose `acker`, if any, ends once the subscription's handler is dropped and
    /// its work is confirmed; the counter is the work not yet confirmed.
    pub(crate) fn new(
        topic: String,
        subscription: Subscription,
        acker: Option<(JoinHandle<()>, Arc<AtomicU64>)>,
    ) -> Self {
        Self {
            topic,
            subscription,
            acker,
        }
    }
}

impl Export for ExportTask {
    /// Unsubscribes (the subscriber first hands over everything queued for it), then waits
    /// for the acks. `Err(n)`: at most `n` exports were not confirmed at the deadline (still
    /// queued when the close began, or awaiting their ack).
    async fn finish(self, deadline: Instant) -> Result<(), u64> {
        let queued = self.subscription.stats().lag;
        let pending = self.acker.as_ref().map(|(_, p)| p.clone());
        let awaited = || pending.as_ref().map_or(0, |p| p.load(Ordering::Relaxed));
        let unsubscribed = tokio::time::timeout_at(deadline, self.subscription.unsubscribe());
        if unsubscribed.await.is_err() {
            tracing::warn!(topic = %self.topic, "ringbus-nats close: export not flushed in time");
            if let Some((acker, _)) = &self.acker {
                acker.abort();
            }
            return Err(queued + awaited());
        }
        if let Some((mut acker, _)) = self.acker {
            // The subscriber's task ended and dropped the handler, so the channel is closed:
            // the acker ends once the window is empty.
            if tokio::time::timeout_at(deadline, &mut acker).await.is_err() {
                acker.abort();
                return Err(awaited());
            }
        }
        Ok(())
    }

    /// Stops waiting at once (the export stays subscribed until the bus closes); returns how
    /// many exports were not confirmed: queued for NATS, or awaiting their ack.
    fn abort(self) -> u64 {
        let queued = self.subscription.stats().lag;
        match self.acker {
            Some((acker, pending)) => {
                acker.abort();
                queued + pending.load(Ordering::Relaxed)
            }
            None => queued,
        }
    }
}
