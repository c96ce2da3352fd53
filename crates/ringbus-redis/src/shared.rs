//! What every part of a link shares: made by `Link::connect`, held by the façade, the
//! exports and the imports.

use std::sync::Arc;
use std::time::Duration;

use redis::Client;
use ringbus::Bus;
use ringbus_link::engine::{Runtime, SubscribedExport};

use crate::conn::Conn;
use crate::options::StreamOptions;
use crate::stats::Counters;

/// What every part of a link shares.
///
/// Every field is set once by `connect` and then read only, except: `counters` (relaxed
/// tallies) and `runtime` (see `ringbus_link::engine::Runtime`).
pub(crate) struct LinkShared {
    /// This link's id: the origin field of its exports.
    pub(crate) id: String,
    /// Its consumer name in every group it reads.
    pub(crate) consumer: String,
    pub(crate) bus: Bus,
    pub(crate) client: Client,
    /// The connection for every command but the blocking reads (each import has its own).
    pub(crate) commands: Conn,
    pub(crate) prefix: String,
    pub(crate) dead_letter_prefix: String,
    pub(crate) streams: StreamOptions,
    pub(crate) max_message_bytes: usize,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) counters: Arc<Counters>,
    /// Its imports' stop signal and held count, the topics linked each way, and its running
    /// imports and exports, stopped by `close`.
    pub(crate) runtime: Runtime<SubscribedExport>,
}

impl LinkShared {
    /// The stream key of `topic`.
    pub(crate) fn stream_key(&self, topic: &str) -> String {
        format!("{}:{topic}", self.prefix)
    }

    /// The dead-letter stream key of `topic`.
    pub(crate) fn dead_letter_key(&self, topic: &str) -> String {
        format!("{}:{topic}", self.dead_letter_prefix)
    }
}
