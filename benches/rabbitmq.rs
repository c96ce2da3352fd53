//! Messages per second through RabbitMQ, the same workload four ways in one run, rounds
//! interleaved (`raw raw-json link bus raw ...`), one `rabbitmq-server` for the whole run (see
//! docs/benchmarks/rabbitmq.md for the method and the figures):
//!
//! - `raw`: the `lapin` client alone, wired as a performance-minded user would, with the
//!   link's topology and guarantees. One connection publishes on a channel in confirm mode to
//!   a durable topic exchange, routing key `bench`, persistent messages carrying the link's
//!   properties and headers (message id, topic, id, origin) and the same JSON body. It starts
//!   64 publishes at a time before awaiting any (so lapin's I/O thread writes them together),
//!   with up to 256 publishes awaiting their confirm, awaited 64 at a time. A second connection
//!   consumes the durable queue bound to it with manual acks and a prefetch of 256 (the
//!   link's `max_in_flight`), counting each message, then acknowledging what it counted with
//!   one `basic.ack` (`multiple: true`) every 64 messages and whenever no delivery is ready.
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
//! A round runs from the first publish until the last message was received and acknowledged
//! and every publish confirmed. Every round checks that every message arrived once with its
//! full body, the publisher's confirms (raw: each one an ack; link: its counters and close
//! report), the receiver's counters and close report (link), and, once both sides closed
//! (what a closed channel held unacknowledged goes back to its queue), that the queue holds
//! nothing; a cell whose round fails is aborted with the reason, and the run exits non-zero
//! without writing anything.
//!
//! The message, the counting handlers, the systems, the interleaved rounds, the table and the
//! JSON figures are shared with `nats.rs` and `redis.rs` (`common/links.rs`); this file holds
//! the RabbitMQ wiring.
//!
//! ```text
//! just rabbitmq-bench        # full run: the "rabbitmq" key of results.json, the rabbitmq.md table
//! just rabbitmq-bench quick  # smoke run (fewer messages, 3 rounds), nothing written
//! just rabbitmq-bench diag   # adds the half links, nothing written
//! ```
//!
//! Options: `rounds=N`, `messages=N` (per round), `systems=raw,link,...` (profiling one
//! system; nothing written). Diagnostics, nothing written: `publish_batch=N` (the raw
//! publishes started together, 64 by default; `publish_batch=1` awaits each publish's write
//! before the next), `ack_batch=N` (the raw consumer's deliveries per ack, 256 by default;
//! `ack_batch=1` acks each on its own).
//! Without a `rabbitmq-server` binary it prints a skip line and exits 0 (unless
//! `REQUIRE_RABBITMQ=1`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::Acker;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer,
    ExchangeKind, PublisherConfirm,
};
use ringbus::{Bus, Subscription};
use ringbus_rabbitmq::testing::RabbitServer;
use ringbus_rabbitmq::{Link, QueueOptions};
use serde_json::{json, Value};
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

/// The topic every round uses (each round under its own prefix: its own exchange and queue).
const TOPIC: &str = "bench";
/// The raw publisher starts this many publishes before awaiting any: lapin writes a publish
/// from its I/O thread, and the future of `basic_publish` resolves once it is written, so
/// publishes awaited one by one cost a write and a wake-up each.
const PUBLISH_BATCH: usize = 64;
/// The raw publisher's publishes sent and not yet confirmed, at most.
const CONFIRM_WINDOW: usize = 256;
/// The raw publisher awaits the confirms of this many publishes at a time, once the window
/// is full.
const CONFIRM_BATCH: usize = 64;
/// The raw consumer acknowledges at most this many deliveries with one `basic.ack`
/// (`multiple: true`); fewer when no other delivery is ready. As many as the link's settler
/// acknowledges together (`ringbus_link::import`'s batch).
const ACK_BATCH: usize = 256;
/// The goal: link/raw at least this, per payload (median of the per-round ratios).
const GOAL: f64 = 0.90;
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

