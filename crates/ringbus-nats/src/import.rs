//! Imports: a task per imported topic publishes what arrives from NATS into the local bus.
//!
//! Core: a subscription (no echo on the connection), or with [`Sharing::Shared`] a queue
//! subscription in the group (the server hands each message to one member); each message is
//! decoded and published with the bus's backpressure, while the client buffers up to
//! `import_buffer` messages.
//! JetStream: a durable pull consumer with explicit acks (`<durable>_<topic>`, or
//! `<group>_<topic>` when shared: instances pulling from one consumer compete for its
//! messages); each message is published with a delivery receipt and settled once every local
//! subscriber has handled it (`ringbus_link::engine::Settlement`): acked; dead-lettered and
//! terminated when a handler gave up on it (after its own retries), so the handlers that
//! succeeded never see it again; nacked with a delay when a subscriber ended before handling
//! it, or the bus refused it (dead-lettered at the last delivery the consumer allows).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt;
use ringbus::{Delivered, Delivery, PublishError, Topic};
use ringbus_link::engine::{ImportTask, Settlement};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::task::AbortOnDropHandle;

use crate::codec::{Codec, ERROR_HEADER, ID_HEADER, NATS_MSG_ID};
use crate::error::LinkError;
use crate::link::LinkShared;
use crate::options::{Mode, Sharing};
use crate::stats::add;
use crate::wire::{decode, origin, BadInput};

/// Decodes a message from NATS for local topic `topic`; a refused one is logged (never with
/// its body) and counted.
pub(crate) fn take<T, C: Codec<T>>(
    link: &LinkShared,
    codec: &C,
    topic: &str,
    subject: &str,
    message: &async_nats::Message,
) -> Result<T, BadInput> {
    let decoded = decode(
        codec,
        topic,
        message.headers.as_ref(),
        &message.payload,
        link.max_message_bytes,
    );
    if let Err(reason) = &decoded {
        add(&link.counters.bad_input);
        tracing::warn!(
            topic = %topic,
            subject = %subject,
            reason = %reason,
            "ringbus-nats: refused a message from NATS"
        );
    }
    decoded
}

/// Starts importing `topic`.
pub(crate) async fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    subject: String,
    mode: Mode,
    sharing: &Sharing,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let local = link.bus.topic::<T>(topic)?;
    let task = match mode {
        Mode::Core => {
            let subscriber = core_subscribe(link, &subject, sharing).await?;
            tokio::spawn(core_loop(link.clone(), local, subject, codec, subscriber))
        }
        Mode::JetStream => {
            let stream = link.stream(&subject).await?;
            let owner = sharing.group().unwrap_or(&link.js.durable);
            let durable = crate::subject::durable_name(&[owner, topic]);
            let config = pull::Config {
                durable_name: Some(durable.clone()),
                filter_subject: subject.clone(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: link.js.ack_wait,
                max_deliver: i64::from(link.js.max_deliver.max(1)),
                max_ack_pending: link.js.max_in_flight.max(1) as i64,
                ..Default::default()
            };
            let consumer: jetstream::consumer::Consumer<pull::Config> = stream
                .get_or_create_consumer(&durable, config.clone())
                .await
                .map_err(|e| LinkError::JetStream(e.to_string()))?;
            // The name keeps only letters, digits and '-' of the topic, so two topics can
            // map to one consumer ("orders.eu" and "orders_eu"): one that already reads
            // another subject is not ours, and reading it would take the other topic's
            // messages (and leave ours unread).
            let reads = &consumer.cached_info().config.filter_subject;
            if *reads != subject {
                return Err(LinkError::JetStream(format!(
                    "the durable consumer \"{durable}\" for topic \"{topic}\" already reads \
                     \"{reads}\", not \"{subject}\": two topics map to that name (it keeps \
                     only letters, digits and '-'); rename one, or import it with another \
                     durable name or group"
                )));
            }
            let allowed = deliveries_allowed(&consumer, &config);
            tokio::spawn(js_loop(
                link.clone(),
                local,
                subject,
                codec,
                consumer,
                allowed,
            ))
        }
    };
    tracing::info!(topic = %topic, ?mode, group = ?sharing.group(), "ringbus-nats: importing");
    Ok(ImportTask::new(task, "ringbus-nats"))
}

/// The deliveries `consumer` allows a message, which the import dead-letters on the last
/// of. A durable consumer that exists keeps its settings: it may be shared with other
/// processes (a group, or one durable name), and the server refuses some changes. Where its
/// `ack_wait`, `max_deliver` or `max_ack_pending` differ from this link's options (`config`),
/// the link follows the consumer's, and says so.
fn deliveries_allowed(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    config: &pull::Config,
) -> i64 {
    let had = &consumer.cached_info().config;
    let kept = (had.ack_wait, had.max_deliver, had.max_ack_pending);
    let asked = (config.ack_wait, config.max_deliver, config.max_ack_pending);
    if kept != asked {
        tracing::warn!(
            consumer = ?config.durable_name,
            ?kept,
            ?asked,
            "ringbus-nats: the durable consumer exists with another ack_wait, max_deliver or \
             max_ack_pending; it keeps them, and this link dead-letters on the last delivery \
             it allows (delete the consumer, or use another durable name, to apply the \
             link's)"
        );
    }
    had.max_deliver
}

