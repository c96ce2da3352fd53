//! Exports: a batch subscriber per exported topic (a pattern's: one per matching topic, all
//! with one handler) hands each local message to NATS, in the topic's order, a batch of what
//! is queued at a time.
//!
//! Core: `publish` into the client (bounded: it waits while the client's queue is full).
//! JetStream: publish, then queue the ack future, with its subject, to the export's acker
//! task through a bounded channel (the ack window, one per topic or pattern); the acker
//! awaits the window's acks concurrently and re-sends (same message id, deduplicated by the
//! server) what was not acked, until `publish_retry_for`.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::Subject;
use futures_util::stream::{FuturesUnordered, StreamExt};
use ringbus::{Batch, BatchHandler, HandlerError, SubscribeOptions, TopicBatchHandler};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::codec::Codec;
use crate::error::LinkError;
use crate::options::Mode;
use crate::shared::{LinkShared, StreamChange};
use crate::stats::add;
use crate::task::ExportTask;
use crate::wire::{encode, ExportError, Outgoing};

/// A JetStream export awaiting its ack.
struct Pending {
    ack: PublishAckFuture,
    export: Sent,
}

/// A JetStream export sent: what a re-send needs.
struct Sent {
    subject: Subject,
    topic: Arc<str>,
    message: Outgoing,
    /// When it was first sent.
    at: Instant,
}

/// What every export's handler shares: the codec, and the JetStream ack window.
struct Exporter<T, C> {
    link: Arc<LinkShared>,
    codec: C,
    /// JetStream: the ack window.
    acks: Option<Window>,
    /// The last body's length: the next body's buffer is made that size at once.
    body_size: AtomicUsize,
    _message: PhantomData<fn(&T)>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> Exporter<T, C> {
    fn new(link: &Arc<LinkShared>, codec: C, acks: Option<Window>) -> Self {
        Self {
            link: link.clone(),
            codec,
            acks,
            body_size: AtomicUsize::new(0),
            _message: PhantomData,
        }
    }

    async fn export(
        &self,
        topic: &Arc<str>,
        subject: &Subject,
        msg: &T,
    ) -> Result<(), ExportError> {
        if self.codec.is_imported(msg) {
            add(&self.link.counters.echo_skipped);
            return Ok(());
        }
        let message = encode(
            &self.codec,
            msg,
            self.link.max_message_bytes,
            self.body_size.load(Ordering::Relaxed),
        )?;
        self.body_size.store(message.body.len(), Ordering::Relaxed);
        match &self.acks {
            None => {
                let headers = message.headers(topic, None)?;
                self.link
                    .client
                    .publish_with_headers(subject.clone(), headers, message.body)
                    .await
                    .map_err(|e| ExportError::Send(e.to_string()))?;
            }
            Some((window, pending)) => {
                let sent = Instant::now();
                let ack = publish_js(&self.link, subject, topic, &message, sent).await?;
                pending.fetch_add(1, Ordering::Relaxed);
                // Waits while the window is full: backpressure into the bus.
                let pending_ack = Pending {
                    ack,
                    export: Sent {
                        subject: subject.clone(),
                        topic: topic.clone(),
                        message,
                        at: sent,
                    },
                };
                if window.send(pending_ack).await.is_err() {
                    pending.fetch_sub(1, Ordering::Relaxed);
                    return Err(ExportError::Send("the link is closing".into()));
                }
            }
        }
        add(&self.link.counters.exported);
        Ok(())
    }

    /// Exports each message of `batch` in order. A message that fails is counted and logged
    /// and costs only itself; the batch's result is the first failure.
    async fn export_batch(
        &self,
        topic: &Arc<str>,
        subject: &Subject,
        batch: Batch<'_, T>,
    ) -> Result<(), HandlerError> {
        let mut first_error: Option<ExportError> = None;
        for msg in batch.iter() {
            if let Err(e) = self.export(topic, subject, msg).await {
                self.failed(topic, &e);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), |e| Err(HandlerError::new(e)))
    }

    /// Counts and logs a message that was not exported.
    fn failed(&self, topic: &str, error: &ExportError) {
        add(&self.link.counters.export_errors);
        tracing::warn!(topic, error = %error, "ringbus-nats: message not exported");
    }
}

/// The handler of one topic's export.
struct TopicExport<T, C> {
    topic: Arc<str>,
    subject: Subject,
    exporter: Exporter<T, C>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> BatchHandler<T> for TopicExport<T, C> {
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.exporter
            .export_batch(&self.topic, &self.subject, batch)
    }
}

/// The handler of a pattern's export: each batch to the subject its topic names.
impl<T: Send + Sync + 'static, C: Codec<T>> TopicBatchHandler<T> for Exporter<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        topic: &'a str,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            match crate::subject::subject(&self.link.prefix, topic) {
                Ok(subject) => {
                    self.export_batch(&Arc::from(topic), &Subject::from(subject), batch)
                        .await
                }
                Err(e) => {
                    let e = ExportError::Send(e.to_string());
                    for _ in 0..batch.len() {
                        self.failed(topic, &e);
                    }
                    Err(HandlerError::new(e))
                }
            }
        }
    }
}

