//! Messages to and from Redis: a stream entry's fields around a codec's body.
//!
//! An entry holds the body under `Ringbus-Body`, the local topic under `Ringbus-Topic`, the
//! message id under `Ringbus-Id`, the exporting link's id under `Ringbus-Origin`, and each
//! user header under its own name (user names never start with `Ringbus-`: the shared
//! `Headers` refuse it). Stream fields are binary safe; ids and headers are still held to the
//! rules every link shares, so a message type sends the same headers over NATS and Redis.

use redis::Value;
use ringbus_link::codec::{check_header, is_reserved};
use ringbus_link::names::{ID, ORIGIN, TOPIC};
use ringbus_link::wire::{self, check_size};
pub(crate) use ringbus_link::wire::{encode, BadInput, ExportError, Outgoing};
use ringbus_link::{Codec, Headers};

/// The field that holds the body.
pub(crate) const BODY: &str = "Ringbus-Body";

/// An encoded message's XADD field/value pairs, `body` last: its topic, id, origin link,
/// the user headers and the body, borrowed (the command copies them once, into its buffer).
pub(crate) fn fields<'a>(
    out: &'a Outgoing,
    topic: &'a str,
    origin: &'a str,
    body: &'a [u8],
) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
    [
        (TOPIC, topic.as_bytes()),
        (ID, out.id.as_bytes()),
        (ORIGIN, origin.as_bytes()),
    ]
    .into_iter()
    .chain(out.headers.iter().map(|(n, v)| (n, v.as_bytes())))
    .chain(std::iter::once((BODY, body)))
}

/// A stream entry's fields, in the order Redis gave them. An entry has a handful: a list is
/// quicker to search than a map is to build. A name given twice means its last value, as
/// the `redis` crate's map replies would.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Fields(Vec<(String, Value)>);

