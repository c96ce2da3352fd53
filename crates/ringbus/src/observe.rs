//! What the bus tells an operator beyond [`Bus::stats`](crate::Bus::stats): a `tracing` span
//! per handler call, events for the publishes that wait or are cancelled, and (feature
//! `metrics`) counters, a gauge and a histogram through the `metrics` facade.
//!
//! # Spans and events
//!
//! Every handler call runs inside a `ringbus.handle` span at `DEBUG` (fields `topic`,
//! `subscriber`, `position`, and `messages` for a batch handler), entered around each poll of
//! the handler's future; a failed call records `error` or `panic` on it. A publish that waits
//! for room records a `DEBUG` event with the time it waited (`waited`); one that is cancelled
//! records one with the time it had waited when it was. With nobody listening at `DEBUG`, a
//! handler call makes no span at all: a subscriber task looks at tracing's level
//! (`subscriber::span::spans_wanted`) only where it would wait, and runs the plain form of its
//! loop, without span code, until then (`subscriber::task::run_loop`). With a subscriber that
//! wants `DEBUG` but not this span, the callsite's cached interest answers and, again, the call
//! runs without a span. The events are made on the waiting paths only. The costs, measured:
//! `docs/benchmarks/observability.md`.
//!
//! # Metrics (feature `metrics`)
//!
//! The handles are resolved from the installed recorder once: a topic's when the topic is
//! made, a subscriber's when it subscribes. A message costs an increment of a resolved handle
//! (and, per handler call, two clock reads, a histogram record and a gauge set), never a
//! lookup by name. A recorder installed after a topic was made is not seen by that topic's
//! handles: install it first, as `metrics` asks of every library. The names follow
//! OpenTelemetry's messaging semantic conventions where one exists:
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `messaging.client.sent.messages` | counter | messages published (accepted) |
//! | `ringbus.topic.unrouted` | counter | of those, published while the topic had no subscriber |
//! | `ringbus.topic.full` | counter | publishes that found the topic full (`try_publish` refused with `Full`, or a publish that waited for room) |
//! | `ringbus.topic.cancelled` | counter | publishes cancelled through their `Context` |
//! | `messaging.client.consumed.messages` | counter | messages handled, whatever the handler returned |
//! | `ringbus.subscriber.errors` | counter | handler calls that returned `Err` |
//! | `ringbus.subscriber.panics` | counter | handler calls that panicked |
//! | `ringbus.subscriber.detached` | counter | 1 once the subscriber was detached after a stall |
//! | `ringbus.subscriber.lag` | gauge | messages published for the subscriber and not yet handled, as of its last handler call |
//! | `messaging.process.duration` | histogram (seconds) | handler call durations (`error.type` is `handler_error` or `panic` for failed calls) |
//!
//! Every metric has the labels `messaging.system` (`ringbus`) and `messaging.destination.name`
//! (the topic); a subscriber's also `messaging.destination.subscription.name` (its name), and
//! the three semantic-convention ones `messaging.operation.name` (`publish` or `process`).
//! The counters count the same events as [`BusStats`](crate::BusStats), at the same places;
//! `Bus::stats` stays the way to read them without a recorder.
//!
//! Without the feature, [`TopicMetrics`] and [`SubMetrics`] are empty and every method is an
//! empty inline function: the hot path has no metric code at all.

/// A section of code that holds the topic registry's locks (a topic being made, a pattern
/// following topics): the events raised in it are emitted when the outermost section ends,
/// once those locks are released.
///
/// A tracing layer runs inside every event, and it may publish to the bus, which may make a
/// topic, which takes those locks; they are not re-entrant, so an event emitted under them
/// would hang such a layer the first time it ran. Enter the section before taking the locks
/// and drop it after releasing them; raise the events with [`emit`].
#[derive(Debug)]
pub(crate) struct Held {
    /// Thread-bound: the held events live in this thread's storage.
    _thread: std::marker::PhantomData<*const ()>,
}

/// An event held back, to be emitted when its section ends.
type HeldEvent = Box<dyn FnOnce()>;

thread_local! {
    /// How many sections this thread is in, and the events they hold.
    static HELD: std::cell::RefCell<(usize, Vec<HeldEvent>)> =
        const { std::cell::RefCell::new((0, Vec::new())) };
}

