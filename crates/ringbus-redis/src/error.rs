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
    /// The URL does not parse, or connecting to Redis failed (unreachable server, refused
    /// password, TLS).
    Connect(redis::RedisError),
    /// A topic, prefix or group name cannot be used in a stream key.
    BadName {
        /// What was checked: `"topic"`, `"prefix"`, `"dead-letter prefix"`, `"group"` or
        /// `"consumer"`.
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
    /// Setting up a consumer group failed.
    Group(redis::RedisError),
    /// The local bus refused (closed bus, type mismatch, no runtime).
    Bus(ringbus::Error),
    /// The link was closed.
    Closed,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Connect(e) => write!(f, "cannot connect to Redis: {e}"),
            LinkError::BadName { what, name, reason } => {
                write!(
                    f,
                    "{what} {name:?} cannot be used in a Redis stream key: {reason}"
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
                 imports would be exported again; use ringbus_redis::Envelope<T>"
            ),
            LinkError::Group(e) => write!(f, "cannot create the consumer group: {e}"),
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
            LinkError::Group(e) if whole => f.debug_tuple("Group").field(e).finish(),
            LinkError::Bus(e) if whole => f.debug_tuple("Bus").field(e).finish(),
            LinkError::Connect(_) => f.write_str("Connect(..)"),
            LinkError::Group(_) => f.write_str("Group(..)"),
            LinkError::Bus(_) => f.write_str("Bus(..)"),
            LinkError::BadName { what, name, reason } => f
                .debug_struct("BadName")
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
            LinkError::Connect(e) | LinkError::Group(e) => Some(e),
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

/// Checks a name used in a stream key or as a group or consumer name: not empty, no
/// whitespace or control characters, no `:` (the key separator), at most 200 bytes.
pub(crate) fn check_name(name: &str, what: &'static str) -> Result<(), LinkError> {
    let refuse = |reason| LinkError::BadName {
        what,
        name: name.escape_debug().to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse("it is empty"));
    }
    if name.len() > 200 {
        return Err(refuse("it is longer than 200 bytes"));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse("it contains whitespace or a control character"));
    }
    if name.contains(':') {
        return Err(refuse(
            "':' separates the prefix from the topic in a stream key",
        ));
    }
    Ok(())
}
