//! Procedural macros for [ringbus](https://docs.rs/ringbus).
//!
//! `#[subscriber("topic")]` arrives with the bus; this crate is its home.
