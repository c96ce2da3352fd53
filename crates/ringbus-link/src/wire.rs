//! For engines: what every engine's wire format does the same way around its own framing
//! (NATS headers, Redis stream fields, AMQP properties).
//!
//! - [`encode`]: a message through its codec into a body, with its id (the codec's, or a new
//!   one) and its user headers, each checked by the rules every link shares (and, with the
//!   feature `otel`, the trace context of the export's span).
//! - [`check_size`], [`decode`]: the body's size, then the codec, on the way in.
//! - [`ExportError`], [`BadInput`]: why a message did not go out, or was refused coming in.

use std::fmt;

use crate::codec::{check_header, decode_caught, encode_caught};
use crate::ids::next_id;
use crate::names::ID;
use crate::{Codec, CodecError, HeaderError, Headers, Meta};

/// Why a message could not be exported.
#[derive(Debug)]
pub enum ExportError {
    /// The codec failed.
    Encode(CodecError),
    /// The id or a header breaks the rules every link shares.
    Header(HeaderError),
    /// The encoded body is larger than the link allows.
    TooLarge {
        /// The body's size.
        bytes: usize,
        /// The most the link allows.
        max: usize,
    },
    /// The server did not take it (refused, or not confirmed in time).
    Send(String),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Encode(e) => write!(f, "cannot encode the message: {e}"),
            ExportError::Header(e) => e.fmt(f),
            ExportError::TooLarge { bytes, max } => write!(
                f,
                "the encoded message has {bytes} bytes, more than the {max} allowed"
            ),
            ExportError::Send(e) => write!(f, "the server did not take the message: {e}"),
        }
    }
}

impl std::error::Error for ExportError {}

/// Why a message from the server was refused (logged without its body, counted, and
/// dead-lettered where the engine keeps dead letters).
#[derive(Debug, PartialEq, Eq)]
pub enum BadInput {
    /// The body is larger than the link allows.
    TooLarge {
        /// The body's size.
        bytes: usize,
        /// The most the link allows.
        max: usize,
    },
    /// A header (or field) the link needs is not there.
    Missing(&'static str),
    /// The topic it carries is not the one imported.
    WrongTopic,
    /// A header (or field) that must be text is not (its name, escaped).
    NotText(String),
    /// The codec refused the body. Its error is not kept: it may quote the body.
    Decode,
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadInput::TooLarge { bytes, max } => {
                write!(f, "the body has {bytes} bytes, more than the {max} allowed")
            }
            BadInput::Missing(name) => write!(f, "the required {name} is missing"),
            BadInput::WrongTopic => f.write_str("its topic names another topic"),
            BadInput::NotText(name) => write!(f, "{name:?} is not UTF-8 text"),
            BadInput::Decode => f.write_str("the body does not decode"),
        }
    }
}

impl std::error::Error for BadInput {}

/// What goes out beside a body: its id and its user headers, both checked.
#[derive(Debug)]
pub struct Outgoing {
    /// The codec's id, or a new one.
    pub id: String,
    /// The user headers.
    pub headers: Headers,
}

/// Ids follow the rule of header values (no line breaks, no padding), on every link.
fn check_id(id: &str) -> Result<(), HeaderError> {
    if id.is_empty() || id.contains(['\r', '\n']) || id.trim() != id {
        return Err(HeaderError::bad_value(ID));
    }
    Ok(())
}

/// Encodes `msg` into `body` (emptied first: one buffer may serve a whole batch, its
/// allocation kept), refusing a body over `max` bytes; the id and user headers are checked
/// (a custom codec may have filled `Headers` without `insert`'s check).
pub fn encode<T, C: Codec<T>>(
    codec: &C,
    msg: &T,
    max: usize,
    body: &mut Vec<u8>,
) -> Result<Outgoing, ExportError> {
    body.clear();
    let mut meta = Meta::default();
    encode_caught(codec, msg, body, &mut meta).map_err(ExportError::Encode)?;
    if body.len() > max {
        return Err(ExportError::TooLarge {
            bytes: body.len(),
            max,
        });
    }
    let id = match meta.id {
        Some(id) => {
            check_id(&id).map_err(ExportError::Header)?;
            id
        }
        // Hex digits, a dash and decimal digits: nothing `check_id` refuses.
        None => next_id(),
    };
    for (name, value) in meta.headers.iter() {
        check_header(name, value).map_err(ExportError::Header)?;
    }
    // Feature `otel`: the trace context of the export's span (see `otel`). The propagator's
    // names and values pass the header rules; one that did not would be left out.
    #[cfg(feature = "otel")]
    let headers = {
        let mut headers = meta.headers;
        crate::otel::inject(|name, value| {
            let _ = headers.insert(name, value);
        });
        headers
    };
    #[cfg(not(feature = "otel"))]
    let headers = meta.headers;
    Ok(Outgoing { id, headers })
}

/// Refuses a body of more than `max` bytes.
pub fn check_size(body: &[u8], max: usize) -> Result<(), BadInput> {
    if body.len() > max {
        return Err(BadInput::TooLarge {
            bytes: body.len(),
            max,
        });
    }
    Ok(())
}

/// Decodes `body` with its id and user headers (a panic in the codec is caught).
pub fn decode<T, C: Codec<T>>(
    codec: &C,
    body: &[u8],
    id: String,
    headers: Headers,
) -> Result<T, BadInput> {
    let meta = Meta {
        id: Some(id),
        headers,
    };
    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Envelope, Json};

    #[test]
    fn ids_and_sizes_are_checked_both_ways() {
        let mut body = Vec::new();
        let out = encode(&Json, &Envelope::new(5u8).with_id("a"), 64, &mut body).unwrap();
        assert_eq!((out.id.as_str(), body.as_slice()), ("a", b"5".as_slice()));
        let made = encode(&Json, &5u8, 64, &mut body).unwrap().id;
        // A made id skips `check_id`: it must pass it, and look as `ids` says.
        assert_eq!(check_id(&made), Ok(()));
        let (tag, n) = made.split_once('-').unwrap();
        assert_eq!(tag, crate::ids::process_tag());
        assert!(n.parse::<u64>().is_ok(), "{made}");
        for bad in ["", " a", "a\r\nb"] {
            let refused = encode(&Json, &Envelope::new(5u8).with_id(bad), 64, &mut body);
            assert!(matches!(refused, Err(ExportError::Header(_))), "{bad:?}");
        }
        let large = encode(&Json, &"x".repeat(100), 10, &mut body);
        assert!(matches!(large, Err(ExportError::TooLarge { .. })));
        assert!(check_size(&[0; 11], 10).is_err() && check_size(&[0; 10], 10).is_ok());
        let back: Result<u8, _> = decode(&Json, b"{not", "a".into(), Headers::new());
        assert_eq!(back, Err(BadInput::Decode));
    }
}
