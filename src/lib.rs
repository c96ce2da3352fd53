//! Support code shared by the suite's examples, integration tests and benchmarks.
//!
//! This package (`ringbus-suite`) is never published: it owns the top-level `examples/`,
//! `tests/` and `benches/` of the workspace.

/// The README's Rust examples, compiled and run as doc tests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
