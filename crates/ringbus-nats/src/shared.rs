//! What every part of a link shares: made by `Link::connect`, held by the façade, the
//! exports and the imports.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{jetstream, Client};
use ringbus::Bus;
use ringbus_link::engine::Runtime;
use tokio_util::sync::CancellationToken;

use crate::error::LinkError;
use crate::options::JetStreamOptions;
use crate::stats::Counters;
use crate::subject::covers;
use crate::task::ExportTask;

pub(crate) struct LinkShared {
    /// This link's id: the origin header of its JetStream exports.
    pub(crate) id: String,
    pub(crate) bus: Bus,
    pub(crate) client: Client,
    pub(crate) jetstream: jetstream::Context,
    pub(crate) prefix: String,
    pub(crate) dead_letter_prefix: String,
    pub(crate) stream_name: String,
    pub(crate) js: JetStreamOptions,
    pub(crate) max_message_bytes: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) counters: Arc<Counters>,
    /// Cancelled by the client's closed event.
    pub(crate) closed: CancellationToken,
    /// Its imports' stop signal and held count (JetStream imports handed to the bus and not
    /// yet settled), the topics linked each way, and its running imports and exports,
    /// stopped by `close`.
    pub(crate) runtime: Runtime<ExportTask>,
    /// Serialises stream setup within this link.
    pub(crate) stream_setup: tokio::sync::Mutex<()>,
}

impl LinkShared {
    /// The link's stream, created if missing, made to hold `subject` (the subject of a topic
    /// linked in JetStream mode, or a pattern's subjects) and the dead letters, unless another
    /// stream holds all of those. Every message published on the stream's subjects is stored,
    /// whoever publishes it.
    ///
    /// The returned change holds the link's stream setup until it is dropped (the change is
    /// kept) or [undone](StreamChange::undo) (the export or import it was for was refused).
    pub(crate) async fn stream(&self, subject: &str) -> Result<StreamChange<'_>, LinkError> {
        let setup = self.stream_setup.lock().await;
        let js_err = |e: &dyn fmt::Display| LinkError::setup(e.to_string());
        let dead = format!("{}.>", self.dead_letter_prefix);
        // Dead letters stored by another stream (an operator's) stay there.
        let dead_elsewhere = self.held_elsewhere(&dead).await;
        let wanted: Vec<&str> = [Some(subject), (!dead_elsewhere).then_some(dead.as_str())]
            .into_iter()
            .flatten()
            .collect();
        let config = jetstream::stream::Config {
            name: self.stream_name.clone(),
            subjects: wanted.iter().map(|w| w.to_string()).collect(),
            duplicate_window: self.js.duplicate_window,
            num_replicas: self.js.replicas.max(1),
            storage: if self.js.memory_storage {
                jetstream::stream::StorageType::Memory
            } else {
                jetstream::stream::StorageType::File
            },
            ..Default::default()
        };
        // Made here, the stream holds `subject` because of this call: an undo takes it out.
        let (stream, created) = match self.jetstream.get_stream(&self.stream_name).await {
            Ok(stream) => (stream, false),
            Err(_) => match self.jetstream.create_stream(config).await {
                Ok(stream) => (stream, true),
                // Made meanwhile by another link sharing the name.
                Err(e) => match self.jetstream.get_stream(&self.stream_name).await {
                    Ok(stream) => (stream, false),
                    Err(_) => return Err(js_err(&e)),
                },
            },
        };
        let mut change = StreamChange {
            link: self,
            stream,
            subject: subject.to_string(),
            replaced: created.then(Vec::new),
            _setup: setup,
        };
        // Made by another link, for another topic or pattern, or by an operator: the subjects
        // it does not cover yet are added, in place of those they cover. A stream with a
        // wildcard that already covers one must be left alone: the server refuses overlapping
        // subjects.
        let info = change.stream.cached_info();
        let held = |wanted: &str| info.config.subjects.iter().any(|s| covers(s, wanted));
        let missing: Vec<&str> = wanted.into_iter().filter(|w| !held(w)).collect();
        if missing.is_empty() {
            return Ok(change);
        }
        let mut config = info.config.clone();
        let (replaced, kept) = config
            .subjects
            .into_iter()
            .partition(|s| missing.iter().any(|w| covers(w, s)));
        config.subjects = kept;
        config
            .subjects
            .extend(missing.iter().map(|w| w.to_string()));
        self.jetstream.update_stream(config).await.map_err(|e| {
            LinkError::setup(format!(
                "the stream \"{}\" (subjects {:?}) cannot take {missing:?}: {e}",
                self.stream_name, info.config.subjects
            ))
        })?;
        if missing.contains(&subject) {
            let replaced: Vec<String> = replaced;
            change.replaced = Some(
                replaced
                    .into_iter()
                    .filter(|s| covers(subject, s))
                    .collect(),
            );
        }
        Ok(change)
    }

    /// Whether a stream other than the link's holds every subject `subject` matches.
    async fn held_elsewhere(&self, subject: &str) -> bool {
        let Ok(name) = self.jetstream.stream_by_subject(subject).await else {
            return false;
        };
        if name == self.stream_name {
            return false;
        }
        match self.jetstream.get_stream(&name).await {
            Ok(stream) => stream
                .cached_info()
                .config
                .subjects
                .iter()
                .any(|s| covers(s, subject)),
            Err(_) => false,
        }
    }

    /// One request round trip to the server: once it returns, the server has processed
    /// everything this connection sent before it (`flush` only writes the socket). No one
    /// answers the subject; the server's "no responders" reply is the answer.
    pub(crate) async fn round_trip(&self) -> Result<(), async_nats::RequestError> {
        let probe = format!("_RINGBUS.{}.FLUSH", self.id);
        match self.client.request(probe, bytes::Bytes::new()).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// What [`LinkShared::stream`] did for one subject, holding the link's stream setup: kept when
/// dropped, taken back by [`undo`](Self::undo).
pub(crate) struct StreamChange<'a> {
    link: &'a LinkShared,
    pub(crate) stream: jetstream::stream::Stream,
    subject: String,
    /// The subjects the stream held that `subject` replaced (it covers them), if the stream
    /// was given `subject`; `None` if it held it already.
    replaced: Option<Vec<String>>,
    _setup: tokio::sync::MutexGuard<'a, ()>,
}

impl StreamChange<'_> {
    /// Takes the subject back out of the stream, putting back the subjects it replaced, so a
    /// refused export or import leaves the stream storing what it stored before. The
    /// dead-letter subject stays. A stream left with no subject stays as it is. Logged, not
    /// returned, if the server refuses: the caller is reporting a refusal already.
    pub(crate) async fn undo(self) {
        let Some(replaced) = self.replaced else {
            return;
        };
        let mut stream = self.stream;
        let mut config = match stream.info().await {
            Ok(info) => info.config.clone(),
            Err(e) => {
                tracing::warn!(stream = %self.link.stream_name, error = %e, "ringbus-nats: could not read the stream to take a refused link's subject back out");
                return;
            }
        };
        config.subjects.retain(|s| *s != self.subject);
        config.subjects.extend(replaced);
        if config.subjects.is_empty() {
            return;
        }
        if let Err(e) = self.link.jetstream.update_stream(config).await {
            tracing::warn!(
                stream = %self.link.stream_name,
                subject = %self.subject,
                error = %e,
                "ringbus-nats: could not take a refused link's subject back out of the stream"
            );
        }
    }
}

impl fmt::Debug for StreamChange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamChange")
            .field("stream", &self.link.stream_name)
            .field("subject", &self.subject)
            .field("replaced", &self.replaced)
            .finish_non_exhaustive()
    }
}
