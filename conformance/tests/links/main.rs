//! One conformance suite, six transports: the in-process bus alone, two buses linked over
//! NATS core through the in-memory stand-in (`MemoryNats`) and through a `nats-server`, over
//! JetStream, over Redis Streams through a `redis-server`, and over RabbitMQ through a
//! `rabbitmq-server`. Each case checks the promises its transport makes (see each engine's
//! crate docs): what every link promises on all six; what an at-least-once link promises on
//! JetStream, Redis and RabbitMQ; pattern exports and imports where the transport has them
//! (all but JetStream and Redis).
//!
//! Every server case starts its own server on 127.0.0.1; without the binary that transport's
//! cases skip with a message (the others still run), unless `REQUIRE_NATS=1` /
//! `REQUIRE_REDIS=1` / `REQUIRE_RABBITMQ=1` (as in CI). Waits are bounded by deadlines that
//! fail the test; none is a sleep standing in for an event. Run one case on one transport with
//! `cargo test -p ringbus-conformance --test links dead_letters`.

mod cases;
mod pair;
