//! [`App`]: the service runtime. Collects handlers, starts them, runs until shutdown (a
//! future of yours, Ctrl-C or SIGTERM), then closes the bus with a bounded drain.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::bus::Subscriber;
use crate::context::Context;
use crate::error::Error;
use crate::handler::HandlerOutput;
use crate::stats::CloseReport;
use crate::subscriber::Subscription;
use crate::Bus;

type BoxFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Registration = Box<dyn FnOnce(&Bus) -> Result<Subscription, Error> + Send>;
type Hook = Box<dyn FnOnce(Bus) -> BoxFuture + Send>;

/// Runs a bus as a service: handlers, startup and shutdown hooks, signals, bounded drain.
///
/// ```no_run
/// use ringbus::{subscriber, App, Bus};
///
/// #[derive(Debug)]
/// struct Order { id: u64 }
///
/// #[subscriber("orders")]
/// async fn audit(order: &Order) { tracing::info!(id = order.id, "audited"); }
///
/// #[tokio::main]
/// async fn main() -> Result<(), ringbus::Error> {
///     let bus = Bus::new();
///     // tokio::spawn(http_server(bus.clone()));   // publishers live beside it
///     App::new(bus).register(audit).run().await?; // until Ctrl-C / SIGTERM, then drains
///     Ok(())
/// }
/// ```
#[must_use = "an App does nothing until `.run().await`"]
pub struct App {
    bus: Bus,
    registrations: Vec<Registration>,
    startup: Vec<Hook>,
    shutdown_hooks: Vec<Hook>,
    shutdown: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    signals: bool,
    drain_timeout: Duration,
    phase: Arc<AtomicU8>,
}

impl App {
    /// Default bound on the drain at shutdown.
    pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

    /// An app around `bus`.
    pub fn new(bus: Bus) -> Self {
        Self {
            bus,
            registrations: Vec::new(),
            startup: Vec::new(),
            shutdown_hooks: Vec::new(),
            shutdown: None,
            signals: true,
            drain_timeout: Self::DEFAULT_DRAIN_TIMEOUT,
            phase: Arc::new(AtomicU8::new(STARTING)),
        }
    }

    /// A probe of this app's state for the service's health endpoint: take it before
    /// [`run`](Self::run) and ask it any time, from any task.
    ///
    /// ```
    /// use ringbus::{App, Bus, HealthStatus};
    ///
    /// let app = App::new(Bus::new());
    /// let health = app.health();
    /// assert_eq!(health.status(), HealthStatus::Starting);
    /// // tokio::spawn(serve_health(health)); app.run().await
    /// ```
    pub fn health(&self) -> Health {
        Health {
            phase: self.phase.clone(),
            bus: self.bus.clone(),
        }
    }

    /// The bus, to clone into publishers.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Adds a handler (such as one made by `#[subscriber]`); registered when the app runs.
    pub fn register<S: Subscriber>(mut self, subscriber: S) -> Self {
        self.registrations
            .push(Box::new(move |bus: &Bus| bus.register(subscriber)));
        self
    }

    /// Runs `hook` after the handlers are registered and before the app waits for shutdown.
    /// An `Err` stops the app (and closes the bus).
    pub fn on_startup<F, Fut>(mut self, hook: F) -> Self
    where
        F: FnOnce(Bus) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: HandlerOutput,
    {
        self.startup.push(hook_box(hook));
        self
    }

    /// Runs `hook` when shutdown begins, before the bus closes (publishers can still publish).
    pub fn on_shutdown<F, Fut>(mut self, hook: F) -> Self
    where
        F: FnOnce(Bus) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: HandlerOutput,
    {
        self.shutdown_hooks.push(hook_box(hook));
        self
    }

    /// Shuts down when `signal` completes (as well as on Ctrl-C / SIGTERM, unless
    /// [`without_signals`](Self::without_signals)).
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// Does not listen for Ctrl-C / SIGTERM (tests, or a service that handles them itself).
    pub fn without_signals(mut self) -> Self {
        self.signals = false;
        self
    }

