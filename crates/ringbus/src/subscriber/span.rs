//! The `ringbus.handle` span of a handler call (see `observe` for the spans and events the
//! bus makes, and what they cost).

use tracing::Span;

use crate::shared::SubShared;

/// True if some subscriber may want `DEBUG` spans: the first check of tracing's macros (the
/// compile-time and the current maximum level), a load and a compare. A subscriber that
/// wants `DEBUG` but not ours then answers from its callsite's cached interest
/// (`handle_span` returns `Span::none()`).
#[inline]
pub(crate) fn spans_wanted() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    tracing::Level::DEBUG <= STATIC_MAX_LEVEL && tracing::Level::DEBUG <= LevelFilter::current()
}

/// The span `make` makes, for a caller that checked the level already ([`spans_wanted`]):
/// `None` when the span's callsite is disabled.
#[inline]
pub(crate) fn span_if_enabled(make: impl FnOnce() -> Span) -> Option<Span> {
    Some(make()).filter(|span| !span.is_disabled())
}

/// The `ringbus.handle` span of one handler call, with the fields given; `@parent $parent;`
/// first makes it a child of `$parent`, else it is a child of the current span.
macro_rules! handle_span {
    ($(@parent $parent:expr;)? $sub:expr, $($field:tt)*) => {
        tracing::debug_span!(
            $(parent: $parent,)?
            "ringbus.handle",
            topic = %$sub.topic,
            subscriber = %$sub.name,
            $($field)*
            error = tracing::field::Empty,
            panic = tracing::field::Empty,
        )
    };
}

/// The `ringbus.handle` span of one handler call on the message at `position`: a child of
/// the span its publish gave (`Context::with_parent`, see `parent`), else of the current
/// one. Disabled, a `Span::none()`.
#[inline]
pub(crate) fn handle_span(sub: &SubShared, position: u64) -> Span {
    if sub.parents.outstanding() {
        return parented_span(sub, position, None);
    }
    handle_span!(sub, position,)
}

/// The `ringbus.handle` span of one batch handler call on the `messages` messages from
/// `position` on: a child of the first parent given to their publishes, if any.
#[inline]
pub(crate) fn batch_span(sub: &SubShared, position: u64, messages: u64) -> Span {
    if sub.parents.outstanding() {
        return parented_span(sub, position, Some(messages));
    }
    handle_span!(sub, position, messages,)
}

/// A handler span while some publish gave a parent: off the path of the handler calls on a
/// topic where none did (see `parent`).
#[cold]
#[inline(never)]
fn parented_span(sub: &SubShared, position: u64, messages: Option<u64>) -> Span {
    let parent = sub.parents.take(position, messages.unwrap_or(1));
    match (parent, messages) {
        (None, None) => handle_span!(sub, position,),
        (None, Some(messages)) => handle_span!(sub, position, messages,),
        (Some(parent), None) => handle_span!(@parent &parent; sub, position,),
        (Some(parent), Some(messages)) => handle_span!(@parent &parent; sub, position, messages,),
    }
}
