//! The bus's errors. Every error that refuses a message gives it back.

use std::fmt;
use std::sync::Arc;

/// Why a publish did not happen. The message always comes back, and no subscriber saw it.
///
/// Its `Debug` does not require `T: Debug`, and leads with the message (see [`Error`]): the
/// refused message shows as `..`. Non-exhaustive: a later release may refuse a
/// message for a new reason, so a `match` ends with a `_` arm; [`into_inner`](Self::into_inner)
/// and [`message`](Self::message) give the message back whatever the variant.
#[non_exhaustive]
pub enum PublishError<T> {
    /// The bus is closed (or closing): the message was not accepted.
    Closed(T),
    /// The publish's [`Context`](crate::Context) ended (deadline or cancellation) before the
    /// message entered the topic.
    Cancelled(T),
    /// [`try_publish`](crate::Bus::try_publish) found the slowest subscriber's queue full
    /// (counting the message of a publisher already waiting for room). Never said of a topic
    /// that has room because another publisher was writing to it.
    Full(T),
    /// The topic carries another message type.
    TypeMismatch(T, TypeMismatch),
    /// The topic (named by the second field) has no subscriber, and the bus is
    /// [strict](crate::BusBuilder::strict): the message would have reached nobody. (Without
    /// strict mode it is accepted, counted in
    /// [`TopicStats::unrouted`](crate::TopicStats::unrouted) and logged once per topic at
    /// `warn`.)
    NoSubscriber(T, Arc<str>),
    /// The topic did not exist, and its ring could not be allocated: nothing was made.
    RingTooLarge(T, RingTooLarge),
    /// The topic did not exist, and a pattern subscription that matches its name handles
    /// another message type: nothing was made. Boxed: a rare error, kept from growing every
    /// publish's result.
    PatternMismatch(T, Box<PatternMismatch>),
    /// The topic name (the second field) has a `*` or `>` token: it is a pattern, and a topic
    /// is never made with it. Publish to each topic by its own name; subscribe to a family
    /// with [`subscribe_pattern`](crate::Bus::subscribe_pattern).
    WildcardTopic(T, Arc<str>),
    /// The publish's [`Context`](crate::Context) has a deadline, and no tokio runtime is
    /// reachable here to time it (a plain thread, another executor): deadlines run on tokio's
    /// time driver. Publish without the deadline, or from inside a runtime.
    NoRuntime(T),
}

impl<T> PublishError<T> {
    /// Takes the refused message back.
    pub fn into_inner(self) -> T {
        match self {
            PublishError::Closed(m)
            | PublishError::Cancelled(m)
            | PublishError::Full(m)
            | PublishError::NoSubscriber(m, _)
            | PublishError::TypeMismatch(m, _)
            | PublishError::RingTooLarge(m, _)
            | PublishError::PatternMismatch(m, _)
            | PublishError::WildcardTopic(m, _)
            | PublishError::NoRuntime(m) => m,
        }
    }

    /// The message, by reference.
    pub fn message(&self) -> &T {
        match self {
            PublishError::Closed(m)
            | PublishError::Cancelled(m)
            | PublishError::Full(m)
            | PublishError::NoSubscriber(m, _)
            | PublishError::TypeMismatch(m, _)
            | PublishError::RingTooLarge(m, _)
            | PublishError::PatternMismatch(m, _)
            | PublishError::WildcardTopic(m, _)
            | PublishError::NoRuntime(m) => m,
        }
    }

    /// The same error, its message replaced by `f(message)`.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> PublishError<U> {
        match self {
            PublishError::Closed(m) => PublishError::Closed(f(m)),
            PublishError::Cancelled(m) => PublishError::Cancelled(f(m)),
            PublishError::Full(m) => PublishError::Full(f(m)),
            PublishError::TypeMismatch(m, e) => PublishError::TypeMismatch(f(m), e),
            PublishError::NoSubscriber(m, topic) => PublishError::NoSubscriber(f(m), topic),
            PublishError::RingTooLarge(m, e) => PublishError::RingTooLarge(f(m), e),
            PublishError::PatternMismatch(m, e) => PublishError::PatternMismatch(f(m), e),
            PublishError::WildcardTopic(m, name) => PublishError::WildcardTopic(f(m), name),
            PublishError::NoRuntime(m) => PublishError::NoRuntime(f(m)),
        }
    }
}

