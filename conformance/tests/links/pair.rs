//! Two buses linked by one transport, and what the cases need to know of each.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringbus::{Bus, SubscribeOptions};
// `eventually` polls a condition until it holds, failing the test after `WAIT` (20 s).
pub(crate) use ringbus_link::testing::{eventually, WAIT};
use ringbus_nats::testing::{MemoryNats, NatsServer};
use ringbus_rabbitmq::testing::RabbitServer;
use ringbus_redis::testing::{RedisServer, ServerOptions as RedisOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub(crate) const TOPIC: &str = "items";
/// The deliveries after which both at-least-once engines dead-letter (in this suite).
pub(crate) const MAX_DELIVER: u32 = 3;
/// How long after a nack both engines deliver again, and the retry backoff (in this suite).
pub(crate) const NACK_DELAY: Duration = Duration::from_millis(200);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    pub(crate) n: u64,
    pub(crate) data: Vec<u8>,
}

/// The message type of every case: the `Envelope` every engine shares.
pub(crate) type Msg = ringbus_nats::Envelope<Item>;

pub(crate) fn item(n: u64) -> Msg {
    Msg::new(Item { n, data: vec![] })
}

/// What a subscriber saw: id, headers and body of each message, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) id: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Item,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    InProcess,
    /// NATS core through `MemoryNats`.
    Memory,
    Core,
    JetStream,
    Redis,
    RabbitMq,
}

/// Every transport, those that need no server first.
pub(crate) const ALL: [Kind; 6] = [
    Kind::InProcess,
    Kind::Memory,
    Kind::Core,
    Kind::JetStream,
    Kind::Redis,
    Kind::RabbitMq,
];

impl Kind {
    /// Delivers at least once: acks after the handlers, redelivery, dead letters, no loss
    /// across a server restart.
    pub(crate) fn at_least_once(self) -> bool {
        matches!(self, Kind::JetStream | Kind::Redis | Kind::RabbitMq)
    }

    /// Goes through a link (anything but the in-process bus).
    pub(crate) fn linked(self) -> bool {
        self != Kind::InProcess
    }

    /// Imports a topic pattern (Redis has no pattern import: see its crate).
    pub(crate) fn imports_patterns(self) -> bool {
        self != Kind::Redis
    }
}

/// The server `kind` needs (none for the in-process bus), the publisher's bus and the
/// subscriber's (the same bus in process); `None` to skip (the server's binary is missing and
/// not required).
async fn start(kind: Kind) -> Option<(Option<Server>, Bus, Bus)> {
    let server = match kind {
        Kind::InProcess => None,
        Kind::Memory => Some(Server::Memory(
            MemoryNats::start().expect("a loopback port"),
        )),
        Kind::Core | Kind::JetStream => Some(Server::Nats(NatsServer::start()?)),
        // An fsynced append-only file: a kill loses nothing Redis answered (the restart
        // case), as JetStream's file store does.
        Kind::Redis => Some(Server::Redis(RedisServer::start_with(
            RedisOptions::new().persistent(true),
        )?)),
        Kind::RabbitMq => Some(Server::Rabbit(
            tokio::task::spawn_blocking(RabbitServer::start)
                .await
                .unwrap()?,
        )),
    };
    let publisher = Bus::new();
    let subscriber = if kind.linked() {
        Bus::new()
    } else {
        publisher.clone()
    };
    Some((server, publisher, subscriber))
}

/// A handler's verdict on a message (and its attempt number): `true` handles it, `false`
/// fails this delivery.
pub(crate) type Verdict = Arc<dyn Fn(&Msg, u32) -> bool + Send + Sync>;

pub(crate) enum Server {
    Memory(MemoryNats),
    Nats(NatsServer),
    Redis(RedisServer),
    Rabbit(RabbitServer),
}

/// A link of either engine.
pub(crate) enum AnyLink {
    Nats(ringbus_nats::Link),
    Redis(ringbus_redis::Link),
    /// With its server's URL, to read the dead letters back.
    Rabbit(ringbus_rabbitmq::Link, String),
}

/// The counters the cases read, in one shape for both engines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) exported: u64,
    pub(crate) export_errors: u64,
    pub(crate) imported: u64,
    pub(crate) acked: u64,
    pub(crate) nacked: u64,
    pub(crate) dead_lettered: u64,
    /// Copies of one message id dropped: by the server (JetStream, on the exporting side) or
    /// by the import (Redis).
    pub(crate) duplicates: u64,
    pub(crate) connects: u64,
    pub(crate) disconnects: u64,
    pub(crate) connected: bool,
}

