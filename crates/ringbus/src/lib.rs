//! ringbus: an async, tokio-native, in-process message bus.
//!
//! The bus itself is being built on top of the ring, which is re-exported here as
//! [`ring`]. Until then, use [`ring`] directly.

pub use ringbus_core as ring;
