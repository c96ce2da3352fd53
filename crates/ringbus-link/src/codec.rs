//! How messages cross the wire: the [`Codec`] trait, the default [`Json`] codec, the
//! validated [`Headers`] and the [`Envelope`] that carries an id and headers with a body.
//!
//! Headers are checked against the strictest engine, NATS (its header names and values are
//! the narrowest of the engines'), so that a message type carries the same headers over every
//! engine and a topic can move from one engine to another without a header becoming
//! unsendable.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ids::next_id;

/// A header name or value a link cannot carry faithfully, or one reserved by the link.
///
/// `{:?}`, what `?` in `main` and `unwrap` print, leads with the message (its `Display`), then
/// gives the fields in parentheses; `{:#?}` is the structure alone.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderError {
    name: String,
    reason: &'static str,
}

impl HeaderError {
    fn new(name: &str, reason: &'static str) -> Self {
        Self {
            name: name.escape_debug().to_string(),
            reason,
        }
    }

    /// A name NATS cannot carry (for a link engine's own checks).
    pub fn bad_name(name: &str) -> Self {
        Self::new(name, BAD_NAME)
    }

    /// A value NATS cannot carry under `name` (for a link engine's own checks).
    pub fn bad_value(name: &str) -> Self {
        Self::new(name, BAD_VALUE)
    }

    /// The header's name (escaped for printing).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            // "NATS": the strictest engine's rule applies to every link (see the module docs).
            "header {:?} cannot be sent over NATS (nor any ringbus link): {}",
            self.name, self.reason
        )
    }
}

impl fmt::Debug for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            write!(f, "{self} (")?;
        }
        f.debug_struct("HeaderError")
            .field("name", &self.name)
            .field("reason", &self.reason)
            .finish()?;
        if !f.alternate() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl std::error::Error for HeaderError {}

const BAD_NAME: &str = "the name must be printable ASCII without ':' or whitespace";
const BAD_VALUE: &str = "the value contains '\\r' or '\\n'";

/// True for header names the link or NATS own (`Ringbus-*`, `Nats-*`, in any case).
pub fn is_reserved(name: &str) -> bool {
    is_reserved_name(name.as_bytes())
}

/// [`is_reserved`] for a name not yet known to be UTF-8: true when its bytes start with a
/// reserved prefix, whatever follows.
pub fn is_reserved_name(name: &[u8]) -> bool {
    let starts = |prefix: &[u8]| {
        name.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    starts(b"ringbus-") || starts(b"nats-")
}

/// Checks a user header: NATS's rules for names and values (the same as `async-nats`'s
/// parsers: a name is printable ASCII without `:`, a value has no `\r` or `\n`), plus what a
/// link needs for an exact round trip.
pub fn check_header(name: &str, value: &str) -> Result<(), HeaderError> {
    if name.is_empty() {
        return Err(HeaderError::new(name, "the name is empty"));
    }
    if name.contains(|c: char| !c.is_ascii_graphic() || c == ':') {
        return Err(HeaderError::new(name, BAD_NAME));
    }
    if is_reserved(name) {
        return Err(HeaderError::new(
            name,
            "names starting with `Ringbus-` or `Nats-` are reserved",
        ));
    }
    if value.contains(['\r', '\n']) {
        return Err(HeaderError::new(name, BAD_VALUE));
    }
    if value.trim() != value {
        return Err(HeaderError::new(
            name,
            "the value has leading or trailing whitespace, which the protocol trims",
        ));
    }
    Ok(())
}

/// User headers: names and values every link carries unchanged, checked when they are
/// inserted.
///
/// ```
/// let mut headers = ringbus_link::Headers::new();
/// headers.insert("Tenant", "acme")?;
/// assert!(headers.insert("Bad Name", "x").is_err()); // whitespace in a name
/// assert!(headers.insert("Note", "two\r\nlines").is_err());
/// assert!(headers.insert("Nats-Msg-Id", "1").is_err()); // reserved
/// assert_eq!(headers.get("Tenant"), Some("acme"));
/// # Ok::<(), ringbus_link::HeaderError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(BTreeMap<String, String>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value` (replacing an earlier value), or says why a link cannot carry
    /// it.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), HeaderError> {
        let (name, value) = (name.into(), value.into());
        check_header(&name, &value)?;
        self.0.insert(name, value);
        Ok(())
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every header, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The number of headers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Inserts without checking: for link engines, with headers read back from the wire
    /// (which the engine has parsed). Engines check every header again before sending it.
    #[doc(hidden)]
    pub fn insert_unchecked(&mut self, name: String, value: String) {
        self.0.insert(name, value);
    }
}

