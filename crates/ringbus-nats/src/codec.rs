//! The codec, headers and envelope live in `ringbus-link`, shared with every link engine;
//! this module names them for the rest of the crate, with the header names NATS alone uses.

pub use ringbus_link::{Codec, CodecError, Envelope, HeaderError, Headers, Json, Meta};

pub(crate) use ringbus_link::codec::is_reserved;
pub(crate) use ringbus_link::names::{
    DEAD_REASON as ERROR_HEADER, ID as ID_HEADER, ORIGIN as ORIGIN_HEADER, TOPIC as TOPIC_HEADER,
};

/// JetStream's dedup header: a copy of the message id on JetStream exports.
pub(crate) const NATS_MSG_ID: &str = "Nats-Msg-Id";