    /// Bounds the drain at shutdown (default 30 s): subscribers still busy then are aborted
    /// and listed in the report.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Registers the handlers, runs the startup hooks, waits for shutdown, runs the shutdown
    /// hooks, then closes the bus with the drain timeout and logs the close report and the
    /// bus's counters (the [`BusStats`](crate::BusStats) table, at `info`).
    ///
    /// Runs on a tokio runtime with time and signals enabled (`#[tokio::main]` enables both):
    /// the drain timeout is a tokio timer.
    ///
    /// # Errors
    ///
    /// A registration or startup hook failing (the bus is closed before returning).
    ///
    /// # Panics
    ///
    /// On a runtime built without time (`enable_time`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping it mid-way leaves the bus open (or half closed); call
    /// [`Bus::close`] then.
    pub async fn run(self) -> Result<CloseReport, Error> {
        let App {
            bus,
            registrations,
            startup,
            shutdown_hooks,
            shutdown,
            signals,
            drain_timeout,
            phase,
        } = self;
        // `Stopped` however `run` ends: returned, failed, or dropped mid-way.
        let phase = PhaseGuard(phase);
        let mut subscriptions = Vec::with_capacity(registrations.len());
        for register in registrations {
            match register(&bus) {
                Ok(sub) => subscriptions.push(sub),
                Err(e) => {
                    tracing::error!(error = %e, "ringbus app: a handler could not be registered");
                    bus.close().await;
                    return Err(e);
                }
            }
        }
        for hook in startup {
            if let Err(message) = hook(bus.clone()).await {
                tracing::error!(error = %message, "ringbus app: a startup hook failed");
                bus.close().await;
                return Err(Error::Hook(message));
            }
        }
        phase.set(RUNNING);
        tracing::info!(handlers = subscriptions.len(), "ringbus app running");

        let own = async move {
            match shutdown {
                Some(signal) => signal.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = own => tracing::info!("ringbus app: shutdown requested"),
            _ = os_signal(signals) => tracing::info!("ringbus app: shutdown signal received"),
        }

        phase.set(DRAINING);
        for hook in shutdown_hooks {
            if let Err(message) = hook(bus.clone()).await {
                tracing::warn!(error = %message, "ringbus app: a shutdown hook failed");
            }
        }
        let report = bus
            .close_with(&Context::new().with_timeout(drain_timeout))
            .await;
        if report.complete {
            tracing::info!("ringbus app: drained and closed");
        } else {
            for u in &report.unfinished {
                tracing::warn!(
                    topic = %u.topic,
                    subscriber = %u.subscriber,
                    unhandled = u.messages,
                    still_running = u.running,
                    "ringbus app: drain timed out"
                );
            }
        }
        drop(subscriptions);
        tracing::info!("ringbus app: counters at shutdown\n{}", bus.stats());
        Ok(report)
    }
}

const STARTING: u8 = 0;
const RUNNING: u8 = 1;
const DRAINING: u8 = 2;
const STOPPED: u8 = 3;

/// Sets the app's phase as `run` goes, and `Stopped` when `run` ends or is dropped.
struct PhaseGuard(Arc<AtomicU8>);

impl PhaseGuard {
    fn set(&self, phase: u8) {
        self.0.store(phase, Ordering::Release);
    }
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        self.set(STOPPED);
    }
}

/// A probe of an [`App`]'s state, from [`App::health`]: cheap to clone, for a service's
/// health or readiness endpoint.
#[derive(Clone)]
pub struct Health {
    phase: Arc<AtomicU8>,
    bus: Bus,
}

impl Health {
    /// Where the app is. While it runs, this reads the bus's counters
    /// ([`Bus::stats`](crate::Bus::stats), which allocates) to find detached subscribers.
    pub fn status(&self) -> HealthStatus {
        match self.phase.load(Ordering::Acquire) {
            STARTING => HealthStatus::Starting,
            RUNNING => {
                let detached: Vec<String> = self
                    .bus
                    .stats()
                    .topics
                    .into_iter()
                    .flat_map(|t| {
                        let topic = t.name;
                        t.subscribers
                            .into_iter()
                            .filter(|s| s.detached)
                            .map(move |s| format!("{topic}/{}", s.name))
                    })
                    .collect();
                if detached.is_empty() {
                    HealthStatus::Running
                } else {
                    HealthStatus::Degraded { detached }
                }
            }
            DRAINING => HealthStatus::Draining,
            _ => HealthStatus::Stopped,
        }
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("phase", &self.phase.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What [`Health::status`] says of an [`App`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthStatus {
    /// `run` has not yet registered every handler and run the startup hooks (or has not been
    /// called).
    Starting,
    /// Running, every subscriber taking messages.
    Running,
    /// Running, but these subscribers (`topic/name`) were detached after a stall (see
    /// [`BusBuilder::stall_timeout`](crate::BusBuilder::stall_timeout)): their topics'
    /// messages no longer reach them.
    Degraded {
        /// The detached subscribers, `topic/name`.
        detached: Vec<String>,
    },
    /// Shutdown has begun: shutdown hooks, then the drain.
    Draining,
    /// `run` has returned (or failed, or was dropped).
    Stopped,
}

impl HealthStatus {
    /// True while the app runs with every subscriber taking messages: what a readiness probe
    /// should report as ready.
    pub fn is_healthy(&self) -> bool {
        matches!(self, Self::Running)
    }
}

fn hook_box<F, Fut>(hook: F) -> Hook
where
    F: FnOnce(Bus) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: HandlerOutput,
{
    Box::new(move |bus| {
        Box::pin(async move { hook(bus).await.into_result().map_err(|e| e.to_string()) })
    })
}

/// Completes on Ctrl-C or (on Unix) SIGTERM; never if `enabled` is false or listening fails.
async fn os_signal(enabled: bool) {
    if !enabled {
        return std::future::pending().await;
    }
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("handlers", &self.registrations.len())
            .field("startup_hooks", &self.startup.len())
            .field("shutdown_hooks", &self.shutdown_hooks.len())
            .field("signals", &self.signals)
            .field("drain_timeout", &self.drain_timeout)
            .finish_non_exhaustive()
    }
}