/// Sends a JetStream publish, retrying while the client refuses it (closed channel during a
/// reconnect), until `publish_retry_for` after `sent`.
async fn publish_js(
    link: &LinkShared,
    subject: &Subject,
    topic: &str,
    message: &Outgoing,
    sent: Instant,
) -> Result<PublishAckFuture, ExportError> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let headers = message.headers(topic, Some(&link.id))?;
        match link
            .jetstream
            .publish_with_headers(subject.clone(), headers, message.body.clone())
            .await
        {
            Ok(ack) => return Ok(ack),
            Err(e) if sent.elapsed() >= link.js.publish_retry_for => {
                return Err(ExportError::Send(e.to_string()))
            }
            Err(e) => {
                tracing::debug!(error = %e, "ringbus-nats: JetStream publish refused; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The acker of one JetStream export: confirms up to a window of exports at once. Their acks
/// are awaited concurrently: each ack's timeout starts when it is awaited, so awaiting them
/// one after the other would make a window lost to a server restart cost one timeout per
/// message before the re-sends.
async fn ack_loop(
    link: Arc<LinkShared>,
    mut window: mpsc::Receiver<Pending>,
    pending: Arc<AtomicU64>,
) {
    let limit = link.js.ack_window.max(1);
    let mut confirming = FuturesUnordered::new();
    loop {
        tokio::select! {
            next = window.recv(), if confirming.len() < limit => match next {
                Some(export) => confirming.push(confirm(&link, export)),
                None => break,
            },
            Some(()) = confirming.next(), if !confirming.is_empty() => {
                pending.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    while confirming.next().await.is_some() {
        pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Awaits the ack of one export; one that is not acked goes to [`resend`].
///
/// The acker holds one of these per export awaiting its ack: the re-sends, whose futures are
/// larger than the rest of it together (a publish, a sleep), are boxed so that it stays
/// small.
async fn confirm(link: &LinkShared, pending: Pending) {
    match pending.ack.await {
        Ok(ack) => acked(link, &ack),
        Err(e) => Box::pin(resend(link, pending.export, e.to_string())).await,
    }
}

/// Re-sends an export that was not acked (`error` says why), with the same message id (the
/// server drops a copy it already stored), until it is acked or `publish_retry_for` has
/// passed since it was first sent.
async fn resend(link: &LinkShared, export: Sent, mut error: String) {
    let Sent {
        subject,
        topic,
        message,
        at: sent,
    } = export;
    let mut backoff = Duration::from_millis(50);
    loop {
        if sent.elapsed() >= link.js.publish_retry_for {
            add(&link.counters.export_errors);
            tracing::error!(
                %subject,
                error = %error,
                "ringbus-nats: JetStream never acknowledged an export; giving up on it"
            );
            return;
        }
        add(&link.counters.export_retries);
        tracing::debug!(%subject, error = %error, "ringbus-nats: re-sending an unacked export");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
        let result = match publish_js(link, &subject, &topic, &message, sent).await {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(_) => Err("not sent".to_string()),
        };
        match result {
            Ok(ack) => return acked(link, &ack),
            Err(e) => error = e,
        }
    }
}

/// Counts an export the server acked.
fn acked(link: &LinkShared, ack: &async_nats::jetstream::publish::PublishAck) {
    add(&link.counters.export_acked);
    if ack.duplicate {
        add(&link.counters.export_duplicates);
    }
}

/// The handler's end of a JetStream export's ack window, and the count of exports awaiting
/// their ack.
type Window = (mpsc::Sender<Pending>, Arc<AtomicU64>);

/// The acker of a JetStream export, which `close` waits for, and the same count.
type Acker = (JoinHandle<()>, Arc<AtomicU64>);

/// What a JetStream export sets up before it subscribes: its ack window, its acker, and the
/// change to the stream that made it hold the export's subject (undone if the subscribe is
/// refused).
type JetStreamSetup<'a> = (Window, Acker, StreamChange<'a>);

/// A JetStream export's ack window and its acker, after the stream is made (or given
/// `subject`); none for core NATS.
async fn ack_window<'a>(
    link: &'a Arc<LinkShared>,
    subject: &str,
    mode: Mode,
) -> Result<Option<JetStreamSetup<'a>>, LinkError> {
    if mode == Mode::Core {
        return Ok(None);
    }
    let change = link.stream(subject).await?;
    let (tx, rx) = mpsc::channel(link.js.ack_window.clamp(1, Semaphore::MAX_PERMITS));
    let pending = Arc::new(AtomicU64::new(0));
    let acker = tokio::spawn(ack_loop(link.clone(), rx, pending.clone()));
    Ok(Some(((tx, pending.clone()), (acker, pending), change)))
}

/// Starts exporting `topic`.
pub(crate) async fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    subject: String,
    mode: Mode,
    codec: C,
) -> Result<ExportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let setup = ack_window(link, &subject, mode).await?;
    let acks = setup.as_ref().map(|(window, ..)| window.clone());
    let topic: Arc<str> = Arc::from(topic);
    let exporter = TopicExport {
        topic: topic.clone(),
        subject: Subject::from(subject),
        exporter: Exporter::<T, C>::new(link, codec, acks),
    };
    let options = SubscribeOptions::new().name(format!("nats-export:{topic}"));
    let subscribed = link.bus.subscribe_batch(&topic, options, exporter);
    started(&topic, mode, subscribed, setup).await
}

/// Starts exporting every topic `pattern` matches, present and future: each to the subject
/// `<prefix>.<topic>`.
pub(crate) async fn start_pattern<T, C>(
    link: &Arc<LinkShared>,
    pattern: &str,
    mode: Mode,
    codec: C,
) -> Result<ExportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let subjects = format!("{}.{pattern}", link.prefix);
    let setup = ack_window(link, &subjects, mode).await?;
    let acks = setup.as_ref().map(|(window, ..)| window.clone());
    let exporter = Exporter::<T, C>::new(link, codec, acks);
    let options = SubscribeOptions::new().name(format!("nats-export:{pattern}"));
    let subscribed = link.bus.subscribe_pattern_batch(pattern, options, exporter);
    started(pattern, mode, subscribed, setup).await
}

/// The export of `name` (a topic or a pattern) once its subscribe returned: on a refusal the
/// acker, which would wait for nothing, is stopped, and the stream no longer holds the
/// export's subject (a refused export leaves the stream storing what it stored before).
async fn started(
    name: &str,
    mode: Mode,
    subscribed: Result<ringbus::Subscription, ringbus::Error>,
    setup: Option<JetStreamSetup<'_>>,
) -> Result<ExportTask, LinkError> {
    let (acker, change) = match setup {
        Some((_, acker, change)) => (Some(acker), Some(change)),
        None => (None, None),
    };
    match subscribed {
        Ok(subscription) => {
            drop(change);
            tracing::info!(name, ?mode, "ringbus-nats: exporting");
            Ok(ExportTask::new(name.to_string(), subscription, acker))
        }
        Err(e) => {
            if let Some((acker, _)) = acker {
                acker.abort();
            }
            if let Some(change) = change {
                change.undo().await;
            }
            Err(e.into())
        }
    }
}
