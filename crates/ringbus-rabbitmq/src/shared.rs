//! What every part of a link shares: made by `Link::connect`, held by the façade, the
//! exports and the imports.

use std::sync::Arc;

use ringbus::Bus;
use ringbus_link::engine::{Runtime, SubscribedExport};

use crate::conn::Conn;
use crate::options::QueueOptions;
use crate::stats::Counters;

/// What every part of a link shares.
///
/// Every field is set once by `connect` and then read only, except `counters` (relaxed
/// tallies), `conn` (its connection under an async mutex) and `runtime` (see
/// `ringbus_link::engine::Runtime`).
pub(crate) struct LinkShared {
    /// This link's id: the origin header of its exports, and its connection's name.
    pub(crate) id: String,
    pub(crate) bus: Bus,
    pub(crate) conn: Conn,
    /// The topic exchange of the exports.
    pub(crate) prefix: String,
    /// The topic exchange of the dead letters.
    pub(crate) dead_letter_prefix: String,
    pub(crate) queues: QueueOptions,
    pub(crate) max_message_bytes: usize,
    pub(crate) counters: Arc<Counters>,
    pub(crate) runtime: Runtime<SubscribedExport>,
}

impl LinkShared {
    /// The queue `group` reads `topic` from.
    pub(crate) fn queue(&self, topic: &str, group: &str) -> String {
        format!("{}.{group}.{topic}", self.prefix)
    }

    /// The queue that keeps the dead letters of `topic`.
    pub(crate) fn dead_letter_queue(&self, topic: &str) -> String {
        format!("{}.{topic}", self.dead_letter_prefix)
    }
}
