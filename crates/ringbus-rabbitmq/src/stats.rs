//! What a link counts, and the report of its close.
//!
//! Every counter is a relaxed atomic: each is a tally on its own, read as a snapshot; no
//! reader infers anything about other memory from a value it reads.

use std::sync::atomic::{AtomicU64, Ordering};

use ringbus_link::import::Count;
pub use ringbus_link::ConnectionState;
use ringbus_link::State;

/// The counters of a link; [`LinkStats`] is their snapshot.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) state: State,
    pub(crate) connects: AtomicU64,
    pub(crate) disconnects: AtomicU64,
    pub(crate) exported: AtomicU64,
    pub(crate) export_retries: AtomicU64,
    pub(crate) export_errors: AtomicU64,
    pub(crate) echo_skipped: AtomicU64,
    pub(crate) imported: AtomicU64,
    pub(crate) bad_input: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) nacked: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) ack_errors: AtomicU64,
    pub(crate) import_errors: AtomicU64,
}

/// A snapshot of a link's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// The connection's state: `Disconnected` after a lost connection, until the link's
    /// next use connects again.
    pub state: ConnectionState,
    /// Connections made (the first and every reconnect).
    pub connects: u64,
    /// Connections lost.
    pub disconnects: u64,
    /// Messages RabbitMQ confirmed (publisher confirms).
    pub exported: u64,
    /// Exports sent again after a lost connection or an unconfirmed publish (the importers'
    /// dedup window drops a copy that was stored twice).
    pub export_retries: u64,
    /// Messages that could not be exported (encoding, a header, size, or retries exhausted).
    pub export_errors: u64,
    /// Messages not exported because they had been imported (a topic linked both ways), or
    /// not imported because this link had exported them.
    pub echo_skipped: u64,
    /// Messages published into the local bus from RabbitMQ.
    pub imported: u64,
    /// Messages from RabbitMQ refused (undecodable, missing headers, oversized):
    /// dead-lettered.
    pub bad_input: u64,
    /// Imports acknowledged after every local subscriber handled them.
    pub acked: u64,
    /// Imports given back (a subscriber ended before handling it, or the bus refused it), to
    /// be delivered again after `nack_delay`.
    pub nacked: u64,
    /// Imports sent to the dead-letter exchange and acknowledged.
    pub dead_lettered: u64,
    /// Messages dropped on import because one with the same message id was handed to the
    /// bus within the dedup window.
    pub duplicates: u64,
    /// Acks, gives-back or dead letters that could not be sent.
    pub ack_errors: u64,
    /// Consumes that failed and were made again.
    pub import_errors: u64,
}

pub(crate) fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// The counter an import's `Count` goes to.
    pub(crate) fn of(&self, what: Count) -> &AtomicU64 {
        match what {
            Count::Imported => &self.imported,
            Count::Acked => &self.acked,
            Count::Nacked => &self.nacked,
            Count::DeadLettered => &self.dead_lettered,
            Count::EchoSkipped => &self.echo_skipped,
            Count::BadInput => &self.bad_input,
            Count::Duplicates => &self.duplicates,
        }
    }

    pub(crate) fn snapshot(&self) -> LinkStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LinkStats {
            state: self.state.get(),
            connects: load(&self.connects),
            disconnects: load(&self.disconnects),
            exported: load(&self.exported),
            export_retries: load(&self.export_retries),
            export_errors: load(&self.export_errors),
            echo_skipped: load(&self.echo_skipped),
            imported: load(&self.imported),
            bad_input: load(&self.bad_input),
            acked: load(&self.acked),
            nacked: load(&self.nacked),
            dead_lettered: load(&self.dead_lettered),
            duplicates: load(&self.duplicates),
            ack_errors: load(&self.ack_errors),
            import_errors: load(&self.import_errors),
        }
    }
}

/// What [`Link::close`](crate::Link::close) did.
pub type LinkCloseReport = ringbus_link::CloseReport<LinkStats>;
