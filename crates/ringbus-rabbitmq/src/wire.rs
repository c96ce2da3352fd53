//! Messages to and from RabbitMQ: an AMQP message's properties and headers around a codec's
//! body.
//!
//! The body is the AMQP body; the message id is the `message-id` property and the header
//! `Ringbus-Id`; the local topic is the header `Ringbus-Topic` (and the routing key); the
//! exporting link's id is `Ringbus-Origin`; each user header is an AMQP header of its own
//! name, a long string. Messages are persistent (delivery mode 2). Headers RabbitMQ adds
//! (`x-delivery-count`, `x-death`, ...) are not user headers: an import leaves every `x-*`
//! name out.

use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;
use ringbus_link::codec::{check_header, is_reserved};
use ringbus_link::names::{ID, ORIGIN, TOPIC};
use ringbus_link::wire::{self, check_size};
pub(crate) use ringbus_link::wire::{encode, BadInput, ExportError, Outgoing};
use ringbus_link::{Codec, Headers};

/// The header in which a quorum queue counts a message's earlier deliveries.
pub(crate) const DELIVERY_COUNT: &str = "x-delivery-count";

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(value.into())
}

/// The properties that carry an encoded message's id, its `topic`, the `origin` link and its
/// user headers; messages are persistent. Made for each publish rather than kept for a retry
/// and cloned: a clone allocates as much as making them.
pub(crate) fn properties(out: &Outgoing, topic: &str, origin: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(TOPIC.into(), text(topic));
    headers.insert(ID.into(), text(&out.id));
    headers.insert(ORIGIN.into(), text(origin));
    for (name, value) in out.headers.iter() {
        headers.insert(name.into(), text(value));
    }
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(headers);
    // AMQP's message-id is a short string (at most 255 bytes); `Ringbus-Id` carries any id.
    if out.id.len() <= 255 {
        properties.with_message_id(ShortString::from(out.id.as_str()))
    } else {
        properties
    }
}

/// A header's value as text, if it is text.
fn header_text<'a>(headers: &'a FieldTable, name: &str) -> Option<Result<&'a str, BadInput>> {
    let value = headers.inner().get(name)?;
    let bytes = match value {
        AMQPValue::LongString(s) => s.as_bytes(),
        AMQPValue::ShortString(s) => s.as_str().as_bytes(),
        _ => return Some(Err(BadInput::NotText(name.escape_debug().to_string()))),
    };
    Some(std::str::from_utf8(bytes).map_err(|_| BadInput::NotText(name.escape_debug().to_string())))
}

/// The header `name` of a message, if it has it and it is text.
pub(crate) fn header<'a>(properties: &'a BasicProperties, name: &str) -> Option<&'a str> {
    header_text(properties.headers().as_ref()?, name)?.ok()
}

/// The exporting link's id, if the message names one.
pub(crate) fn origin(properties: &BasicProperties) -> Option<&str> {
    header(properties, ORIGIN)
}

/// The message id, if the message has one.
pub(crate) fn message_id(properties: &BasicProperties) -> Option<&str> {
    header(properties, ID)
}

/// The deliveries of this message before this one (a quorum queue's count; 0 without it).
pub(crate) fn earlier_deliveries(properties: &BasicProperties) -> u64 {
    let Some(value) = properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(DELIVERY_COUNT))
    else {
        return 0;
    };
    match value {
        AMQPValue::LongLongInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::LongInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::LongUInt(n) => u64::from(*n),
        AMQPValue::ShortInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::ShortUInt(n) => u64::from(*n),
        _ => 0,
    }
}

/// Decodes a message from RabbitMQ for `topic`.
pub(crate) fn decode<T, C: Codec<T>>(
    codec: &C,
    topic: &str,
    properties: &BasicProperties,
    body: &[u8],
    max: usize,
) -> Result<T, BadInput> {
    check_size(body, max)?;
    let empty = FieldTable::default();
    let fields = properties.headers().as_ref().unwrap_or(&empty);
    let required = |name: &'static str| -> Result<&str, BadInput> {
        header_text(fields, name).ok_or(BadInput::Missing(name))?
    };
    if required(TOPIC)? != topic {
        return Err(BadInput::WrongTopic);
    }
    let id = required(ID)?.to_string();
    let mut headers = Headers::new();
    for (name, _) in fields {
        let name = name.as_str();
        if is_reserved(name) || name.starts_with("x-") {
            continue;
        }
        let value = header_text(fields, name)
            .unwrap_or_else(|| Err(BadInput::NotText(name.escape_debug().to_string())))?;
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

    #[test]
    fn round_trip_keeps_id_headers_and_body() {
        let msg = Envelope::new(vec![1u8, 2, 3])
            .with_id("order-7")
            .with_header("Tenant", "acme")
            .unwrap();
        let mut body = Vec::new();
        let out = encode(&Json, &msg, 1 << 20, &mut body).unwrap();
        let sent = properties(&out, "orders", "me");
        assert_eq!(sent.delivery_mode(), &Some(2), "persistent");
        assert_eq!(origin(&sent), Some("me"));
        assert_eq!(message_id(&sent), Some("order-7"));
        assert_eq!(
            sent.message_id().as_ref().map(ShortString::as_str),
            Some("order-7")
        );
        assert_eq!(earlier_deliveries(&sent), 0);
        let back: Envelope<Vec<u8>> = decode(&Json, "orders", &sent, &body, 1 << 20).unwrap();
        assert_eq!(back.id(), "order-7");
        assert_eq!(back.headers(), msg.headers());
        assert_eq!(back.body(), msg.body());
        assert!(back.is_imported());
        let other: Result<Envelope<Vec<u8>>, _> = decode(&Json, "other", &sent, &body, 1 << 20);
        assert_eq!(other.err(), Some(BadInput::WrongTopic));
        let large: Result<Envelope<Vec<u8>>, _> = decode(&Json, "orders", &sent, &body, 2);
        assert!(matches!(large, Err(BadInput::TooLarge { .. })));
    }

    #[test]
    fn rabbitmq_headers_are_not_user_headers_and_count_deliveries() {
        let mut body = Vec::new();
        let out = encode(&Json, &Envelope::new(5u8), 64, &mut body).unwrap();
        let sent = properties(&out, "t", "me");
        let mut headers = sent.headers().clone().unwrap();
        headers.insert(DELIVERY_COUNT.into(), AMQPValue::LongLongInt(2));
        let received = sent.with_headers(headers);
        assert_eq!(earlier_deliveries(&received), 2);
        let back: Envelope<u8> = decode(&Json, "t", &received, &body, 64).unwrap();
        assert!(back.headers().is_empty());
    }
}