impl<T> fmt::Debug for PublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        message_first(f, self, |f| match self {
            PublishError::Closed(_) => f.debug_tuple("Closed").field(&Elided).finish(),
            PublishError::Cancelled(_) => f.debug_tuple("Cancelled").field(&Elided).finish(),
            PublishError::Full(_) => f.debug_tuple("Full").field(&Elided).finish(),
            PublishError::TypeMismatch(_, e) => f
                .debug_tuple("TypeMismatch")
                .field(&Elided)
                .field(e)
                .finish(),
            PublishError::NoSubscriber(_, topic) => f
                .debug_tuple("NoSubscriber")
                .field(&Elided)
                .field(&&**topic)
                .finish(),
            PublishError::RingTooLarge(_, e) => f
                .debug_tuple("RingTooLarge")
                .field(&Elided)
                .field(e)
                .finish(),
            PublishError::PatternMismatch(_, e) => f
                .debug_tuple("PatternMismatch")
                .field(&Elided)
                .field(e)
                .finish(),
            PublishError::WildcardTopic(_, name) => f
                .debug_tuple("WildcardTopic")
                .field(&Elided)
                .field(&&**name)
                .finish(),
            PublishError::NoRuntime(_) => f.debug_tuple("NoRuntime").field(&Elided).finish(),
        })
    }
}

/// Writes the `Debug` of the bus's errors: `{:?}` (what `?` in `main` and `unwrap` print) is
/// the error's message, then `structure` in parentheses, on one line; `{:#?}` is `structure`
/// alone, over several lines, as `#[derive(Debug)]` would print it.
fn message_first(
    f: &mut fmt::Formatter<'_>,
    message: &dyn fmt::Display,
    structure: impl FnOnce(&mut fmt::Formatter<'_>) -> fmt::Result,
) -> fmt::Result {
    if f.alternate() {
        return structure(f);
    }
    write!(f, "{message} (")?;
    structure(f)?;
    f.write_str(")")
}

/// Prints `..`: the place of a message an error gives back, which need not be `Debug`.
struct Elided;

impl fmt::Debug for Elided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("..")
    }
}

impl<T> fmt::Display for PublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Closed(_) => {
                f.write_str("the bus is closed; the message was not published")
            }
            PublishError::Cancelled(_) => f.write_str(
                "the publish was cancelled by its context; no subscriber got the message",
            ),
            PublishError::Full(_) => {
                f.write_str("the topic is full (its slowest subscriber has a full queue)")
            }
            PublishError::TypeMismatch(_, e) => e.fmt(f),
            PublishError::NoSubscriber(_, topic) => write!(
                f,
                "topic \"{topic}\" has no subscriber (strict bus); the message was not \
                 published"
            ),
            PublishError::RingTooLarge(_, e) => e.fmt(f),
            PublishError::PatternMismatch(_, e) => e.fmt(f),
            PublishError::WildcardTopic(_, name) => wildcard_topic(f, name),
            PublishError::NoRuntime(_) => f.write_str(
                "no tokio runtime is reachable to time the publish's deadline; the message was \
                 not published",
            ),
        }
    }
}

impl<T> std::error::Error for PublishError<T> {}

/// The messages of a batch that were not published, in order: what a failed
/// [`publish_batch`](crate::Bus::publish_batch) gives back in its error.
///
/// An iterator: the message that was refused, if it had already been taken from the
/// batch's iterator (an unbuffered topic takes them one at a time), then the rest of that
/// iterator. Its `Debug` does not require the messages to be `Debug`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let bus = ringbus::Bus::new();
/// bus.close().await;
/// match bus.publish_batch("t", vec![1u32, 2, 3]).await {
///     Err(ringbus::PublishError::Closed(rest)) => assert_eq!(rest.collect::<Vec<_>>(), [1, 2, 3]),
///     other => panic!("expected Closed, got {other:?}"),
/// }
/// # }
/// ```
pub struct Unpublished<I: Iterator> {
    refused: Option<I::Item>,
    rest: I,
}

