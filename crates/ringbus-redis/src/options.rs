//! How a link uses Redis Streams: consumer groups, redelivery, dead letters, trimming, dedup.

use std::time::Duration;

use ringbus_link::LONGEST_WAIT;

/// Settings of the link's streams and consumer groups.
///
/// A wait longer than [`LONGEST_WAIT`](ringbus_link::LONGEST_WAIT) (30 years), such as
/// `Duration::MAX` for "no limit", counts as that.
///
/// ```
/// use ringbus_redis::StreamOptions;
/// use std::time::Duration;
///
/// let options = StreamOptions {
///     max_deliver: 3,
///     claim_idle: Duration::from_secs(10),
///     ..StreamOptions::default()
/// };
/// assert_eq!(options.group, "ringbus");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// The consumer group of [`Link::import`](crate::Link::import): instances with the same
    /// group share a topic's messages, instances with their own group each see every message.
    /// Default: `ringbus`.
    pub group: String,
    /// This link's consumer name within its groups. Default: none, a fresh name per link
    /// (`<process tag>-<n>`); set a stable one per instance so that a restarted instance
    /// reads back, as its own, what it held when it died (otherwise others claim it after
    /// `claim_idle`).
    pub consumer: Option<String>,
    /// Deliveries of one message before it goes to the dead-letter stream. Default: 5.
    pub max_deliver: u32,
    /// How long a message may stay unacknowledged with a consumer before another consumer of
    /// the group (or this one) claims it (XAUTOCLAIM's min-idle): how long a dead consumer's
    /// messages wait. Must exceed the slowest handler's run time, its retries and their
    /// backoff included. Default: 30 s.
    pub claim_idle: Duration,
    /// How long a message given back (a subscriber ended before handling it, or the bus
    /// refused it) waits before it is delivered again. Default: 1 s. A handler that fails
    /// retries by its own `RetryPolicy` instead (see `ringbus_link::engine::Settlement`).
    pub nack_delay: Duration,
    /// Messages handed to the local bus and not yet settled, at most, per import.
    /// Default: 256. 0 counts as 1, and more than tokio's `Semaphore::MAX_PERMITS` (or
    /// `u32::MAX`, if smaller) as that.
    pub max_in_flight: usize,
    /// Messages asked for per XREADGROUP. Default: 64.
    pub read_batch: usize,
    /// The longest an XREADGROUP waits for messages (it also bounds how late a claim may
    /// run). Default: 1 s.
    pub block: Duration,
    /// Trims each stream on export (XADD MAXLEN) to about this many entries (`None`: never
    /// trim). A message trimmed before a group read it is lost for that group. Default:
    /// 100 000.
    pub max_len: Option<usize>,
    /// Trim to exactly `max_len` (`MAXLEN n`) instead of about it (`MAXLEN ~ n`, which
    /// trims whole nodes and costs less). Default: false.
    pub exact_trim: bool,
    /// Message ids an import remembers, to drop a second stream entry with an id it has
    /// already handed to the bus (an export re-sent after a lost reply, or two publishes of
    /// one [`Envelope`](crate::Envelope) id). `0` turns dedup off. Default: 4096.
    pub dedup_window: usize,
    /// How long an export keeps re-sending (XADD) while Redis is unreachable before it gives
    /// up on the message (logged and counted). Default: 60 s.
    pub publish_retry_for: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            group: "ringbus".to_string(),
            consumer: None,
            max_deliver: 5,
            claim_idle: Duration::from_secs(30),
            nack_delay: Duration::from_secs(1),
            max_in_flight: 256,
            read_batch: 64,
            block: Duration::from_secs(1),
            max_len: Some(100_000),
            exact_trim: false,
            dedup_window: 4096,
            publish_retry_for: Duration::from_secs(60),
        }
    }
}

impl StreamOptions {
    /// These options with every wait at most [`LONGEST_WAIT`].
    pub(crate) fn clamped(self) -> Self {
        Self {
            claim_idle: self.claim_idle.min(LONGEST_WAIT),
            nack_delay: self.nack_delay.min(LONGEST_WAIT),
            block: self.block.min(LONGEST_WAIT),
            publish_retry_for: self.publish_retry_for.min(LONGEST_WAIT),
            ..self
        }
    }

    /// How often an import looks for messages to claim: half the shorter of `nack_delay`
    /// and `claim_idle`, between 10 ms and `block`.
    pub(crate) fn claim_interval(&self) -> Duration {
        (self.nack_delay.min(self.claim_idle) / 2).clamp(
            Duration::from_millis(10),
            self.block.max(Duration::from_millis(10)),
        )
    }
}
