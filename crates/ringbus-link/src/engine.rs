//! For engines: the parts of a link's runtime that every engine runs the same way (feature
//! `engine`, which needs tokio; a codec crate leaves it off).
//!
//! - [`Claims`] and its guard [`Claim`]: which topics a link has linked, in which direction.
//! - [`ImportTask`]: what `close` needs of a running import.
//! - [`deadline_after`]: a deadline from a timeout that may be `Duration::MAX`.
//! - [`Settlement`]: what an at-least-once import does with a message once every local
//!   subscriber has handled it: ack, dead-letter, or deliver again.
//! - [`Tasks`]: a link's running imports and exports (of the engine's [`Export`] type), and
//!   the first steps of its `close`: settle the imports, then flush the exports, within one
//!   deadline.
//! - [`redacted_url`]: a URL without its password, for a builder's `Debug`.
//! - [`SubscribedExport`]: an export that is a bus subscription alone.
//! - [`Runtime`]: what every link keeps beside its connection: the signal that stops its
//!   imports, the count of what they hold, its claims and its tasks. Its `add_export`,
//!   `add_import` and `close` are the bodies of every engine's `Link` methods of those
//!   names; [`refuse_echo`], the check of `link_both`.
//!
//! An engine keeps its own `Link` (its docs say what each step means on its server); the
//! types it reports with, [`LinkError`], [`CloseReport`] and
//! [`ConnectionState`], are shared.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::report::{CloseReport, ConnectionState, State};
use crate::{Codec, LinkError, LONGEST_WAIT};

/// The topics a link has linked, each with its direction (`"export"` or `"import"`): a link
/// links a topic at most once each way.
#[derive(Debug, Default)]
pub struct Claims {
    /// Under its own mutex: a set of names, which a panic cannot leave inconsistent.
    linked: Mutex<HashSet<(String, &'static str)>>,
}

impl Claims {
    /// No topic linked yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn linked(&self) -> MutexGuard<'_, HashSet<(String, &'static str)>> {
        self.linked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `topic` (a name or a pattern) as linked in `direction`, or `None` if it, or a
    /// name or pattern sharing a topic with it, already is. The claim is
    /// given back when the returned guard is dropped, unless it was [kept](Claim::keep): a
    /// call that fails, or whose future is dropped midway, leaves the topic unlinked.
    pub fn claim(&self, topic: &str, direction: &'static str) -> Option<Claim<'_>> {
        let key = (topic.to_string(), direction);
        let mut linked = self.linked();
        // A name and a pattern (or two patterns) that share a topic would link it twice. A
        // name that is no pattern (`a..b`, which some engines take) is a topic of its own.
        let new = ringbus::Pattern::parse(topic).ok();
        let shares = |name: &str| match (ringbus::Pattern::parse(name).ok(), &new) {
            (Some(old), Some(new)) => old.overlaps(new),
            (Some(old), None) => old.matches(topic),
            (None, Some(new)) => new.matches(name),
            (None, None) => name == topic,
        };
        if linked
            .iter()
            .any(|(name, way)| *way == direction && shares(name))
        {
            return None;
        }
        linked.insert(key.clone());
        drop(linked);
        Some(Claim {
            claims: self,
            key: Some(key),
        })
    }
}

/// A topic recorded as linked in one direction ([`Claims::claim`]): given back on drop
/// unless kept.
#[derive(Debug)]
pub struct Claim<'a> {
    claims: &'a Claims,
    /// `None` once kept.
    key: Option<(String, &'static str)>,
}

impl Claim<'_> {
    /// The call that claimed the topic succeeded: the topic stays linked.
    pub fn keep(mut self) {
        self.key = None;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.claims.linked().remove(&key);
        }
    }
}

/// What `close` needs of a running import: its task.
pub struct ImportTask {
    task: JoinHandle<()>,
    /// The engine's name (`"ringbus-nats"`), which starts its log lines.
    engine: &'static str,
}

impl ImportTask {
    /// An import run by `task`, which ends once the link's `stop_imports` is cancelled and
    /// what it took is settled. `engine` names the engine in the log.
    pub fn new(task: JoinHandle<()>, engine: &'static str) -> Self {
        Self { task, engine }
    }