impl<I: Iterator> Unpublished<I> {
    /// The rest of a batch, nothing taken from it yet.
    pub(crate) fn new(rest: I) -> Self {
        Self {
            refused: None,
            rest,
        }
    }

    /// `refused`, taken from the batch, put back in front of `rest`.
    pub(crate) fn with_refused(refused: I::Item, rest: I) -> Self {
        Self {
            refused: Some(refused),
            rest,
        }
    }

    /// Puts `item`, just taken from the front, back in front. Only with nothing in front.
    pub(crate) fn put_back(&mut self, item: I::Item) {
        debug_assert!(self.refused.is_none(), "a message is already in front");
        self.refused = Some(item);
    }

    /// The refused message (if it had been taken from the batch's iterator) and the rest of
    /// that iterator.
    pub fn into_parts(self) -> (Option<I::Item>, I) {
        (self.refused, self.rest)
    }
}

impl<I: Iterator> Iterator for Unpublished<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        self.refused.take().or_else(|| self.rest.next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let front = usize::from(self.refused.is_some());
        let (low, high) = self.rest.size_hint();
        (
            low.saturating_add(front),
            high.and_then(|h| h.checked_add(front)),
        )
    }
}

impl<I: ExactSizeIterator> ExactSizeIterator for Unpublished<I> {}

impl<I: std::iter::FusedIterator> std::iter::FusedIterator for Unpublished<I> {}

impl<I: Iterator> fmt::Debug for Unpublished<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unpublished")
            .field("refused", &self.refused.is_some())
            .field("rest", &self.rest.size_hint())
            .finish()
    }
}

/// A topic was used with a message type other than the one it carries.
#[derive(Clone, PartialEq, Eq)]
pub struct TypeMismatch {
    /// The topic.
    pub topic: Arc<str>,
    /// The type the topic carries.
    pub expected: &'static str,
    /// The type it was used with.
    pub found: &'static str,
}

impl fmt::Debug for TypeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypeMismatch")
            .field("topic", &&*self.topic)
            .field("expected", &self.expected)
            .field("found", &self.found)
            .finish()
    }
}

impl fmt::Display for TypeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic \"{}\" carries `{}`, not `{}`",
            self.topic, self.expected, self.found
        )
    }
}

impl std::error::Error for TypeMismatch {}

/// A pattern subscription and a topic its pattern matches carry different message types. Met
/// when the two meet: the pattern subscribing while the topic exists (then the subscription is
/// refused), or the topic being made while the pattern is subscribed (then the topic is not
/// made, and the publish or subscribe that would have made it gets this error).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ringbus::Error> {
/// use ringbus::{Bus, PublishError};
///
/// let bus = Bus::new();
/// let sub = bus.subscribe_pattern("orders.*", async |_topic: &str, _id: &u64| {})?;
/// match bus.publish("orders.created", "not a u64").await {
///     Err(PublishError::PatternMismatch(msg, e)) => {
///         assert_eq!(msg, "not a u64"); // the message comes back
///         assert_eq!((&*e.pattern, &*e.topic), ("orders.*", "orders.created"));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert!(bus.stats().topics.is_empty()); // nothing was made
/// sub.unsubscribe().await;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PatternMismatch {
    /// The pattern.
    pub pattern: Arc<str>,
    /// The topic.
    pub topic: Arc<str>,
    /// The type the pattern's handler takes.
    pub pattern_type: &'static str,
    /// The type the topic carries (or would have carried).
    pub topic_type: &'static str,
}

impl fmt::Debug for PatternMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatternMismatch")
            .field("pattern", &&*self.pattern)
            .field("topic", &&*self.topic)
            .field("pattern_type", &self.pattern_type)
            .field("topic_type", &self.topic_type)
            .finish()
    }
}

impl fmt::Display for PatternMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pattern \"{}\" handles `{}`, and matches topic \"{}\", which carries `{}`",
            self.pattern, self.pattern_type, self.topic, self.topic_type
        )
    }
}

