# ringbus tasks. Install just with `cargo install just`, then run `just` to list recipes.

# List the recipes.
default:
    @just --list

# Every test: unit, integration and doc tests, the slow ones a plain `cargo test` ignores (the
# trybuild UI cases, the multi-process NATS tests), then the release-mode stress tests.
test:
    cargo test --workspace
    just slow-tests
    cargo test --release -p ringbus-core --test stress

# The tests a plain `cargo test --workspace` ignores because they take a minute: the trybuild UI
# cases (a crate built per case) and the multi-process NATS tests (worker processes, a
# 3-node cluster losing a node). The 50-process measurement stays out (`docs/scale.md`).
# The same selection as `cargo test --workspace`, so it reuses that build.
slow-tests:
    cargo test --workspace --tests -- --ignored --skip fifty

# The ringbus-nats tests against a real nats-server, failing (not skipping) if it is not installed.
nats:
    REQUIRE_NATS=1 cargo test -p ringbus-nats
    REQUIRE_NATS=1 cargo test -p ringbus-conformance --features otel --test otel

# The ringbus-redis tests (and its example) against a real redis-server, failing (not skipping) if it is not installed.
redis:
    REQUIRE_REDIS=1 cargo test -p ringbus-redis
    REQUIRE_REDIS=1 cargo test -p ringbus-redis --features tls --test redis tls
    REQUIRE_REDIS=1 cargo run -p ringbus-redis --example redis_orders

# The ringbus-rabbitmq tests (and its example) against a real rabbitmq-server, failing (not skipping) if it is not installed.
rabbitmq:
    REQUIRE_RABBITMQ=1 cargo test -p ringbus-rabbitmq
    REQUIRE_RABBITMQ=1 cargo run -p ringbus-rabbitmq --example rabbitmq_orders

# The loom models of the ring's protocols and the bus's writer lock (own target dir; raise LOOM_MAX_PREEMPTIONS to search deeper).
loom preemptions="3":
    RUSTFLAGS="--cfg ringbus_loom" LOOM_MAX_PREEMPTIONS={{preemptions}} CARGO_TARGET_DIR=target-loom \
        cargo test -p ringbus-core -p ringbus --lib --release loom_

# Plants each known bug (a fence, a wake-up, a protocol rule) in a scratch copy and checks that
# the test meant to catch it fails. `just plant-bugs gate join` runs the bugs whose names match.
# The copy builds into target/ and target-loom/: after `just test` and `just loom` it rebuilds
# only the crate each bug changes.
plant-bugs *words:
    python3 scripts/plant-bugs.py {{words}}

# Formatting and clippy (every feature set), exactly as CI runs them.
lint:
    bash .ci/run lint

# The module graph of a crate (who uses whom, and any circle); CI checks each crate that has a
# LAYERS file against it.
layers crate="crates/ringbus":
    python3 scripts/layers.py {{crate}} --graph

# Every scenario, ringbus beside each peer in interleaved rounds; writes docs/benchmarks/results.json
# and README.md (RUSTFLAGS cleared so figures are reproducible). `just bench quick`: under 3 minutes,
# written to target/tmp/compare-quick/. `just bench render`: redraw the page from results.json.
bench *args:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench compare -- {{args}}

# The criterion benches (ring, bus, topic registry) against their peers, and the idle-CPU bench.
criterion *args:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench ring {{args}}
    RUSTFLAGS= cargo bench -p ringbus-bench --bench bus {{args}}
    RUSTFLAGS= cargo bench -p ringbus-bench --bench registry {{args}}
    RUSTFLAGS= cargo bench -p ringbus-bench --bench idle

# Latency percentiles (coordinated-omission aware); see docs/benchmarks.
latency:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench latency

# Memory per topic and per subscriber, and lookups among a million topics (docs/scale.md).
scale:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench scale

# Instructions and allocations per message under callgrind, held against docs/benchmarks/cost.json.
cost:
    RUSTFLAGS= cargo run --release -p ringbus-bench --bin ringbus-cost -- gate

# Re-measure and rewrite the cost baseline (commit it, saying why the cost changed).
cost-update:
    RUSTFLAGS= cargo run --release -p ringbus-bench --bin ringbus-cost -- gate --update

# Everything CI runs, step by step with each step's time (about 20 minutes on 2 cores from a
# cold target directory).
ci:
    bash .ci/run

# Writes the "nats" key of docs/benchmarks/results.json and the table in docs/benchmarks/nats.md
# (RUSTFLAGS cleared); `just nats-bench quick` is a smoke run that writes nothing.
# ringbus-nats beside the raw async-nats client: core and JetStream, 64 B and 512 B, interleaved.
nats-bench *args:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench nats -- {{args}}

# Writes the "redis" key of docs/benchmarks/results.json and the table in docs/benchmarks/redis.md
# (RUSTFLAGS cleared); `just redis-bench quick` is a smoke run that writes nothing.
# ringbus-redis beside the raw redis client: Redis Streams, 64 B and 512 B, interleaved.
redis-bench *args:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench redis -- {{args}}

# Writes the "rabbitmq" key of docs/benchmarks/results.json and the table in
# docs/benchmarks/rabbitmq.md (RUSTFLAGS cleared); `just rabbitmq-bench quick` is a smoke run
# that writes nothing. ringbus-rabbitmq beside the raw lapin client: publisher confirms and
# manual acks on a durable queue, 64 B and 512 B, interleaved.
rabbitmq-bench *args:
    RUSTFLAGS= cargo bench -p ringbus-bench --bench rabbitmq -- {{args}}
