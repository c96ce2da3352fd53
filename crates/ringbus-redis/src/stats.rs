//! What a link counts, and the report of its close.
//!
//! Every counter is a relaxed atomic: each is a tally on its own, read as a snapshot; no
//! reader infers anything about other memory from a value it reads.

use std::sync::atomic::{AtomicU64, Ordering};

pub use ringbus_link::ConnectionState;
use ringbus_link::State;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            pub(crate) state: State,
            $(pub(crate) $name: AtomicU64,)*
        }

        /// A snapshot of a link's counters.
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct LinkStats {
            /// The connections' state: `Connected` while the last connection made is in use
            /// and no command has failed on it; `Disconnected` after a lost connection, until
            /// the link's next command connects again.
            pub state: ConnectionState,
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> LinkStats {
                LinkStats {
                    state: self.state.get(),
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Connections made (the first and every reconnect, reading connections included).
    connects,
    /// Connections lost.
    disconnects,
    /// Messages added to their stream (XADD answered).
    exported,
    /// Export pipelines (the XADDs of one batch of queued messages) sent again after Redis
    /// did not answer (some may have been stored: the importers' dedup window drops the
    /// copies).
    export_retries,
    /// Messages that could not be exported (encoding, a header, size, or retries exhausted).
    export_errors,
    /// Messages not exported because they had been imported (a topic linked both ways), or
    /// not imported because this link had exported them.
    echo_skipped,
    /// Messages published into the local bus from Redis.
    imported,
    /// Messages from Redis refused (undecodable, missing fields, oversized): dead-lettered.
    bad_input,
    /// Imports acknowledged (XACK) after every local subscriber handled them.
    acked,
    /// Imports given back (a subscriber ended before handling it, or the bus refused it), to
    /// be delivered again after `nack_delay`.
    nacked,
    /// Messages this link claimed from the pending list (XAUTOCLAIM): given back, or held by
    /// a consumer that died or stalled past `claim_idle`.
    claimed,
    /// Imports sent to the dead-letter stream and acknowledged.
    dead_lettered,
    /// Stream entries dropped on import because an entry with the same message id was
    /// handed to the bus within the dedup window.
    duplicates,
    /// Pending messages that were trimmed or deleted from their stream before they were
    /// handled (XAUTOCLAIM reported them deleted).
    trimmed,
    /// Acks, gives-back or dead letters that could not be sent.
    ack_errors,
    /// Reads or claims that failed and were retried.
    import_errors,
}

pub(crate) fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What [`Link::close`](crate::Link::close) did: what an import held unsettled stays
/// pending in its group and is claimed again after `claim_idle`.
pub type LinkCloseReport = ringbus_link::CloseReport<LinkStats>;