/// Subscribes to `subject` (in the queue group, when shared) and waits until the server
/// knows the subscription: a message sent right after the import returns is delivered.
pub(crate) async fn core_subscribe(
    link: &LinkShared,
    subject: &str,
    sharing: &Sharing,
) -> Result<async_nats::Subscriber, LinkError> {
    let subscribed = match sharing {
        Sharing::FanOut => link.client.subscribe(subject.to_string()).await,
        Sharing::Shared(group) => {
            link.client
                .queue_subscribe(subject.to_string(), group.clone())
                .await
        }
    };
    let subscriber = subscribed.map_err(|e| LinkError::Subscribe(e.to_string()))?;
    link.round_trip()
        .await
        .map_err(|e| LinkError::Subscribe(e.to_string()))?;
    Ok(subscriber)
}

async fn core_loop<T, C>(
    link: Arc<LinkShared>,
    local: Topic<T>,
    subject: String,
    codec: C,
    mut subscriber: async_nats::Subscriber,
) where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    loop {
        let message = tokio::select! {
            biased;
            _ = link.stop_imports.cancelled() => break,
            m = subscriber.next() => match m {
                Some(m) => m,
                None => break,
            },
        };
        let Ok(msg) = take(&link, &codec, local.name(), &subject, &message) else {
            continue;
        };
        // Not cancelled by the close: a message taken from NATS is handed over.
        let ctx = crate::otel::context(local.name(), &subject, message.headers.as_ref());
        match local.publish_with(&ctx, msg).await {
            Ok(()) => add(&link.counters.imported),
            Err(e) => {
                tracing::warn!(
                    topic = %local.name(),
                    error = %e,
                    "ringbus-nats: the local bus refused an import; stopping this import"
                );
                break;
            }
        }
    }
    if let Err(e) = subscriber.unsubscribe().await {
        tracing::debug!(error = %e, "ringbus-nats: unsubscribe failed");
    }
}

async fn js_loop<T, C>(
    link: Arc<LinkShared>,
    local: Topic<T>,
    subject: String,
    codec: C,
    consumer: jetstream::consumer::Consumer<pull::Config>,
    allowed: i64,
) where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    // Held messages go to one settler, in order: receipts resolve in position order, so it
    // waits on one at a time. The channel's bound is `max_in_flight`; the settler is aborted
    // with this task if a cut close aborts it.
    let (to_settle, held) = mpsc::channel(link.js.max_in_flight.clamp(1, Semaphore::MAX_PERMITS));
    let settler = AbortOnDropHandle::new(tokio::spawn(settle_in_order(
        link.clone(),
        local.name().to_string(),
        held,
        allowed,
    )));
    let mut retry = Duration::from_millis(100);
    'pull: while !link.stop_imports.is_cancelled() {
        let messages = consumer
            .stream()
            .max_messages_per_batch(link.js.pull_batch.max(1))
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await;
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                add(&link.counters.import_errors);
                tracing::warn!(topic = %local.name(), error = %e, "ringbus-nats: JetStream pull failed; retrying");
                tokio::select! {
                    _ = link.stop_imports.cancelled() => break 'pull,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        loop {
            // At most `max_in_flight` messages held: room taken before pulling the next one.
            let permit = tokio::select! {
                biased;
                _ = link.stop_imports.cancelled() => break 'pull,
                p = to_settle.reserve() => match p {
                    Ok(p) => p,
                    Err(_) => break 'pull,
                },
            };
            let next = tokio::select! {
                biased;
                _ = link.stop_imports.cancelled() => break 'pull,
                m = messages.next() => m,
            };
            let message = match next {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    // A missed heartbeat or a broken pull: start a new stream of pulls (the
                    // durable consumer keeps the place; anything the old stream had buffered
                    // is delivered again after the ack wait).
                    add(&link.counters.import_errors);
                    tracing::warn!(topic = %local.name(), error = %e, "ringbus-nats: JetStream pull error; pulling anew");
                    continue 'pull;
                }
                // The stream of pulls ended (for instance the consumer was recreated):
                // start a new one.
                None => continue 'pull,
            };
            retry = Duration::from_millis(100);
            if origin(message.headers.as_ref()) == Some(link.id.as_str()) {
                // Our own export, back from the stream: not for us.
                add(&link.counters.echo_skipped);
                settle(&link, &message, AckKind::Ack).await;
                continue;
            }
            let msg = match take(&link, &codec, local.name(), &subject, &message) {
                Ok(msg) => msg,
                Err(reason) => {
                    dead_letter(&link, local.name(), &message, &reason.to_string()).await;
                    continue;
                }
            };
            let ctx = crate::otel::context(local.name(), &subject, message.headers.as_ref());
            match local.publish_tracked(&ctx, msg).await {
                Ok(delivery) => {
                    add(&link.counters.imported);
                    link.held.fetch_add(1, Ordering::Relaxed);
                    permit.send((delivery, message));
                }
                Err(PublishError::Closed(_)) => {
                    // The bus is closing: give it back for a later delivery.
                    settle(&link, &message, AckKind::Nak(None)).await;
                    break 'pull;
                }
                Err(e) => {
                    tracing::warn!(topic = %local.name(), error = %e, "ringbus-nats: the local bus refused an import");
                    let why = format!("the local bus refused it: {e}");
                    failed(&link, local.name(), &message, &why, allowed).await;
                }
            }
        }
    }
    // Stop pulling (the stream of pulls is dropped above), then settle what is held.
    drop(to_settle);
    let _ = settler.await;
}