/// A dead letter, read back from its engine: the body, the message id and the reason.
#[derive(Debug)]
pub(crate) struct DeadLetter {
    pub(crate) body: Item,
    pub(crate) id: String,
    pub(crate) reason: String,
}

impl AnyLink {
    pub(crate) fn stats(&self) -> Stats {
        match self {
            AnyLink::Nats(link) => {
                let s = link.stats();
                Stats {
                    exported: s.exported,
                    export_errors: s.export_errors,
                    imported: s.imported,
                    acked: s.acked,
                    nacked: s.nacked,
                    dead_lettered: s.dead_lettered,
                    duplicates: s.export_duplicates,
                    connects: s.connects,
                    disconnects: s.disconnects,
                    connected: s.state == ringbus_nats::ConnectionState::Connected,
                }
            }
            AnyLink::Redis(link) => {
                let s = link.stats();
                Stats {
                    exported: s.exported,
                    export_errors: s.export_errors,
                    imported: s.imported,
                    acked: s.acked,
                    nacked: s.nacked,
                    dead_lettered: s.dead_lettered,
                    duplicates: s.duplicates,
                    connects: s.connects,
                    disconnects: s.disconnects,
                    connected: s.state == ringbus_redis::ConnectionState::Connected,
                }
            }
            AnyLink::Rabbit(link, _) => {
                let s = link.stats();
                Stats {
                    exported: s.exported,
                    export_errors: s.export_errors,
                    imported: s.imported,
                    acked: s.acked,
                    nacked: s.nacked,
                    dead_lettered: s.dead_lettered,
                    duplicates: s.duplicates,
                    connects: s.connects,
                    disconnects: s.disconnects,
                    connected: s.state == ringbus_rabbitmq::ConnectionState::Connected,
                }
            }
        }
    }

    /// Closes the link within `WAIT`; its report must be complete.
    pub(crate) async fn close(&self, kind: Kind) {
        self.close_with_deadline(kind, WAIT).await;
    }

    /// Closes the link giving it `timeout`, and asserts the report says it finished.
    pub(crate) async fn close_with_deadline(&self, kind: Kind, timeout: Duration) {
        let (complete, report) = self.close_report(timeout).await;
        assert!(complete, "{kind:?}: {report}");
    }

    /// Closes the link giving it `timeout`: whether its report says it finished, and the
    /// report.
    pub(crate) async fn close_report(&self, timeout: Duration) -> (bool, String) {
        match self {
            AnyLink::Nats(link) => {
                let r = link.close(timeout).await;
                (r.complete, format!("{r:?}"))
            }
            AnyLink::Redis(link) => {
                let r = link.close(timeout).await;
                (r.complete, format!("{r:?}"))
            }
            AnyLink::Rabbit(link, _) => {
                let r = link.close(timeout).await;
                (r.complete, format!("{r:?}"))
            }
        }
    }

    /// The last dead letter of `TOPIC`, read from the engine.
    pub(crate) async fn last_dead_letter(&self) -> DeadLetter {
        match self {
            AnyLink::Nats(link) => {
                let js = async_nats::jetstream::new(link.client().clone());
                let stream = js.get_stream(link.stream_name()).await.unwrap();
                let dead = stream
                    .get_last_raw_message_by_subject(&link.dead_letter_subject(TOPIC).unwrap())
                    .await
                    .unwrap();
                let header = |name: &str| dead.headers.get(name).unwrap().as_str().to_string();
                DeadLetter {
                    body: serde_json::from_slice(&dead.payload).unwrap(),
                    id: header("Ringbus-Id"),
                    reason: header("Ringbus-Dead-Reason"),
                }
            }
            AnyLink::Redis(link) => {
                let mut conn = link
                    .client()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let dead: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
                    .arg(link.dead_letter_key(TOPIC).unwrap())
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let entry = &dead.ids[0];
                let field = |name: &str| match entry.map.get(name) {
                    Some(redis::Value::BulkString(b)) => b.clone(),
                    other => panic!("dead letter field {name}: {other:?}"),
                };
                let text = |name: &str| String::from_utf8(field(name)).unwrap();
                DeadLetter {
                    body: serde_json::from_slice(&field("Ringbus-Body")).unwrap(),
                    id: text("Ringbus-Id"),
                    reason: text("Ringbus-Dead-Reason"),
                }
            }
            AnyLink::Rabbit(link, url) => {
                use lapin::options::BasicGetOptions;
                let connection =
                    lapin::Connection::connect(url, lapin::ConnectionProperties::default())
                        .await
                        .unwrap();
                let channel = connection.create_channel().await.unwrap();
                let queue = link.dead_letter_queue(TOPIC).unwrap();
                let mut last = None;
                while let Some(got) = channel
                    .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
                    .await
                    .unwrap()
                {
                    last = Some(got.delivery);
                }
                let dead = last.expect("a dead letter");
                let headers = dead.properties.headers().clone().unwrap();
                let text = |name: &str| match headers.inner().get(name) {
                    Some(lapin::types::AMQPValue::LongString(s)) => {
                        String::from_utf8(s.as_bytes().to_vec()).unwrap()
                    }
                    other => panic!("dead letter header {name}: {other:?}"),
                };
                let _ = connection.close(200, "read".into()).await;
                DeadLetter {
                    body: serde_json::from_slice(&dead.data).unwrap(),
                    id: text("Ringbus-Id"),
                    reason: text("Ringbus-Dead-Reason"),
                }
            }
        }
    }
}

