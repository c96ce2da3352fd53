//! Messages per second through Redis Streams, the same workload four ways in one run, rounds
//! interleaved (`raw raw-json link bus raw ...`), one `redis-server` for the whole run (see
//! docs/benchmarks/redis.md for the method and the figures):
//!
//! - `raw`: the `redis` crate alone, wired as a performance-minded user would. One
//!   multiplexed connection publishes: `XADD` with the fields the link writes (topic, id,
//!   origin, the same JSON body) and the link's trimming (`MAXLEN ~ 100000`), pipelined in
//!   batches of 64 (`redis::pipe`), with up to 256 commands awaiting their reply. The
//!   receiver reads on a connection of its own (`XREADGROUP ... COUNT 64 BLOCK 1000`, the
//!   link's read batch and block) and acknowledges each batch it read with one `XACK` of all
//!   its ids on another connection, sent at once (not awaited before the next read), with at
//!   most 256 messages read and not yet acknowledged (the link's `max_in_flight`).
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
//! The body is the same in the stream in all of them: the JSON string the link's codec makes
//! of the payload (a 64 B payload is a 66 B body). `raw` sends it ready-made; the link
//! encodes and decodes it per message, which is part of what it costs.
//!
//! A round runs from the first publish until the last message was received and acknowledged
//! (XACK answered) and every XADD was answered. Every round checks that every message arrived
//! once with its full body, the link's counters and close report (or, raw, that XACK
//! acknowledged every message), and that the stream holds each message once with nothing
//! pending in the group; a cell whose round fails is aborted with the reason, and the run
//! exits non-zero without writing anything.
//!
//! ```text
//! just redis-bench               # full run: the "redis" key of results.json, the redis.md table
//! just redis-bench quick         # smoke run (fewer messages, 3 rounds), nothing written
//! just redis-bench diag          # adds the half links, nothing written
//! ```
//!
//! Options: `rounds=N`, `messages=N` (per round, at most the link's `max_len`: a longer
//! stream would be trimmed under a slow reader), `systems=raw,link,...` (profiling one
//! system; nothing written). Without a `redis-server` binary it prints a skip line and exits 0.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::stream::FuturesOrdered;
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use ringbus::{Bus, Subscription};
use ringbus_redis::testing::RedisServer;
use ringbus_redis::{Link, StreamOptions};
use serde_json::{json, Value as Json};
use tokio::task::JoinHandle;

#[path = "common/mod.rs"]
mod common;
#[path = "common/links.rs"]
mod links;
#[path = "common/one_mode.rs"]
mod one_mode;

use common::command;
use links::{
    payload_text, poll_until, CellResult, LinkBench, OrFail, Payload, Publishing, RoundReceiver,
    RoundSender, Run, Sample, Side, System, Tally,
};
use one_mode::{Cell, Options};

/// The topic every round uses (each round under its own prefix, so its own stream).
const TOPIC: &str = "bench";
/// The raw publisher's XADDs sent and not yet answered, at most.
const XADD_WINDOW: usize = 256;
/// The raw publisher's XADDs per pipeline (as the link's export sends what is queued as one).
const XADD_PIPE: usize = 64;
/// The goal: link/raw at least this, per payload (median of the per-round ratios).
const GOAL: f64 = 0.90;
/// How long a connection waits for a connect or for a reply (the link's defaults).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

// Field names of a stream entry, as the link writes them (`ringbus_link::names` and the link's
// `wire::BODY`).
const FIELD_TOPIC: &str = "Ringbus-Topic";
const FIELD_ID: &str = "Ringbus-Id";
const FIELD_ORIGIN: &str = "Ringbus-Origin";
const FIELD_BODY: &str = "Ringbus-Body";

// ---------------------------------------------------------------------------------------------
// Cells and what every round shares
// ---------------------------------------------------------------------------------------------

/// What every round shares.
struct Ctx {
    url: String,
    client: Client,
    /// For setting up and checking a round (never timed).
    admin: MultiplexedConnection,
    server_pid: Option<u32>,
    /// The link's defaults, which the raw client mirrors.
    streams: StreamOptions,
    /// Distinguishes the message ids of the raw client, as the link's process tag does.
    tag: String,
    next_prefix: AtomicU64,
    /// `diag`: print the commands the server ran per message in each round.
    diag: bool,
}