/// Settles held imports in the order they were handed to the bus.
async fn settle_in_order(
    link: Arc<LinkShared>,
    topic: String,
    mut held: mpsc::Receiver<(Delivery, jetstream::Message)>,
    allowed: i64,
) {
    while let Some((delivery, message)) = held.recv().await {
        let outcome = delivery.wait().await;
        settle_outcome(&link, &topic, &message, outcome, allowed).await;
        link.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Acks, nacks or dead-letters one import after the local subscribers handled it (see
/// `Settlement`: a handler that gave up dead-letters it, one that never got it redelivers it).
async fn settle_outcome(
    link: &LinkShared,
    topic: &str,
    message: &jetstream::Message,
    outcome: Delivered,
    allowed: i64,
) {
    match Settlement::of(outcome.subscribers, outcome.failed, outcome.missed) {
        Settlement::Ack => {
            if settle(link, message, AckKind::Ack).await {
                add(&link.counters.acked);
            }
        }
        Settlement::DeadLetter(why) => {
            let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
            dead_letter(
                link,
                topic,
                message,
                &format!("{why} on delivery {delivered}"),
            )
            .await;
        }
        Settlement::Redeliver(why) => failed(link, topic, message, &why, allowed).await,
    }
}

/// A delivery that did not succeed (`why`): dead-lettered if it was the last the consumer
/// allows (`allowed`; the server would not deliver it again), otherwise nacked to come again
/// after the nack delay. A consumer made elsewhere may allow any number (`allowed` below 1).
async fn failed(
    link: &LinkShared,
    topic: &str,
    message: &jetstream::Message,
    why: &str,
    allowed: i64,
) {
    let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
    if allowed > 0 && delivered >= allowed {
        let reason = format!("{why} on delivery {delivered} (the last allowed)");
        dead_letter(link, topic, message, &reason).await;
    } else {
        tracing::debug!(
            topic,
            delivered,
            reason = why,
            "ringbus-nats: a delivery failed; delivering again later"
        );
        if settle(link, message, AckKind::Nak(Some(link.js.nack_delay))).await {
            add(&link.counters.nacked);
        }
    }
}

/// Sends an ack of `kind`; false (logged and counted) if it could not be sent.
async fn settle(link: &LinkShared, message: &jetstream::Message, kind: AckKind) -> bool {
    match message.ack_with(kind).await {
        Ok(()) => true,
        Err(e) => {
            add(&link.counters.ack_errors);
            tracing::warn!(error = %e, "ringbus-nats: could not settle a JetStream message");
            false
        }
    }
}

/// Copies `message` to the dead-letter subject of `topic` (with the reason as a header) and
/// terminates it.
async fn dead_letter(link: &LinkShared, topic: &str, message: &jetstream::Message, reason: &str) {
    let subject = match crate::subject::subject(&link.dead_letter_prefix, topic) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "ringbus-nats: no dead-letter subject");
            settle(link, message, AckKind::Term).await;
            return;
        }
    };
    let mut headers = message.headers.clone().unwrap_or_default();
    // The copy is a message of its own: the original's dedup id would make the stream drop it.
    if let Some(id) = headers.get(NATS_MSG_ID).map(|v| v.to_string()) {
        if let Ok(v) = format!("{id}.dead").parse::<async_nats::HeaderValue>() {
            headers.insert(NATS_MSG_ID, v);
        }
    }
    let one_line: String = reason.chars().filter(|c| !c.is_control()).collect();
    if let Ok(v) = one_line.parse::<async_nats::HeaderValue>() {
        headers.insert(ERROR_HEADER, v);
    }
    let stored = match link
        .jetstream
        .publish_with_headers(subject.clone(), headers, message.payload.clone())
        .await
    {
        Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let id = message
        .headers
        .as_ref()
        .and_then(|h| h.get(ID_HEADER))
        .map(|v| v.to_string());
    match stored {
        Ok(()) => {
            add(&link.counters.dead_lettered);
            tracing::warn!(topic, id = ?id, %subject, reason, "ringbus-nats: message dead-lettered");
            settle(link, message, AckKind::Term).await;
        }
        Err(e) => {
            // Not stored: leave it to the server's redelivery rather than lose it.
            tracing::error!(topic, id = ?id, error = %e, "ringbus-nats: dead-lettering failed; the message will be delivered again");
            settle(link, message, AckKind::Nak(Some(link.js.nack_delay))).await;
        }
    }
}
