//! The bus's integration tests, one module per guarantee or feature, in one test binary: each
//! test binary links tokio and ringbus anew, and fifteen of them took a third of a cold
//! `cargo test --workspace`. Tests that install process-wide state (a counting global
//! allocator, a global `tracing` subscriber) stay binaries of their own: `tests/alloc_bus.rs`,
//! `tests/failures.rs`, `tests/spans.rs`.
//!
//! Run one module with `cargo test --test suite close::`.

#[path = "../common/mod.rs"]
mod common;

mod all_or_nothing;
mod api_contract;
mod app;
mod backpressure;
mod close;
mod closures;
mod delivery;
mod errors;
mod idle;
mod neighbour;
mod no_loss;
mod no_runtime;
mod order;
mod patterns;
mod removal;
mod stress;
mod subscribe;
mod types;
mod unrouted;
