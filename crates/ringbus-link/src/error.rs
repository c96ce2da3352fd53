//! The error of every link engine (feature `engine`): `ringbus_nats::LinkError`,
//! `ringbus_redis::LinkError` and `ringbus_rabbitmq::LinkError` are this type.

use std::error::Error;
use std::fmt;

/// A wrapped error: the client library's, or a message.
type Source = Box<dyn Error + Send + Sync>;

/// Why a link could not be made or used.
///
/// `{:?}`, what `?` in `main` and `unwrap` print, leads with the message (its `Display`), then
/// gives the variant and its fields in parentheses, a wrapped error as `..` (its text is in the
/// message); `{:#?}` is the structure alone, wrapped errors included, as `#[derive(Debug)]`
/// prints it.
#[non_exhaustive]
pub enum LinkError {
    /// Connecting failed: an unreachable server, refused credentials, TLS, a URL that does
    /// not parse, a credentials file that cannot be read.
    Connect(Source),
    /// A topic, prefix, group or consumer name the engine cannot use (in a NATS subject, a
    /// Redis stream key, a RabbitMQ exchange, queue or routing key).
    BadName {
        /// What was checked: `"topic"`, `"prefix"`, `"dead-letter prefix"`, `"group"`,
        /// `"queue group"` or `"consumer"`.
        what: &'static str,
        /// The name, escaped for printing.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The topic is already linked in that direction by this link: by its name, or by a
    /// pattern sharing a topic with it.
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
    /// Setting up what the link reads or writes on the server failed: a JetStream stream or
    /// consumer, a NATS subscription, a Redis consumer group, a RabbitMQ exchange, queue or
    /// binding.
    Setup(Source),
    /// The local bus refused (closed bus, type mismatch, no runtime).
    Bus(ringbus::Error),
    /// The link was closed.
    Closed,
}

impl LinkError {
    /// [`LinkError::Connect`] with `error`.
    pub fn connect(error: impl Into<Source>) -> Self {
        LinkError::Connect(error.into())
    }

    /// [`LinkError::Setup`] with `error`.
    pub fn setup(error: impl Into<Source>) -> Self {
        LinkError::Setup(error.into())
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Connect(e) => write!(f, "cannot connect to the server: {e}"),
            LinkError::BadName { what, name, reason } => {
                write!(f, "{what} {name:?} cannot be used: {reason}")
            }
            LinkError::AlreadyLinked { topic, direction } => {
                write!(
                    f,
                    "topic {topic:?} is already linked ({direction}), by its name or by a \
                     pattern that shares a topic with it"
                )
            }
            LinkError::EchoLoop {
                topic,
                message_type,
            } => write!(
                f,
                "topic {topic:?} cannot be linked both ways with messages of type \
                 {message_type}: the codec cannot tell imported messages from local ones, so \
                 imports would be exported again; use Envelope<T>"
            ),
            LinkError::Setup(e) => write!(f, "cannot set the link up on the server: {e}"),
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
            LinkError::Setup(e) if whole => f.debug_tuple("Setup").field(e).finish(),
            LinkError::Bus(e) if whole => f.debug_tuple("Bus").field(e).finish(),
            LinkError::Connect(_) => f.write_str("Connect(..)"),
            LinkError::Setup(_) => f.write_str("Setup(..)"),
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

impl Error for LinkError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            LinkError::Connect(e) | LinkError::Setup(e) => Some(&**e),
            LinkError::Bus(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ringbus::Error> for LinkError {
    fn from(e: ringbus::Error) -> Self {
        LinkError::Bus(e)
    }
}

#[cfg(test)]
mod tests {
    use super::LinkError;

    #[test]
    fn the_debug_of_every_link_error_leads_with_its_message() {
        let wrapped = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "WRONGPASS");
        let errors = [
            (LinkError::connect(wrapped()), "Connect(..)"),
            (
                LinkError::BadName {
                    what: "topic",
                    name: "orders.>".into(),
                    reason: "it contains a wildcard",
                },
                "BadName { what: \"topic\", name: \"orders.>\", reason: \"it contains a wildcard\" }",
            ),
            (
                LinkError::AlreadyLinked {
                    topic: "orders".into(),
                    direction: "export",
                },
                "AlreadyLinked { topic: \"orders\", direction: \"export\" }",
            ),
            (
                LinkError::EchoLoop {
                    topic: "orders".into(),
                    message_type: "app::Order",
                },
                "EchoLoop { topic: \"orders\", message_type: \"app::Order\" }",
            ),
            (LinkError::setup("no stream"), "Setup(..)"),
            (LinkError::Bus(ringbus::Error::Closed), "Bus(..)"),
            (LinkError::Closed, "Closed"),
        ];
        for (e, structure) in errors {
            assert_eq!(format!("{e:?}"), format!("{e} ({structure})"));
            let whole = format!("{e:#?}");
            let variant = structure.split(['(', ' ']).next().unwrap();
            assert!(whole.starts_with(variant), "{{:#?}}: {whole}");
        }
        // `{:#?}` shows a wrapped error in full, and the message quotes it.
        assert!(format!("{:#?}", LinkError::connect(wrapped())).contains("WRONGPASS"));
        assert!(LinkError::setup("no stream")
            .to_string()
            .contains("no stream"));
        assert!(format!("{:#?}", LinkError::Bus(ringbus::Error::Closed)).contains("Closed"));
    }
}