impl Ctx {
    /// A multiplexed connection whose replies may take `response` at most.
    async fn connect(&self, response: Duration) -> Result<MultiplexedConnection, String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .or_fail("raw connect")
    }

    /// Creates the group at the start of the stream, and the stream, as the link's import
    /// does.
    async fn create_group(&self, key: &str) -> Result<(), String> {
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(key)
            .arg(&self.streams.group)
            .arg("0")
            .arg("MKSTREAM");
        cmd.query_async::<()>(&mut self.admin.clone())
            .await
            .or_fail("XGROUP CREATE")
    }
}

fn stream_key(prefix: &str) -> String {
    format!("{prefix}:{TOPIC}")
}

// ---------------------------------------------------------------------------------------------
// Receivers
// ---------------------------------------------------------------------------------------------

enum Receiver {
    Raw {
        task: JoinHandle<Result<Instant, String>>,
        tally: Tally,
    },
    Link {
        link: Link,
        bus: Bus,
        tally: Tally,
        _subscription: Subscription,
    },
}

/// The body length of a stream entry's fields (`[name, value, name, value, ...]`), or
/// `usize::MAX` if it has no body or no id.
fn body_len(fields: &[Value], side: Side) -> usize {
    let (mut body, mut id) = (None, false);
    for pair in fields.chunks_exact(2) {
        let (Value::BulkString(name), Value::BulkString(value)) = (&pair[0], &pair[1]) else {
            continue;
        };
        if name == FIELD_BODY.as_bytes() {
            body = Some(side.received_len(value));
        } else if name == FIELD_ID.as_bytes() {
            id = true;
        }
    }
    match body {
        Some(len) if id => len,
        _ => usize::MAX,
    }
}

/// Walks an XREADGROUP reply (RESP2 arrays or RESP3 maps), calling `each(entry id, body
/// length)` per entry (`raw-json`: the decoded payload's length); returns how many there were.
fn entries(reply: Value, side: Side, mut each: impl FnMut(&[u8], usize)) -> Result<usize, String> {
    let streams: Vec<Value> = match reply {
        Value::Nil => return Ok(0),
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut key_entries) if key_entries.len() == 2 => key_entries.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
        other => return Err(format!("unexpected XREADGROUP reply {other:?}")),
    };
    let mut n = 0;
    for stream in streams {
        let Value::Array(stream) = stream else {
            return Err("an XREADGROUP stream is not an array".into());
        };
        for entry in stream {
            match &entry {
                Value::Array(e) if e.len() == 2 => match (&e[0], &e[1]) {
                    (Value::BulkString(id), Value::Array(fields)) => {
                        each(id, body_len(fields, side))
                    }
                    (Value::BulkString(id), _) => each(id, usize::MAX),
                    _ => return Err("an XREADGROUP entry has no id".into()),
                },
                _ => return Err("an XREADGROUP entry is not an [id, fields] pair".into()),
            }
            n += 1;
        }
    }
    Ok(n)
}

/// An XACK of one batch, sent.
struct Ack {
    /// The messages it acknowledges.
    messages: usize,
    reply: JoinHandle<redis::RedisResult<u64>>,
}

impl Ack {
    /// How many messages Redis acknowledged.
    async fn confirmed(self) -> Result<u64, String> {
        self.reply
            .await
            .or_fail("raw XACK panicked")?
            .or_fail("raw XACK")
    }
}

