//! Errors of the link.

use std::fmt;

use ringbus_link::engine::Refused;

/// Why a link could not be made or used.
///
/// `{:?}`, what `?` in `main` and `unwrap` print, leads with the message (its `Display`),
/// then the variant in parentheses; `{:#?}` is the structure alone.
#[non_exhaustive]
pub enum LinkError {
    /// The URL does not parse, or connecting to RabbitMQ failed (unreachable server, refused
    /// credentials, timeout).
    Connect(String),
    /// A topic, prefix or group name cannot be used in an exchange, queue or routing key.
    BadName {
        /// What was checked: `"topic"`, `"prefix"`, `"dead-letter prefix"` or `"group"`.
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
    /// Declaring an exchange, a queue or a binding failed.
    Topology(String),
    /// The local bus refused (closed bus, type mismatch, no runtime).
    Bus(ringbus::Error),
    /// The link was closed.
    Closed,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Connect(e) => write!(f, "cannot connect to RabbitMQ: {e}"),
            LinkError::BadName { what, name, reason } => {
                write!(
                    f,
                    "{what} {name:?} cannot be used in a RabbitMQ name: {reason}"
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
                 imports would be exported again; use ringbus_rabbitmq::Envelope<T>"
            ),
            LinkError::Topology(e) => write!(f, "cannot declare the link's topology: {e}"),
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
            LinkError::Connect(e) => f.debug_tuple("Connect").field(e).finish(),
            LinkError::Topology(e) => f.debug_tuple("Topology").field(e).finish(),
            LinkError::Bus(e) if whole => f.debug_tuple("Bus").field(e).finish(),
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
            LinkError::Bus(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Refused> for LinkError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Closed => LinkError::Closed,
            Refused::AlreadyLinked { topic, direction } => {
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

/// Checks a name used in an exchange, a queue or a routing key: not empty, no whitespace or
/// control characters, none of AMQP's topic wildcards (`*`, `#`), at most 200 bytes.
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
    if name.contains(['*', '#']) {
        return Err(refuse("it contains a topic wildcard (`*` or `#`)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_name, LinkError};

    #[test]
    fn names_with_wildcards_or_spaces_are_refused_and_debug_leads_with_the_message() {
        assert!(check_name("orders.eu", "topic").is_ok());
        for bad in ["", "a b", "orders.*", "orders.#", &"x".repeat(201)] {
            assert!(check_name(bad, "topic").is_err(), "{bad:?}");
        }
        let e = check_name("a*", "topic").unwrap_err();
        assert!(format!("{e:?}").starts_with("topic \"a*\" cannot be used"));
        assert!(format!("{:#?}", LinkError::Closed).starts_with("Closed"));
    }
}