/// A message's identity and headers on the wire, apart from its body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Its id: the dedup key. `None` on encode lets the link make one.
    pub id: Option<String>,
    /// User headers.
    pub headers: Headers,
}

/// Why a message could not be encoded or decoded.
///
/// `{:?}`, what `?` in `main` and `unwrap` print, is the message (its `Display`, the wrapped
/// error's) then `(CodecError(..))`; `{:#?}` is the structure alone, with the wrapped error's
/// `Debug`.
pub struct CodecError(Box<dyn std::error::Error + Send + Sync>);

impl CodecError {
    /// Wraps any error.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            f.debug_tuple("CodecError").field(&self.0).finish()
        } else {
            write!(f, "{self} (CodecError(..))")
        }
    }
}

impl std::error::Error for CodecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl From<HeaderError> for CodecError {
    fn from(e: HeaderError) -> Self {
        Self::new(e)
    }
}

/// Turns messages of type `T` into bytes plus [`Meta`], and back.
///
/// [`Json`] is the default. A codec only sees bodies and metadata; subjects, the topic and
/// the origin of a message are the link's business.
///
/// A codec that panics costs the message it was given, and nothing more: the links take the
/// panic for an `Err` (an export error, or bad input that is dead-lettered) and go on.
pub trait Codec<T>: Send + Sync + 'static {
    /// Appends the body of `msg` to `body` and fills in `meta` (id and headers) if the
    /// message type carries them.
    fn encode(&self, msg: &T, body: &mut Vec<u8>, meta: &mut Meta) -> Result<(), CodecError>;

    /// Rebuilds a message from its body and metadata. `imported` is true for every message
    /// the link decodes: a type that records it (like [`Envelope`]) lets a topic be linked
    /// both ways without echoing imports back out.
    fn decode(&self, body: &[u8], meta: Meta) -> Result<T, CodecError>;

    /// True if `msg` came in through a link (it is then never exported again). Only types
    /// that record their origin can say so; linking a topic both ways requires it.
    fn is_imported(&self, msg: &T) -> bool {
        let _ = msg;
        false
    }

    /// True if [`is_imported`](Self::is_imported) can tell. Checked when a topic is linked
    /// both ways.
    fn records_origin(&self) -> bool {
        false
    }
}

/// For link engines: [`Codec::encode`], with a panic in the codec turned into a
/// [`CodecError`]. A codec is user code: one that panics on a message must cost that message
/// (refused and counted as any encoding error), not the task that runs the link.
///
/// Unwind safety: `body` and `meta` may hold a partial encoding after a panic; the engine
/// drops or clears both with the message. A codec's own state is its business, as after an
/// `Err`.
#[doc(hidden)]
pub fn encode_caught<T, C: Codec<T>>(
    codec: &C,
    msg: &T,
    body: &mut Vec<u8>,
    meta: &mut Meta,
) -> Result<(), CodecError> {
    caught(std::panic::AssertUnwindSafe(|| {
        codec.encode(msg, body, meta)
    }))
}

