//! The names a link writes beside a message's body (NATS headers, Redis stream fields). A
//! user header may not use them: [`is_reserved`](crate::codec::is_reserved) refuses every
//! `Ringbus-*` and `Nats-*` name.

/// The local topic a message was published to; an import checks it.
pub const TOPIC: &str = "Ringbus-Topic";
/// The message id (an [`Envelope`](crate::Envelope)'s, or one the link made).
pub const ID: &str = "Ringbus-Id";
/// The id of the link that exported the message: a link skips its own exports on import.
pub const ORIGIN: &str = "Ringbus-Origin";
/// On a dead letter: why the message was dead-lettered.
pub const DEAD_REASON: &str = "Ringbus-Dead-Reason";
