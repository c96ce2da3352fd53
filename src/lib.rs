//! Support code shared by the suite's examples, integration tests and benchmarks.
//!
//! This package (`ringbus-suite`) is never published: it owns the top-level `examples/`,
//! `tests/` and `benches/` of the workspace.

/// The README's Rust examples, compiled and run as doc tests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// `ringbus-macros`'s README (shown on crates.io), compiled and run here: its example needs
/// `ringbus` and tokio, which the proc-macro crate does not depend on (dev-dependencies of a
/// proc-macro crate are built a second time, for the host).
#[doc = include_str!("../crates/ringbus-macros/README.md")]
#[cfg(doctest)]
pub struct MacrosReadmeDoctests;