/// For link engines: [`Codec::decode`], with a panic in the codec turned into a
/// [`CodecError`] (see [`encode_caught`]): the message counts as bad input, and the import
/// goes on with the next one.
#[doc(hidden)]
pub fn decode_caught<T, C: Codec<T>>(codec: &C, body: &[u8], meta: Meta) -> Result<T, CodecError> {
    caught(std::panic::AssertUnwindSafe(|| codec.decode(body, meta)))
}

fn caught<R>(
    call: std::panic::AssertUnwindSafe<impl FnOnce() -> Result<R, CodecError>>,
) -> Result<R, CodecError> {
    std::panic::catch_unwind(call).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(not a string)");
        Err(CodecError::new(format!("the codec panicked: {what}")))
    })
}

/// JSON through `serde_json`: the default codec. Plain types travel as their JSON body
/// (the link gives them an id); [`Envelope`]s carry their id and headers as the engine's
/// headers (NATS headers, Redis stream fields).
#[derive(Clone, Copy, Debug, Default)]
pub struct Json;

impl<T> Codec<T> for Json
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn encode(&self, msg: &T, body: &mut Vec<u8>, _meta: &mut Meta) -> Result<(), CodecError> {
        serde_json::to_writer(body, msg).map_err(CodecError::new)
    }

    fn decode(&self, body: &[u8], _meta: Meta) -> Result<T, CodecError> {
        serde_json::from_slice(body).map_err(CodecError::new)
    }
}

impl<T> Codec<Envelope<T>> for Json
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn encode(
        &self,
        msg: &Envelope<T>,
        body: &mut Vec<u8>,
        meta: &mut Meta,
    ) -> Result<(), CodecError> {
        meta.id = Some(msg.id.to_string());
        meta.headers = msg.headers.clone();
        serde_json::to_writer(body, &msg.body).map_err(CodecError::new)
    }

    fn decode(&self, body: &[u8], meta: Meta) -> Result<Envelope<T>, CodecError> {
        let body = serde_json::from_slice(body).map_err(CodecError::new)?;
        Ok(Envelope {
            id: Arc::from(meta.id.unwrap_or_else(next_id)),
            headers: meta.headers,
            body,
            imported: true,
        })
    }

    fn is_imported(&self, msg: &Envelope<T>) -> bool {
        msg.imported
    }

    fn records_origin(&self) -> bool {
        true
    }
}

/// A body with an id and user headers that travel with it: what a topic carries when its
/// messages need ids of their own (JetStream dedup across retries of the *publisher*), user
/// headers, or a link in both directions.
///
/// ```
/// use ringbus_link::Envelope;
/// let order = Envelope::new(42u64).with_header("Tenant", "acme")?;
/// assert_eq!(*order.body(), 42);
/// assert_eq!(order.headers().get("Tenant"), Some("acme"));
/// assert!(!order.is_imported());
/// # Ok::<(), ringbus_link::HeaderError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<T> {
    id: Arc<str>,
    headers: Headers,
    body: T,
    imported: bool,
}

impl<T> Envelope<T> {
    /// `body` with a fresh id, unique across processes (a random process prefix and a
    /// counter) and no headers.
    pub fn new(body: T) -> Self {
        Self {
            id: Arc::from(next_id()),
            headers: Headers::new(),
            body,
            imported: false,
        }
    }

    /// Replaces the id (the dedup key: JetStream stores two publishes with one id within the
    /// stream's duplicate window once; a Redis import drops an id it handled recently).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Arc::from(id.into());
        self
    }

    /// Adds a header, or says why a link cannot carry it.
    pub fn with_header(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, HeaderError> {
        self.headers.insert(name, value)?;
        Ok(self)
    }

    /// Replaces the headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &T {
        &self.body
    }

    /// The body, by value.
    pub fn into_body(self) -> T {
        self.body
    }

    /// True if this message came in through a link.
    pub fn is_imported(&self) -> bool {
        self.imported
    }
}

impl<T> std::ops::Deref for Envelope<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.body
    }
}
