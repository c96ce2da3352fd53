//! What `close` needs of a running export: its subscription, below the link's shared state
//! that keeps it.

use ringbus::Subscription;
use ringbus_link::engine::Export;
use tokio::time::Instant;

/// What `close` needs of a running export.
pub(crate) struct ExportTask {
    pub(crate) topic: String,
    pub(crate) subscription: Subscription,
}

impl Export for ExportTask {
    /// Unsubscribes: the subscriber first hands over (adds to the stream) everything queued
    /// for it. `Err(n)`: at most `n` exports were not added at the deadline.
    async fn finish(self, deadline: Instant) -> Result<(), u64> {
        let queued = self.subscription.stats().lag;
        let unsubscribed = tokio::time::timeout_at(deadline, self.subscription.unsubscribe());
        if unsubscribed.await.is_err() {
            tracing::warn!(topic = %self.topic, "ringbus-redis close: export not flushed in time");
            return Err(queued.max(1));
        }
        Ok(())
    }

    /// Stops waiting at once (the export stays subscribed until the bus closes); returns how
    /// many exports were still queued.
    fn abort(self) -> u64 {
        self.subscription.stats().lag
    }
}
