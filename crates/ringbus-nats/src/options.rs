//! How to connect ([`LinkBuilder`], [`Auth`], [`Tls`]), how each topic travels ([`Mode`],
//! [`JetStreamOptions`]) and how instances that import the same topic share it ([`Sharing`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use ringbus_link::LONGEST_WAIT;

/// Credentials for the NATS server, handed to `async-nats`. Their `Debug` output never shows
/// a secret, and the link never logs them.
#[derive(Clone)]
#[non_exhaustive]
pub enum Auth {
    /// No credentials.
    None,
    /// A user name and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password (secret).
        password: String,
    },
    /// A token (secret).
    Token(String),
    /// An nkey seed (secret).
    NKey(String),
    /// A `.creds` file (JWT and nkey seed), read at connect time.
    CredsFile(PathBuf),
}

impl Auth {
    /// A user name and password.
    pub fn user_password(user: impl Into<String>, password: impl Into<String>) -> Self {
        Auth::UserPassword {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::NKey(_) => f.write_str("NKey(<redacted>)"),
            Auth::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
        }
    }
}

/// TLS settings, handed to `async-nats` (which uses rustls).
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// Refuse a connection without TLS.
    pub required: bool,
    /// Extra root certificates (PEM files) to trust.
    pub root_certificates: Vec<PathBuf>,
    /// A client certificate and its key (PEM files), for mutual TLS.
    pub client_certificate: Option<(PathBuf, PathBuf)>,
}

/// How a topic travels, chosen when it is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// NATS core: at-most-once, fire and forget. A message published while the link is down
    /// or while an importer is too slow may be lost; losses the client reports (slow
    /// consumer) are logged and counted.
    Core,
    /// JetStream: at-least-once. Exports are acknowledged by the server (and re-sent with
    /// the same message id, deduplicated by the server, until they are); imports are acked
    /// only once every local subscriber handled them. Handlers must be idempotent:
    /// a message may arrive more than once.
    JetStream,
}

/// How the instances (processes, or links) that import one topic divide its messages, chosen
/// per topic when it is imported.
///
/// - **fan-out**: every instance sees every message. This is what [`Link::import`] does on
///   [`Mode::Core`] (a plain subscription). On [`Mode::JetStream`] a durable consumer is the
///   unit of fan-out: [`Link::import`] uses the consumer `<durable>_<topic>`
///   ([`JetStreamOptions::durable`]), so instances see every message when each has a durable
///   name of its own, and share them when they keep the same one (the default `ringbus` is
///   the same everywhere).
/// - **shared**: each message goes to one instance of the group (competing consumers). Core:
///   the instances join the NATS queue group `group`, and the server hands each message to
///   one member (at most once: a message in flight to an instance that dies is lost). JetStream:
///   the instances pull from the one durable consumer `<group>_<topic>` (the group replaces
///   [`JetStreamOptions::durable`] for that topic); each message is delivered to one of them
///   and acked by it, and a message an instance took and did not ack (it died, or was too
///   slow) goes to another after [`JetStreamOptions::ack_wait`] (at least once). Instances
///   in different groups each receive every message, once per group.
///
/// [`Link::import_shared`] imports a topic shared; [`Link::import_as`] takes a `Sharing`, for
/// a choice made in configuration.
///
/// [`Link::import`]: crate::Link::import
/// [`Link::import_shared`]: crate::Link::import_shared
/// [`Link::import_as`]: crate::Link::import_as
///
/// ```
/// use ringbus_nats::Sharing;
/// assert_eq!(Sharing::default(), Sharing::FanOut);
/// assert_eq!(Sharing::shared("billing"), Sharing::Shared("billing".to_string()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// Every instance sees every message (on JetStream: per durable name, see above).
    #[default]
    FanOut,
    /// Each message goes to one instance of the named group. The name must be usable in a
    /// NATS subject (no whitespace, no wildcards); on JetStream it names the durable
    /// consumer (characters other than letters, digits and `-` become `_`).
    Shared(String),
}

impl Sharing {
    /// Each message to one instance of `group`.
    pub fn shared(group: impl Into<String>) -> Self {
        Sharing::Shared(group.into())
    }

    /// The group's name, if shared.
    pub fn group(&self) -> Option<&str> {
        match self {
            Sharing::FanOut => None,
            Sharing::Shared(group) => Some(group),
        }
    }
}

