//! What a link counts, and the report of its close.

use std::sync::atomic::{AtomicU64, Ordering};

pub use ringbus_link::ConnectionState;
use ringbus_link::State;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) state: State,
    pub(crate) connects: AtomicU64,
    pub(crate) disconnects: AtomicU64,
    pub(crate) exported: AtomicU64,
    pub(crate) export_acked: AtomicU64,
    pub(crate) export_duplicates: AtomicU64,
    pub(crate) export_retries: AtomicU64,
    pub(crate) export_errors: AtomicU64,
    pub(crate) echo_skipped: AtomicU64,
    pub(crate) imported: AtomicU64,
    pub(crate) bad_input: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) nacked: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) ack_errors: AtomicU64,
    pub(crate) slow_consumer: AtomicU64,
    pub(crate) client_errors: AtomicU64,
    pub(crate) import_errors: AtomicU64,
    pub(crate) requests_sent: AtomicU64,
    pub(crate) requests_served: AtomicU64,
    pub(crate) request_timeouts: AtomicU64,
    pub(crate) no_responders: AtomicU64,
    pub(crate) late_replies: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> LinkStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LinkStats {
            state: self.state.get(),
            connects: get(&self.connects),
            disconnects: get(&self.disconnects),
            exported: get(&self.exported),
            export_acked: get(&self.export_acked),
            export_duplicates: get(&self.export_duplicates),
            export_retries: get(&self.export_retries),
            export_errors: get(&self.export_errors),
            echo_skipped: get(&self.echo_skipped),
            imported: get(&self.imported),
            bad_input: get(&self.bad_input),
            acked: get(&self.acked),
            nacked: get(&self.nacked),
            dead_lettered: get(&self.dead_lettered),
            ack_errors: get(&self.ack_errors),
            slow_consumer: get(&self.slow_consumer),
            client_errors: get(&self.client_errors),
            import_errors: get(&self.import_errors),
            requests_sent: get(&self.requests_sent),
            requests_served: get(&self.requests_served),
            request_timeouts: get(&self.request_timeouts),
            no_responders: get(&self.no_responders),
            late_replies: get(&self.late_replies),
        }
    }
}

/// A snapshot of a link's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// The connection's state: `Disconnected` while the client reconnects (subscriptions
    /// and consumers come back with it).
    pub state: ConnectionState,
    /// Connections made (the first and every reconnect).
    pub connects: u64,
    /// Connections lost.
    pub disconnects: u64,
    /// Messages handed to NATS.
    pub exported: u64,
    /// JetStream: exports the server acknowledged.
    pub export_acked: u64,
    /// JetStream: exports the server reported as duplicates (a re-send it had stored).
    pub export_duplicates: u64,
    /// JetStream: re-sends of exports whose ack did not come.
    pub export_retries: u64,
    /// Messages that could not be exported (encoding, a header, size, or retries exhausted).
    pub export_errors: u64,
    /// Messages not exported because they had been imported (a topic linked both ways), or
    /// not imported because this link had exported them (JetStream).
    pub echo_skipped: u64,
    /// Messages published into the local bus from NATS.
    pub imported: u64,
    /// Messages from NATS refused: undecodable, missing headers, or oversized.
    pub bad_input: u64,
    /// JetStream: imports acked after every local subscriber handled them.
    pub acked: u64,
    /// JetStream: imports given back (a subscriber ended before handling it, or the bus
    /// refused it) to be delivered again later.
    pub nacked: u64,
    /// JetStream: imports sent to the dead-letter subject and terminated (a handler gave up
    /// on it, it came for the last allowed time, or it was bad input).
    pub dead_lettered: u64,
    /// JetStream: acks, naks or terms that could not be sent.
    pub ack_errors: u64,
    /// Core: slow-consumer events (the client's buffer for an import overflowed and it
    /// dropped messages).
    pub slow_consumer: u64,
    /// Errors reported by the client or the server.
    pub client_errors: u64,
    /// Import subscriptions or pulls that failed and were retried.
    pub import_errors: u64,
    /// Requests sent to NATS by [`export_requests`](crate::Link::export_requests).
    pub requests_sent: u64,
    /// Requests from NATS answered (a reply or an error sent back) by
    /// [`import_requests`](crate::Link::import_requests).
    pub requests_served: u64,
    /// Requests sent whose answer did not come before the requester's deadline (or the
    /// link's [`request_timeout`](crate::LinkBuilder::request_timeout)).
    pub request_timeouts: u64,
    /// Requests sent that no process was subscribed to (NATS's "no responders").
    pub no_responders: u64,
    /// Replies from NATS that came after their request had timed out, or whose requester
    /// had stopped waiting: dropped, never given to another request.
    pub late_replies: u64,
}

/// What [`Link::close`](crate::Link::close) did: JetStream delivers again what an import
/// held unsettled.
pub type LinkCloseReport = ringbus_link::CloseReport<LinkStats>;
