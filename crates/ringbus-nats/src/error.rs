//! Errors of the link.

use std::fmt;

/// Why a link could not be made or used.
///
/// `{:?}`, what `?` in `main` and `unwrap` print, leads with the message (its `Display`), then
/// gives the variant and its fields in parentheses, a wrapped error as `..` (its text is in the
/// message); `{:#?}` is the structure alone, wrapped errors included, as `#[derive(Debug)]`
/// prints it.
#[non_exhaustive]
pub enum LinkError {
    /// Connecting to NATS failed (unreachable server, refused credentials, TLS).
    Connect(async_nats::ConnectError),
    /// A credentials file could not be read.
    Credentials(std::io::Error),
    /// A topic or prefix does not make a publishable NATS subject.
    BadSubject {
        /// What was checked: `"topic"`, `"prefix"`, `"dead-letter prefix"` or `"queue group"`.
        what: &'static str,
        /// The name, escaped for printing.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The topic is already linked in that direction by this link.
    AlreadyLinked {
        /// The topic.
        topic: String,
        /// `"export"` or `"import"`.
        direction: &'static str,
    },
    /// Linking a topic both ways needs a message type that records that it was imported
    /// (such as [`Envelope`](crate::Envelope)), or imports would be exported again, forever.
    EchoLoop {
        /// The topic.
        topic: String,
        /// The message type.
        message_type: &'static str,
    },
    /// Setting up JetStream (the stream or a consumer) failed.
    JetStream(String),
    /// A subscription to NATS failed.
    Subscribe(String),
    /// The local bus refused (closed bus, type mismatch, no runtime).
    Bus(ringbus::Error),
    /// The link was closed.
    Closed,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Connect(e) => write!(f, "cannot connect to NATS: {e}"),
            LinkError::Credentials(e) => write!(f, "cannot read the NATS credentials: {e}"),
            LinkError::BadSubject { what, name, reason } => {
                write!(
                    f,
                    "{what} {name:?} cannot be used as a NATS subject: {reason}"
                )
            }
            LinkError::AlreadyLinked { topic, direction } => {
                write!(f, "topic {topic:?} is already linked ({direction})")
            }
            LinkError::EchoLoop {
                topic,
                message_type,
            } => write!(
                f,
                "topic {topic:?} cannot be linked both ways with messages of type \
                 {message_type}: the codec cannot tell imported messages from local ones, so \
                 imports would be exported again; use ringbus_nats::Envelope<T>"
            ),
            LinkError::JetStream(e) => write!(f, "JetStream setup failed: {e}"),
            LinkError::Subscribe(e) => write!(f, "NATS subscribe failed: {e}"),
            LinkError::Bus(e) => write!(f, "the local bus refused: {e}"),
            LinkError::Closed => f.write_str("the link is closed"),
        }
    }
}

impl fmt::Debug for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = f.alternate();
        if !whole {
            write!(f, "{self} (")?;
        }
        match self {
            LinkError::Connect(e) if whole => f.debug_tuple("Connect").field(e).finish(),
            LinkError::Credentials(e) if whole => f.debug_tuple("Credentials").field(e).finish(),
            LinkError::Bus(e) if whole => f.debug_tuple("Bus").field(e).finish(),
            LinkError::Connect(_) => f.write_str("Connect(..)"),
            LinkError::Credentials(_) => f.write_str("Credentials(..)"),
            LinkError::Bus(_) => f.write_str("Bus(..)"),
            LinkError::BadSubject { what, name, reason } => f
                .debug_struct("BadSubject")
                .field("what", what)
                .field("name", name)
                .field("reason", reason)
                .finish(),
            LinkError::AlreadyLinked { topic, direction } => f
                .debug_struct("AlreadyLinked")
                .field("topic", topic)
                .field("direction", direction)
                .finish(),
            LinkError::EchoLoop {
                topic,
                message_type,
            } => f
                .debug_struct("EchoLoop")
                .field("topic", topic)
                .field("message_type", message_type)
                .finish(),
            LinkError::JetStream(e) => f.debug_tuple("JetStream").field(e).finish(),
            LinkError::Subscribe(e) => f.debug_tuple("Subscribe").field(e).finish(),
            LinkError::Closed => f.write_str("Closed"),
        }?;
        if !whole {
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl std::error::Error for LinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LinkError::Connect(e) => Some(e),
            LinkError::Credentials(e) => Some(e),
            LinkError::Bus(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ringbus_link::engine::Refused> for LinkError {
    fn from(refused: ringbus_link::engine::Refused) -> Self {
        match refused {
            ringbus_link::engine::Refused::Closed => LinkError::Closed,
            ringbus_link::engine::Refused::AlreadyLinked { topic, direction } => {
                LinkError::AlreadyLinked { topic, direction }
            }
        }
    }
}

impl From<ringbus::Error> for LinkError {
    fn from(e: ringbus::Error) -> Self {
        LinkError::Bus(e)
    }
}
