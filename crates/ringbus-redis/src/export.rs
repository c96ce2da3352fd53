//! Exports: a bus batch subscriber per exported topic adds the local messages to the
//! topic's stream.
//!
//! The handler takes what is queued for it at once (a bus batch, at most 1,024 messages),
//! encodes each message and sends one pipeline of `XADD <prefix>:<topic> [MAXLEN [~] n] *
//! field value ...`, one per message, in the topic's order, and returns once Redis has
//! answered all of them: the subscriber's queue is the export's buffer, the bus's
//! backpressure its flow control, and the topic's order is the stream's order. While one
//! pipeline is on its way, what is published meanwhile waits in the queue and goes in the
//! next one: the link pays one round trip per batch, not per message (an awaited XADD per
//! message made the export a quarter of the raw client's speed).
//!
//! While Redis is unreachable the whole pipeline is sent again (after a reconnect), for up
//! to `publish_retry_for`. A send whose answer was lost may have been stored: the re-sent
//! copies carry the same message ids, which the importers' dedup window drops. A message
//! that cannot be encoded, or whose XADD Redis refuses, is counted in `export_errors` and
//! logged; the others in its batch are still sent.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ringbus::{Batch, BatchHandler, HandlerError, SubscribeOptions, TopicBatchHandler};
use ringbus_link::engine::SubscribedExport;
use ringbus_link::Codec;
use tokio::time::Instant;

use crate::conn::is_connection_error;
use crate::error::LinkError;
use crate::shared::LinkShared;
use crate::stats::add;
use crate::wire::{encode, fields, ExportError};

