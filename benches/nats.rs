//! Messages per second through NATS, the same workload four ways in one run, rounds
//! interleaved (`raw raw-json link bus raw ...`), one `nats-server` for the whole run
//! (see docs/benchmarks/nats.md for the method and the figures):
//!
//! - `raw`: the `async-nats` client alone. One connection publishes (with the headers the
//!   link sends: topic and id; on JetStream also `Nats-Msg-Id` and the origin, awaiting server
//!   acks in a window of 256), a second one receives (core: a subscription; JetStream: a
//!   durable pull consumer, explicit acks, pulls of 64, at most 256 unacked: the link's
//!   defaults).
//! - `raw-json`: the same raw client doing the link's codec work: each message made into the
//!   payload type and encoded with serde_json on send, decoded on receipt (the link's `Json`).
//! - `link`: the link crate with the bus as thin as its API allows: messages published into
//!   a resolved topic handle whose only subscriber is the link's export; on the other side
//!   the link's import publishes into a bus whose only subscriber is a counting closure.
//! - `bus`: the same, written as an application would: `bus.publish(topic, msg)` by name,
//!   and a `#[subscriber]` `async fn(&Msg)` with a `State<_>` registered with `bus.register`.
//! - with `diag`, also `export-only` (link export, raw receiver) and `import-only` (raw
//!   publisher, link import), to tell which side costs what.
//!
//! The body is the same on the wire in all of them: the JSON string the link's codec makes
//! of the payload (a 64 B payload is a 66 B body). `raw` sends it ready-made; the link
//! encodes and decodes it per message, which is part of what it costs.
//!
//! A round runs from the first publish until the last message was received (JetStream: and
//! every publish acked by the server, every delivery acked by the consumer). Every round
//! checks that every message arrived exactly once with its full body (JetStream: the stream
//! holds each once, the consumer has nothing pending or unacked); a cell whose round fails is
//! aborted with the reason, and the run exits non-zero. A JetStream round cut by a stall of
//! the client's pull stream (a missed heartbeat, see nats.md) is run again and recorded.
//!
//! The message, the counting handlers, the systems, the interleaved rounds, the table and the
//! JSON figures are shared with `redis.rs` (`common/links.rs`); this file holds the NATS wiring.
//!
//! ```text
//! just nats-bench                # full run: the "nats" key of results.json, the nats.md table
//! just nats-bench quick          # smoke run (fewer messages, 3 rounds), nothing written
//! just nats-bench diag           # adds the half links, nothing written
//! ```
//!
//! Options: `rounds=N`, `core=N` and `js=N` (messages per round), `only=core|js`,
//! `systems=raw,link,...` (profiling one system; nothing written).
//! Without a `nats-server` binary it prints a skip line and exits 0.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream::StorageType};
use async_nats::{Client, HeaderMap, Subject};
use bytes::Bytes;
use futures_util::StreamExt;
use ringbus::{Bus, Subscription};
use ringbus_nats::testing::NatsServer;
use ringbus_nats::{JetStreamOptions, Link, Mode};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

#[path = "common/mod.rs"]
mod common;
#[path = "common/links.rs"]
mod links;

use common::{command, read};
use links::{
    payload_text, poll_until, CellResult, LinkBench, OrFail, Payload, Publishing, RoundReceiver,
    RoundSender, Run, Sample, Side, System, Tally,
};

/// The topic every round uses (each round under its own prefix, so its own subject and
/// stream).
const TOPIC: &str = "bench";
/// Core has no flow control: a burst out-runs any receiver, whose client then drops what its
/// buffer cannot hold (the link's default `import_buffer` is 4096). Both receivers buffer a
/// whole round (raw: `subscription_capacity`, link: `import_buffer`), at least this many.
const IMPORT_BUFFER: usize = 4096;
/// The link's default JetStream windows, mirrored by the raw client.
const ACK_WINDOW: usize = 256;
const PULL_BATCH: usize = 64;
const MAX_ACK_PENDING: i64 = 256;
/// Starts the error of a round cut by a JetStream pull stall (see nats.md): such a round is
/// run again, at most `MAX_STALL_RETRIES` times per cell.
const STALL: &str = "pull stalled";
const MAX_STALL_RETRIES: usize = 6;
/// The durable consumer name the link derives for topic `bench` (`<durable>_<topic>`).
const DURABLE: &str = "ringbus_bench";