impl Held {
    pub(crate) fn enter() -> Self {
        HELD.with_borrow_mut(|(depth, _)| *depth += 1);
        Self {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let events = HELD.with_borrow_mut(|(depth, events)| {
            *depth -= 1;
            if *depth == 0 {
                std::mem::take(events)
            } else {
                Vec::new()
            }
        });
        // Unwinding, a layer that panicked again would abort the process: the events go.
        if !std::thread::panicking() {
            // Each runs with nothing borrowed: its layer may enter a section of its own.
            for event in events {
                event();
            }
        }
    }
}

/// Runs `event` (a `tracing` macro call) now, or, inside a [`Held`] section, when it ends.
pub(crate) fn emit(event: impl FnOnce() + 'static) {
    let event = HELD.with_borrow_mut(|(depth, events)| {
        if *depth == 0 {
            return Some(event);
        }
        events.push(Box::new(event));
        None
    });
    if let Some(event) = event {
        event();
    }
}

/// A publish on `topic` waited `waited` for room and got it.
#[cold]
pub(crate) fn waited(topic: &str, waited: std::time::Duration) {
    tracing::debug!(topic, ?waited, "ringbus publish waited for room");
}

/// A publish on `topic` was cancelled through its context after waiting `waited` (zero when
/// the context had ended before it began).
#[cold]
pub(crate) fn cancelled(topic: &str, waited: std::time::Duration) {
    tracing::debug!(
        topic,
        ?waited,
        "ringbus publish cancelled; the message was given back"
    );
}

/// How a handler call ended, for the duration histogram.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    Ok,
    Error,
    Panic,
}

#[cfg(feature = "metrics")]
pub(crate) use enabled::{SubMetrics, TopicMetrics};

#[cfg(not(feature = "metrics"))]
pub(crate) use disabled::{SubMetrics, TopicMetrics};

#[cfg(feature = "metrics")]
mod enabled {
    use metrics::{Counter, Gauge, Histogram, Label, Unit};
    use tokio::time::Instant;

    use super::Outcome;

    const SYSTEM: (&str, &str) = ("messaging.system", "ringbus");
    const TOPIC: &str = "messaging.destination.name";
    const SUBSCRIPTION: &str = "messaging.destination.subscription.name";
    const OPERATION: &str = "messaging.operation.name";

    /// `labels`, owned by the recorder's keys.
    fn owned(labels: &[(&str, &str)]) -> Vec<Label> {
        labels
            .iter()
            .map(|&(k, v)| Label::new(k.to_owned(), v.to_owned()))
            .collect()
    }

    /// A topic's metric handles, resolved when the topic is made.
    #[derive(Debug)]
    pub(crate) struct TopicMetrics {
        published: Counter,
        unrouted: Counter,
        full: Counter,
        cancelled: Counter,
    }

    impl TopicMetrics {
        pub(crate) fn new(topic: &str) -> Self {
            metrics::describe_counter!("messaging.client.sent.messages", "Messages published.");
            metrics::describe_counter!(
                "ringbus.topic.unrouted",
                "Messages published while the topic had no subscriber."
            );
            metrics::describe_counter!(
                "ringbus.topic.full",
                "Publishes that found the topic full (refused, or waited for room)."
            );
            metrics::describe_counter!(
                "ringbus.topic.cancelled",
                "Publishes cancelled through their context."
            );
            let labels = [SYSTEM, (TOPIC, topic), (OPERATION, "publish")];
            // The semantic-convention metric carries the operation; ours do not.
            let counter = |name: &'static str| metrics::counter!(name, owned(&labels[..2]));
            Self {
                published: metrics::counter!("messaging.client.sent.messages", owned(&labels)),
                unrouted: counter("ringbus.topic.unrouted"),
                full: counter("ringbus.topic.full"),
                cancelled: counter("ringbus.topic.cancelled"),
            }
        }

        #[inline]
        pub(crate) fn published(&self, n: u64) {
            self.published.increment(n);
        }

        pub(crate) fn unrouted(&self, n: u64) {
            self.unrouted.increment(n);
        }

        pub(crate) fn full(&self) {
            self.full.increment(1);
        }

        pub(crate) fn cancelled(&self) {
            self.cancelled.increment(1);
        }
    }

    /// A subscriber's metric handles, resolved when it subscribes.
    #[derive(Debug)]
    pub(crate) struct SubMetrics {
        handled: Counter,
        errors: Counter,
        panics: Counter,
        detached: Counter,
        lag: Gauge,
        /// `messaging.process.duration` of the calls that returned `Ok`, returned `Err`,
        /// panicked.
        duration: [Histogram; 3],
    }

    /// When a handler call began.
    pub(crate) type Clock = Instant;

