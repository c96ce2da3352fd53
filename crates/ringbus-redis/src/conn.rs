//! A multiplexed connection that reconnects on the next command after it was lost.
//!
//! The `redis` crate's `MultiplexedConnection` pipelines every clone's commands over one
//! socket, and fails every command once that socket is gone; its connection manager (which
//! reconnects) is a feature with three more dependencies. This is the part of it the link
//! needs: [`Conn::get`] hands out the current connection (a cheap clone) or makes one;
//! [`Conn::lost`] forgets the connection a command failed on, so the next `get` makes a new
//! one.
//!
//! Invariants: `current` holds the connection of generation `generation` or nothing; it is
//! only replaced under its lock, which `get` holds while connecting (one connect at a time,
//! and callers that wait for it get the connection it made). `lost(g)` forgets the connection
//! only if it is still generation `g`: a command that failed on an older connection cannot
//! drop a newer one that works.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, Pipeline, RedisError};

use crate::stats::{add, ConnectionState, Counters};

/// A connection of one generation: what a command ran on, so a failure can be reported
/// against it.
pub(crate) struct Lease {
    pub(crate) connection: MultiplexedConnection,
    generation: u64,
}

pub(crate) struct Conn {
    client: Client,
    config: AsyncConnectionConfig,
    current: tokio::sync::Mutex<Option<Lease>>,
    counters: Arc<Counters>,
    /// Shown in the logs: `commands` or `reads:<topic>`.
    role: String,
}

impl Conn {
    /// A connection to `client`'s server whose commands fail after `response_timeout`
    /// (`None`: never).
    pub(crate) fn new(
        client: Client,
        connection_timeout: Duration,
        response_timeout: Option<Duration>,
        counters: Arc<Counters>,
        role: String,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connection_timeout))
            .set_response_timeout(response_timeout);
        Self {
            client,
            config,
            current: tokio::sync::Mutex::new(None),
            counters,
            role,
        }
    }

    /// The current connection, or a new one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while connecting, the connection being made is dropped and the
    /// next call makes another.
    pub(crate) async fn get(&self) -> Result<Lease, RedisError> {
        let mut current = self.current.lock().await;
        if let Some(lease) = &*current {
            return Ok(Lease {
                connection: lease.connection.clone(),
                generation: lease.generation,
            });
        }
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let generation = current.as_ref().map_or(0, |l| l.generation) + 1;
        add(&self.counters.connects);
        self.counters.state.set(ConnectionState::Connected);
        tracing::debug!(role = %self.role, "ringbus-redis: connected");
        *current = Some(Lease {
            connection: connection.clone(),
            generation,
        });
        Ok(Lease {
            connection,
            generation,
        })
    }

    /// Reports that a command on `lease` failed with `error`: a lost or timed-out connection
    /// is forgotten (and counted), so the next [`get`](Self::get) reconnects. A reply error
    /// (such as `NOGROUP`) leaves the connection alone.
    pub(crate) async fn failed(&self, lease: &Lease, error: &RedisError) {
        if !is_connection_error(error) {
            return;
        }
        let mut current = self.current.lock().await;
        if current
            .as_ref()
            .is_some_and(|l| l.generation == lease.generation)
        {
            *current = None;
            add(&self.counters.disconnects);
            self.counters.state.set(ConnectionState::Disconnected);
            tracing::warn!(role = %self.role, error = %error, "ringbus-redis: connection lost; reconnecting");
        }
    }

    /// Runs `cmd` once: on the current connection, reporting a failure.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense of a dropped command: the command may or may not have run.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        let mut lease = self.get().await?;
        let result = cmd.query_async(&mut lease.connection).await;
        if let Err(e) = &result {
            self.failed(&lease, e).await;
        }
        result
    }

    /// Runs `pipe` once (atomically if it was built with `atomic()`).
    ///
    /// # Cancel safety
    ///
    /// As [`query`](Self::query).
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        pipe: &Pipeline,
    ) -> Result<T, RedisError> {
        let mut lease = self.get().await?;
        let result = pipe.query_async(&mut lease.connection).await;
        if let Err(e) = &result {
            self.failed(&lease, e).await;
        }
        result
    }
}

/// True for the errors after which the connection is not to be used again.
pub(crate) fn is_connection_error(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}