impl Fields {
    /// The value of the field `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Every field, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The fields of a reply's `[name, value, name, value, ...]` array (or RESP3 map),
    /// taking its values without copying them. A name that is not UTF-8 is kept lossily (it
    /// can never be a field the link reads, and `decode` refuses it as a header). `None`
    /// for any other shape.
    pub(crate) fn from_reply(reply: Value) -> Option<Self> {
        let name = |v: Value| match v {
            Value::BulkString(b) => Some(
                String::from_utf8(b)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
            Value::SimpleString(s) => Some(s),
            _ => None,
        };
        match reply {
            Value::Array(flat) if flat.len() % 2 == 0 => {
                let mut fields = Vec::with_capacity(flat.len() / 2);
                let mut flat = flat.into_iter();
                while let (Some(n), Some(v)) = (flat.next(), flat.next()) {
                    fields.push((name(n)?, v));
                }
                Some(Self(fields))
            }
            Value::Map(pairs) => pairs
                .into_iter()
                .map(|(n, v)| Some((name(n)?, v)))
                .collect::<Option<Vec<_>>>()
                .map(Self),
            _ => None,
        }
    }
}

impl FromIterator<(String, Value)> for Fields {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// The bytes of a field's value, if it is a string.
pub(crate) fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// A field's value as text.
pub(crate) fn text<'a>(fields: &'a Fields, name: &'static str) -> Result<&'a str, BadInput> {
    let value = fields.get(name).ok_or(BadInput::Missing(name))?;
    let raw = bytes(value).ok_or_else(|| BadInput::NotText(name.to_string()))?;
    std::str::from_utf8(raw).map_err(|_| BadInput::NotText(name.to_string()))
}

/// The exporting link's id, if the entry names one.
pub(crate) fn origin(fields: &Fields) -> Option<&str> {
    text(fields, ORIGIN).ok()
}

/// The message id, if the entry has one.
pub(crate) fn message_id(fields: &Fields) -> Option<&str> {
    text(fields, ID).ok()
}

/// Decodes a stream entry for `topic`.
pub(crate) fn decode<T, C: Codec<T>>(
    codec: &C,
    topic: &str,
    fields: &Fields,
    max: usize,
) -> Result<T, BadInput> {
    let body = fields
        .get(BODY)
        .and_then(bytes)
        .ok_or(BadInput::Missing(BODY))?;
    check_size(body, max)?;
    if text(fields, TOPIC)? != topic {
        return Err(BadInput::WrongTopic);
    }
    let id = text(fields, ID)?.to_string();
    let mut headers = Headers::new();
    for (name, value) in fields.iter() {
        if is_reserved(name) {
            continue;
        }
        let value = bytes(value)
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(|| BadInput::NotText(name.escape_debug().to_string()))?;
        if check_header(name, value).is_err() {
            return Err(BadInput::NotText(name.escape_debug().to_string()));
        }
        headers.insert_unchecked(name.to_string(), value.to_string());
    }
    wire::decode(codec, body, id, headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringbus_link::{Envelope, Json};

    fn as_entry(out: &Outgoing, topic: &str, body: &[u8]) -> Fields {
        fields(out, topic, "me", body)
            .map(|(k, v)| (k.to_string(), Value::BulkString(v.to_vec())))
            .collect()
    }

    #[test]
    fn round_trip_keeps_id_headers_and_body() {
        let msg = Envelope::new(vec![1u8, 2, 3])
            .with_id("order-7")
            .with_header("Tenant", "acme")
            .unwrap();
        let mut body = Vec::new();
        let out = encode(&Json, &msg, 1 << 20, &mut body).unwrap();
        let entry = as_entry(&out, "orders", &body);
        assert_eq!(origin(&entry), Some("me"));
        let back: Envelope<Vec<u8>> = decode(&Json, "orders", &entry, 1 << 20).unwrap();
        assert_eq!(back.id(), "order-7");
        assert_eq!(back.headers(), msg.headers());
        assert_eq!(back.body(), msg.body());
        assert!(back.is_imported());
    }

    #[test]
    fn fields_are_read_from_either_reply_shape_without_losing_a_bad_name() {
        let b = |s: &[u8]| Value::BulkString(s.to_vec());
        let flat = Value::Array(vec![
            b(b"a"),
            b(b"1"),
            b(b"\xff"),
            b(b"2"),
            b(b"a"),
            b(b"3"),
        ]);
        let fields = Fields::from_reply(flat).unwrap();
        assert_eq!(
            fields.get("a"),
            Some(&b(b"3")),
            "the last value of a name given twice"
        );
        let names: Vec<&str> = fields.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "\u{fffd}", "a"]);
        let map = Value::Map(vec![(b(b"x"), b(b"y"))]);
        assert_eq!(Fields::from_reply(map).unwrap().get("x"), Some(&b(b"y")));
        assert_eq!(Fields::from_reply(Value::Array(vec![b(b"odd")])), None);
        assert_eq!(
            Fields::from_reply(Value::Array(vec![Value::Int(1), b(b"v")])),
            None
        );
        assert_eq!(Fields::from_reply(Value::Nil), None);
    }

    #[test]
    fn refuses_bad_input_without_panicking() {
        let mut body = b"left over from the last message".to_vec();
        let out = encode(&Json, &5u32, 1024, &mut body).unwrap();
        assert_eq!(body, b"5", "the buffer is emptied first");
        let entry = as_entry(&out, "n", &body);
        assert_eq!(
            decode::<u32, _>(&Json, "other", &entry, 1024).unwrap_err(),
            BadInput::WrongTopic
        );
        let mut broken = entry.clone();
        broken
            .0
            .push((BODY.into(), Value::BulkString(b"{not json".to_vec())));
        assert_eq!(
            decode::<u32, _>(&Json, "n", &broken, 1024).unwrap_err(),
            BadInput::Decode
        );
        let mut no_id = entry.clone();
        no_id.0.retain(|(n, _)| n != ID);
        assert_eq!(
            decode::<u32, _>(&Json, "n", &no_id, 1024).unwrap_err(),
            BadInput::Missing(ID)
        );
        let mut bad_header = entry.clone();
        bad_header
            .0
            .push(("Note".into(), Value::BulkString(b"a\r\nb".to_vec())));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", &bad_header, 1024),
            Err(BadInput::NotText(_))
        ));
        assert!(matches!(
            decode::<u32, _>(&Json, "n", &entry, 0),
            Err(BadInput::TooLarge { .. })
        ));
        assert!(matches!(
            encode(&Json, &"x".repeat(100), 10, &mut body),
            Err(ExportError::TooLarge { .. })
        ));
        let bad_id = Envelope::new(1u32).with_id("a\r\nb");
        assert!(matches!(
            encode(&Json, &bad_id, 1024, &mut body),
            Err(ExportError::Header(_))
        ));
    }
}