    impl SubMetrics {
        pub(crate) fn new(topic: &str, subscriber: &impl std::ops::Deref<Target = str>) -> Self {
            // The name's string is made here (a label needs it), only with metrics on.
            let subscriber: &str = subscriber;
            metrics::describe_counter!(
                "messaging.client.consumed.messages",
                "Messages handled, whatever the handler returned."
            );
            metrics::describe_counter!(
                "ringbus.subscriber.errors",
                "Handler calls that returned an error."
            );
            metrics::describe_counter!("ringbus.subscriber.panics", "Handler calls that panicked.");
            metrics::describe_counter!(
                "ringbus.subscriber.detached",
                "1 once the subscriber was detached after a stall."
            );
            metrics::describe_gauge!(
                "ringbus.subscriber.lag",
                "Messages published for the subscriber and not yet handled."
            );
            metrics::describe_histogram!(
                "messaging.process.duration",
                Unit::Seconds,
                "Handler call durations."
            );
            let labels = [
                SYSTEM,
                (TOPIC, topic),
                (SUBSCRIPTION, subscriber),
                (OPERATION, "process"),
            ];
            // The three semantic-convention metrics carry the operation; ours do not.
            let ours = owned(&labels[..3]);
            let duration = |error: Option<&'static str>| {
                let mut labels = owned(&labels);
                if let Some(error) = error {
                    labels.push(Label::new("error.type", error));
                }
                metrics::histogram!("messaging.process.duration", labels)
            };
            Self {
                handled: metrics::counter!("messaging.client.consumed.messages", owned(&labels)),
                errors: metrics::counter!("ringbus.subscriber.errors", ours.clone()),
                panics: metrics::counter!("ringbus.subscriber.panics", ours.clone()),
                detached: metrics::counter!("ringbus.subscriber.detached", ours.clone()),
                lag: metrics::gauge!("ringbus.subscriber.lag", ours),
                duration: [
                    duration(None),
                    duration(Some("handler_error")),
                    duration(Some("panic")),
                ],
            }
        }

        #[inline]
        pub(crate) fn clock(&self) -> Clock {
            Instant::now()
        }

        /// A handler call that began at `began` handled `n` messages and ended as `outcome()`
        /// says; `lag()` are left. (Closures, so that nothing is computed without the
        /// feature.)
        #[inline]
        pub(crate) fn handled(
            &self,
            began: Clock,
            n: u64,
            outcome: impl FnOnce() -> Outcome,
            lag: impl FnOnce() -> u64,
        ) {
            self.duration[outcome() as usize].record(began.elapsed());
            self.handled.increment(n);
            self.lag.set(lag() as f64);
        }

        pub(crate) fn error(&self) {
            self.errors.increment(1);
        }

        pub(crate) fn panic(&self) {
            self.panics.increment(1);
        }

        pub(crate) fn detached(&self) {
            self.detached.increment(1);
            self.lag.set(0.0);
        }

        /// The task ended: nothing is pending for it any more (as in `stats`).
        pub(crate) fn ended(&self) {
            self.lag.set(0.0);
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod disabled {
    use super::Outcome;

    /// Without the feature `metrics`: nothing.
    #[derive(Debug)]
    pub(crate) struct TopicMetrics;

    impl TopicMetrics {
        #[inline]
        pub(crate) fn new(_: &str) -> Self {
            Self
        }

        #[inline]
        pub(crate) fn published(&self, _: u64) {}

        #[inline]
        pub(crate) fn unrouted(&self, _: u64) {}

        #[inline]
        pub(crate) fn full(&self) {}

        #[inline]
        pub(crate) fn cancelled(&self) {}
    }

    /// Without the feature `metrics`: nothing.
    #[derive(Debug)]
    pub(crate) struct SubMetrics;

    /// Without the feature `metrics`, no clock is read.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Clock;

    impl SubMetrics {
        #[inline]
        pub(crate) fn new(_: &str, _: &impl std::ops::Deref<Target = str>) -> Self {
            Self
        }

        #[inline]
        pub(crate) fn clock(&self) -> Clock {
            Clock
        }

        #[inline]
        pub(crate) fn handled(
            &self,
            _: Clock,
            _: u64,
            _: impl FnOnce() -> Outcome,
            _: impl FnOnce() -> u64,
        ) {
        }

        #[inline]
        pub(crate) fn error(&self) {}

        #[inline]
        pub(crate) fn panic(&self) {}

        #[inline]
        pub(crate) fn detached(&self) {}

        #[inline]
        pub(crate) fn ended(&self) {}
    }
}