/// The raw receiver's loop: reads batches of new entries, counts each, acknowledges each
/// batch with one XACK sent at once on `acker`; at most `max_in_flight` messages read and not
/// yet acknowledged. Returns when the last message was read and every XACK answered.
async fn raw_receive(
    mut reads: MultiplexedConnection,
    acker: MultiplexedConnection,
    key: String,
    streams: StreamOptions,
    consumer: String,
    (tally, expected): (Tally, u64),
    side: Side,
) -> Result<Instant, String> {
    let mut acks: VecDeque<Ack> = VecDeque::new();
    let (mut unacked, mut acked) = (0usize, 0u64);
    let max_in_flight = streams.max_in_flight.max(1);
    let block = u64::try_from(streams.block.as_millis()).unwrap_or(u64::MAX);
    loop {
        // Acks already answered, then room for a batch.
        while acks.front().is_some_and(|a| a.reply.is_finished()) || unacked >= max_in_flight {
            let Some(ack) = acks.pop_front() else {
                break;
            };
            unacked -= ack.messages;
            acked += ack.confirmed().await?;
        }
        let room = (max_in_flight - unacked).min(streams.read_batch.max(1));
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(&streams.group)
            .arg(&consumer)
            .arg("COUNT")
            .arg(room)
            .arg("BLOCK")
            .arg(block)
            .arg("STREAMS")
            .arg(&key)
            .arg(">");
        let reply: Value = read
            .query_async(&mut reads)
            .await
            .or_fail("raw XREADGROUP")?;
        let mut ack = redis::cmd("XACK");
        ack.arg(&key).arg(&streams.group);
        let n = entries(reply, side, |id, len| {
            ack.arg(id);
            tally.record(len);
        })?;
        if n == 0 {
            continue;
        }
        let mut acker = acker.clone();
        acks.push_back(Ack {
            messages: n,
            reply: tokio::spawn(async move { ack.query_async::<u64>(&mut acker).await }),
        });
        unacked += n;
        if tally.seen() >= expected {
            while let Some(ack) = acks.pop_front() {
                acked += ack.confirmed().await?;
            }
            if acked != expected {
                return Err(format!("XACK acknowledged {acked} of {expected} messages"));
            }
            return Ok(Instant::now());
        }
    }
}

