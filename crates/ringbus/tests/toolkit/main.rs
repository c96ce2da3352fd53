//! The handler toolkit's integration tests (retries and dead letters, request/reply, pull
//! streams, the `testing` helpers), one module each in one test binary, so that a cold
//! `cargo test` links tokio and ringbus once for the four of them rather than four times.
//! `tests/metrics.rs` stays a binary of its own: it needs the `metrics` feature.
//!
//! Run one module with `cargo test -p ringbus --test toolkit retry::`.

mod reply;
mod retry;
mod stream;
mod testing;