    /// Waits for the task until `deadline`: it stops taking messages (the link's
    /// `stop_imports` is cancelled) and settles what it holds. False if it did not: the
    /// deadline cut it (it is then aborted), or it had ended by a panic. What it held is
    /// delivered again by the server (JetStream after the ack wait, Redis Streams after
    /// `claim_idle`).
    pub async fn finish(mut self, deadline: Instant) -> bool {
        match tokio::time::timeout_at(deadline, &mut self.task).await {
            Ok(Ok(())) => return true,
            // Not settled either: what it held is delivered again, as after a cut.
            Ok(Err(ended)) => {
                tracing::error!(error = %ended, "{}: an import task ended early", self.engine);
                return false;
            }
            Err(_) => {}
        }
        self.task.abort();
        false
    }
}

impl fmt::Debug for ImportTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportTask")
            .field("engine", &self.engine)
            .field("finished", &self.task.is_finished())
            .finish()
    }
}

/// What `close` needs of a running export: an engine's export task.
pub trait Export: Send + Sized {
    /// Unsubscribes (the subscriber first hands over everything queued for it), then waits
    /// until what it handed over is confirmed. `Err(n)`: at most `n` exports were not
    /// confirmed at the deadline.
    fn finish(self, deadline: Instant) -> impl Future<Output = Result<(), u64>> + Send;

    /// Stops waiting at once (the export stays subscribed until the bus closes); returns how
    /// many exports were not confirmed.
    fn abort(self) -> u64;
}

/// What an at-least-once import does with a message once its delivery receipt resolved,
/// the same on every engine.
///
/// A handler's failure stays with that handler, as in process: a subscriber retries by its
/// own [retry policy](https://docs.rs/ringbus/latest/ringbus/struct.RetryPolicy.html), and the
/// receipt counts it failed only once it gave up. The broker then gets the message settled
/// once, so the handlers that succeeded never see it again: dead-lettered (the failure is
/// kept where an operator finds it) and acknowledged. The broker delivers a message again only
/// when some subscriber never got to handle it (it ended first: unsubscribed, detached after
/// a stall, stopped by a bounded close), or when the bus refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Every subscriber present handled it without error (or there was none): acknowledge.
    Ack,
    /// A handler gave up on it: dead-letter it with this reason, and acknowledge it.
    DeadLetter(String),
    /// A subscriber ended before handling it, and none gave up: deliver it again (or
    /// dead-letter it at the last delivery the broker allows), with this reason.
    Redeliver(String),
}

impl Settlement {
    /// The settlement of a message that `subscribers` subscribers were present for, of which
    /// `failed` handlers gave up on it and `missed` ended without handling it (the fields of
    /// `ringbus::Delivered`).
    pub fn of(subscribers: usize, failed: usize, missed: usize) -> Self {
        if failed > 0 {
            Settlement::DeadLetter(format!("{failed} of {subscribers} handlers gave up on it"))
        } else if missed > 0 {
            Settlement::Redeliver(format!(
                "{missed} of {subscribers} subscribers ended before handling it"
            ))
        } else {
            Settlement::Ack
        }
    }
}

/// The deadline `timeout` after `start` (a close's, a request's): a timeout past what the
/// clock can represent (`Duration::MAX`) is no deadline, and waits [`LONGEST_WAIT`] instead
/// of overflowing.
pub fn deadline_after(start: Instant, timeout: Duration) -> Instant {
    start
        .checked_add(timeout)
        .unwrap_or_else(|| start + LONGEST_WAIT)
}

/// What [`Tasks::settle_and_flush`] left undone, for the close report.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// The step the deadline cut, if any: `"settling imports"` (also when an import's task
    /// had ended by a panic) or `"flushing exports"`.
    pub cut_at: Option<&'static str>,
    /// Imports handed to the bus and not settled when the deadline passed (counted only if
    /// the imports were cut).
    pub unsettled_imports: u64,
    /// Exports not confirmed when the deadline passed, at most.
    pub unacked_exports: u64,
}