impl std::error::Error for PatternMismatch {}

/// What [`Error::WildcardTopic`] and [`PublishError::WildcardTopic`] say.
fn wildcard_topic(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    write!(
        f,
        "\"{name}\" has a `*` or `>` token: it is a pattern, not a topic name (publish to each \
         topic by its own name; subscribe to the family with `subscribe_pattern`)"
    )
}

/// A topic's ring could not be allocated: its capacity times the size of its message type is
/// more memory than the process can have.
///
/// A topic is made (at the first publish or subscribe naming it) only if the allocator gives
/// its whole ring then: the bus asks for it and hands it straight back. If not, nothing was
/// made: the topic does not exist, and the next publish or subscribe naming it tries again.
/// The ring itself is allocated when the first subscriber joins; should the allocator refuse
/// it then, that `subscribe` returns this error and the topic stays as it was, without
/// subscribers. [`BusBuilder::MAX_CAPACITY`](crate::BusBuilder::MAX_CAPACITY) bounds a
/// topic's capacity, not its size in bytes: 2^30 messages of 64 bytes ask for 64 GiB. Lower
/// the capacity
/// ([`BusBuilder::capacity`](crate::BusBuilder::capacity),
/// [`SubscribeOptions::capacity`](crate::SubscribeOptions::capacity)) or make the message
/// small (a `Box` or an `Arc` of the large part).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use ringbus::{Bus, Error};
///
/// let bus = Bus::builder().capacity(1 << 30).build();
/// // 2^30 messages of 1 MiB: 1 PiB, more than a 64-bit process can map.
/// match bus.topic::<[u8; 1 << 20]>("frames") {
///     Err(Error::RingTooLarge(e)) => {
///         assert_eq!((&*e.topic, e.capacity, e.bytes), ("frames", 1 << 30, 1 << 50));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert!(bus.stats().topics.is_empty()); // nothing was made
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingTooLarge {
    /// The topic.
    pub topic: Arc<str>,
    /// Its capacity, in messages (its ring has that many slots, rounded up to a power of
    /// two).
    pub capacity: usize,
    /// The size of one message, in bytes.
    pub message_size: usize,
    /// The bytes the ring asked for: its slots times `message_size`. A `u128`: it may be past
    /// `usize::MAX`.
    pub bytes: u128,
}

impl fmt::Display for RingTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic \"{}\": a ring of {} messages of {} bytes takes {} bytes, which could not \
             be allocated: lower the topic's capacity or box its messages",
            self.topic, self.capacity, self.message_size, self.bytes
        )
    }
}

impl std::error::Error for RingTooLarge {}

/// Why [`Bus::remove`](crate::Bus::remove) removed nothing. Each names the topic; nothing
/// changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoveError {
    /// The bus was built without
    /// [`removable_topics`](crate::BusBuilder::removable_topics).
    NotRemovable(Arc<str>),
    /// No topic has the name.
    NoSuchTopic(Arc<str>),
    /// Something holds the topic: a subscriber (or a pattern subscription that matches it),
    /// a [`Topic`](crate::Topic) handle, a link, a publish by name in the middle of it, or,
    /// for a moment, a `stats`, `close` or pattern subscribe listing every topic.
    InUse {
        /// The topic.
        topic: Arc<str>,
        /// How many held it when the error was made (references to the topic beyond the
        /// bus's own; 0 if they all let go since).
        holders: usize,
    },
}

impl RemoveError {
    /// The topic the removal was asked for.
    pub fn topic(&self) -> &Arc<str> {
        match self {
            RemoveError::NotRemovable(topic)
            | RemoveError::NoSuchTopic(topic)
            | RemoveError::InUse { topic, .. } => topic,
        }
    }
}

impl fmt::Display for RemoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveError::NotRemovable(topic) => write!(
                f,
                "topic \"{topic}\" was not removed: this bus's topics cannot be removed; build \
                 it with Bus::builder().removable_topics()"
            ),
            RemoveError::NoSuchTopic(topic) => {
                write!(
                    f,
                    "topic \"{topic}\" was not removed: there is no such topic"
                )
            }
            RemoveError::InUse { topic, holders } => write!(
                f,
                "topic \"{topic}\" was not removed: {holders} subscriber(s), handle(s), \
                 link(s) or waiting publish(es) hold it"
            ),
        }
    }
}

