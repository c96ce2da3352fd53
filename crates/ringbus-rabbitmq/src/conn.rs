//! The link's connection to RabbitMQ, made again after it is lost.
//!
//! Every part of a link takes its channels from one `Conn`: a channel on the live
//! connection, or, when that connection is gone, on a new one. A lost connection is noticed
//! where it is used next (a channel asked for, or an operation that failed), counted once,
//! and replaced at the next request; the caller decides how long to wait before asking again.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties, Consumer};

use crate::stats::{add, ConnectionState, Counters};

/// A connection made on demand and made again after it is lost.
pub(crate) struct Conn {
    url: String,
    name: String,
    timeout: Duration,
    counters: Arc<Counters>,
    /// The connection in use, if one was made and not yet found lost. Under an async mutex:
    /// one connect at a time.
    current: tokio::sync::Mutex<Option<Live>>,
}

/// A live connection, the channels opened on it that are still open, and the consumers
/// started on those.
///
/// They are kept so that none is closed by its last handle being dropped: lapin closes such
/// a channel (or cancels such a consumer) from a task of its own, and when that task runs
/// after the connection began to close, the close fails and takes the connection down in
/// an error instead of the server's `close-ok` (the connection's close then fails, or, now
/// and then, is never answered). What is kept closes with its connection, or is closed by
/// its user.
struct Live {
    connection: Connection,
    /// Each channel with the consumer started on it, if one was (an import's channel carries
    /// one consumer).
    channels: Vec<(Channel, Option<Consumer>)>,
}

impl Live {
    /// `channel`, kept until the connection closes; those no longer open are let go, with
    /// their consumers.
    fn keep(&mut self, channel: &Channel) {
        self.channels.retain(|(kept, _)| kept.status().connected());
        self.channels.push((channel.clone(), None));
    }
}

impl Conn {
    pub(crate) fn new(
        url: String,
        name: String,
        timeout: Duration,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            url,
            name,
            timeout,
            counters,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// A new channel on the live connection, connecting first if there is none (or the one
    /// there was is lost).
    pub(crate) async fn channel(&self) -> Result<Channel, String> {
        let mut current = self.current.lock().await;
        if let Some(live) = current.as_mut() {
            if live.connection.status().connected() {
                match live.connection.create_channel().await {
                    Ok(channel) => {
                        live.keep(&channel);
                        return Ok(channel);
                    }
                    Err(e) if live.connection.status().connected() => return Err(e.to_string()),
                    Err(_) => {}
                }
            }
            self.lost(&mut current);
        }
        let properties =
            ConnectionProperties::default().with_connection_name(self.name.as_str().into());
        let connection =
            match tokio::time::timeout(self.timeout, Connection::connect(&self.url, properties))
                .await
            {
                Ok(Ok(connection)) => connection,
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("no connection within {:?}", self.timeout)),
            };
        add(&self.counters.connects);
        self.counters.state.set(ConnectionState::Connected);
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        *current = Some(Live {
            connection,
            channels: vec![(channel.clone(), None)],
        });
        Ok(channel)
    }

    /// Keeps `consumer`, started on `channel`, until the connection closes (see [`Live`]),
    /// if `channel` is one of the connection's.
    pub(crate) async fn keep_consumer(&self, channel: &Channel, consumer: &Consumer) {
        if let Some(live) = self.current.lock().await.as_mut() {
            let kept = live
                .channels
                .iter_mut()
                .find(|(kept, _)| kept.id() == channel.id());
            if let Some((_, kept_consumer)) = kept {
                *kept_consumer = Some(consumer.clone());
            }
        }
    }

    /// How many channels the connection in use allows, as negotiated (a server without a
    /// limit: 65,535); `None` when there is none.
    pub(crate) async fn channel_max(&self) -> Option<u16> {
        let current = self.current.lock().await;
        current
            .as_ref()
            .map(|live| live.connection.configuration().channel_max())
    }

    /// Whether the connection in use is still up (false when there is none).
    pub(crate) async fn check(&self) -> bool {
        let mut current = self.current.lock().await;
        match current.as_ref() {
            Some(live) if live.connection.status().connected() => true,
            Some(_) => {
                self.lost(&mut current);
                false
            }
            None => false,
        }
    }

    /// Forgets a connection found lost, counting it once.
    fn lost(&self, current: &mut Option<Live>) {
        if current.take().is_some() {
            add(&self.counters.disconnects);
            self.counters.state.set(ConnectionState::Disconnected);
            tracing::warn!(link = %self.name, "ringbus-rabbitmq: the connection was lost; connecting again");
        }
    }

    /// Closes the connection (its channels with it: RabbitMQ delivers again what they held
    /// unacknowledged). False if the close failed: the connection ended without the
    /// server's `close-ok`, and what was still queued for it may not have been sent.
    pub(crate) async fn close(&self) -> bool {
        let live = self.current.lock().await.take();
        let closed = match &live {
            Some(live) if live.connection.status().connected() => {
                let closed = live
                    .connection
                    .close(200, "ringbus link closed".into())
                    .await;
                if let Err(e) = &closed {
                    tracing::warn!(link = %self.name, error = %e, "ringbus-rabbitmq: closing the connection failed");
                }
                closed.is_ok()
            }
            // Never made, or lost: nothing is left to close.
            _ => true,
        };
        // Let go of the channels only now: they closed with the connection.
        drop(live);
        self.counters.state.set(ConnectionState::Disconnected);
        closed
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("name", &self.name)
            .field("state", &self.counters.state.get())
            .finish_non_exhaustive()
    }
}
