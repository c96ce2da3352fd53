//! Messages to and from NATS: the link's headers around a codec's body.

use std::fmt;
use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;

use crate::codec::{
    check_header, decode_caught, encode_caught, is_reserved, next_id, Codec, CodecError,
    HeaderError, Headers, Meta, ID_HEADER, NATS_MSG_ID, ORIGIN_HEADER, TOPIC_HEADER,
};

/// Why a message could not be exported.
#[derive(Debug)]
pub(crate) enum ExportError {
    Encode(CodecError),
    Header(HeaderError),
    TooLarge { bytes: usize, max: usize },
    Publish(String),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Encode(e) => write!(f, "cannot encode the message: {e}"),
            ExportError::Header(e) => e.fmt(f),
            ExportError::TooLarge { bytes, max } => {
                write!(
                    f,
                    "the encoded message has {bytes} bytes, more than the {max} allowed"
                )
            }
            ExportError::Publish(e) => write!(f, "NATS refused the publish: {e}"),
        }
    }
}

/// Why a message from NATS was refused.
#[derive(Debug)]
pub(crate) enum BadInput {
    TooLarge { bytes: usize, max: usize },
    MissingHeader(&'static str),
    WrongTopic,
    Decode,
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadInput::TooLarge { bytes, max } => {
                write!(f, "the body has {bytes} bytes, more than the {max} allowed")
            }
            BadInput::MissingHeader(h) => write!(f, "the required header {h} is missing"),
            BadInput::WrongTopic => f.write_str("the topic header names another topic"),
            // The codec's error may quote the body: only its kind is kept.
            BadInput::Decode => f.write_str("the body does not decode"),
        }
    }
}

/// An encoded message, ready to publish (and to re-send: cloning is cheap).
#[derive(Clone, Debug)]
pub(crate) struct Outgoing {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

fn set(headers: &mut HeaderMap, name: &str, value: &str) -> Result<(), HeaderError> {
    let n = HeaderName::from_str(name).map_err(|_| HeaderError::bad_name(name))?;
    set_known(headers, n, value)
}

/// Sets one of the link's own headers: its name is a constant (no allocation, no parsing).
fn set_known(headers: &mut HeaderMap, name: HeaderName, value: &str) -> Result<(), HeaderError> {
    let v = HeaderValue::from_str(value).map_err(|_| HeaderError::bad_value(name.as_ref()))?;
    headers.insert(name, v);
    Ok(())
}

/// Encodes `msg` for `topic`; `origin` is set on JetStream exports (the echo filter). The
/// body's buffer starts with `capacity` bytes.
pub(crate) fn encode<T, C: Codec<T>>(
    codec: &C,
    msg: &T,
    topic: &str,
    origin: Option<&str>,
    max: usize,
    capacity: usize,
) -> Result<Outgoing, ExportError> {
    // Sized from the caller's last body: JSON grown from empty reallocates 4-8 times.
    let mut body = Vec::with_capacity(capacity.min(max));
    let mut meta = Meta::default();
    encode_caught(codec, msg, &mut body, &mut meta).map_err(ExportError::Encode)?;
    if body.len() > max {
        return Err(ExportError::TooLarge {
            bytes: body.len(),
            max,
        });
    }
    let mut headers = HeaderMap::new();
    for (name, value) in meta.headers.iter() {
        // A custom codec may have filled `Headers` through `insert`, which checks; check
        // again anyway, never trusting `HeaderMap::insert(&str, &str)` (it panics).
        check_header(name, value).map_err(ExportError::Header)?;
        set(&mut headers, name, value).map_err(ExportError::Header)?;
    }
    let id = meta.id.unwrap_or_else(next_id);
    set_known(&mut headers, HeaderName::from_static(TOPIC_HEADER), topic)
        .map_err(ExportError::Header)?;
    set_known(&mut headers, HeaderName::from_static(ID_HEADER), &id)
        .map_err(ExportError::Header)?;
    if let Some(origin) = origin {
        set_known(&mut headers, HeaderName::from_static(NATS_MSG_ID), &id)
            .map_err(ExportError::Header)?;
        set_known(&mut headers, HeaderName::from_static(ORIGIN_HEADER), origin)
            .map_err(ExportError::Header)?;
    }
    Ok(Outgoing {
        headers,
        body: Bytes::from(body),
    })
}

/// The origin header of a message, if any.
pub(crate) fn origin(headers: Option<&HeaderMap>) -> Option<&str> {
    headers?.get(ORIGIN_HEADER).map(|v| v.as_str())
}

/// Decodes a message from NATS for `topic`.
pub(crate) fn decode<T, C: Codec<T>>(
    codec: &C,
    topic: &str,
    headers: Option<&HeaderMap>,
    body: &[u8],
    max: usize,
) -> Result<T, BadInput> {
    if body.len() > max {
        return Err(BadInput::TooLarge {
            bytes: body.len(),
            max,
        });
    }
    let headers = headers.ok_or(BadInput::MissingHeader(TOPIC_HEADER))?;
    let named = headers
        .get(TOPIC_HEADER)
        .ok_or(BadInput::MissingHeader(TOPIC_HEADER))?;
    if named.as_str() != topic {
        return Err(BadInput::WrongTopic);
    }
    let id = headers
        .get(ID_HEADER)
        .ok_or(BadInput::MissingHeader(ID_HEADER))?
        .to_string();
    let mut user = Headers::new();
    for (name, values) in headers.iter() {
        let name: &str = name.as_ref();
        if is_reserved(name) {
            continue;
        }
        if let Some(value) = values.last() {
            user.insert_unchecked(name.to_string(), value.to_string());
        }
    }
    let meta = Meta {
        id: Some(id),
        headers: user,
    };
    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Envelope, Json};