impl std::error::Error for RemoveError {}

/// Every error of the bus, without a message attached: what `?` turns a
/// [`PublishError`] into, and what `subscribe`, `register` and `topic` return.
///
/// # Debug
///
/// `{:?}` leads with the error's message (its `Display`), then gives its structure in
/// parentheses, so that what `?` in a `main` returning `Result<(), ringbus::Error>` prints
/// and what `unwrap` panics with say what went wrong and how to fix it. `{:#?}` is the
/// structure alone, as `#[derive(Debug)]` prints it. [`PublishError`] and [`RequestError`]
/// print the same way, with `..` in place of the message they give back (so their `Debug`
/// needs no `T: Debug`).
///
/// ```
/// let e = ringbus::Error::MissingState { subscriber: "audit".into(), state: "app::Ledger" };
/// assert_eq!(
///     format!("{e:?}"),
///     "subscriber \"audit\" takes a State<app::Ledger>, but no `app::Ledger` was registered: \
///      add `.state(value)` to Bus::builder() \
///      (MissingState { subscriber: \"audit\", state: \"app::Ledger\" })"
/// );
/// assert!(format!("{e:#?}").starts_with("MissingState {\n"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The bus is closed.
    Closed,
    /// A publish was cancelled by its context.
    Cancelled,
    /// A topic was full.
    Full,
    /// A topic was used with the wrong message type.
    TypeMismatch(TypeMismatch),
    /// A strict bus refused a publish to a topic with no subscriber.
    NoSubscriber {
        /// The topic.
        topic: Arc<str>,
    },
    /// No tokio runtime is reachable from here, and what was asked needs one: subscribing
    /// (subscribers are tokio tasks), or a publish with a deadline (timed on tokio's time
    /// driver). Call it from inside `#[tokio::main]`, a task, or `Runtime::enter`.
    NoRuntime,
    /// A topic exists with another capacity than the one asked for.
    CapacityMismatch {
        /// The topic.
        topic: Arc<str>,
        /// Its capacity.
        capacity: usize,
        /// The capacity asked for.
        requested: usize,
    },
    /// A handler takes a `State<S>` that was never registered on the bus builder.
    MissingState {
        /// The subscriber.
        subscriber: String,
        /// The state type it asked for.
        state: &'static str,
    },
    /// An [`App`](crate::App) startup hook failed.
    Hook(String),
    /// The options asked for something this kind of subscriber does not do (the text says
    /// what): a retry policy or a dead-letter topic on a batch subscriber or a replier.
    Unsupported(&'static str),
    /// A topic already has the configured maximum of subscribers.
    TooManySubscribers {
        /// The topic.
        topic: Arc<str>,
        /// The limit.
        max: usize,
    },
    /// A request got no reply: nobody subscribes to its topic, or no subscriber replied
    /// (from [`RequestError::NoResponders`] and [`RequestError::Unanswered`]).
    NoResponders,
    /// A request's replier failed: the error's text ([`RequestError::Failed`]).
    ReplyFailed(String),
    /// A topic's ring could not be allocated (see [`RingTooLarge`]).
    RingTooLarge(RingTooLarge),
    /// A pattern subscription and a topic it matches carry different message types (see
    /// [`PatternMismatch`]).
    PatternMismatch(PatternMismatch),
    /// A pattern that is not one (see [`Bus::subscribe_pattern`](crate::Bus::subscribe_pattern)
    /// for the syntax).
    InvalidPattern {
        /// The pattern as given.
        pattern: Arc<str>,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A topic name with a `*` or `>` token: a pattern, never made into a topic (see
    /// [`PublishError::WildcardTopic`]).
    WildcardTopic(Arc<str>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed => f.write_str("the bus is closed"),
            Error::Cancelled => f.write_str("the publish was cancelled by its context"),
            Error::Full => f.write_str("the topic is full"),
            Error::TypeMismatch(e) => e.fmt(f),
            Error::NoSubscriber { topic } => write!(
                f,
                "topic \"{topic}\" has no subscriber (strict bus); nothing was published"
            ),
            Error::NoRuntime => f.write_str(
                "no tokio runtime is reachable: subscribe, or publish with a deadline, from \
                 inside a tokio runtime (#[tokio::main], a spawned task, or Runtime::enter)",
            ),
            Error::CapacityMismatch {
                topic,
                capacity,
                requested,
            } => write!(
                f,
                "topic \"{topic}\" already exists with capacity {capacity}, not {requested}"
            ),
            Error::MissingState { subscriber, state } => write!(
                f,
                "subscriber \"{subscriber}\" takes a State<{state}>, but no `{state}` was \
                 registered: add `.state(value)` to Bus::builder()"
            ),
            Error::Hook(message) => write!(f, "a startup hook failed: {message}"),
            Error::Unsupported(what) => f.write_str(what),
            Error::TooManySubscribers { topic, max } => {
                write!(
                    f,
                    "topic \"{topic}\" already has its maximum of {max} subscribers"
                )
            }
            Error::NoResponders => f.write_str("the request got no reply: no replier"),
            Error::ReplyFailed(text) => write!(f, "the replier failed: {text}"),
            Error::RingTooLarge(e) => e.fmt(f),
            Error::PatternMismatch(e) => e.fmt(f),
            Error::InvalidPattern { pattern, reason } => {
                write!(f, "\"{pattern}\" is not a topic pattern: {reason}")
            }
            Error::WildcardTopic(name) => wildcard_topic(f, name),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        message_first(f, self, |f| match self {
            Error::Closed => f.write_str("Closed"),
            Error::Cancelled => f.write_str("Cancelled"),
            Error::Full => f.write_str("Full"),
            Error::TypeMismatch(e) => f.debug_tuple("TypeMismatch").field(e).finish(),
            Error::NoSubscriber { topic } => f
                .debug_struct("NoSubscriber")
                .field("topic", &&**topic)
                .finish(),
            Error::NoRuntime => f.write_str("NoRuntime"),
            Error::CapacityMismatch {
                topic,
                capacity,
                requested,
            } => f
                .debug_struct("CapacityMismatch")
                .field("topic", &&**topic)
                .field("capacity", capacity)
                .field("requested", requested)
                .finish(),
            Error::MissingState { subscriber, state } => f
                .debug_struct("MissingState")
                .field("subscriber", subscriber)
                .field("state", state)
                .finish(),
            Error::Hook(message) => f.debug_tuple("Hook").field(message).finish(),
            Error::Unsupported(what) => f.debug_tuple("Unsupported").field(what).finish(),
            Error::TooManySubscribers { topic, max } => f
                .debug_struct("TooManySubscribers")
                .field("topic", &&**topic)
                .field("max", max)
                .finish(),
            Error::NoResponders => f.write_str("NoResponders"),
            Error::ReplyFailed(text) => f.debug_tuple("ReplyFailed").field(text).finish(),
            Error::RingTooLarge(e) => f.debug_tuple("RingTooLarge").field(e).finish(),
            Error::PatternMismatch(e) => f.debug_tuple("PatternMismatch").field(e).finish(),
            Error::InvalidPattern { pattern, reason } => f
                .debug_struct("InvalidPattern")
                .field("pattern", &&**pattern)
                .field("reason", reason)
                .finish(),
            Error::WildcardTopic(name) => f.debug_tuple("WildcardTopic").field(&&**name).finish(),
        })
    }
}

impl std::error::Error for Error {}

impl<T> From<PublishError<T>> for Error {
    fn from(e: PublishError<T>) -> Self {
        match e {
            PublishError::Closed(_) => Error::Closed,
            PublishError::Cancelled(_) => Error::Cancelled,
            PublishError::Full(_) => Error::Full,
            PublishError::TypeMismatch(_, e) => Error::TypeMismatch(e),
            PublishError::NoSubscriber(_, topic) => Error::NoSubscriber { topic },
            PublishError::RingTooLarge(_, e) => Error::RingTooLarge(e),
            PublishError::PatternMismatch(_, e) => Error::PatternMismatch(*e),
            PublishError::WildcardTopic(_, name) => Error::WildcardTopic(name),
            PublishError::NoRuntime(_) => Error::NoRuntime,
        }
    }
}

/// Why a topic could not be had by name: it carries another type, or it did not exist and its
/// ring could not be allocated.
#[derive(Debug)]
pub(crate) enum Unresolved {
    TypeMismatch(TypeMismatch),
    RingTooLarge(RingTooLarge),
    PatternMismatch(Box<PatternMismatch>),
    WildcardTopic(Arc<str>),
}

impl Unresolved {
    /// The publish error, giving `msg` back.
    pub(crate) fn refuse<M>(self, msg: M) -> PublishError<M> {
        match self {
            Unresolved::TypeMismatch(e) => PublishError::TypeMismatch(msg, e),
            Unresolved::RingTooLarge(e) => PublishError::RingTooLarge(msg, e),
            Unresolved::PatternMismatch(e) => PublishError::PatternMismatch(msg, e),
            Unresolved::WildcardTopic(name) => PublishError::WildcardTopic(msg, name),
        }
    }
}

impl From<TypeMismatch> for Unresolved {
    fn from(e: TypeMismatch) -> Self {
        Unresolved::TypeMismatch(e)
    }
}

impl From<PatternMismatch> for Unresolved {
    fn from(e: PatternMismatch) -> Self {
        Unresolved::PatternMismatch(Box::new(e))
    }
}

impl From<RingTooLarge> for Unresolved {
    fn from(e: RingTooLarge) -> Self {
        Unresolved::RingTooLarge(e)
    }
}

impl From<Unresolved> for Error {
    fn from(e: Unresolved) -> Self {
        match e {
            Unresolved::TypeMismatch(e) => Error::TypeMismatch(e),
            Unresolved::RingTooLarge(e) => Error::RingTooLarge(e),
            Unresolved::PatternMismatch(e) => Error::PatternMismatch(*e),
            Unresolved::WildcardTopic(name) => Error::WildcardTopic(name),
        }
    }
}

/// Why a [request](crate::Topic::request) got no reply.
///
/// Where the request was not sent, the message comes back (`NoResponders`, `Closed`, `NoRuntime`, and
/// `Timeout` / `Cancelled` with `Some`); once it was sent, handlers have borrowed it in
/// place and it stays in the topic, so the error carries nothing (`None`).
/// [`into_message`](Self::into_message) takes it back whatever the variant. Its `Debug`
/// does not require `T: Debug`, and leads with the message (see [`Error`]). Non-exhaustive: a `match` ends with a `_` arm.
#[non_exhaustive]
pub enum RequestError<T> {
    /// The topic has no subscriber: the request was not sent.
    NoResponders(T),
    /// Every subscriber present when the request was sent handled it (or ended without
    /// doing so), and none replied: the topic's subscribers are not repliers (plain
    /// handlers or streams of `Request<T, R>`), or the replier was detached after a stall
    /// or stopped by a bounded close.
    Unanswered,
    /// The request's [`Context`](crate::Context) deadline passed: before the request was
    /// sent (`Some(msg)`: no subscriber saw it), or while waiting for the reply (`None`:
    /// a reply that comes later is dropped and counted in
    /// [`SubscriberStats::late_replies`](crate::SubscriberStats::late_replies)).
    Timeout(Option<T>),
    /// The request's [`Context`](crate::Context) was cancelled (its token): as `Timeout`.
    Cancelled(Option<T>),
    /// The replier failed: its handler returned `Err` (the error's text) or panicked
    /// ("panicked: " and the panic's message). The failure is also logged and counted on
    /// the replier, as any handler's.
    Failed(String),
    /// The bus is closed (or closing): the request was not sent.
    Closed(T),
    /// The request's [`Context`](crate::Context) has a deadline and no tokio runtime is
    /// reachable to time it (see [`PublishError::NoRuntime`]): the request was not sent.
    NoRuntime(T),
}

impl<T> RequestError<T> {
    /// Takes the message back, if the request was not sent.
    pub fn into_message(self) -> Option<T> {
        match self {
            RequestError::NoResponders(m)
            | RequestError::Closed(m)
            | RequestError::NoRuntime(m) => Some(m),
            RequestError::Timeout(m) | RequestError::Cancelled(m) => m,
            RequestError::Unanswered | RequestError::Failed(_) => None,
        }
    }

    /// The message, by reference, if the request was not sent.
    pub fn message(&self) -> Option<&T> {
        match self {
            RequestError::NoResponders(m)
            | RequestError::Closed(m)
            | RequestError::NoRuntime(m) => Some(m),
            RequestError::Timeout(m) | RequestError::Cancelled(m) => m.as_ref(),
            RequestError::Unanswered | RequestError::Failed(_) => None,
        }
    }

    /// True if the request reached the topic's subscribers (so handlers saw it).
    pub fn was_sent(&self) -> bool {
        match self {
            RequestError::NoResponders(_)
            | RequestError::Closed(_)
            | RequestError::NoRuntime(_) => false,
            RequestError::Timeout(m) | RequestError::Cancelled(m) => m.is_none(),
            RequestError::Unanswered | RequestError::Failed(_) => true,
        }
    }
}

impl<T> fmt::Debug for RequestError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sent = |m: &Option<T>| m.as_ref().map(|_| Elided);
        message_first(f, self, |f| match self {
            RequestError::NoResponders(_) => f.debug_tuple("NoResponders").field(&Elided).finish(),
            RequestError::Unanswered => f.write_str("Unanswered"),
            RequestError::Timeout(m) => f.debug_tuple("Timeout").field(&sent(m)).finish(),
            RequestError::Cancelled(m) => f.debug_tuple("Cancelled").field(&sent(m)).finish(),
            RequestError::Failed(text) => f.debug_tuple("Failed").field(text).finish(),
            RequestError::Closed(_) => f.debug_tuple("Closed").field(&Elided).finish(),
            RequestError::NoRuntime(_) => f.debug_tuple("NoRuntime").field(&Elided).finish(),
        })
    }
}