/// The running tasks of a link, which its `close` stops: its imports, and its exports of
/// the engine's type `E`.
pub struct Tasks<E> {
    /// Only lists of handles: a panic cannot leave them inconsistent.
    lists: Mutex<(Vec<ImportTask>, Vec<E>)>,
}

impl<E: Export> Tasks<E> {
    /// No task yet.
    pub fn new() -> Self {
        Self {
            lists: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    fn lists(&self) -> MutexGuard<'_, (Vec<ImportTask>, Vec<E>)> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a started import for `close`.
    pub fn push_import(&self, task: ImportTask) {
        self.lists().0.push(task);
    }

    /// Keeps a started export for `close`.
    pub fn push_export(&self, task: E) {
        self.lists().1.push(task);
    }

    /// The first two steps of a link's close, within `deadline`, over every task kept so
    /// far (which it takes): each import stops taking messages and settles what it holds;
    /// then each export is flushed (or, once the deadline cut a step, aborted and counted).
    /// `held` is the link's count of imports handed to the bus and not yet settled.
    pub async fn settle_and_flush(&self, held: &AtomicU64, deadline: Instant) -> Settled {
        let (imports, exports) = std::mem::take(&mut *self.lists());
        let mut settled = Settled::default();

        // 1. Imports: each task stops taking messages and settles what it holds.
        for task in imports {
            if !task.finish(deadline).await {
                settled.cut_at = settled.cut_at.or(Some("settling imports"));
            }
        }
        if settled.cut_at.is_some() {
            settled.unsettled_imports = held.load(Ordering::Relaxed);
        }

        // 2. Exports: unsubscribe (which hands over what is queued), then await confirmation.
        for task in exports {
            if settled.cut_at.is_some() {
                settled.unacked_exports += task.abort();
                continue;
            }
            if let Err(left) = task.finish(deadline).await {
                settled.unacked_exports += left;
                settled.cut_at = Some("flushing exports");
            }
        }
        settled
    }
}

impl<E: Export> Default for Tasks<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> fmt::Debug for Tasks<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Tasks")
            .field("imports", &lists.0.len())
            .field("exports", &lists.1.len())
            .finish()
    }
}

/// An export that is a bus subscription alone (its handler waits for the server's answer
/// before it returns, so nothing is left to confirm once it is unsubscribed): Redis's and
/// RabbitMQ's exports.
pub struct SubscribedExport {
    /// The engine's name, which starts its log lines: `"ringbus-redis"`.
    pub engine: &'static str,
    /// The exported topic.
    pub topic: String,
    /// The export's subscription.
    pub subscription: ringbus::Subscription,
}

impl Export for SubscribedExport {
    /// Unsubscribes: the subscriber first hands over everything queued for it, and its
    /// handler returns once the server took it. `Err(n)`: at most `n` exports were not taken
    /// at the deadline.
    async fn finish(self, deadline: Instant) -> Result<(), u64> {
        let queued = self.subscription.stats().lag;
        let unsubscribed = tokio::time::timeout_at(deadline, self.subscription.unsubscribe());
        if unsubscribed.await.is_err() {
            tracing::warn!(topic = %self.topic, "{} close: export not flushed in time", self.engine);
            return Err(queued.max(1));
        }
        Ok(())
    }

    /// Stops waiting at once (the export stays subscribed until the bus closes); returns how
    /// many exports were still queued.
    fn abort(self) -> u64 {
        self.subscription.stats().lag
    }
}

impl fmt::Debug for SubscribedExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscribedExport")
            .field("engine", &self.engine)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

/// What every link keeps beside its connection, the same for every engine.
///
/// `stop_imports` is cancelled once, by `close` (or when the link is dropped); `held` is a
/// relaxed count for the close report; the claims and tasks are each under their own mutex.
pub struct Runtime<E> {
    /// Cancelled first by `close` (or when the link is dropped): imports stop taking
    /// messages, and no topic can be linked any more.
    pub stop_imports: CancellationToken,
    /// Imports handed to the bus and not yet settled.
    pub held: AtomicU64,
    claims: Claims,
    tasks: Tasks<E>,
}