    #[test]
    fn round_trip_keeps_id_headers_and_body() {
        let msg = Envelope::new(vec![1u8, 2, 3])
            .with_id("order-7")
            .with_header("Tenant", "acme")
            .unwrap();
        let out = encode(&Json, &msg, "orders", Some("me"), 1 << 20, 0).unwrap();
        assert_eq!(out.headers.get(NATS_MSG_ID).unwrap().as_str(), "order-7");
        let back: Envelope<Vec<u8>> =
            decode(&Json, "orders", Some(&out.headers), &out.body, 1 << 20).unwrap();
        assert_eq!(back.id(), "order-7");
        assert_eq!(back.headers(), msg.headers());
        assert_eq!(back.body(), msg.body());
        assert!(back.is_imported());
    }

    #[test]
    fn refuses_bad_input_without_panicking() {
        let out = encode(&Json, &5u32, "n", None, 1024, 0).unwrap();
        assert!(matches!(
            decode::<u32, _>(&Json, "n", None, &out.body, 1024),
            Err(BadInput::MissingHeader(_))
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "other", Some(&out.headers), &out.body, 1024),
            Err(BadInput::WrongTopic)
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", Some(&out.headers), b"{not json", 1024),
            Err(BadInput::Decode)
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", Some(&out.headers), &[b'1'; 100], 10),
            Err(BadInput::TooLarge { .. })
        ));
        assert!(matches!(
            encode(&Json, &"x".repeat(100), "n", None, 10, 0),
            Err(ExportError::TooLarge { .. })
        ));
    }

    /// A codec that writes a header `Headers::insert` would refuse.
    struct Sneaky;
    impl Codec<u32> for Sneaky {
        fn encode(&self, _: &u32, body: &mut Vec<u8>, meta: &mut Meta) -> Result<(), CodecError> {
            body.push(b'1');
            meta.headers.insert_unchecked("Bad Name".into(), "v".into());
            Ok(())
        }
        fn decode(&self, _: &[u8], _: Meta) -> Result<u32, CodecError> {
            Ok(1)
        }
    }

    #[test]
    fn a_header_nats_cannot_carry_is_an_error_not_a_panic() {
        assert!(matches!(
            encode(&Sneaky, &1, "n", None, 1024, 0),
            Err(ExportError::Header(_))
        ));
        let id_with_newline = Envelope::new(1u32).with_id("a\r\nb");
        assert!(matches!(
            encode(&Json, &id_with_newline, "n", None, 1024, 0),
            Err(ExportError::Header(_))
        ));
    }
}
