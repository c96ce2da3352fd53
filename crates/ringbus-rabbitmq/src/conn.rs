//! The link's connection to RabbitMQ, made again after it is lost.
//!
//! Every part of a link takes its channels from one `Conn`: a channel on the live
//! connection, or, when that connection is gone, on a new one. A lost connection is noticed
//! where it is used next (a channel asked for, or an operation that failed), counted once,
//! and replaced at the next request; the caller decides how long to wait before asking again.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};

use crate::stats::{add, ConnectionState, Counters};

/// A connection made on demand and made again after it is lost.
pub(crate) struct Conn {
    url: String,
    name: String,
    timeout: Duration,
    counters: Arc<Counters>,
    /// The connection in use, if one was made and not yet found lost. Under an async mutex:
    /// one connect at a time.
    current: tokio::sync::Mutex<Option<Connection>>,
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
        if let Some(connection) = current.as_ref() {
            if connection.status().connected() {
                match connection.create_channel().await {
                    Ok(channel) => return Ok(channel),
                    Err(e) if connection.status().connected() => return Err(e.to_string()),
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
        *current = Some(connection);
        Ok(channel)
    }

    /// Whether the connection in use is still up (false when there is none).
    pub(crate) async fn check(&self) -> bool {
        let mut current = self.current.lock().await;
        match current.as_ref() {
            Some(connection) if connection.status().connected() => true,
            Some(_) => {
                self.lost(&mut current);
                false
            }
            None => false,
        }
    }

    /// Forgets a connection found lost, counting it once.
    fn lost(&self, current: &mut Option<Connection>) {
        if current.take().is_some() {
            add(&self.counters.disconnects);
            self.counters.state.set(ConnectionState::Disconnected);
            tracing::warn!(link = %self.name, "ringbus-rabbitmq: the connection was lost; connecting again");
        }
    }

    /// Closes the connection (its channels with it: RabbitMQ delivers again what they held
    /// unacknowledged).
    pub(crate) async fn close(&self) {
        if let Some(connection) = self.current.lock().await.take() {
            if let Err(e) = connection.close(200, "ringbus link closed".into()).await {
                tracing::debug!(error = %e, "ringbus-rabbitmq: closing the connection failed");
            }
        }
        self.counters.state.set(ConnectionState::Disconnected);
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