// ---------------------------------------------------------------------------------------------
// Cells, systems, rounds
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Core,
    Js,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Core => "core",
            Kind::Js => "jetstream",
        }
    }

    fn mode(self) -> Mode {
        match self {
            Kind::Core => Mode::Core,
            Kind::Js => Mode::JetStream,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    kind: Kind,
    size: usize,
    messages: u64,
}

impl links::Cell for Cell {
    fn mode(&self) -> &'static str {
        self.kind.name()
    }

    fn size(&self) -> usize {
        self.size
    }

    fn messages(&self) -> u64 {
        self.messages
    }
}

/// What every round shares.
struct Ctx {
    url: String,
    admin: jetstream::Context,
    server_pid: Option<u32>,
    /// Distinguishes the message ids of the raw client, as the link's process tag does.
    tag: String,
    next_prefix: AtomicU64,
}

/// One request round trip: the server has processed everything this connection sent before.
async fn round_trip(client: &Client) -> Result<(), String> {
    match client.request("_BENCH.PING", Bytes::new()).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Err(e) => Err(format!("round trip: {e}")),
    }
}

fn stream_config(prefix: &str) -> jetstream::stream::Config {
    // As the link makes it (see `LinkShared::stream`), with the link's default options.
    let defaults = JetStreamOptions::default();
    jetstream::stream::Config {
        name: prefix.to_ascii_uppercase(),
        subjects: vec![format!("{prefix}.>"), format!("{prefix}-dead.>")],
        duplicate_window: defaults.duplicate_window,
        storage: if defaults.memory_storage {
            StorageType::Memory
        } else {
            StorageType::File
        },
        ..Default::default()
    }
}

