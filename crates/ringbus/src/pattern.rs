//! Topic patterns: NATS-style tokens split on `.`, `*` for one token, `>` for the rest.
//!
//! A pattern subscription ([`Bus::subscribe_pattern`](crate::Bus::subscribe_pattern)) is one
//! ordinary subscriber per matching topic, each running the same handler: every guarantee of
//! a named subscriber holds per topic because each follower *is* one. Matching happens when a
//! topic is made or a pattern subscribes, never per publish.
//!
//! # Why no topic is missed
//!
//! The bus's patterns live in one list under a read-write lock. A pattern subscribing takes it
//! for writing, adds itself, then follows every topic that exists; a topic being made holds it
//! for reading from before its map insert until after, and is followed by every matching pattern
//! before it is inserted (so before anyone can publish to it). A topic's insert either finished
//! before the pattern took the lock, and the pattern's walk of the map sees it, or waits for the
//! lock, and then finds the pattern in the list.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, PatternMismatch};
use crate::handler::{Batch, BatchHandler, Handler, HandlerError, TopicBatchHandler, TopicHandler};
use crate::observe;
use crate::options::SubscribeOptions;
use crate::shared::{BusState, SubShared};
use crate::stats::SubscriberStats;
use crate::subscriber::{Followers, Subscription};
use crate::topic::{AnyTopic, TopicInner};

/// A topic pattern: NATS-style tokens split on `.`, `*` standing for one token and `>` (last
/// only) for every token left, at least one.
///
/// [`Bus::subscribe_pattern`](crate::Bus::subscribe_pattern) parses its pattern with this;
/// links use it to check and match theirs the same way. It is stricter than NATS, which takes
/// a `*` or `>` inside a longer token (`ord*`) as a literal: here that is an error, so a
/// pattern never means something else than it looks.
///
/// ```
/// use ringbus::Pattern;
///
/// let p = Pattern::parse("orders.*.paid")?;
/// assert!(p.matches("orders.eu.paid"));
/// assert!(!p.matches("orders.eu.paid.late"));
/// assert!(Pattern::parse("orders.>")?.matches("orders.eu.paid.late"));
/// assert!(!Pattern::parse("orders.>")?.matches("orders"));
/// assert!(Pattern::parse("orders.>.paid").is_err());
/// # Ok::<(), ringbus::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    text: Arc<str>,
}

