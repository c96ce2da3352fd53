//! The conformance suite of the ringbus links lives in `tests/links`: one set of cases, run
//! over the in-process bus alone, NATS core through `ringbus_nats::testing::MemoryNats` and
//! through a `nats-server`, JetStream, Redis Streams through a `redis-server`, and RabbitMQ
//! through a `rabbitmq-server`. What every link promises is checked on all of them; what an
//! at-least-once link promises (redelivery, dead letters, dedup, no loss across a server kill)
//! on JetStream, Redis and RabbitMQ; pattern exports and imports on every transport that has
//! them.
//!
//! `cargo test -p ringbus-conformance` runs it. Cases over a server the machine does not have
//! skip with a `SKIPPED:` line, unless `REQUIRE_NATS=1` / `REQUIRE_REDIS=1` /
//! `REQUIRE_RABBITMQ=1` (as in CI).
