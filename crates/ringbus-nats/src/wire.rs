//! Messages to and from NATS: the link's headers around a codec's body.

use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;

use ringbus_link::wire::{self, check_size};
pub(crate) use ringbus_link::wire::{BadInput, ExportError};

use crate::codec::{
    is_reserved, Codec, HeaderError, Headers, ID_HEADER, NATS_MSG_ID, ORIGIN_HEADER, TOPIC_HEADER,
};

/// An encoded message: its body, and what its headers are made of. A JetStream export keeps
/// it until the server acks it, to publish it again: the client takes the headers by value,
/// so they are made for each send rather than made once and cloned.
#[derive(Debug)]
pub(crate) struct Outgoing {
    out: wire::Outgoing,
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

/// Encodes `msg`. The body's buffer starts with `capacity` bytes.
pub(crate) fn encode<T, C: Codec<T>>(
    codec: &C,
    msg: &T,
    max: usize,
    capacity: usize,
) -> Result<Outgoing, ExportError> {
    // Sized from the caller's last body: JSON grown from empty reallocates 4-8 times.
    let mut body = Vec::with_capacity(capacity.min(max));
    let out = wire::encode(codec, msg, max, &mut body)?;
    Ok(Outgoing {
        out,
        body: Bytes::from(body),
    })
}

impl Outgoing {
    /// The headers to publish it with to `topic`; `origin` is set on JetStream exports (the
    /// echo filter; the id then also goes as the server's dedup id).
    pub(crate) fn headers(
        &self,
        topic: &str,
        origin: Option<&str>,
    ) -> Result<HeaderMap, ExportError> {
        let mut headers = HeaderMap::new();
        for (name, value) in self.out.headers.iter() {
            // Checked by `wire::encode`; `HeaderMap::insert(&str, &str)` is still never
            // trusted (it panics on a name it cannot take).
            set(&mut headers, name, value).map_err(ExportError::Header)?;
        }
        let id = &self.out.id;
        set_known(&mut headers, HeaderName::from_static(TOPIC_HEADER), topic)
            .map_err(ExportError::Header)?;
        set_known(&mut headers, HeaderName::from_static(ID_HEADER), id)
            .map_err(ExportError::Header)?;
        if let Some(origin) = origin {
            set_known(&mut headers, HeaderName::from_static(NATS_MSG_ID), id)
                .map_err(ExportError::Header)?;
            set_known(&mut headers, HeaderName::from_static(ORIGIN_HEADER), origin)
                .map_err(ExportError::Header)?;
        }
        Ok(headers)
    }
}

/// One of the link's own headers of a received message, if it has it. Looked up by
/// `HeaderName`: a `&str` key is validated and copied into a new name on every lookup.
pub(crate) fn known<'h>(headers: &'h HeaderMap, name: &'static str) -> Option<&'h HeaderValue> {
    headers.get(HeaderName::from_static(name))
}

/// The origin header of a message, if any.
pub(crate) fn origin(headers: Option<&HeaderMap>) -> Option<&str> {
    known(headers?, ORIGIN_HEADER).map(|v| v.as_str())
}

/// Decodes a message from NATS for `topic`.
pub(crate) fn decode<T, C: Codec<T>>(
    codec: &C,
    topic: &str,
    headers: Option<&HeaderMap>,
    body: &[u8],
    max: usize,
) -> Result<T, BadInput> {
    check_size(body, max)?;
    let headers = headers.ok_or(BadInput::Missing(TOPIC_HEADER))?;
    // One pass over the headers finds the link's own and keeps the user's: cheaper than a
    // hashed lookup per name.
    let (mut named, mut id) = (None, None);
    let mut user = Headers::new();
    for (name, values) in headers.iter() {
        let name: &str = name.as_ref();
        match name {
            TOPIC_HEADER => named = values.first(),
            ID_HEADER => id = values.first(),
            _ if is_reserved(name) => {}
            _ => {
                if let Some(value) = values.last() {
                    user.insert_unchecked(name.to_string(), value.to_string());
                }
            }
        }
    }
    let named = named.ok_or(BadInput::Missing(TOPIC_HEADER))?;
    if named.as_str() != topic {
        return Err(BadInput::WrongTopic);
    }
    let id = id.ok_or(BadInput::Missing(ID_HEADER))?.as_str().to_owned();
    wire::decode(codec, body, id, user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{CodecError, Meta};
    use crate::{Envelope, Json};

    #[test]
    fn round_trip_keeps_id_headers_and_body() {
        let msg = Envelope::new(vec![1u8, 2, 3])
            .with_id("order-7")
            .with_header("Tenant", "acme")
            .unwrap();
        let out = encode(&Json, &msg, 1 << 20, 0).unwrap();
        let headers = out.headers("orders", Some("me")).unwrap();
        assert_eq!(headers.get(NATS_MSG_ID).unwrap().as_str(), "order-7");
        let back: Envelope<Vec<u8>> =
            decode(&Json, "orders", Some(&headers), &out.body, 1 << 20).unwrap();
        assert_eq!(back.id(), "order-7");
        assert_eq!(back.headers(), msg.headers());
        assert_eq!(back.body(), msg.body());
        assert!(back.is_imported());
    }

    #[test]
    fn refuses_bad_input_without_panicking() {
        let out = encode(&Json, &5u32, 1024, 0).unwrap();
        let headers = out.headers("n", None).unwrap();
        assert!(matches!(
            decode::<u32, _>(&Json, "n", None, &out.body, 1024),
            Err(BadInput::Missing(_))
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "other", Some(&headers), &out.body, 1024),
            Err(BadInput::WrongTopic)
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", Some(&headers), b"{not json", 1024),
            Err(BadInput::Decode)
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", Some(&headers), &[b'1'; 100], 10),
            Err(BadInput::TooLarge { .. })
        ));
        assert!(matches!(
            encode(&Json, &"x".repeat(100), 10, 0),
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
            encode(&Sneaky, &1, 1024, 0).and_then(|out| out.headers("n", None)),
            Err(ExportError::Header(_))
        ));
        let id_with_newline = Envelope::new(1u32).with_id("a\r\nb");
        assert!(matches!(
            encode(&Json, &id_with_newline, 1024, 0),
            Err(ExportError::Header(_))
        ));
    }
}