impl Pattern {
    /// Parses `text`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPattern`], with the reason, if `text` is empty, has an empty token (a
    /// leading, trailing or double `.`), a wildcard character inside a longer token, or a `>`
    /// before the last token.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let invalid = |reason| Error::InvalidPattern {
            pattern: text.into(),
            reason,
        };
        if text.is_empty() {
            return Err(invalid("a pattern has at least one token"));
        }
        let mut tokens = text.split('.').peekable();
        while let Some(token) = tokens.next() {
            if token.is_empty() {
                return Err(invalid(
                    "tokens are not empty (no leading, trailing or double `.`)",
                ));
            }
            if token != "*" && token != ">" && token.contains(['*', '>']) {
                return Err(invalid("a wildcard (`*` or `>`) is a whole token"));
            }
            if token == ">" && tokens.peek().is_some() {
                return Err(invalid("`>` is the last token"));
            }
        }
        Ok(Self { text: text.into() })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the topic `name` matches: token by token, `*` taking any one token and `>`
    /// every token left (at least one).
    pub fn matches(&self, name: &str) -> bool {
        let mut names = name.split('.');
        for token in self.text.split('.') {
            match (token, names.next()) {
                (">", Some(_)) => return true,
                ("*", Some(_)) => {}
                (literal, Some(name)) if literal == name => {}
                _ => return false,
            }
        }
        names.next().is_none()
    }

    /// Whether some topic name matches both patterns (a plain name is a pattern that matches
    /// itself alone): `orders.*` and `*.eu` overlap (on `orders.eu`), `orders.*` and
    /// `orders.>` too, `orders.*` and `orders.*.paid` do not.
    ///
    /// ```
    /// use ringbus::Pattern;
    ///
    /// let p = |s| Pattern::parse(s).unwrap();
    /// assert!(p("orders.*").overlaps(&p("*.eu")));
    /// assert!(p("orders.>").overlaps(&p("orders.eu.paid")));
    /// assert!(!p("orders.*").overlaps(&p("orders.*.paid")));
    /// assert!(!p("orders.>").overlaps(&p("orders")));
    /// ```
    pub fn overlaps(&self, other: &Pattern) -> bool {
        let (mut a, mut b) = (self.text.split('.'), other.text.split('.'));
        loop {
            match (a.next(), b.next()) {
                // `>` takes every token left, at least one: the other has one here.
                (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
                (Some(x), Some(y)) if x == y || x == "*" || y == "*" => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    /// Whether every topic name `other` matches, this one matches too (a plain name is a
    /// pattern that matches itself alone): `orders.>` covers `orders.*` and `orders.eu.paid`,
    /// `orders.*` covers `orders.eu` but not `orders.>`.
    ///
    /// ```
    /// use ringbus::Pattern;
    ///
    /// let p = |s| Pattern::parse(s).unwrap();
    /// assert!(p("orders.>").covers(&p("orders.*")));
    /// assert!(p("orders.*").covers(&p("orders.eu")));
    /// assert!(!p("orders.*").covers(&p("orders.>")));
    /// assert!(!p("orders.eu").covers(&p("orders.*")));
    /// ```
    pub fn covers(&self, other: &Pattern) -> bool {
        let (mut a, mut b) = (self.text.split('.'), other.text.split('.'));
        loop {
            match (a.next(), b.next()) {
                (Some(">"), Some(_)) | (None, None) => return true,
                // `*` takes any one token; the other's `>` takes one or more.
                (Some("*"), Some(y)) if y != ">" => {}
                (Some(x), Some(y)) if x == y => {}
                _ => return false,
            }
        }
    }

    /// The pattern as written, shared.
    pub(crate) fn text(&self) -> &Arc<str> {
        &self.text
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Pattern {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        Self::parse(text)
    }
}

/// True if `name` has a wildcard token (`*` or `>`): a pattern, not a topic name.
pub(crate) fn is_pattern(name: &str) -> bool {
    name.split('.').any(|token| token == "*" || token == ">")
}

/// The bus's pattern subscriptions; see the module docs for the lock's part.
#[derive(Default)]
pub(crate) struct Patterns {
    list: RwLock<Vec<Arc<dyn AnyPattern>>>,
}

impl Patterns {
    /// Holds the list for reading while a topic is made (see the module docs).
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<dyn AnyPattern>>> {
        // The list is only pushed to and filtered; a panic cannot leave it inconsistent.
        self.list.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<dyn AnyPattern>>> {
        self.list.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the pattern `id` out of the list. It is dropped after the lock is released: it
    /// may hold the last reference to the user's handler, whose `Drop` may make a topic.
    fn remove(&self, id: u64) -> Option<Arc<dyn AnyPattern>> {
        let mut list = self.write();
        let at = list.iter().position(|p| p.shared().id == id)?;
        Some(list.remove(at))
    }
}

/// Checks a topic being made against every pattern in `patterns` that matches it: the
/// first whose message type differs is the error, and then nothing is followed.
pub(crate) fn check(
    patterns: &[Arc<dyn AnyPattern>],
    name: &str,
    topic_type: &'static str,
    topic: &Arc<dyn Any + Send + Sync>,
) -> Result<(), PatternMismatch> {
    for p in patterns.iter().filter(|p| p.shared().pattern.matches(name)) {
        if !p.carries(topic) {
            return Err(p.mismatch(name, topic_type));
        }
    }
    Ok(())
}

/// Makes every pattern of `patterns` that matches `name` follow the topic (after [`check`]).
pub(crate) fn follow_new(
    patterns: &[Arc<dyn AnyPattern>],
    name: &str,
    topic: &Arc<dyn Any + Send + Sync>,
) {
    for p in patterns.iter().filter(|p| p.shared().pattern.matches(name)) {
        if let Err(error) = p.follow(topic) {
            let (pattern, name) = (p.shared().pattern.clone(), Arc::<str>::from(name));
            observe::emit(
                move || tracing::error!(pattern = %pattern.text(), topic = %name, %error, "ringbus pattern could not follow a new topic"),
            );
        }
    }
}

/// A pattern subscription, whatever its message and handler types.
pub(crate) trait AnyPattern: Send + Sync + 'static {
    fn shared(&self) -> &Arc<PatternShared>;
    /// Whether `topic` (an `Arc<TopicInner<_>>`) carries this pattern's message type.
    fn carries(&self, topic: &Arc<dyn Any + Send + Sync>) -> bool;
    fn mismatch(&self, topic: &str, topic_type: &'static str) -> PatternMismatch;
    /// Starts a follower on `topic`, which carries this pattern's type; `Ok` as well when the
    /// bus is closing (nothing will be published to the topic).
    fn follow(&self, topic: &Arc<dyn Any + Send + Sync>) -> Result<(), Error>;
    /// Makes the ring of `topic`, which carries this pattern's type, if it has none yet (see
    /// `TopicInner::prepare_ring`): `wait` waits for a publisher holding its writer; without
    /// it, `None` while one does.
    fn make_ring(
        &self,
        topic: &Arc<dyn Any + Send + Sync>,
        wait: bool,
    ) -> Option<Result<(), Error>>;
}

/// A follower, as `stats` reads it: its shared state and its topic.
type Member = (Arc<SubShared>, Arc<dyn AnyTopic>);

/// What a pattern subscription's handle reads: its followers, one per matched topic.
pub(crate) struct PatternShared {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) pattern: Pattern,
    /// The followers whose tasks `unsubscribe` has not yet taken over.
    followers: Mutex<Vec<Subscription>>,
    /// Every follower ever started, for `stats` and `is_finished`.
    members: Mutex<Vec<Member>>,
    /// Set by `unsubscribe`: no topic is followed from then on.
    left: AtomicBool,
    /// The bus's list, which holds this pattern: weak, or the two would keep each other (and
    /// the handler, its followers and their topics) alive after the bus is dropped.
    patterns: Weak<Patterns>,
    bus: Arc<BusState>,
}

impl Followers for PatternShared {
    fn id(&self) -> u64 {
        self.id
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn pattern(&self) -> &str {
        self.pattern.text()
    }

    fn topics(&self) -> Vec<String> {
        lock(&self.members)
            .iter()
            .map(|(sub, _)| sub.topic.to_string())
            .collect()
    }

    fn stats(&self) -> SubscriberStats {
        let mut total = SubscriberStats {
            id: self.id,
            name: self.name.to_string(),
            running: !self.is_finished(),
            ..SubscriberStats::default()
        };
        for (sub, topic) in lock(&self.members).iter() {
            let s = sub.stats(topic.published());
            total.handled += s.handled;
            total.lag += s.lag;
            total.errors += s.errors;
            total.panics += s.panics;
            total.detached |= s.detached;
            total.crashed |= s.crashed;
            total.retries += s.retries;
            total.dead_lettered += s.dead_lettered;
            total.dead_letter_failures += s.dead_letter_failures;
        }
        total
    }

    /// Unsubscribed, or the bus refuses subscribers; and every follower has ended.
    fn is_finished(&self) -> bool {
        (self.left.load(Ordering::Acquire) || self.bus.refuses())
            && lock(&self.members).iter().all(|(sub, _)| sub.ended())
    }

    fn leave(&self) -> Vec<Subscription> {
        if let Some(patterns) = self.patterns.upgrade() {
            drop(patterns.remove(self.id));
        }
        self.stop()
    }
}

impl PatternShared {
    /// Follows nothing more and cuts every follower; the caller took the pattern out of the
    /// list (or never put it in).
    fn stop(&self) -> Vec<Subscription> {
        self.left.store(true, Ordering::Release);
        let followers = std::mem::take(&mut *lock(&self.followers));
        for f in &followers {
            f.cut();
        }
        followers
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only pushed to and read; a panic cannot leave it inconsistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a pattern's handler follows one topic: an ordinary subscriber of it, running the
/// handler told the topic.
pub(crate) trait Follow<T>: Send + Sync + 'static {
    fn subscribe(
        handler: &Arc<Self>,
        topic: &Arc<TopicInner<T>>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error>;
}

/// A pattern's handler of one message at a time ([`TopicHandler`]).
pub(crate) struct Each<H>(pub(crate) H);

/// A pattern's handler of batches ([`TopicBatchHandler`]).
pub(crate) struct Batches<H>(pub(crate) H);

impl<T: Send + Sync + 'static, H: TopicHandler<T>> Follow<T> for Each<H> {
    fn subscribe(
        handler: &Arc<Self>,
        topic: &Arc<TopicInner<T>>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        crate::subscriber::subscribe(topic, options, OnTopic::new(topic, handler))
    }
}

impl<T: Send + Sync + 'static, H: TopicBatchHandler<T>> Follow<T> for Batches<H> {
    fn subscribe(
        handler: &Arc<Self>,
        topic: &Arc<TopicInner<T>>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        crate::subscriber::subscribe_batch(topic, options, OnTopic::new(topic, handler))
    }
}

/// A typed pattern subscription: the handler each follower runs, and how to start one.
struct PatternSub<T, H> {
    shared: Arc<PatternShared>,
    handler: Arc<H>,
    options: SubscribeOptions,
    /// The runtime the followers run on: the one `subscribe_pattern` was called on, since a
    /// topic may be made where none is reachable.
    runtime: tokio::runtime::Handle,
    _message: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static, H: Follow<T>> AnyPattern for PatternSub<T, H> {
    fn shared(&self) -> &Arc<PatternShared> {
        &self.shared
    }

    fn carries(&self, topic: &Arc<dyn Any + Send + Sync>) -> bool {
        topic.is::<TopicInner<T>>()
    }

    fn mismatch(&self, topic: &str, topic_type: &'static str) -> PatternMismatch {
        PatternMismatch {
            pattern: self.shared.pattern.text().clone(),
            topic: topic.into(),
            pattern_type: std::any::type_name::<T>(),
            topic_type,
        }
    }

    fn make_ring(
        &self,
        topic: &Arc<dyn Any + Send + Sync>,
        wait: bool,
    ) -> Option<Result<(), Error>> {
        let Some(topic) = topic.downcast_ref::<TopicInner<T>>() else {
            // Every caller checks `carries` first.
            debug_assert!(
                false,
                "a pattern asked for the ring of a topic of another type"
            );
            return Some(Ok(()));
        };
        topic.prepare_ring(wait)
    }

    fn follow(&self, topic: &Arc<dyn Any + Send + Sync>) -> Result<(), Error> {
        let Ok(topic) = topic.clone().downcast::<TopicInner<T>>() else {
            // Every caller checks `carries` first (`check`, `subscribe`).
            debug_assert!(false, "a pattern asked to follow a topic of another type");
            return Ok(());
        };
        // A topic may be made where no runtime is reachable (or on another runtime): the
        // follower runs where the pattern subscribed.
        let _runtime = self.runtime.enter();
        // Named after the pattern's subscription (unless the options name it), so that its
        // logs and each topic's stats say whose follower it is.
        let mut options = self.options.clone();
        options
            .name
            .get_or_insert_with(|| self.shared.name.to_string());
        match H::subscribe(&self.handler, &topic, options) {
            Ok(sub) => {
                let (pattern, name) = (self.shared.pattern.clone(), topic.name.clone());
                observe::emit(
                    move || tracing::debug!(pattern = %pattern.text(), topic = %name, "ringbus pattern follows a topic"),
                );
                if let Some(shared) = sub.shared() {
                    lock(&self.shared.members).push((shared.clone(), topic.clone()));
                }
                lock(&self.shared.followers).push(sub);
                Ok(())
            }
            Err(Error::Closed) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// A follower's handler: the pattern's, told the topic.
struct OnTopic<T, H> {
    topic: Arc<str>,
    handler: Arc<H>,
    _message: PhantomData<fn(T)>,
}

impl<T, H> OnTopic<T, H> {
    fn new(topic: &TopicInner<T>, handler: &Arc<H>) -> Self {
        Self {
            topic: topic.name.clone(),
            handler: handler.clone(),
            _message: PhantomData,
        }
    }
}

impl<T: Send + Sync + 'static, H: TopicHandler<T>> Handler<T> for OnTopic<T, Each<H>> {
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl std::future::Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.handler.0.call(&self.topic, msg)
    }
}

impl<T: Send + Sync + 'static, H: TopicBatchHandler<T>> BatchHandler<T> for OnTopic<T, Batches<H>> {
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl std::future::Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.handler.0.call(&self.topic, batch)
    }
}

/// A topic as a pattern meets it: its name, its typed face (an `Arc<TopicInner<_>>`) and
/// its message type.
pub(crate) type Met = (Arc<str>, Arc<dyn Any + Send + Sync>, &'static str);

/// Subscribes `handler` to every topic matching `pattern`, present and future: the pattern
/// joins the list, then follows the topics that exist, listed by `topics` while it holds the
/// list (see the module docs).
pub(crate) fn subscribe<T, H>(
    bus: &Arc<BusState>,
    patterns: &Arc<Patterns>,
    topics: impl Fn() -> Vec<Met>,
    pattern: &str,
    options: SubscribeOptions,
    handler: H,
) -> Result<Subscription, Error>
where
    T: Send + Sync + 'static,
    H: Follow<T>,
{
    let pattern = Pattern::parse(pattern)?;
    if options.capacity.is_some() {
        return Err(Error::Unsupported(
            "a pattern subscription takes each topic's own capacity: set it on the bus or per \
             topic, not in the pattern's options",
        ));
    }
    crate::subscriber::runnable(bus, &options)?;
    // The options' errors (a dead-letter topic of another type) refuse the subscription here,
    // as they refuse a named one, rather than each topic's follower.
    crate::retry::prepare::<T>(&mut options.clone())?;
    if bus.refuses() {
        return Err(Error::Closed);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let id = crate::shared::next_subscriber_id();
    let shared = Arc::new(PatternShared {
        id,
        name: options
            .name
            .clone()
            .map_or_else(|| format!("{}#{id}", pattern.text()).into(), Into::into),
        pattern,
        followers: Mutex::new(Vec::new()),
        members: Mutex::new(Vec::new()),
        left: AtomicBool::new(false),
        patterns: Arc::downgrade(patterns),
        bus: bus.clone(),
    });
    let sub: Arc<dyn AnyPattern> = Arc::new(PatternSub::<T, H> {
        shared: shared.clone(),
        handler: Arc::new(handler),
        options,
        runtime,
        _message: PhantomData,
    });
    let matching = || -> Result<Vec<Met>, Error> {
        let matching: Vec<_> = topics()
            .into_iter()
            .filter(|(name, ..)| shared.pattern.matches(name))
            .collect();
        // All or nothing: a matching topic of another type refuses the whole subscription.
        for (name, topic, topic_type) in &matching {
            if !sub.carries(topic) {
                return Err(Error::PatternMismatch(sub.mismatch(name, topic_type)));
            }
        }
        Ok(matching)
    };
    // The followers join holding the list, and a topic's first join makes its ring, which
    // waits for a publisher holding the topic's writer. That publisher's own code (a
    // message's `Drop`, a batch iterator) may make a topic, which waits for the list: so the
    // rings are made first, holding nothing, and under the list only a topic made meanwhile
    // can lack one, whose writer nobody holds but for a moment (else: start over).
    // Events raised while the list is held wait for it (see `observe::Held`).
    let _held = observe::Held::enter();
    let (mut list, matching) = loop {
        for (_, topic, _) in matching()? {
            sub.make_ring(&topic, true).transpose()?;
        }
        let list = patterns.write();
        let matching = matching()?;
        let mut made = Some(Ok(()));
        for (_, topic, _) in &matching {
            made = sub.make_ring(topic, false);
            if !matches!(made, Some(Ok(()))) {
                break;
            }
        }
        match made {
            Some(Ok(())) => break (list, matching),
            Some(Err(error)) => return Err(error),
            None => drop(list),
        }
    };
    // All or nothing here too: a topic that refuses a follower (too many subscribers) refuses
    // the subscription, and the followers already started are cut (they hold nothing yet).
    for (_, topic, _) in &matching {
        if let Err(error) = sub.follow(topic) {
            drop(shared.stop());
            return Err(error);
        }
    }
    list.push(sub.clone());
    drop(list);
    tracing::debug!(pattern = %shared.pattern.text(), subscriber = %shared.name, topics = matching.len(), "ringbus pattern subscribed");
    Ok(Subscription::pattern(shared))
}

impl fmt::Debug for PatternShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatternSubscription")
            .field("id", &self.id)
            .field("name", &&*self.name)
            .field("pattern", &&**self.pattern.text())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_takes_every_name_the_other_matches() {
        let cases = [
            ("orders.eu", "orders.eu", true),
            ("orders.*", "orders.eu", true),
            (">", "orders.eu.paid", true),
            ("orders.>", "orders.*", true),
            ("orders.>", "orders.>", true),
            ("*.eu", "*.eu", true),
            ("orders.eu", "orders.e", false),
            ("orders.eu", "orders.eu.paid", false),
            ("orders.*", "orders.eu.paid", false),
            ("orders.*", "orders.>", false),
            ("orders.eu", "orders.*", false),
            ("*.eu", "orders.*", false),
            ("orders.>", "orders", false),
        ];
        for (a, b, covers) in cases {
            let (a, b) = (Pattern::parse(a).unwrap(), Pattern::parse(b).unwrap());
            assert_eq!(a.covers(&b), covers, "{a} covers {b}");
            // What covers overlaps.
            assert!(
                !covers || a.overlaps(&b),
                "{a} covers {b} without overlapping"
            );
        }
    }

    #[test]
    fn overlapping_is_symmetric_and_follows_the_tokens() {
        let cases = [
            ("orders.*", "*.eu", true),
            ("orders.*", "orders.>", true),
            ("orders.>", "*.*.paid", true),
            ("orders.eu", "orders.eu", true),
            (">", "a.b.c", true),
            ("orders.*", "orders.*.paid", false),
            ("orders.>", "orders", false),
            ("orders.eu", "orders.us", false),
            ("a.*.c", "a.b.d", false),
            ("*", "a.b", false),
        ];
        for (a, b, overlap) in cases {
            let (a, b) = (Pattern::parse(a).unwrap(), Pattern::parse(b).unwrap());
            assert_eq!(a.overlaps(&b), overlap, "{a} {b}");
            assert_eq!(b.overlaps(&a), overlap, "{b} {a}");
        }
    }

    #[test]
    fn matching_follows_nats_tokens() {
        let cases = [
            ("orders.*", "orders.created", true),
            ("orders.*", "orders", false),
            ("orders.*", "orders.eu.paid", false),
            ("orders.>", "orders.eu.paid", true),
            ("orders.>", "orders.created", true),
            ("orders.>", "orders", false),
            ("*.*.paid", "orders.eu.paid", true),
            ("*.*.paid", "orders.eu.shipped", false),
            (">", "anything.at.all", true),
            ("orders.created", "orders.created", true),
            ("orders.created", "orders.create", false),
            ("user.*.notifications", "user.42.notifications", true),
            ("user.*.notifications", "user.42", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(
                Pattern::parse(pattern).unwrap().matches(name),
                expected,
                "{pattern} against {name}"
            );
        }
    }

    #[test]
    fn malformed_patterns_are_refused_with_the_reason() {
        for bad in [
            "",
            "orders..paid",
            ".orders",
            "orders.",
            "orders.>.paid",
            "ord*.x",
            "a.b>",
        ] {
            match Pattern::parse(bad) {
                Err(Error::InvalidPattern { pattern, .. }) => assert_eq!(&*pattern, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_wildcard_tokens_make_a_pattern() {
        assert!(is_pattern("orders.*"));
        assert!(is_pattern(">"));
        assert!(!is_pattern("orders.created"));
        assert!(!is_pattern("ord*.x"));
    }
}