impl<E: Export> Runtime<E> {
    /// Nothing linked, nothing running.
    pub fn new() -> Self {
        Self {
            stop_imports: CancellationToken::new(),
            held: AtomicU64::new(0),
            claims: Claims::new(),
            tasks: Tasks::new(),
        }
    }

    /// Records `topic` as linked in `direction`, or says why it cannot be. The claim is given
    /// back when the returned guard is dropped, unless it was [kept](Claim::keep): a call
    /// that fails, or whose future is dropped midway, leaves the topic unlinked.
    pub fn claim(&self, topic: &str, direction: &'static str) -> Result<Claim<'_>, LinkError> {
        if self.stop_imports.is_cancelled() {
            return Err(LinkError::Closed);
        }
        self.claims
            .claim(topic, direction)
            .ok_or_else(|| LinkError::AlreadyLinked {
                topic: topic.to_string(),
                direction,
            })
    }

    /// Links `topic` for export: claims it, awaits `start` (the engine's export, made and
    /// subscribed) and keeps the task for `close`. A `start` that fails, or a call dropped
    /// midway, leaves the topic unlinked.
    pub async fn add_export(
        &self,
        topic: &str,
        start: impl Future<Output = Result<E, LinkError>>,
    ) -> Result<(), LinkError> {
        let claim = self.claim(topic, "export")?;
        let task = start.await?;
        claim.keep();
        self.tasks.push_export(task);
        Ok(())
    }

    /// Links `topic` for import, as [`add_export`](Self::add_export) does for an export.
    pub async fn add_import(
        &self,
        topic: &str,
        start: impl Future<Output = Result<ImportTask, LinkError>>,
    ) -> Result<(), LinkError> {
        let claim = self.claim(topic, "import")?;
        let task = start.await?;
        claim.keep();
        self.tasks.push_import(task);
        Ok(())
    }

    /// Keeps a started import for `close` (for a task whose topic was claimed otherwise).
    pub fn push_import(&self, task: ImportTask) {
        self.tasks.push_import(task);
    }

    /// Keeps a started export for `close` (for a task whose topic was claimed otherwise).
    pub fn push_export(&self, task: E) {
        self.tasks.push_export(task);
    }

    /// A link's close, within `timeout`: stops the imports and [settles and
    /// flushes](Tasks::settle_and_flush); then runs the engine's own last steps, `finish`,
    /// given the deadline and the step cut so far, which returns the step it cut, if any;
    /// then marks the link's `state` closed, reads the engine's counters with `stats` and
    /// logs the outcome as `engine`'s link `link`.
    pub async fn close<S, F>(
        &self,
        (engine, link): (&'static str, &str),
        timeout: Duration,
        finish: impl FnOnce(Instant, Option<&'static str>) -> F,
        state: &State,
        stats: impl FnOnce() -> S,
    ) -> CloseReport<S>
    where
        F: Future<Output = Option<&'static str>>,
    {
        let started = Instant::now();
        let deadline = deadline_after(started, timeout);
        self.stop_imports.cancel();
        let settled = self.tasks.settle_and_flush(&self.held, deadline).await;
        let cut_at = finish(deadline, settled.cut_at).await;
        state.set(ConnectionState::Closed);
        let report = CloseReport {
            complete: cut_at.is_none(),
            cut_at,
            unsettled_imports: settled.unsettled_imports,
            unacked_exports: settled.unacked_exports,
            stats: stats(),
            elapsed: started.elapsed(),
        };
        match cut_at {
            None => tracing::info!(link, elapsed = ?report.elapsed, "{engine} link closed"),
            Some(cut_at) => tracing::warn!(
                link,
                cut_at,
                unsettled_imports = report.unsettled_imports,
                unacked_exports = report.unacked_exports,
                "{engine} link close did not finish"
            ),
        }
        report
    }
}

/// Parses a topic pattern a link is asked to export or import ([`ringbus::Pattern`]), or
/// says why it is not one ([`LinkError::BadName`]).
pub fn parse_pattern(pattern: &str) -> Result<ringbus::Pattern, LinkError> {
    ringbus::Pattern::parse(pattern).map_err(|e| LinkError::BadName {
        what: "topic pattern",
        name: pattern.escape_debug().to_string(),
        reason: match e {
            ringbus::Error::InvalidPattern { reason, .. } => reason,
            _ => "it is not a topic pattern",
        },
    })
}

/// Refuses to link `topic` both ways with a `codec` that does not record which messages were
/// imported: each message would go out and come back forever.
pub fn refuse_echo<T, C: Codec<T>>(topic: &str, codec: &C) -> Result<(), LinkError> {
    if codec.records_origin() {
        return Ok(());
    }
    Err(LinkError::EchoLoop {
        topic: topic.to_string(),
        message_type: std::any::type_name::<T>(),
    })
}

impl<E: Export> Default for Runtime<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> fmt::Debug for Runtime<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("stopped", &self.stop_imports.is_cancelled())
            .field("held", &self.held.load(Ordering::Relaxed))
            .field("claims", &self.claims)
            .field("tasks", &self.tasks)
            .finish()
    }
}

/// `url` with the password of its user-info part (`redis://user:password@host`,
/// `amqp://user:password@host`) replaced by `<redacted>`, for a builder's `Debug`.
pub fn redacted_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let user_info = &rest[..at];
    let user = user_info.split(':').next().unwrap_or("");
    let hidden = if user_info.contains(':') {
        format!("{user}:<redacted>")
    } else {
        "<redacted>".to_string() // `redis://password@host`: the lone part is a password
    };
    format!("{}{hidden}{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::{redacted_url, Claims, Settlement};

    #[test]
    fn a_name_and_a_pattern_sharing_a_topic_are_not_both_linked() {
        let claims = Claims::new();
        claims.claim("orders.eu", "export").unwrap().keep();
        assert!(claims.claim("orders.eu", "export").is_none());
        assert!(claims.claim("orders.>", "export").is_none());
        assert!(claims.claim("*.eu", "export").is_none());
        // Another direction, or topics the name is not among: free.
        claims.claim("orders.>", "import").unwrap().keep();
        claims.claim("orders.*.paid", "export").unwrap().keep();
        claims.claim("orders", "export").unwrap().keep();
        assert!(claims.claim("orders.us.paid", "export").is_none());
        assert!(claims.claim("orders.eu.x", "import").is_none());
        // A name that is no pattern is still a topic a pattern may cover.
        claims.claim("x.a>b", "import").unwrap().keep();
        assert!(claims.claim("x.*", "import").is_none());
        assert!(claims.claim("x.a>b", "import").is_none());
        claims.claim("y..z", "import").unwrap().keep();
        assert!(claims.claim("y..z", "import").is_none());
        // A claim given back frees what it covered.
        drop(claims.claim("billing.*", "export"));
        claims.claim("billing.x", "export").unwrap().keep();
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redacted_url("redis://app:s3cret@host:6379/0"),
            "redis://app:<redacted>@host:6379/0"
        );
        assert_eq!(
            redacted_url("redis://:s3cret@host"),
            "redis://:<redacted>@host"
        );
        assert_eq!(
            redacted_url("rediss://s3cret@host"),
            "rediss://<redacted>@host"
        );
        assert_eq!(
            redacted_url("amqp://u:p@h/%2f"),
            "amqp://u:<redacted>@h/%2f"
        );
        assert_eq!(redacted_url("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn a_handler_that_gave_up_dead_letters_and_a_missed_one_redelivers() {
        assert_eq!(Settlement::of(3, 0, 0), Settlement::Ack);
        assert_eq!(Settlement::of(0, 0, 0), Settlement::Ack);
        assert_eq!(
            Settlement::of(3, 1, 0),
            Settlement::DeadLetter("1 of 3 handlers gave up on it".into())
        );
        // A handler that gave up wins over one that missed it: the message is kept in the
        // dead letters, and the handlers that succeeded do not see it again.
        assert!(matches!(Settlement::of(3, 1, 1), Settlement::DeadLetter(_)));
        assert_eq!(
            Settlement::of(2, 0, 1),
            Settlement::Redeliver("1 of 2 subscribers ended before handling it".into())
        );
    }
}