// Header names of a message, as the link writes them (`ringbus_link::names`).
const HEADER_TOPIC: &str = "Ringbus-Topic";
const HEADER_ID: &str = "Ringbus-Id";
const HEADER_ORIGIN: &str = "Ringbus-Origin";

// ---------------------------------------------------------------------------------------------
// What every round shares
// ---------------------------------------------------------------------------------------------

/// What every round shares.
struct Ctx {
    url: String,
    /// For setting up and checking a round (never timed).
    admin: Connection,
    server_pid: Option<u32>,
    /// The link's defaults, which the raw client mirrors.
    queues: QueueOptions,
    /// Distinguishes the message ids of the raw client, as the link's process tag does.
    tag: String,
    next_prefix: AtomicU64,
    /// How the raw client batches.
    batches: Batches,
}

/// How the raw client batches its publishes and its acks: [`Batches::WIRED`] unless
/// diagnosing (a run with other batches is not published).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Batches {
    /// Publishes started together (`publish_batch=N`).
    publish: usize,
    /// Deliveries acknowledged with one ack, at most (`ack_batch=N`).
    ack: usize,
}

impl Batches {
    const WIRED: Self = Self {
        publish: PUBLISH_BATCH,
        ack: ACK_BATCH,
    };

    fn parse() -> Self {
        let args = links::Args::parse();
        let num = |key, default: usize| args.num(key, default as u64).max(1) as usize;
        Self {
            publish: num("publish_batch", PUBLISH_BATCH),
            ack: num("ack_batch", ACK_BATCH),
        }
    }
}

/// The names of one round's topology: the exchange is the prefix, the queue the one the
/// link's import reads (`<prefix>.<group>.<topic>`), the dead letters the link's.
struct Names {
    exchange: String,
    queue: String,
    dead_exchange: String,
    dead_queue: String,
}

impl Names {
    fn new(prefix: &str, queues: &QueueOptions) -> Self {
        Self {
            exchange: prefix.to_string(),
            queue: format!("{prefix}.{}.{TOPIC}", queues.group),
            dead_exchange: format!("{prefix}-dead"),
            dead_queue: format!("{prefix}-dead.{TOPIC}"),
        }
    }
}

async fn connect(url: &str) -> Result<Connection, String> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(connected) => connected.or_fail("raw connect"),
        Err(_) => Err(format!(
            "raw connect: no connection within {CONNECT_TIMEOUT:?}"
        )),
    }
}

async fn close(connection: &Connection) {
    let _ = connection.close(200, "round over".into()).await;
}

const DURABLE_QUEUE: QueueDeclareOptions = QueueDeclareOptions {
    passive: false,
    durable: true,
    exclusive: false,
    auto_delete: false,
    nowait: false,
};