/// One publisher side and one subscriber side, linked as `kind` says.
pub(crate) struct Pair {
    pub(crate) kind: Kind,
    pub(crate) server: Option<Server>,
    pub(crate) publisher: Bus,
    pub(crate) subscriber: Bus,
    pub(crate) pub_link: Option<AnyLink>,
    pub(crate) sub_link: Option<AnyLink>,
    pub(crate) seen: mpsc::UnboundedReceiver<Seen>,
    /// Deliveries per message number (attempts, with failures).
    attempts: Arc<Mutex<BTreeMap<u64, u32>>>,
}

async fn nats_link(url: String, bus: &Bus) -> ringbus_nats::Link {
    ringbus_nats::Link::builder(url)
        .prefix("conf")
        .jetstream(ringbus_nats::JetStreamOptions {
            max_deliver: MAX_DELIVER,
            nack_delay: NACK_DELAY,
            ack_wait: Duration::from_secs(5),
            ..ringbus_nats::JetStreamOptions::default()
        })
        .connect(bus)
        .await
        .unwrap()
}

async fn rabbit_link(url: String, bus: &Bus) -> ringbus_rabbitmq::Link {
    let mut queues = ringbus_rabbitmq::QueueOptions::default();
    queues.max_deliver = MAX_DELIVER;
    queues.nack_delay = NACK_DELAY;
    ringbus_rabbitmq::Link::builder(url)
        .prefix("conf")
        .queues(queues)
        .connect(bus)
        .await
        .unwrap()
}

async fn redis_link(url: String, bus: &Bus) -> ringbus_redis::Link {
    ringbus_redis::Link::builder(url)
        .prefix("conf")
        .streams(ringbus_redis::StreamOptions {
            max_deliver: MAX_DELIVER,
            nack_delay: NACK_DELAY,
            claim_idle: Duration::from_secs(2),
            ..ringbus_redis::StreamOptions::default()
        })
        .connect(bus)
        .await
        .unwrap()
}

impl Pair {
    /// `None` when the transport must skip (no server binary, and not required).
    pub(crate) async fn new(kind: Kind) -> Option<Pair> {
        Self::with(kind, Arc::new(|_, _| true)).await
    }

    /// As [`new`](Self::new), with a verdict on each delivery.
    pub(crate) async fn with(kind: Kind, verdict: Verdict) -> Option<Pair> {
        Self::with_options(kind, verdict, SubscribeOptions::new()).await
    }

