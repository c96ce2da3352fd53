//! [`App`]: the service runtime. Collects handlers, starts them, runs until shutdown (a
//! future of yours, Ctrl-C or SIGTERM), then closes the bus with a bounded drain.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::context::Context;
use crate::error::Error;
use crate::handler::{HandlerOutput, Subscriber};
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
        } = self;
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