/// Declares what the link declares (a durable topic exchange, a durable queue bound to it
/// under the topic), as a raw user would.
async fn declare(channel: &Channel, names: &Names) -> Result<(), String> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(
            names.exchange.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .or_fail("raw exchange.declare")?;
    channel
        .queue_declare(
            names.queue.as_str().into(),
            DURABLE_QUEUE,
            FieldTable::default(),
        )
        .await
        .or_fail("raw queue.declare")?;
    channel
        .queue_bind(
            names.queue.as_str().into(),
            names.exchange.as_str().into(),
            TOPIC.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .or_fail("raw queue.bind")
}

// ---------------------------------------------------------------------------------------------
// Receivers
// ---------------------------------------------------------------------------------------------

enum Receiver {
    Raw {
        connection: Connection,
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

/// Acknowledges every delivery up to `last` with one `basic.ack` (`multiple: true`).
async fn ack_up_to(last: &mut Option<Acker>, unacked: &mut usize) -> Result<(), String> {
    if let Some(acker) = last.take() {
        let sent = acker
            .ack(BasicAckOptions { multiple: true })
            .await
            .or_fail("raw basic.ack")?;
        if !sent {
            return Err("raw basic.ack: the channel was gone".into());
        }
        *unacked = 0;
    }
    Ok(())
}

/// The raw consumer's loop: counts each delivery, then acknowledges what it counted with one
/// ack every `ack_batch` deliveries and whenever none is ready. Returns once the last message
/// was counted and acknowledged.
async fn raw_receive(
    mut consumer: Consumer,
    tally: Tally,
    ack_batch: usize,
    side: Side,
) -> Result<Instant, String> {
    let (mut last, mut unacked) = (None, 0);
    loop {
        let next = match consumer.next().now_or_never() {
            Some(next) => next,
            None => {
                ack_up_to(&mut last, &mut unacked).await?;
                consumer.next().await
            }
        };
        let Some(delivery) = next else {
            return Err("the raw consumer ended".into());
        };
        let delivery = delivery.or_fail("raw consume")?;
        let has_id = delivery
            .properties
            .headers()
            .as_ref()
            .is_some_and(|h| h.inner().contains_key(HEADER_ID));
        let done = tally.record(if has_id {
            side.received_len(&delivery.data)
        } else {
            usize::MAX
        });
        last = Some(delivery.acker);
        unacked += 1;
        if unacked >= ack_batch || done {
            ack_up_to(&mut last, &mut unacked).await?;
        }
        if done {
            return Ok(Instant::now());
        }
    }
}

async fn receiver(ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Receiver, String> {
    match side {
        Side::Raw | Side::RawJson => {
            let names = Names::new(prefix, &ctx.queues);
            let connection = connect(&ctx.url).await?;
            let channel = connection.create_channel().await.or_fail("raw channel")?;
            declare(&channel, &names).await?;
            let prefetch = u16::try_from(ctx.queues.max_in_flight).unwrap_or(u16::MAX);
            channel
                .basic_qos(prefetch, BasicQosOptions::default())
                .await
                .or_fail("raw basic.qos")?;
            let consumer = channel
                .basic_consume(
                    names.queue.as_str().into(),
                    format!("{}-raw", ctx.tag).into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .or_fail("raw basic.consume")?;
            // The raw receiver gets the JSON body as bytes (two quotes longer), or decodes it.
            let tally = Tally::new(cell.messages, side.expected_len(cell.size));
            let task = tokio::spawn(raw_receive(consumer, tally.clone(), ctx.batches.ack, side));
            Ok(Receiver::Raw {
                connection,
                task,
                tally,
            })
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
            Receiver::Raw { task, tally, .. } => links::raw_received(task, tally, || None).await,
            Receiver::Link { link, tally, .. } => {
                let lost = || {
                    let s = link.stats();
                    (s.bad_input > 0
                        || s.import_errors > 0
                        || s.dead_lettered > 0
                        || s.nacked > 0
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
            Receiver::Raw {
                connection, tally, ..
            } => {
                close(&connection).await;
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
                    || s.acked != cell.messages
                    || s.bad_input != 0
                    || s.nacked != 0
                    || s.dead_lettered != 0
                    || s.duplicates != 0
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
            Receiver::Raw {
                connection, task, ..
            } => {
                task.abort();
                let _ = tokio::time::timeout(links::ABANDON_WITHIN, close(&connection)).await;
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
    Raw {
        connection: Box<Connection>,
        channel: Channel,
        /// `raw-json`: it encodes each message.
        typed: bool,
    },
    Link {
        link: Link,
        bus: Bus,
    },
}

async fn sender(ctx: &Ctx, side: Side, prefix: &str) -> Result<Sender, String> {
    match side {
        Side::Raw | Side::RawJson => {
            let connection = connect(&ctx.url).await?;
            let channel = connection.create_channel().await.or_fail("raw channel")?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .or_fail("raw confirm.select")?;
            Ok(Sender::Raw {
                connection: Box::new(connection),
                channel,
                typed: side.typed(),
            })
        }
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

/// The properties the link sends a message with (id `id`), as a raw client user would write
/// them: persistent, the message id, and the link's three headers.
fn raw_properties(id: &str, origin: &str) -> BasicProperties {
    let text = |v: &str| AMQPValue::LongString(v.into());
    let mut headers = FieldTable::default();
    headers.insert(HEADER_TOPIC.into(), text(TOPIC));
    headers.insert(HEADER_ID.into(), text(id));
    headers.insert(HEADER_ORIGIN.into(), text(origin));
    BasicProperties::default()
        .with_message_id(ShortString::from(id))
        .with_delivery_mode(2)
        .with_headers(headers)
}

/// Waits for one publish's confirm; only an ack counts.
async fn confirmed(confirm: PublisherConfirm) -> Result<(), String> {
    match confirm.await.or_fail("raw confirm")? {
        Confirmation::Ack(_) => Ok(()),
        other => Err(format!("raw publish not confirmed: {other:?}")),
    }
}

impl Sender {
    fn start(&self, ctx: &Ctx, side: Side, cell: Cell, prefix: &str) -> Result<Publishing, String> {
        let text = payload_text(cell.size);
        let n = cell.messages;
        let task = match self {
            Sender::Raw { channel, typed, .. } => {
                let body = serde_json::to_vec(&text).or_fail("encode")?;
                let typed = *typed;
                let exchange = ShortString::from(prefix);
                let origin = format!("{}-0", ctx.tag);
                let tag = ctx.tag.clone();
                let channel = channel.clone();
                let batch = ctx.batches.publish;
                tokio::spawn(async move {
                    // Up to CONFIRM_WINDOW publishes awaiting their confirm; when there is no
                    // room for the next batch, the oldest CONFIRM_BATCH are awaited together.
                    let mut window = VecDeque::with_capacity(CONFIRM_WINDOW);
                    let mut i = 0;
                    while i < n {
                        let end = (i + batch as u64).min(n);
                        while !window.is_empty()
                            && window.len() + (end - i) as usize > CONFIRM_WINDOW
                        {
                            let oldest = CONFIRM_BATCH.min(window.len());
                            for confirm in window.drain(..oldest) {
                                confirmed(confirm).await?;
                            }
                        }
                        // Every publish of the batch is started (and queued for the I/O
                        // thread) before any is awaited.
                        let ids: Vec<String> = (i..end).map(|i| links::raw_id(&tag, i)).collect();
                        // `raw-json`: each message encoded, as the link does; `raw` allocates
                        // nothing here (an empty `Vec`) and sends the one body.
                        let encoded: Vec<Vec<u8>> = match typed {
                            true => ids.iter().map(|_| links::encode_payload(&text)).collect(),
                            false => Vec::new(),
                        };
                        let written: Vec<_> = ids
                            .iter()
                            .enumerate()
                            .map(|(k, id)| {
                                channel.basic_publish(
                                    exchange.clone(),
                                    TOPIC.into(),
                                    BasicPublishOptions::default(),
                                    encoded.get(k).map_or(body.as_slice(), Vec::as_slice),
                                    raw_properties(id, &origin),
                                )
                            })
                            .collect::<FuturesOrdered<_>>()
                            .collect()
                            .await;
                        for confirm in written {
                            window.push_back(confirm.or_fail("raw basic.publish")?);
                        }
                        i = end;
                    }
                    for confirm in window {
                        confirmed(confirm).await?;
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

    /// When every publish was done and confirmed; `since` if already.
    async fn wait(&self, task: Publishing, cell: Cell, since: Instant) -> Result<Instant, String> {
        let published = links::published(task).await?;
        match self {
            Sender::Raw { .. } => Ok(published.map_or(since, |t| t.max(since))),
            Sender::Link { link, .. } => {
                poll_until(since, "the export was not confirmed", || {
                    link.stats().exported >= cell.messages
                })
                .await
            }
        }
    }

    async fn finish(self, cell: Cell) -> Result<(), String> {
        match self {
            Sender::Raw { connection, .. } => {
                close(&connection).await;
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
        match self {
            Sender::Raw { connection, .. } => {
                let _ = tokio::time::timeout(links::ABANDON_WITHIN, close(&connection)).await;
            }
            Sender::Link { link, bus } => {
                links::abandon_link(link.close(links::ABANDON_WITHIN), bus).await;
            }
        }
    }
}

impl Ctx {
    /// Once both sides closed (a closed channel's unacknowledged messages are back in the
    /// queue): the queue holds nothing and has no consumer.
    async fn verify_queue(&self, names: &Names) -> Result<(), String> {
        let channel = self.admin.create_channel().await.or_fail("admin channel")?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let queue = channel
            .queue_declare(names.queue.as_str().into(), passive, FieldTable::default())
            .await
            .or_fail("queue.declare (passive)")?;
        if queue.message_count() != 0 || queue.consumer_count() != 0 {
            return Err(format!(
                "the queue holds {} messages unacknowledged, with {} consumers",
                queue.message_count(),
                queue.consumer_count()
            ));
        }
        let _ = channel.close(200, "checked".into()).await;
        Ok(())
    }

    /// Deletes the round's queues and exchanges (those of the link too), ignoring what is not
    /// there.
    async fn delete(&self, names: &Names) {
        let Ok(channel) = self.admin.create_channel().await else {
            return;
        };
        for queue in [&names.queue, &names.dead_queue] {
            let _ = channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for exchange in [&names.exchange, &names.dead_exchange] {
            let _ = channel
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
        let _ = channel.close(200, "deleted".into()).await;
    }
}

impl LinkBench for Ctx {
    type Cell = Cell;

    async fn round(&self, system: System, cell: Cell) -> Result<Sample, String> {
        let prefix = format!("qb{}", self.next_prefix.fetch_add(1, Ordering::Relaxed));
        let names = Names::new(&prefix, &self.queues);
        let result = measure(self, system, cell, &prefix, &names).await;
        self.delete(&names).await;
        result
    }
}

async fn measure(
    ctx: &Ctx,
    system: System,
    cell: Cell,
    prefix: &str,
    names: &Names,
) -> Result<Sample, String> {
    let sample = links::measure(
        receiver(ctx, system.recv, cell, prefix),
        sender(ctx, system.send, prefix),
        cell,
        ctx.server_pid,
        |tx| tx.start(ctx, system.send, cell, prefix),
    )
    .await?;
    ctx.verify_queue(names).await?;
    Ok(sample)
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// The Erlang VM of the server whose start script is `script` (the script runs it as its
/// child): the process whose CPU time is the server's. The script itself if none is found.
fn vm_pid(script: u32) -> u32 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return script;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let stat = common::read(&format!("/proc/{pid}/stat"));
            // `pid (comm) state ppid ...`: the comm may hold spaces.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            head.ends_with("(beam.smp") && ppid == Some(script)
        })
        .unwrap_or(script)
}

/// The rabbitmq-server's version, from the directory the Debian package installs it in
/// (`/usr/lib/rabbitmq/lib/rabbitmq_server-<version>/sbin/rabbitmq-server`).
fn server_version() -> String {
    let bin = std::env::var("RABBITMQ_SERVER_BIN")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/usr/lib/rabbitmq/bin/rabbitmq-server".to_string());
    std::fs::canonicalize(bin)
        .ok()
        .and_then(|p| {
            p.components().find_map(|c| {
                c.as_os_str()
                    .to_str()?
                    .strip_prefix("rabbitmq_server-")
                    .map(str::to_string)
            })
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// What the figures were measured on, with the server's and Erlang's versions.
fn machine() -> Value {
    let mut machine = common::machine(&[
        "lapin",
        "ringbus",
        "ringbus-rabbitmq",
        "serde_json",
        "tokio",
    ]);
    machine["rabbitmq_server"] = json!(server_version());
    machine["erlang"] = json!(
        command("dpkg-query", &["-W", "-f", "${Version}", "erlang-base"])
            .unwrap_or_else(|| "unknown".to_string())
    );
    machine
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    // `exit` skips destructors: the server is dropped (stopped) before it.
    let code = bench();
    if code != 0 {
        std::process::exit(code);
    }
}

/// The whole run; its exit code.
fn bench() -> i32 {
    let (o, batches) = (Options::parse(), Batches::parse());
    let Some(server) = RabbitServer::start() else {
        println!(
            "rabbitmq bench SKIPPED: no rabbitmq-server binary (set RABBITMQ_SERVER_BIN or \
             install it)"
        );
        return 0;
    };
    let systems = links::systems(o.diag, o.systems.as_deref());
    let run = Run::on_runtime(run(&o, batches, &server, &systems));
    let table = links::table(&run.results, &links::names(&systems), "rabbitmq-server");
    let (met, mut lines) = links::ratio_goal(&run.results, "raw", |(median, ..)| median >= GOAL);
    let (same_work, same_lines) =
        links::ratio_goal(&run.results, "raw-json", |(median, ..)| median >= GOAL);
    lines.push_str(&same_lines);
    println!("\n{table}\nGoal (link/raw ≥ {GOAL}):\n{lines}");
    let partial = o.partial() || batches != Batches::WIRED;
    if let Err(code) = run.summary(o.rounds, partial, "rabbitmq.md") {
        return code;
    }
    let queues = QueueOptions::default();
    let mut run_json = run.json("just rabbitmq-bench", o.rounds);
    run_json["runtime"] = json!("tokio multi-thread, 2 workers; publisher and receiver in this process on two AMQP connections (each with lapin's I/O thread); one rabbitmq-server (Erlang VM) process");
    run_json["settings"] = json!({
        "topology": "a durable topic exchange, a durable classic queue bound to it under the topic; persistent messages (delivery mode 2)",
        "raw_publish_batch": PUBLISH_BATCH,
        "raw_confirm_window": CONFIRM_WINDOW,
        "raw_confirm_batch": CONFIRM_BATCH,
        "raw_ack_batch": ACK_BATCH,
        "raw_publishes": "raw_publish_batch publishes started before any is awaited (lapin's I/O thread writes them together); at most raw_confirm_window unconfirmed, their confirms awaited raw_confirm_batch at a time",
        "raw_acks": "one basic.ack (multiple) every raw_ack_batch deliveries and whenever no delivery is ready, after counting them",
        "link_exports": "what is queued for the export published on a confirm channel in parts of at most publish_window (256), every publish of a part started before any is awaited, then its confirms awaited together before the next part (the link's batch export handler)",
        "link_acks": "the link's settler hands the handled messages due (up to 256) to the engine's Inbound::ack together, which sends one basic.ack (multiple) per run of one consumer's deliveries",
        "prefetch": queues.max_in_flight,
        "bus_capacity": 1024,
    });
    let rabbitmq = json!({
        "about": "ringbus-rabbitmq beside the raw lapin client: messages per second end to end \
                  (first publish to last message received and acknowledged, every publish \
                  confirmed), median, min and max of the interleaved rounds (rounds in run \
                  order); ratio_to_raw = system / raw per round. Written by \
                  benches/rabbitmq.rs (`just rabbitmq-bench`); see rabbitmq.md.",
        "machine": machine(),
        "run": run_json,
        "figures": links::figures_json(&run.results),
        "goals": {
            "durable": {
                "goal": "the link moves at least 90% of the messages per second of the raw lapin client",
                "criterion": "per payload: the median of the per-round ratios link/raw is at least 0.90",
                "met": met,
                "met_against_raw_json": same_work,
                "raw_json": "the same work: the raw client encoding and decoding each message with serde_json, as the link's Json codec does (system raw-json)",
            },
        },
    });
    i32::from(!links::publish("rabbitmq", rabbitmq, &table))
}

async fn run(
    o: &Options,
    batches: Batches,
    server: &RabbitServer,
    systems: &[System],
) -> Vec<CellResult<Cell>> {
    let url = server.url();
    let admin = connect(&url).await.expect("connect to the rabbitmq-server");
    let ctx = Ctx {
        url,
        admin,
        server_pid: server.pid().map(vm_pid),
        queues: QueueOptions::default(),
        tag: format!("{:016x}", (u64::from(std::process::id()) << 32) | 0xbe4c),
        next_prefix: AtomicU64::new(1),
        batches,
    };
    let cells = one_mode::cells("durable", o.messages);
    let results = links::run_cells(&ctx, &cells, systems, o.rounds, o.quick).await;
    close(&ctx.admin).await;
    results
}