/// JetStream settings of a link (used by every topic linked in [`Mode::JetStream`]).
///
/// A wait longer than [`LONGEST_WAIT`](ringbus_link::LONGEST_WAIT) (30 years), such as
/// `Duration::MAX` for "no limit", counts as that.
///
/// `ack_wait`, `max_deliver` and `max_in_flight` (as `max_ack_pending`) are set on a durable
/// consumer when the link makes it. One that exists (made by an earlier run, or by another
/// process sharing it) keeps its own: the link follows them (it dead-letters on the last
/// delivery the consumer allows) and logs a warning where they differ. Delete the consumer,
/// or use another durable name, to apply new ones.
#[derive(Clone, Debug)]
pub struct JetStreamOptions {
    /// The stream, created if missing, that holds the subjects of the topics linked in
    /// JetStream mode (each link adds its own) and the dead letters.
    /// Default: the prefix with `.` and other separators turned into `_`, upper-cased.
    pub stream: Option<String>,
    /// The durable consumer name prefix (one consumer per imported topic):
    /// `<durable>_<topic>`. Default: `ringbus`. Two processes with the same durable name
    /// share the work of one consumer (each message goes to one of them); with names of
    /// their own, each sees every message (see [`Sharing`]; a topic imported with
    /// [`Sharing::Shared`] uses the group's name instead). Processes that link a topic both
    /// ways must each use their own durable name, or a process would skip (and settle) its
    /// own messages in place of the other's.
    pub durable: String,
    /// Deliveries of one message before it is dead-lettered. Default: 5. A handler that gives
    /// up on a message has it dead-lettered on that delivery.
    pub max_deliver: u32,
    /// How long a message nacked (a subscriber ended before handling it, or the bus refused
    /// it) waits before it is delivered again. Default: 1 s. A handler that fails retries by
    /// its own `RetryPolicy` instead (see `ringbus_link::engine::Settlement`).
    pub nack_delay: Duration,
    /// How long the server waits for an ack before delivering again. Default: 30 s. Keep it
    /// above the slowest handler's run time, its retries and their backoff included.
    pub ack_wait: Duration,
    /// Messages fetched per pull. Default: 64.
    pub pull_batch: usize,
    /// Imported messages held (handed to the bus and not yet settled) at most. Default: 256.
    /// 0 counts as 1, and more than tokio's `Semaphore::MAX_PERMITS` (or `u32::MAX`, if
    /// smaller) as that.
    pub max_in_flight: usize,
    /// Exported messages whose server ack is awaited at most. Default: 256. 0 counts as 1,
    /// and more than tokio's `Semaphore::MAX_PERMITS` as that.
    pub ack_window: usize,
    /// How long an export keeps re-sending a message the server did not ack (for instance
    /// while it restarts) before it gives up, logs and counts it. Default: 60 s.
    pub publish_retry_for: Duration,
    /// The stream's duplicate window (server-side dedup by message id). Default: 2 min.
    pub duplicate_window: Duration,
    /// Store the stream in memory instead of files. Default: false.
    pub memory_storage: bool,
    /// Copies of the stream kept by a JetStream cluster (1 to 5; the server refuses more
    /// than the cluster has nodes), used when the link creates the stream: with 3, the
    /// stream and its consumers survive the loss of one node. An existing stream keeps its
    /// own setting. Default: 1.
    pub replicas: usize,
}

impl JetStreamOptions {
    /// These options with every wait at most [`LONGEST_WAIT`].
    pub(crate) fn clamped(self) -> Self {
        Self {
            nack_delay: self.nack_delay.min(LONGEST_WAIT),
            ack_wait: self.ack_wait.min(LONGEST_WAIT),
            publish_retry_for: self.publish_retry_for.min(LONGEST_WAIT),
            duplicate_window: self.duplicate_window.min(LONGEST_WAIT),
            ..self
        }
    }
}

impl Default for JetStreamOptions {
    fn default() -> Self {
        Self {
            stream: None,
            durable: "ringbus".to_string(),
            max_deliver: 5,
            nack_delay: Duration::from_secs(1),
            ack_wait: Duration::from_secs(30),
            pull_batch: 64,
            max_in_flight: 256,
            ack_window: 256,
            publish_retry_for: Duration::from_secs(60),
            duplicate_window: Duration::from_secs(120),
            memory_storage: false,
            replicas: 1,
        }
    }
}
