//! Exports: a bus subscriber per exported topic adds each local message to the topic's
//! stream.
//!
//! The handler encodes the message and sends one `XADD <prefix>:<topic> [MAXLEN [~] n] *
//! field value ...`, and returns once Redis has answered: the subscriber's queue is the
//! export's buffer, the bus's backpressure its flow control, and the topic's order is the
//! stream's order. While Redis is unreachable the XADD is sent again (after a reconnect),
//! for up to `publish_retry_for`. A send whose answer was lost may have been stored: the
//! re-sent copy carries the same message id, which the importers' dedup window drops.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ringbus::{Handler, HandlerError, SubscribeOptions, Subscription};
use ringbus_link::Codec;
use tokio::time::Instant;

use crate::conn::is_connection_error;
use crate::error::LinkError;
use crate::link::LinkShared;
use crate::stats::add;
use crate::wire::{encode, ExportError, Outgoing};

/// What `close` needs of a running export.
pub(crate) struct ExportTask {
    topic: String,
    subscription: Subscription,
}

impl ExportTask {
    /// Unsubscribes: the subscriber first hands over (adds to the stream) everything queued
    /// for it. `Err(n)`: at most `n` exports were not added at the deadline.
    pub(crate) async fn finish(self, deadline: Instant) -> Result<(), u64> {
        let queued = self.subscription.stats().lag;
        let unsubscribed = tokio::time::timeout_at(deadline, self.subscription.unsubscribe());
        if unsubscribed.await.is_err() {
            tracing::warn!(topic = %self.topic, "ringbus-redis close: export not flushed in time");
            return Err(queued.max(1));
        }
        Ok(())
    }

    /// Stops waiting at once (the export stays subscribed until the bus closes); returns how
    /// many exports were still queued.
    pub(crate) fn abort(self) -> u64 {
        self.subscription.stats().lag
    }
}

/// The handler of an export subscriber.
struct Exporter<T, C> {
    link: Arc<LinkShared>,
    topic: Arc<str>,
    key: String,
    codec: C,
    _message: PhantomData<fn(&T)>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> Exporter<T, C> {
    async fn export(&self, msg: &T) -> Result<(), ExportError> {
        if self.codec.is_imported(msg) {
            add(&self.link.counters.echo_skipped);
            return Ok(());
        }
        let message = encode(
            &self.codec,
            msg,
            &self.topic,
            &self.link.id,
            self.link.max_message_bytes,
        )?;
        xadd(&self.link, &self.key, &message).await?;
        add(&self.link.counters.exported);
        Ok(())
    }
}

/// The XADD of `message` to `key`, trimmed as the link's options say.
pub(crate) fn xadd_cmd(link: &LinkShared, key: &str, fields: &[(String, Vec<u8>)]) -> redis::Cmd {
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

/// Sends the XADD of `message`, again after each lost connection, until Redis answers or
/// `publish_retry_for` has passed.
async fn xadd(link: &LinkShared, key: &str, message: &Outgoing) -> Result<(), ExportError> {
    let cmd = xadd_cmd(link, key, &message.fields);
    let sent = Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        match link.commands.query::<String>(&cmd).await {
            Ok(_entry) => return Ok(()),
            Err(e)
                if !is_connection_error(&e) || sent.elapsed() >= link.streams.publish_retry_for =>
            {
                return Err(ExportError::Send(e.to_string()));
            }
            Err(e) => {
                add(&link.counters.export_retries);
                tracing::debug!(id = %message.id, error = %e, "ringbus-redis: XADD failed; sending again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl<T: Send + Sync + 'static, C: Codec<T>> Handler<T> for Exporter<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            self.export(msg).await.map_err(|e| {
                add(&self.link.counters.export_errors);
                tracing::warn!(
                    topic = %self.topic,
                    stream = %self.key,
                    error = %e,
                    "ringbus-redis: message not exported"
                );
                HandlerError::new(e)
            })
        }
    }
}

/// Starts exporting `topic`.
pub(crate) fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    codec: C,
) -> Result<ExportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let exporter = Exporter::<T, C> {
        link: link.clone(),
        topic: Arc::from(topic),
        key: link.stream_key(topic),
        codec,
        _message: PhantomData,
    };
    let options = SubscribeOptions::new().name(format!("redis-export:{topic}"));
    let subscription = link.bus.subscribe_with(topic, options, exporter)?;
    tracing::info!(topic, stream = %link.stream_key(topic), "ringbus-redis: exporting");
    Ok(ExportTask {
        topic: topic.to_string(),
        subscription,
    })
}
