//! Messages to and from Redis: a stream entry's fields around a codec's body.
//!
//! An entry holds the body under `Ringbus-Body`, the local topic under `Ringbus-Topic`, the
//! message id under `Ringbus-Id`, the exporting link's id under `Ringbus-Origin`, and each
//! user header under its own name (user names never start with `Ringbus-`: the shared
//! `Headers` refuse it). Stream fields are binary safe; ids and headers are still held to the
//! rules every link shares, so a message type sends the same headers over NATS and Redis.

use std::borrow::Cow;

use redis::Value;
use ringbus_link::codec::{check_header, is_reserved_name};
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

/// A stream entry's fields, in the order Redis gave them: the reply's own flat list of
/// names and values (`[name, value, name, value, ...]`), kept as it came, so reading an
/// entry copies nothing and checks each name only when it is looked at. An entry has a
/// handful: a list is quicker to search than a map is to build. A name given twice means its
/// last value, as the `redis` crate's map replies would.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Fields(Vec<Value>);

impl Fields {
    /// The value of the field `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.pairs()
            .rev()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// Every field, in order: its name (lossily as text: a name that is not UTF-8 can never
    /// be a field the link reads, and `decode` refuses it as a header) and its value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, &Value)> {
        // `from_utf8` first, the cheaper check, which every name the link writes passes;
        // `from_utf8_lossy` only for the others.
        self.pairs().map(|(n, v)| {
            let name =
                std::str::from_utf8(n).map_or_else(|_| String::from_utf8_lossy(n), Cow::Borrowed);
            (name, v)
        })
    }

    /// Every field's name as bytes, and its value.
    fn pairs(&self) -> impl DoubleEndedIterator<Item = (&[u8], &Value)> {
        self.0
            .chunks_exact(2)
            .filter_map(|pair| Some((bytes(&pair[0])?, &pair[1])))
    }

    /// The fields of a reply's `[name, value, name, value, ...]` array (or RESP3 map),
    /// taking it as it is. `None` for any other shape, or a name that is not a string.
    pub(crate) fn from_reply(reply: Value) -> Option<Self> {
        let is_name = |v: &Value| matches!(v, Value::BulkString(_) | Value::SimpleString(_));
        match reply {
            Value::Array(flat) if flat.len() % 2 == 0 && flat.iter().step_by(2).all(is_name) => {
                Some(Self(flat))
            }
            Value::Map(pairs) if pairs.iter().all(|(n, _)| is_name(n)) => {
                Some(Self(pairs.into_iter().flat_map(|(n, v)| [n, v]).collect()))
            }
            _ => None,
        }
    }
}

impl FromIterator<(String, Value)> for Fields {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .flat_map(|(n, v)| [Value::BulkString(n.into_bytes()), v])
                .collect(),
        )
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
    // Names are looked at as bytes first: the link's own (most of an entry) are skipped
    // without a UTF-8 check.
    for (name, value) in fields.pairs() {
        if is_reserved_name(name) {
            continue;
        }
        let bad = || BadInput::NotText(String::from_utf8_lossy(name).escape_debug().to_string());
        let (Ok(name), Some(Ok(value))) = (
            std::str::from_utf8(name),
            bytes(value).map(std::str::from_utf8),
        ) else {
            return Err(bad());
        };
        if check_header(name, value).is_err() {
            return Err(bad());
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
        let names: Vec<String> = fields.iter().map(|(n, _)| n.into_owned()).collect();
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
        let with = |fields: &Fields, name: &str, value: &[u8]| -> Fields {
            let mut all: Vec<(String, Value)> = fields
                .iter()
                .map(|(n, v)| (n.into_owned(), v.clone()))
                .collect();
            all.push((name.into(), Value::BulkString(value.to_vec())));
            all.into_iter().collect()
        };
        let broken = with(&entry, BODY, b"{not json");
        assert_eq!(
            decode::<u32, _>(&Json, "n", &broken, 1024).unwrap_err(),
            BadInput::Decode
        );
        let no_id: Fields = entry
            .iter()
            .filter(|(n, _)| n != ID)
            .map(|(n, v)| (n.into_owned(), v.clone()))
            .collect();
        assert_eq!(
            decode::<u32, _>(&Json, "n", &no_id, 1024).unwrap_err(),
            BadInput::Missing(ID)
        );
        let bad_header = with(&entry, "Note", b"a\r\nb");
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