    /// As [`with`](Self::with), the subscriber subscribed with `options` (a retry policy).
    pub(crate) async fn with_options(
        kind: Kind,
        verdict: Verdict,
        options: SubscribeOptions,
    ) -> Option<Pair> {
        let (server, publisher, subscriber) = start(kind).await?;
        let (tx, seen) = mpsc::unbounded_channel();
        let attempts = Arc::new(Mutex::new(BTreeMap::new()));
        let counts = attempts.clone();
        subscriber
            .subscribe_with(TOPIC, options, move |m: &Msg| {
                let attempt = {
                    let mut counts = counts.lock().unwrap();
                    let a = counts.entry(m.body().n).or_insert(0);
                    *a += 1;
                    *a
                };
                let ok = verdict(m, attempt);
                if ok {
                    let _ = tx.send(Seen {
                        id: m.id().to_string(),
                        headers: m
                            .headers()
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        body: m.body().clone(),
                    });
                }
                async move {
                    if ok {
                        Ok(())
                    } else {
                        Err("refused by the test")
                    }
                }
            })
            .unwrap();
        let (pub_link, sub_link) = match (&server, kind) {
            (None, _) => (None, None),
            (Some(Server::Redis(server)), _) => {
                let p = redis_link(server.url(), &publisher).await;
                let s = redis_link(server.url(), &subscriber).await;
                s.import::<Msg>(TOPIC).await.unwrap();
                p.export::<Msg>(TOPIC).await.unwrap();
                (Some(AnyLink::Redis(p)), Some(AnyLink::Redis(s)))
            }
            (Some(Server::Rabbit(server)), _) => {
                let url = server.url();
                let p = rabbit_link(url.clone(), &publisher).await;
                let s = rabbit_link(url.clone(), &subscriber).await;
                s.import::<Msg>(TOPIC).await.unwrap();
                p.export::<Msg>(TOPIC).await.unwrap();
                (
                    Some(AnyLink::Rabbit(p, url.clone())),
                    Some(AnyLink::Rabbit(s, url)),
                )
            }
            (Some(nats), kind) => {
                let url = match nats {
                    Server::Memory(m) => m.url(),
                    Server::Nats(n) => n.url(),
                    Server::Redis(_) | Server::Rabbit(_) => unreachable!("matched above"),
                };
                let mode = if kind == Kind::JetStream {
                    ringbus_nats::Mode::JetStream
                } else {
                    ringbus_nats::Mode::Core
                };
                let p = nats_link(url.clone(), &publisher).await;
                let s = nats_link(url, &subscriber).await;
                s.import::<Msg>(TOPIC, mode).await.unwrap();
                p.export::<Msg>(TOPIC, mode).await.unwrap();
                (Some(AnyLink::Nats(p)), Some(AnyLink::Nats(s)))
            }
        };
        Some(Pair {
            kind,
            server,
            publisher,
            subscriber,
            pub_link,
            sub_link,
            seen,
            attempts,
        })
    }

    pub(crate) async fn publish(&self, msg: Msg) {
        self.publisher.publish(TOPIC, msg).await.unwrap();
    }

    pub(crate) async fn next(&mut self) -> Seen {
        match tokio::time::timeout(WAIT, self.seen.recv()).await {
            Ok(Some(seen)) => seen,
            other => panic!("{:?}: no message within {WAIT:?} ({other:?})", self.kind),
        }
    }

    /// Receives until message `n` arrives; returns everything received on the way.
    pub(crate) async fn until(&mut self, n: u64) -> Vec<Seen> {
        let mut got = Vec::new();
        loop {
            let seen = self.next().await;
            let done = seen.body.n == n;
            got.push(seen);
            if done {
                return got;
            }
        }
    }

    pub(crate) fn attempts(&self, n: u64) -> u32 {
        self.attempts.lock().unwrap().get(&n).copied().unwrap_or(0)
    }

    pub(crate) fn pub_link(&self) -> &AnyLink {
        self.pub_link.as_ref().expect("a linked transport")
    }

    pub(crate) fn sub_link(&self) -> &AnyLink {
        self.sub_link.as_ref().expect("a linked transport")
    }

    /// Kills the server and brings it back on the same port with the same store (the
    /// stand-in: drops every connection).
    pub(crate) async fn restart_server(&mut self) {
        match self.server.take() {
            Some(Server::Memory(memory)) => {
                memory.drop_connections();
                self.server = Some(Server::Memory(memory));
            }
            Some(Server::Nats(mut server)) => {
                let server = tokio::task::spawn_blocking(move || {
                    server.restart();
                    server
                })
                .await
                .unwrap();
                self.server = Some(Server::Nats(server));
            }
            Some(Server::Redis(mut server)) => {
                let server = tokio::task::spawn_blocking(move || {
                    server.restart();
                    server
                })
                .await
                .unwrap();
                self.server = Some(Server::Redis(server));
            }
            Some(Server::Rabbit(mut server)) => {
                let server = tokio::task::spawn_blocking(move || {
                    server.restart();
                    server
                })
                .await
                .unwrap();
                self.server = Some(Server::Rabbit(server));
            }
            None => panic!("{:?} has no server", self.kind),
        }
    }

    /// A second subscriber side on the same server, importing `TOPIC` as the first did (the
    /// same durable consumer, group or queue): the numbers of the messages its handler sees.
    pub(crate) async fn subscriber_again(&self) -> (Bus, AnyLink, mpsc::UnboundedReceiver<u64>) {
        let bus = Bus::new();
        let (tx, seen) = mpsc::unbounded_channel();
        bus.subscribe(TOPIC, move |m: &Msg| {
            let _ = tx.send(m.body().n);
            async {}
        })
        .unwrap();
        let link = match &self.server {
            Some(Server::Redis(server)) => {
                let link = redis_link(server.url(), &bus).await;
                link.import::<Msg>(TOPIC).await.unwrap();
                AnyLink::Redis(link)
            }
            Some(Server::Rabbit(server)) => {
                let link = rabbit_link(server.url(), &bus).await;
                link.import::<Msg>(TOPIC).await.unwrap();
                AnyLink::Rabbit(link, server.url())
            }
            Some(Server::Nats(server)) if self.kind == Kind::JetStream => {
                let link = nats_link(server.url(), &bus).await;
                link.import::<Msg>(TOPIC, ringbus_nats::Mode::JetStream)
                    .await
                    .unwrap();
                AnyLink::Nats(link)
            }
            _ => panic!("{:?}: an at-least-once transport only", self.kind),
        };
        (bus, link, seen)
    }

