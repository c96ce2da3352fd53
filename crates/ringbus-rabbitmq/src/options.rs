//! How a link uses RabbitMQ: queues, redelivery, dead letters, dedup.

use std::time::Duration;

use ringbus_link::LONGEST_WAIT;

/// Queue and redelivery settings of a [`Link`](crate::Link).
///
/// Topic `t` travels through the topic exchange `<prefix>` with routing key `t`. An import
/// reads the durable queue `<prefix>.<group>.<t>`, bound to it: instances that import with
/// one group share its messages (competing consumers), each group sees every message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueOptions {
    /// The group of [`Link::import`](crate::Link::import) (each
    /// [`import_shared`](crate::Link::import_shared) names its own). Default: `ringbus`.
    pub group: String,
    /// Deliveries of one message before it is dead-lettered (a message a subscriber never
    /// handled, or that killed its consumers). A handler that gives up on a message has it
    /// dead-lettered on that delivery. RabbitMQ's classic queues do not count deliveries: an
    /// import counts those it sees, in memory, so the count starts again in another process or
    /// after a restart (a message that kills its process every time is never dead-lettered by
    /// count). Default: 5.
    pub max_deliver: u32,
    /// How long a message given back (a subscriber ended before handling it, or the bus
    /// refused it) waits before it is delivered again; it stays with this consumer meanwhile.
    /// Default: 1 s. A handler that fails retries by its own `RetryPolicy` instead.
    pub nack_delay: Duration,
    /// Messages handed to the local bus and not yet settled, at most, per import: the
    /// consumer's prefetch. Default: 256; at most 65,535.
    pub max_in_flight: usize,
    /// Message ids an import remembers to drop a second copy of a message (an export re-sent
    /// after a lost confirm), in this process. 0 turns it off. Default: 4096.
    pub dedup_window: usize,
    /// How long an export keeps re-sending a message RabbitMQ did not confirm (a lost
    /// connection) before it gives up on it, counted from the later of its batch's start and
    /// the last message of the batch it settled. Default: 60 s.
    pub publish_retry_for: Duration,
    /// Publishes of one exported topic awaiting their confirms, at most (a pattern export
    /// counts each topic apart): a larger batch of queued messages goes out in parts of this
    /// many, each confirmed before the next, because RabbitMQ's server spends more a message
    /// on a burst of many hundreds than on parts of a few hundred. Default: 256; at least 1.
    pub publish_window: usize,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            group: "ringbus".to_string(),
            max_deliver: 5,
            nack_delay: Duration::from_secs(1),
            max_in_flight: 256,
            dedup_window: 4096,
            publish_retry_for: Duration::from_secs(60),
            publish_window: 256,
        }
    }
}

impl QueueOptions {
    /// The waits past [`LONGEST_WAIT`] taken as that, the prefetch within AMQP's range, and
    /// a publish window of at least one.
    pub(crate) fn clamped(self) -> Self {
        Self {
            nack_delay: self.nack_delay.min(LONGEST_WAIT),
            publish_retry_for: self.publish_retry_for.min(LONGEST_WAIT),
            max_in_flight: self.max_in_flight.clamp(1, usize::from(u16::MAX)),
            publish_window: self.publish_window.max(1),
            ..self
        }
    }
}
