//! The NATS link's integration tests, one module per subject, in one test binary: each test
//! binary linked tokio, ringbus and the NATS client with its TLS stack anew, and eight of them
//! were a fifth of a cold `cargo test --workspace`.
//!
//! Run one module with `cargo test -p ringbus-nats --test nats sharing::`. The conformance cases
//! every link shares run in the shared suite, `cargo test -p ringbus-conformance`. The
//! multi-process tests (`cluster`, `scale`) are ignored by a plain `cargo test`; CI and
//! `just test` run them with `cargo test -p ringbus-nats --test nats -- --ignored --skip fifty`.

mod cluster;
mod link;
mod memory;
mod request;
mod scale;
mod send_sync;
mod sharing;