    /// Closes the publisher's link (flushing exports), then its bus.
    pub(crate) async fn close(self) -> Self {
        if let Some(link) = &self.pub_link {
            link.close(self.kind).await;
        }
        self.publisher.close().await;
        self
    }

    /// Closes the subscriber's link (settling what it holds), then its bus.
    pub(crate) async fn close_subscriber(&mut self) {
        if let Some(link) = &self.sub_link {
            link.close(self.kind).await;
        }
        self.subscriber.close().await;
    }
}

/// A publisher side exporting every topic (the pattern `>`, topics made later included) and a
/// subscriber side importing a topic pattern: the subscriber bus's pattern subscriber sees
/// `(topic, n)` of each message.
pub(crate) struct PatternPair {
    pub(crate) kind: Kind,
    _server: Option<Server>,
    pub(crate) publisher: Bus,
    pub(crate) subscriber: Bus,
    links: Vec<AnyLink>,
    pub(crate) seen: mpsc::UnboundedReceiver<(String, u64)>,
}

impl PatternPair {
    /// `pattern` imported and subscribed to; `None` when the transport must skip, or has no
    /// pattern import.
    pub(crate) async fn new(kind: Kind, pattern: &str) -> Option<PatternPair> {
        if !kind.imports_patterns() {
            return None;
        }
        let (server, publisher, subscriber) = start(kind).await?;
        let (tx, seen) = mpsc::unbounded_channel();
        subscriber
            .subscribe_pattern(pattern, move |topic: &str, m: &Msg| {
                let _ = tx.send((topic.to_string(), m.body().n));
                async {}
            })
            .unwrap();
        let links = match &server {
            None => Vec::new(),
            Some(Server::Rabbit(server)) => {
                let url = server.url();
                let (p, s) = (
                    rabbit_link(url.clone(), &publisher).await,
                    rabbit_link(url.clone(), &subscriber).await,
                );
                s.import_pattern::<Msg>(pattern).await.unwrap();
                p.export_pattern::<Msg>(">").await.unwrap();
                vec![AnyLink::Rabbit(p, url.clone()), AnyLink::Rabbit(s, url)]
            }
            Some(Server::Memory(_) | Server::Nats(_)) => {
                let url = match &server {
                    Some(Server::Memory(m)) => m.url(),
                    Some(Server::Nats(n)) => n.url(),
                    _ => unreachable!("matched above"),
                };
                let (p, s) = (
                    nats_link(url.clone(), &publisher).await,
                    nats_link(url, &subscriber).await,
                );
                let mode = if kind == Kind::JetStream {
                    ringbus_nats::Mode::JetStream
                } else {
                    ringbus_nats::Mode::Core
                };
                let (fan_out, json) = (ringbus_nats::Sharing::FanOut, ringbus_nats::Json);
                s.import_pattern_as::<Msg, _>(pattern, mode, fan_out, json)
                    .await
                    .unwrap();
                p.export_pattern_with::<Msg, _>(">", mode, json)
                    .await
                    .unwrap();
                vec![AnyLink::Nats(p), AnyLink::Nats(s)]
            }
            Some(Server::Redis(_)) => unreachable!("Redis imports no pattern"),
        };
        Some(PatternPair {
            kind,
            _server: server,
            publisher,
            subscriber,
            links,
            seen,
        })
    }

    /// Receives `n` messages.
    pub(crate) async fn take(&mut self, n: usize) -> Vec<(String, u64)> {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match tokio::time::timeout(WAIT, self.seen.recv()).await {
                Ok(Some(seen)) => got.push(seen),
                other => panic!(
                    "{:?}: {} of {n} within {WAIT:?} ({other:?})",
                    self.kind,
                    got.len()
                ),
            }
        }
        got
    }

    /// Closes the links (the publisher's first), then both buses.
    pub(crate) async fn close(self) {
        for link in &self.links {
            link.close(self.kind).await;
        }
        self.publisher.close().await;
        self.subscriber.close().await;
    }
}