impl<T> fmt::Display for RequestError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::NoResponders(_) => {
                f.write_str("the topic has no subscriber; the request was not sent")
            }
            RequestError::Unanswered => f.write_str(
                "every subscriber of the topic handled the request and none replied \
                 (no replier: subscribe one with `reply`)",
            ),
            RequestError::Timeout(Some(_)) => {
                f.write_str("the request's deadline passed before it was sent")
            }
            RequestError::Timeout(None) => {
                f.write_str("the request's deadline passed before a reply came")
            }
            RequestError::Cancelled(Some(_)) => {
                f.write_str("the request was cancelled by its context before it was sent")
            }
            RequestError::Cancelled(None) => {
                f.write_str("the request was cancelled by its context before a reply came")
            }
            RequestError::Failed(text) => write!(f, "the replier failed: {text}"),
            RequestError::Closed(_) => f.write_str("the bus is closed; the request was not sent"),
            RequestError::NoRuntime(_) => f.write_str(
                "no tokio runtime is reachable to time the request's deadline; the request was \
                 not sent",
            ),
        }
    }
}

impl<T> std::error::Error for RequestError<T> {}

impl<T> From<RequestError<T>> for Error {
    /// `NoResponders` and `Unanswered` become [`Error::NoResponders`], `Timeout` and
    /// `Cancelled` [`Error::Cancelled`], `Failed` [`Error::ReplyFailed`], `Closed`
    /// [`Error::Closed`], `NoRuntime` [`Error::NoRuntime`].
    fn from(e: RequestError<T>) -> Self {
        match e {
            RequestError::NoResponders(_) | RequestError::Unanswered => Error::NoResponders,
            RequestError::Timeout(_) | RequestError::Cancelled(_) => Error::Cancelled,
            RequestError::Failed(text) => Error::ReplyFailed(text),
            RequestError::Closed(_) => Error::Closed,
            RequestError::NoRuntime(_) => Error::NoRuntime,
        }
    }
}