async fn receiver(ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Receiver, String> {
    match side {
        Side::Raw | Side::RawJson => {
            let key = stream_key(prefix);
            ctx.create_group(&key).await?;
            // A blocking read answers within its BLOCK.
            let reads = ctx.connect(ctx.streams.block + RESPONSE_TIMEOUT).await?;
            let acker = ctx.connect(RESPONSE_TIMEOUT).await?;
            // The raw receiver gets the JSON body as bytes (two quotes longer), or decodes it.
            let tally = Tally::new(cell.messages, side.expected_len(cell.size));
            let task = tokio::spawn(raw_receive(
                reads,
                acker,
                key,
                ctx.streams.clone(),
                format!("{}-raw", ctx.tag),
                (tally.clone(), cell.messages),
                side,
            ));
            Ok(Receiver::Raw { task, tally })
        }
        Side::Link | Side::Bus => {
            let tally = Tally::new(cell.messages, cell.size);
            let (bus, subscription) = links::counting_bus(side, &tally)?;
            let link = Link::builder(ctx.url.as_str())
                .prefix(prefix)
                .connect(&bus)
                .await
                .or_fail("import link connect")?;
            link.import::<Payload>(TOPIC).await.or_fail("import")?;
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

    /// When the last message was received and acknowledged.
    async fn wait(&mut self, cell: Cell) -> Result<Instant, String> {
        match self {
            Receiver::Raw { task, tally } => links::raw_received(task, tally, || None).await,
            Receiver::Link { link, tally, .. } => {
                let lost = || {
                    let s = link.stats();
                    (s.bad_input > 0
                        || s.import_errors > 0
                        || s.dead_lettered > 0
                        || s.trimmed > 0
                        || s.ack_errors > 0)
                        .then(|| format!("the import lost or refused messages: {s:?}"))
                };
                one_mode::imported(tally, cell.messages, lost, || link.stats().acked).await
            }
        }
    }

    /// Checks the counts, then closes.
    async fn finish(self, cell: Cell) -> Result<(), String> {
        match self {
            Receiver::Raw { tally, .. } => tally.verify(),
            Receiver::Link {
                link, bus, tally, ..
            } => {
                let report = link.close(Duration::from_secs(10)).await;
                bus.close().await;
                tally.verify()?;
                let s = &report.stats;
                if !report.complete
                    || s.imported != cell.messages
                    || s.acked != cell.messages
                    || s.bad_input != 0
                    || s.nacked != 0
                    || s.claimed != 0
                    || s.dead_lettered != 0
                    || s.duplicates != 0
                    || s.trimmed != 0
                    || s.ack_errors != 0
                    || s.import_errors != 0
                    || s.echo_skipped != 0
                    || s.disconnects != 0
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
            Receiver::Raw { task, .. } => task.abort(),
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
    Raw(MultiplexedConnection, bool),
    Link {
        link: Link,
        bus: Bus,
    },
}

async fn sender(ctx: &Ctx, side: Side, prefix: &str) -> Result<Sender, String> {
    match side {
        Side::Raw | Side::RawJson => Ok(Sender::Raw(
            ctx.connect(RESPONSE_TIMEOUT).await?,
            side.typed(),
        )),
        Side::Link | Side::Bus => {
            let bus = Bus::new();
            let link = Link::builder(ctx.url.as_str())
                .prefix(prefix)
                .connect(&bus)
                .await
                .or_fail("export link connect")?;
            link.export::<Payload>(TOPIC).await.or_fail("export")?;
            Ok(Sender::Link { link, bus })
        }
    }
}

/// The XADD the link sends for a message with id `id`, as a raw client user would write it: the
/// link's fields in the link's order, its trimming, the ready-made JSON body.
fn raw_xadd(streams: &StreamOptions, key: &str, id: &str, origin: &str, body: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(key);
    if let Some(max_len) = streams.max_len {
        cmd.arg("MAXLEN");
        if !streams.exact_trim {
            cmd.arg("~");
        }
        cmd.arg(max_len);
    }
    cmd.arg("*")
        .arg(FIELD_TOPIC)
        .arg(TOPIC)
        .arg(FIELD_ID)
        .arg(id)
        .arg(FIELD_ORIGIN)
        .arg(origin)
        .arg(FIELD_BODY)
        .arg(body);
    cmd
}

impl Sender {
    fn start(&self, ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Publishing, String> {
        let text = payload_text(cell.size);
        let n = cell.messages;
        let task = match self {
            Sender::Raw(connection, typed) => {
                let encoded = serde_json::to_vec(&text).or_fail("encode")?;
                let typed = *typed;
                let key = stream_key(prefix);
                let origin = format!("{}-0", ctx.tag);
                let (streams, tag) = (ctx.streams.clone(), ctx.tag.clone());
                let connection = connection.clone();
                tokio::spawn(async move {
                    // Pipelines of XADD_PIPE commands (one write and one reply batch each),
                    // with up to XADD_WINDOW commands sent and not yet answered.
                    let mut window = FuturesOrdered::new();
                    let mut i = 0;
                    while i < n {
                        if window.len() == XADD_WINDOW / XADD_PIPE {
                            if let Some(reply) = window.next().await {
                                let reply: redis::RedisResult<()> = reply;
                                reply.or_fail("raw XADD")?;
                            }
                        }
                        let mut pipe = redis::pipe();
                        for i in i..(i + XADD_PIPE as u64).min(n) {
                            let id = links::raw_id(&tag, i);
                            // `raw-json`: each message encoded, as the link does.
                            let body = if typed {
                                std::borrow::Cow::Owned(links::encode_payload(&text))
                            } else {
                                std::borrow::Cow::Borrowed(encoded.as_slice())
                            };
                            pipe.add_command(raw_xadd(&streams, &key, &id, &origin, &body));
                        }
                        i = (i + XADD_PIPE as u64).min(n);
                        let mut connection = connection.clone();
                        window.push_back(
                            async move { pipe.query_async::<()>(&mut connection).await },
                        );
                    }
                    while let Some(reply) = window.next().await {
                        reply.or_fail("raw XADD")?;
                    }
                    Ok(Some(Instant::now()))
                })
            }
            Sender::Link { bus, .. } => links::publish_into(bus, side, text, n)?,
        };
        Ok(task)
    }
}

impl RoundSender for Sender {
    type Cell = Cell;

    /// When every publish was done and every XADD answered; `since` if already.
    async fn wait(&self, task: Publishing, cell: Cell, since: Instant) -> Result<Instant, String> {
        let published = links::published(task).await?;
        match self {
            Sender::Raw(..) => Ok(published.map_or(since, |t| t.max(since))),
            Sender::Link { link, .. } => {
                poll_until(since, "the export did not add every message", || {
                    link.stats().exported >= cell.messages
                })
                .await
            }
        }
    }

    async fn finish(self, cell: Cell) -> Result<(), String> {
        match self {
            Sender::Raw(..) => Ok(()),
            Sender::Link { link, bus } => {
                let report = link.close(Duration::from_secs(10)).await;
                bus.close().await;
                let s = &report.stats;
                if !report.complete
                    || s.exported != cell.messages
                    || s.export_errors != 0
                    || s.export_retries != 0
                    || s.disconnects != 0
                {
                    return Err(format!("export link: {report:?}"));
                }
                Ok(())
            }
        }
    }

    /// Tears down a round that failed, without checking anything.
    async fn abandon(self) {
        if let Sender::Link { link, bus } = self {
            links::abandon_link(link.close(links::ABANDON_WITHIN), bus).await;
        }
    }
}

/// The stream holds each message once and the group has nothing pending.
async fn verify_stream(ctx: &Ctx, prefix: &str, n: u64) -> Result<(), String> {
    let key = stream_key(prefix);
    let mut admin = ctx.admin.clone();
    let stored: u64 = redis::cmd("XLEN")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .or_fail("XLEN")?;
    if stored != n {
        return Err(format!("the stream holds {stored} messages, not {n}"));
    }
    // XPENDING's summary: [count, first id, last id, consumers].
    let summary: Value = redis::cmd("XPENDING")
        .arg(&key)
        .arg(&ctx.streams.group)
        .query_async(&mut admin)
        .await
        .or_fail("XPENDING")?;
    match summary {
        Value::Array(v) if matches!(v.first(), Some(Value::Int(0))) => Ok(()),
        other => Err(format!("the group has messages pending: {other:?}")),
    }
}

impl Ctx {
    /// Prints the stream commands the server ran in the round (since `CONFIG RESETSTAT`), per
    /// message: how much each side batches.
    async fn commands_per_message(&self, system: System, cell: Cell) {
        let Ok(info) = redis::cmd("INFO")
            .arg("commandstats")
            .query_async::<String>(&mut self.admin.clone())
            .await
        else {
            return;
        };
        let mut line = format!("    {} commands per message:", system.name);
        for l in info.lines() {
            // cmdstat_xadd:calls=20000,usec=...
            let Some((name, rest)) = l.strip_prefix("cmdstat_").and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|c| c.parse::<f64>().ok());
            if let (true, Some(calls)) = (name.starts_with('x'), calls) {
                let _ = write!(line, " {name} {:.3}", calls / cell.messages as f64);
            }
        }
        println!("{line}");
    }
}

impl LinkBench for Ctx {
    type Cell = Cell;

    async fn round(&self, system: System, cell: Cell) -> Result<Sample, String> {
        let prefix = format!("rb{}", self.next_prefix.fetch_add(1, Ordering::Relaxed));
        if self.diag {
            let _ = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async::<()>(&mut self.admin.clone())
                .await;
        }
        let result = measure(self, system, cell, &prefix).await;
        if self.diag && result.is_ok() {
            self.commands_per_message(system, cell).await;
        }
        let _ = redis::cmd("DEL")
            .arg(stream_key(&prefix))
            .query_async::<()>(&mut self.admin.clone())
            .await;
        result
    }
}

async fn measure(ctx: &Ctx, system: System, cell: Cell, prefix: &str) -> Result<Sample, String> {
    let sample = links::measure(
        receiver(ctx, system.recv, cell, prefix),
        sender(ctx, system.send, prefix),
        cell,
        ctx.server_pid,
        |tx| tx.start(ctx, system.send, cell, prefix),
    )
    .await?;
    verify_stream(ctx, prefix, cell.messages).await?;
    Ok(sample)
}

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

/// The goal verdict: per payload, the median of the per-round ratios link/raw is at least
/// [`GOAL`]; and the same against `raw-json`, the raw client doing the link's codec work.
fn goals(results: &[CellResult<Cell>]) -> (Json, String) {
    let (met, mut lines) = links::ratio_goal(results, "raw", |(median, ..)| median >= GOAL);
    let (same_work, same_lines) =
        links::ratio_goal(results, "raw-json", |(median, ..)| median >= GOAL);
    lines.push_str(&same_lines);
    let verdict = json!({
        "streams": {
            "goal": "the link moves at least 90% of the messages per second of the raw redis client",
            "criterion": "per payload: the median of the per-round ratios link/raw is at least 0.90",
            "met": met,
            "met_against_raw_json": same_work,
            "raw_json": "the same work: the raw client encoding and decoding each message with serde_json, as the link's Json codec does (system raw-json)",
        },
    });
    (verdict, lines)
}

/// What the figures were measured on, with the redis-server's version.
fn machine() -> Json {
    let server_bin = std::env::var("REDIS_SERVER_BIN")
        .ok()
        .filter(|v| !v.is_empty());
    let server_version = [
        server_bin.as_deref(),
        Some("redis-server"),
        Some("/usr/bin/redis-server"),
    ]
    .into_iter()
    .flatten()
    .find_map(|b| command(b, &["--version"]))
    .unwrap_or_else(|| "unknown".to_string());
    let mut machine =
        common::machine(&["redis", "ringbus", "ringbus-redis", "serde_json", "tokio"]);
    machine["redis_server"] = json!(server_version);
    machine
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn options() -> Options {
    let o = Options::parse();
    if let Some(max_len) = StreamOptions::default().max_len {
        assert!(
            o.messages <= max_len as u64,
            "messages={}: at most the link's max_len ({max_len}), or a slow reader loses what \
             the stream trims",
            o.messages
        );
    }
    o
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
    let Some(server) = RedisServer::start() else {
        println!(
            "redis bench SKIPPED: no redis-server binary (set REDIS_SERVER_BIN or install it)"
        );
        return 0;
    };
    let systems = links::systems(o.diag, o.systems.as_deref());
    let run = Run::on_runtime(run(&o, &server, &systems));
    let table = links::table(&run.results, &links::names(&systems), "redis-server");
    let (verdict, lines) = goals(&run.results);
    println!("\n{table}\nGoal (link/raw ≥ {GOAL}):\n{lines}");
    if let Err(code) = run.summary(o.rounds, o.partial(), "redis.md") {
        return code;
    }
    let streams = StreamOptions::default();
    let mut run_json = run.json("just redis-bench", o.rounds);
    run_json["runtime"] = json!("tokio multi-thread, 2 workers; publisher and receiver in this process (raw: a publishing, a reading and an acking connection; link: the export link's connection, the import link's command and reading connections); one redis-server process without persistence");
    run_json["settings"] = json!({
        "raw_xadd_window": XADD_WINDOW,
        "raw_xadd_pipeline": XADD_PIPE,
        "raw_acks": "one XACK per batch read, sent without waiting; at most max_in_flight read and unacknowledged",
        "link_acks": "one XACK of the handled messages due, once 64 (max_in_flight / 4) are due or 1 ms after the first (the link's settler)",
        "link_exports": "what is queued for the export as one pipeline of XADDs, awaited (the link's batch export handler)",
        "read_batch": streams.read_batch,
        "max_in_flight": streams.max_in_flight,
        "block_ms": streams.block.as_millis() as u64,
        "max_len": streams.max_len,
        "exact_trim": streams.exact_trim,
        "bus_capacity": 1024,
    });
    let redis = json!({
        "about": "ringbus-redis beside the raw redis client: messages per second end to end \
                  (first publish to last message received and acknowledged, every XADD \
                  answered), median, min and max of the interleaved rounds (rounds in run \
                  order); ratio_to_raw = system / raw per round. Written by \
                  benches/redis.rs (`just redis-bench`); see redis.md.",
        "machine": machine(),
        "run": run_json,
        "figures": links::figures_json(&run.results),
        "goals": verdict,
    });
    i32::from(!links::publish("redis", redis, &table))
}

async fn run(o: &Options, server: &RedisServer, systems: &[System]) -> Vec<CellResult<Cell>> {
    let url = server.url();
    let client = Client::open(url.as_str()).expect("a redis URL");
    let admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the redis-server");
    let ctx = Ctx {
        url,
        client,
        admin,
        server_pid: server.pid(),
        streams: StreamOptions::default(),
        tag: format!("{:016x}", (u64::from(std::process::id()) << 32) | 0xbe4c),
        next_prefix: AtomicU64::new(1),
        diag: o.diag,
    };
    let cells = one_mode::cells("streams", o.messages);
    links::run_cells(&ctx, &cells, systems, o.rounds, o.quick).await
}