/// What an export's handler holds: the link and the codec. A topic's export is one
/// ([`TopicExport`]); a pattern's is one for all its topics.
struct Exporter<T, C> {
    link: Arc<LinkShared>,
    codec: C,
    _message: PhantomData<fn(&T)>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> Exporter<T, C> {
    /// Adds `batch` of `topic` to its stream `key`: one pipelined XADD per message. `Err`
    /// names the first message that was not stored (each one is counted and logged).
    async fn export(&self, topic: &str, key: &str, batch: Batch<'_, T>) -> Result<(), ExportError> {
        let failed = |first: &mut Option<ExportError>, id: Option<&str>, error: ExportError| {
            add(&self.link.counters.export_errors);
            tracing::warn!(
                topic,
                stream = key,
                id,
                error = %error,
                "ringbus-redis: message not exported"
            );
            first.get_or_insert(error);
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut ids = Vec::with_capacity(batch.len());
        let mut first_error = None;
        let mut body = Vec::new();
        for msg in batch.iter() {
            if self.codec.is_imported(msg) {
                add(&self.link.counters.echo_skipped);
                continue;
            }
            match encode(&self.codec, msg, self.link.max_message_bytes, &mut body) {
                Ok(message) => {
                    let fields = fields(&message, topic, &self.link.id, &body);
                    pipe.add_command(xadd_cmd(&self.link, key, fields));
                    ids.push(message.id);
                }
                Err(e) => failed(&mut first_error, None, e),
            }
        }
        if ids.is_empty() {
            return first_error.map_or(Ok(()), Err);
        }
        match xadd_all(&self.link, &pipe, &ids).await {
            Ok(results) => {
                for (result, id) in results.into_iter().zip(&ids) {
                    match result {
                        Ok(_entry) => add(&self.link.counters.exported),
                        Err(e) => {
                            failed(&mut first_error, Some(id), ExportError::Send(e.to_string()))
                        }
                    }
                }
            }
            Err(e) => {
                for id in &ids {
                    failed(&mut first_error, Some(id), ExportError::Send(e.clone()));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The XADD of the field/value pairs `fields` to `key`, trimmed as the link's options say.
pub(crate) fn xadd_cmd<'a>(
    link: &LinkShared,
    key: &str,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(key);
    if let Some(max_len) = link.streams.max_len {
        cmd.arg("MAXLEN");
        if !link.streams.exact_trim {
            cmd.arg("~");
        }
        cmd.arg(max_len);
    }
    cmd.arg("*");
    for (name, value) in fields {
        cmd.arg(name).arg(value);
    }
    cmd
}

/// Sends `pipe` (the XADDs of the messages `ids`), again after each lost connection, until
/// Redis answers or `publish_retry_for` has passed. `Ok` holds each XADD's own answer, in
/// order; `Err`, why none of them is known to be stored.
async fn xadd_all(
    link: &LinkShared,
    pipe: &redis::Pipeline,
    ids: &[String],
) -> Result<Vec<redis::RedisResult<String>>, String> {
    let sent = Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        match link
            .commands
            .query_pipe::<Vec<redis::RedisResult<String>>>(pipe)
            .await
        {
            Ok(results) if results.len() == ids.len() => return Ok(results),
            Ok(results) => {
                return Err(format!(
                    "{} answers to a pipeline of {} XADDs",
                    results.len(),
                    ids.len()
                ))
            }
            Err(e)
                if !is_connection_error(&e) || sent.elapsed() >= link.streams.publish_retry_for =>
            {
                return Err(e.to_string());
            }
            Err(e) => {
                add(&link.counters.export_retries);
                tracing::debug!(
                    first = %ids[0],
                    messages = ids.len(),
                    error = %e,
                    "ringbus-redis: XADD pipeline failed; sending again"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// The handler of one topic's export.
struct TopicExport<T, C> {
    topic: Arc<str>,
    key: String,
    exporter: Exporter<T, C>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> BatchHandler<T> for TopicExport<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            let exported = self.exporter.export(&self.topic, &self.key, batch).await;
            exported.map_err(HandlerError::new)
        }
    }
}

/// The handler of a pattern's export: each batch to its own topic's stream.
impl<T: Send + Sync + 'static, C: Codec<T>> TopicBatchHandler<T> for Exporter<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        topic: &'a str,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            // A topic name a stream key cannot be made of: its messages are not exported.
            if let Err(e) = crate::error::check_name(topic, "topic") {
                let n = batch.len() as u64;
                self.link
                    .counters
                    .export_errors
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(topic, error = %e, messages = batch.len(), "ringbus-redis: messages not exported");
                return Err(HandlerError::new(e));
            }
            let key = self.link.stream_key(topic);
            let exported = self.export(topic, &key, batch).await;
            exported.map_err(HandlerError::new)
        }
    }
}

/// Starts exporting `topic`.
pub(crate) fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    codec: C,
) -> Result<SubscribedExport, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let exporter = TopicExport {
        topic: Arc::from(topic),
        key: link.stream_key(topic),
        exporter: Exporter::<T, C> {
            link: link.clone(),
            codec,
            _message: PhantomData,
        },
    };
    let options = SubscribeOptions::new().name(format!("redis-export:{topic}"));
    let subscription = link.bus.subscribe_batch(topic, options, exporter)?;
    tracing::info!(topic, stream = %link.stream_key(topic), "ringbus-redis: exporting");
    Ok(SubscribedExport {
        engine: "ringbus-redis",
        topic: topic.to_string(),
        subscription,
    })
}

/// Starts exporting every topic `pattern` matches, present and future, each to its own
/// stream.
pub(crate) fn start_pattern<T, C>(
    link: &Arc<LinkShared>,
    pattern: &str,
    codec: C,
) -> Result<SubscribedExport, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let exporter = Exporter::<T, C> {
        link: link.clone(),
        codec,
        _message: PhantomData,
    };
    let options = SubscribeOptions::new().name(format!("redis-export:{pattern}"));
    let subscription = link
        .bus
        .subscribe_pattern_batch(pattern, options, exporter)?;
    tracing::info!(pattern, "ringbus-redis: exporting a pattern");
    Ok(SubscribedExport {
        engine: "ringbus-redis",
        topic: pattern.to_string(),
        subscription,
    })
}