fn consumer_config(subject: &str) -> pull::Config {
    // As the link's import makes it, with the default options.
    let defaults = JetStreamOptions::default();
    pull::Config {
        durable_name: Some(DURABLE.to_string()),
        filter_subject: subject.to_string(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: defaults.ack_wait,
        max_deliver: i64::from(defaults.max_deliver),
        max_ack_pending: MAX_ACK_PENDING,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Receivers
// ---------------------------------------------------------------------------------------------

enum Receiver {
    Raw {
        client: Client,
        task: JoinHandle<Result<Instant, String>>,
        tally: Tally,
        /// Set when the client reports a slow consumer (it dropped messages).
        slow: Arc<AtomicBool>,
    },
    Link {
        link: Link,
        bus: Bus,
        tally: Tally,
        _subscription: Subscription,
    },
}

async fn receiver(ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Receiver, String> {
    let subject = format!("{prefix}.{TOPIC}");
    match side {
        Side::Raw | Side::RawJson => {
            let slow = Arc::new(AtomicBool::new(false));
            let lost = slow.clone();
            let client = async_nats::ConnectOptions::new()
                .no_echo()
                .subscription_capacity(IMPORT_BUFFER.max(cell.messages as usize))
                .event_callback(move |event| {
                    match event {
                        async_nats::Event::SlowConsumer(_) => lost.store(true, Ordering::Relaxed),
                        async_nats::Event::Connected
                        | async_nats::Event::Draining
                        | async_nats::Event::Closed => {}
                        other => eprintln!("  (raw receiver connection: {other})"),
                    }
                    async {}
                })
                .connect(ctx.url.as_str())
                .await
                .or_fail("raw receiver connect")?;
            // The raw receiver gets the JSON body as bytes (two quotes longer), or decodes it.
            let tally = Tally::new(cell.messages, side.expected_len(cell.size));
            let counted = tally.clone();
            let task = match cell.kind {
                Kind::Core => {
                    let mut sub = client.subscribe(subject).await.or_fail("raw subscribe")?;
                    round_trip(&client).await?;
                    tokio::spawn(async move {
                        while let Some(m) = sub.next().await {
                            let len = match &m.headers {
                                Some(h) if h.get("Ringbus-Id").is_some() => {
                                    side.received_len(&m.payload)
                                }
                                _ => usize::MAX,
                            };
                            if counted.record(len) {
                                return Ok(Instant::now());
                            }
                        }
                        Err("the raw subscription ended".to_string())
                    })
                }
                Kind::Js => {
                    let js = jetstream::new(client.clone());
                    let stream = js
                        .get_or_create_stream(stream_config(prefix))
                        .await
                        .or_fail("raw create stream")?;
                    let consumer = stream
                        .get_or_create_consumer(DURABLE, consumer_config(&subject))
                        .await
                        .or_fail("raw create consumer")?;
                    let mut messages = consumer
                        .stream()
                        .max_messages_per_batch(PULL_BATCH)
                        .heartbeat(Duration::from_secs(5))
                        .expires(Duration::from_secs(30))
                        .messages()
                        .await
                        .or_fail("raw pull")?;
                    tokio::spawn(async move {
                        while let Some(m) = messages.next().await {
                            // A pull error (in practice a missed heartbeat: the client's pull
                            // accounting stalled) cuts the round; it is run again.
                            let m = match m {
                                Ok(m) => m,
                                Err(e) => {
                                    return Err(format!(
                                        "{STALL}: raw pull error after {} messages: {e}",
                                        counted.seen()
                                    ))
                                }
                            };
                            let last = counted.record(side.received_len(&m.payload));
                            m.ack().await.map_err(|e| format!("raw ack: {e}"))?;
                            if last {
                                return Ok(Instant::now());
                            }
                        }
                        Err("the raw pull ended".to_string())
                    })
                }
            };
            Ok(Receiver::Raw {
                client,
                task,
                tally,
                slow,
            })
        }
        Side::Link | Side::Bus => {
            let tally = Tally::new(cell.messages, cell.size);
            let (bus, subscription) = links::counting_bus(side, &tally)?;
            let link = Link::builder(ctx.url.as_str())
                .prefix(prefix)
                .import_buffer(IMPORT_BUFFER.max(cell.messages as usize))
                .connect(&bus)
                .await
                .or_fail("import link connect")?;
            link.import::<Payload>(TOPIC, cell.kind.mode())
                .await
                .or_fail("import")?;
            Ok(Receiver::Link {
                link,
                bus,
                tally,
                _subscription: subscription,
            })
        }
    }
}

impl RoundReceiver for Receiver {
    type Cell = Cell;

    /// When the last message was received (JetStream: and acked).
    async fn wait(&mut self, cell: Cell) -> Result<Instant, String> {
        match self {
            Receiver::Raw {
                task, tally, slow, ..
            } => {
                links::raw_received(task, tally, || {
                    slow.load(Ordering::Relaxed)
                        .then(|| "the raw client dropped messages (slow consumer)".to_string())
                })
                .await
            }
            Receiver::Link { link, tally, .. } => {
                let handled = tally
                    .wait(|| {
                        let s = link.stats();
                        if s.import_errors > 0 {
                            return Some(format!(
                                "{STALL}: import pull error after {} messages",
                                s.imported
                            ));
                        }
                        (s.slow_consumer > 0 || s.bad_input > 0)
                            .then(|| format!("the import lost or refused messages: {s:?}"))
                    })
                    .await?;
                if cell.kind == Kind::Core {
                    return Ok(handled);
                }
                poll_until(handled, "the import did not ack every message", || {
                    link.stats().acked >= cell.messages
                })
                .await
            }
        }
    }

    /// Checks the counts, then closes.
    async fn finish(self, cell: Cell) -> Result<(), String> {
        match self {
            Receiver::Raw { client, tally, .. } => {
                // The acks are fire and forget: let the server take them before draining.
                round_trip(&client).await?;
                let _ = client.drain().await;
                tally.verify()
            }
            Receiver::Link {
                link, bus, tally, ..
            } => {
                let report = link.close(Duration::from_secs(10)).await;
                bus.close().await;
                tally.verify()?;
                let s = &report.stats;
                if !report.complete
                    || s.imported != cell.messages
                    || s.bad_input != 0
                    || s.slow_consumer != 0
                    || s.nacked != 0
                    || s.import_errors != 0
                    || (cell.kind == Kind::Js && s.acked != cell.messages)
                {
                    return Err(format!("import link: {report:?}"));
                }
                Ok(())
            }
        }
    }

    /// Tears down a round that failed, without checking anything.
    async fn abandon(self) {
        match self {
            Receiver::Raw { client, task, .. } => {
                task.abort();
                let _ = tokio::time::timeout(links::ABANDON_WITHIN, client.drain()).await;
            }
            Receiver::Link { link, bus, .. } => {
                links::abandon_link(link.close(links::ABANDON_WITHIN), bus).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Senders
// ---------------------------------------------------------------------------------------------

enum Sender {
    /// The raw client; `typed` (`raw-json`): it encodes each message.
    Raw(Client, bool),
    Link {
        link: Link,
        bus: Bus,
    },
}

async fn sender(ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Sender, String> {
    match side {
        Side::Raw | Side::RawJson => {
            let client = async_nats::ConnectOptions::new()
                .no_echo()
                .connect(ctx.url.as_str())
                .await
                .or_fail("raw sender connect")?;
            if cell.kind == Kind::Js {
                jetstream::new(client.clone())
                    .get_or_create_stream(stream_config(prefix))
                    .await
                    .or_fail("raw create stream")?;
            }
            Ok(Sender::Raw(client, side.typed()))
        }
        Side::Link | Side::Bus => {
            let bus = Bus::new();
            let link = Link::builder(ctx.url.as_str())
                .prefix(prefix)
                .connect(&bus)
                .await
                .or_fail("export link connect")?;
            link.export::<Payload>(TOPIC, cell.kind.mode())
                .await
                .or_fail("export")?;
            Ok(Sender::Link { link, bus })
        }
    }
}

/// The headers the link sends, as a raw client user would set them.
fn raw_headers(kind: Kind, tag: &str, n: u64) -> HeaderMap {
    let id = links::raw_id(tag, n);
    let mut headers = HeaderMap::new();
    headers.insert("Ringbus-Topic", TOPIC);
    if kind == Kind::Js {
        headers.insert("Nats-Msg-Id", id.as_str());
        headers.insert("Ringbus-Origin", tag);
    }
    headers.insert("Ringbus-Id", id);
    headers
}

impl Sender {
    fn start(&self, ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Publishing, String> {
        let text = payload_text(cell.size);
        let n = cell.messages;
        let task = match self {
            Sender::Raw(client, typed) => {
                let encoded = Bytes::from(serde_json::to_vec(&text).or_fail("encode")?);
                let typed = *typed;
                // `raw`: the body made once; `raw-json`: each message encoded, as the link does.
                let body = move || {
                    if typed {
                        Bytes::from(links::encode_payload(&text))
                    } else {
                        encoded.clone()
                    }
                };
                let subject = Subject::from(format!("{prefix}.{TOPIC}"));
                let tag = ctx.tag.clone();
                let client = client.clone();
                match cell.kind {
                    Kind::Core => tokio::spawn(async move {
                        for i in 0..n {
                            client
                                .publish_with_headers(
                                    subject.clone(),
                                    raw_headers(Kind::Core, &tag, i),
                                    body(),
                                )
                                .await
                                .or_fail("raw publish")?;
                        }
                        client.flush().await.or_fail("raw flush")?;
                        Ok(None)
                    }),
                    Kind::Js => tokio::spawn(async move {
                        let js = jetstream::new(client);
                        let mut window: VecDeque<jetstream::context::PublishAckFuture> =
                            VecDeque::with_capacity(ACK_WINDOW);
                        for i in 0..n {
                            if window.len() == ACK_WINDOW {
                                if let Some(ack) = window.pop_front() {
                                    ack.await.or_fail("raw publish ack")?;
                                }
                            }
                            let ack = js
                                .publish_with_headers(
                                    subject.clone(),
                                    raw_headers(Kind::Js, &tag, i),
                                    body(),
                                )
                                .await
                                .or_fail("raw publish")?;
                            window.push_back(ack);
                        }
                        while let Some(ack) = window.pop_front() {
                            ack.await.or_fail("raw publish ack")?;
                        }
                        Ok(Some(Instant::now()))
                    }),
                }
            }
            Sender::Link { bus, .. } => links::publish_into(bus, side, text, n)?,
        };
        Ok(task)
    }
}

impl RoundSender for Sender {
    type Cell = Cell;

    /// When every publish was done (JetStream: acked by the server); `since` if already.
    async fn wait(&self, task: Publishing, cell: Cell, since: Instant) -> Result<Instant, String> {
        let published = links::published(task).await?;
        match self {
            Sender::Raw(..) => Ok(published.map_or(since, |t| t.max(since))),
            Sender::Link { link, .. } if cell.kind == Kind::Js => {
                poll_until(since, "the export was not acked", || {
                    link.stats().export_acked >= cell.messages
                })
                .await
            }
            Sender::Link { .. } => Ok(since),
        }
    }

    async fn finish(self, cell: Cell) -> Result<(), String> {
        match self {
            Sender::Raw(client, _) => {
                round_trip(&client).await?;
                let _ = client.drain().await;
                Ok(())
            }
            Sender::Link { link, bus } => {
                let report = link.close(Duration::from_secs(10)).await;
                bus.close().await;
                let s = &report.stats;
                if !report.complete
                    || s.exported != cell.messages
                    || s.export_errors != 0
                    || s.export_retries != 0
                    || (cell.kind == Kind::Js && s.export_acked != cell.messages)
                {
                    return Err(format!("export link: {report:?}"));
                }
                Ok(())
            }
        }
    }

    /// Tears down a round that failed, without checking anything.
    async fn abandon(self) {
        match self {
            Sender::Raw(client, _) => {
                let _ = tokio::time::timeout(links::ABANDON_WITHIN, client.drain()).await;
            }
            Sender::Link { link, bus } => {
                links::abandon_link(link.close(links::ABANDON_WITHIN), bus).await;
            }
        }
    }
}

/// JetStream: the stream holds each message once and the consumer has nothing pending.
async fn verify_stream(ctx: &Ctx, prefix: &str, n: u64) -> Result<(), String> {
    let name = prefix.to_ascii_uppercase();
    let stream = ctx.admin.get_stream(&name).await.or_fail("get stream")?;
    let stored = stream
        .get_info()
        .await
        .or_fail("stream info")?
        .state
        .messages;
    if stored != n {
        return Err(format!("the stream holds {stored} messages, not {n}"));
    }
    let consumer: jetstream::consumer::PullConsumer =
        stream.get_consumer(DURABLE).await.or_fail("get consumer")?;
    // Acks are fire and forget: give the server a moment to apply the last ones.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = consumer.get_info().await.or_fail("consumer info")?;
        if info.num_pending == 0 && info.num_ack_pending == 0 && info.num_redelivered == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the consumer has {} pending, {} unacked, {} redelivered",
                info.num_pending, info.num_ack_pending, info.num_redelivered
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl LinkBench for Ctx {
    type Cell = Cell;

    async fn round(&self, system: System, cell: Cell) -> Result<Sample, String> {
        let prefix = format!("nb{}", self.next_prefix.fetch_add(1, Ordering::Relaxed));
        let result = measure(self, system, cell, &prefix).await;
        if cell.kind == Kind::Js {
            let _ = self.admin.delete_stream(prefix.to_ascii_uppercase()).await;
        }
        result
    }

    /// A JetStream round cut by a pull stall (see nats.md) is run again, at most
    /// `MAX_STALL_RETRIES` times per cell.
    fn rerun(&self, error: &str, reruns: usize) -> bool {
        error.starts_with(STALL) && reruns < MAX_STALL_RETRIES
    }
}

async fn measure(ctx: &Ctx, system: System, cell: Cell, prefix: &str) -> Result<Sample, String> {
    let sample = links::measure(
        receiver(ctx, system.recv, cell, prefix),
        sender(ctx, system.send, cell, prefix),
        cell,
        ctx.server_pid,
        |tx| tx.start(ctx, system.send, cell, prefix),
    )
    .await?;
    if cell.kind == Kind::Js {
        verify_stream(ctx, prefix, cell.messages).await?;
    }
    Ok(sample)
}

// ---------------------------------------------------------------------------------------------
// Statistics and the report
// ---------------------------------------------------------------------------------------------

/// The goal verdicts: per payload, the median of the per-round ratios link/raw is at least
/// 0.80 on core and 0.90 on JetStream.
fn goals(results: &[CellResult<Cell>]) -> (Value, String) {
    let of = |kind: Kind| results.iter().filter(move |r| r.cell.kind == kind);
    let core = |m: (f64, f64, f64)| m.0 >= 0.80;
    let js = |m: (f64, f64, f64)| m.0 >= 0.90;
    let (core_met, mut lines) = links::ratio_goal(of(Kind::Core), "raw", core);
    let (js_met, js_lines) = links::ratio_goal(of(Kind::Js), "raw", js);
    let (core_same, core_same_lines) = links::ratio_goal(of(Kind::Core), "raw-json", core);
    let (js_same, js_same_lines) = links::ratio_goal(of(Kind::Js), "raw-json", js);
    for more in [js_lines, core_same_lines, js_same_lines] {
        lines.push_str(&more);
    }
    let verdict = json!({
        "core": {
            "goal": "the link moves at least 80% of the messages per second of the raw client",
            "criterion": "per payload: the median of the per-round ratios link/raw is at least 0.80",
            "met": core_met,
            "met_against_raw_json": core_same,
            "raw_json": "the same work: the raw client encoding and decoding each message with serde_json, as the link's Json codec does (system raw-json)",
        },
        "jetstream": {
            "goal": "the link moves at least 90% of the messages per second of the raw client",
            "criterion": "per payload: the median of the per-round ratios link/raw is at least 0.90",
            "met": js_met,
            "met_against_raw_json": js_same,
            "raw_json": "the same work: the raw client encoding and decoding each message with serde_json, as the link's Json codec does (system raw-json)",
        },
    });
    (verdict, lines)
}

/// What the figures were measured on, with the nats-server's version.
fn machine() -> Value {
    let server_bin = std::env::var("NATS_SERVER_BIN")
        .ok()
        .filter(|v| !v.is_empty());
    let server_version = [
        server_bin.as_deref(),
        Some("nats-server"),
        Some("/usr/sbin/nats-server"),
    ]
    .into_iter()
    .flatten()
    .find_map(|b| command(b, &["--version"]))
    .unwrap_or_else(|| "unknown".to_string());
    let mut machine = common::machine(&[
        "async-nats",
        "ringbus",
        "ringbus-nats",
        "serde_json",
        "tokio",
    ]);
    machine["nats_server"] = json!(server_version);
    machine
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

struct Options {
    quick: bool,
    diag: bool,
    rounds: usize,
    core: u64,
    js: u64,
    only: Option<Kind>,
    /// Run only these systems (for profiling one of them); nothing is written.
    systems: Option<Vec<String>>,
}

fn options() -> Options {
    let args = links::Args::parse();
    let quick = args.flag("quick");
    let only = match args.value("only").as_deref() {
        None => None,
        Some("core") => Some(Kind::Core),
        Some("js" | "jetstream") => Some(Kind::Js),
        Some(v) => panic!("only={v}: core or js"),
    };
    Options {
        systems: args.systems(),
        quick,
        diag: args.flag("diag"),
        rounds: args.num("rounds", if quick { 3 } else { 9 }) as usize,
        core: args.num("core", if quick { 50_000 } else { 300_000 }),
        js: args.num("js", if quick { 5_000 } else { 60_000 }),
        only,
    }
}

fn main() {
    // `exit` skips destructors: the server is dropped (killed) before it.
    let code = bench();
    if code != 0 {
        std::process::exit(code);
    }
}

/// The whole run; its exit code.
fn bench() -> i32 {
    let o = options();
    let Some(server) = NatsServer::start() else {
        println!("nats bench SKIPPED: no nats-server binary (set NATS_SERVER_BIN or install it)");
        return 0;
    };
    let systems = links::systems(o.diag, o.systems.as_deref());
    let run = Run::on_runtime(run(&o, &server, &systems));
    // What the server warned about (slow consumers, for instance).
    for line in read(&server.log_path().to_string_lossy())
        .lines()
        .filter(|l| l.contains("[WRN]") || l.contains("[ERR]"))
        .take(20)
    {
        eprintln!("nats-server: {line}");
    }

    let table = links::table(&run.results, &links::names(&systems), "nats-server");
    let (verdict, lines) = goals(&run.results);
    println!("\n{table}\nGoals:\n{lines}");
    let partial = o.quick || o.diag || o.only.is_some() || o.systems.is_some();
    if let Err(code) = run.summary(o.rounds, partial, "nats.md") {
        return code;
    }
    let mut run_json = run.json("just nats-bench", o.rounds);
    if let Some(map) = run_json.as_object_mut() {
        // Published under this name since the first run: JetStream rounds are run again only
        // after a pull stall.
        if let Some(reruns) = map.remove("rounds_rerun") {
            map.insert("rounds_rerun_after_pull_stall".into(), reruns);
        }
    }
    run_json["runtime"] = json!("tokio multi-thread, 2 workers; publisher and receiver in this process on two connections; one nats-server process");
    run_json["settings"] = json!({
        "core_receive_buffer_messages": IMPORT_BUFFER.max(o.core as usize),
        "jetstream_storage": "file",
        "jetstream_ack_window": ACK_WINDOW,
        "jetstream_pull_batch": PULL_BATCH,
        "jetstream_max_ack_pending": MAX_ACK_PENDING,
        "bus_capacity": 1024,
    });
    let nats = json!({
        "about": "ringbus-nats beside the raw async-nats client: messages per second end to end \
                  (first publish to last message received; JetStream: and every publish and \
                  delivery acked), median, min and max of the interleaved rounds (rounds in run \
                  order); ratio_to_raw = system / raw per round. Written by \
                  benches/nats.rs (`just nats-bench`); see nats.md.",
        "machine": machine(),
        "run": run_json,
        "figures": links::figures_json(&run.results),
        "goals": verdict,
    });
    i32::from(!links::publish("nats", nats, &table))
}

async fn run(o: &Options, server: &NatsServer, systems: &[System]) -> Vec<CellResult<Cell>> {
    let url = server.url();
    let admin = async_nats::connect(url.as_str())
        .await
        .expect("connect to the nats-server");
    let ctx = Ctx {
        url,
        admin: jetstream::new(admin),
        server_pid: server.pid(),
        tag: format!("{:016x}", (u64::from(std::process::id()) << 32) | 0xbe4c),
        next_prefix: AtomicU64::new(1),
    };
    let mut cells = Vec::new();
    for kind in [Kind::Core, Kind::Js] {
        if o.only.is_some_and(|k| k != kind) {
            continue;
        }
        for size in [64, 512] {
            let messages = if kind == Kind::Core { o.core } else { o.js };
            cells.push(Cell {
                kind,
                size,
                messages,
            });
        }
    }
    links::run_cells(&ctx, &cells, systems, o.rounds, o.quick).await
}
