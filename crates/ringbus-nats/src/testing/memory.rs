//! [`MemoryNats`]: a NATS core server inside the test process, for tests that need no
//! `nats-server`.
//!
//! # How it works
//!
//! It speaks the NATS client protocol (the text protocol every client uses: `INFO`,
//! `CONNECT`, `PUB`/`HPUB`, `SUB`, `UNSUB`, `PING`/`PONG`, `MSG`/`HMSG`) on a loopback port,
//! so a [`Link`](crate::Link) connects to it with the real `async-nats` client and runs its
//! real code: the same export, import, `link_both`, shared imports and request/reply as
//! against a `nats-server`. Only the server is replaced. The port is the only thing it shares
//! with the machine: it binds `127.0.0.1`, keeps nothing on disk and needs no binary.
//!
//! Threads, not tasks: one thread accepts, one per client reads its commands and routes each
//! message to the matching subscriptions, so it works under any runtime (or none) and
//! outlives no test: dropping it closes the listener and every client socket.
//!
//! State: one mutex holds the clients and their subscriptions. A reader thread routes under
//! it (matching subscriptions, the queue-group pick, `UNSUB` limits) and writes after
//! releasing it, each client's socket behind its own mutex, so one client's messages reach
//! each receiver in the order that client sent them (one reader thread per sender).
//!
//! What it implements of a NATS server: subjects with `*` and `>` wildcards, queue groups
//! (each message to one member per group, in turn), headers, no-echo, `UNSUB` with a limit,
//! the "no responders" status for a request nobody subscribes to, and `max_payload`.
//! What it does not: JetStream (its API answers with an error, so a
//! [`Mode::JetStream`](crate::Mode::JetStream) export or import is a
//! [`LinkError::Setup`](crate::LinkError::Setup) naming the stand-in), clustering,
//! TLS and authentication (credentials are accepted and not checked), and the slow-consumer
//! cut-off (a client that stops reading slows its senders down instead).

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;

/// The default largest message body, as `nats-server`'s: 1 MiB.
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;
/// The longest protocol line accepted (a subject, a reply subject, a queue group, numbers).
const MAX_LINE: usize = 64 * 1024;
/// The status a server sends to a request's reply subject when nobody subscribes to it.
const NO_RESPONDERS: &[u8] = b"NATS/1.0 503\r\n\r\n";

/// A NATS core server inside this process, on a loopback port: connect
/// [`Link`](crate::Link)s to [`url`](Self::url) as to a `nats-server`, and a service's
/// tests run its real links without one.
///
/// Every core-mode feature of the link works through it as against a `nats-server`:
/// export, import, [`link_both`](crate::Link::link_both), shared imports (queue groups),
/// headers and ids, request/reply (with the server's "no responders" answer), and
/// [`Link::close`](crate::Link::close). JetStream is not implemented: linking a topic in
/// [`Mode::JetStream`](crate::Mode::JetStream) is a [`LinkError::Setup`](crate::LinkError)
/// that says so. Credentials and TLS are not checked.
///
/// It needs no async runtime (it runs on threads) and stops when dropped: the listener
/// and every client connection are closed, and the links see a lost connection. Close the
/// links first: a link whose server is gone keeps trying to reconnect, and its
/// [`close`](crate::Link::close) cannot complete (as with a `nats-server` that was stopped).
///
/// # Examples
///
/// Two buses, as two services, linked in one test:
///
/// ```
/// use std::time::Duration;
/// use ringbus::{testing::Recorder, Bus};
/// use ringbus_nats::{testing::MemoryNats, Link, Mode};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let nats = MemoryNats::start()?;
/// let (shop, billing) = (Bus::new(), Bus::new());
/// let seen = Recorder::<u64>::new(&billing, "orders")?;
/// let shop_link = Link::builder(nats.url()).connect(&shop).await?;
/// let billing_link = Link::builder(nats.url()).connect(&billing).await?;
/// billing_link.import::<u64>("orders", Mode::Core).await?;
/// shop_link.export::<u64>("orders", Mode::Core).await?;
///
/// shop.publish("orders", 7_u64).await?;
/// assert_eq!(seen.wait_for(1).await, [7]);
///
/// assert!(shop_link.close(Duration::from_secs(5)).await.complete);
/// assert!(billing_link.close(Duration::from_secs(5)).await.complete);
/// # Ok(()) }
/// ```
pub struct MemoryNats {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the accept thread and the client threads share.
struct Shared {
    /// Set on drop: the accept thread stops at its next connection (the drop makes one).
    stopping: AtomicBool,
    max_payload: usize,
    next_client: AtomicU64,
    /// Messages routed to a subscription (each copy counts).
    delivered: AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    clients: HashMap<u64, Client>,
    /// Turns of the queue-group picks.
    turn: usize,
}

struct Client {
    /// The socket's write half (a clone of the reader's socket): locked per message.
    writer: Arc<Mutex<TcpStream>>,
    /// False after `CONNECT {"echo":false}`: its own messages are not sent back to it.
    echo: bool,
    /// True after `CONNECT {"headers":true,"no_responders":true}`.
    no_responders: bool,
    subs: HashMap<String, Sub>,
}

struct Sub {
    /// The subscription's subject, wildcards and all.
    filter: ringbus::Pattern,
    queue: Option<String>,
    /// `UNSUB sid max`: removed once `delivered` reaches it.
    max: Option<u64>,
    delivered: u64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Maps of plain data, each change a single insert or remove: a panic cannot leave
        // them inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MemoryNats {
    /// Starts a server on a free loopback port with the default maximum payload (1 MiB).
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound, or a thread cannot be started.
    pub fn start() -> io::Result<Self> {
        Self::start_with_max_payload(DEFAULT_MAX_PAYLOAD)
    }

    /// Starts a server whose largest accepted message body is `bytes` (the `max_payload` a
    /// `nats-server` announces, which a link takes as its own limit unless told otherwise).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with_max_payload(bytes: usize) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            max_payload: bytes,
            next_client: AtomicU64::new(1),
            delivered: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        });
        let accepting = shared.clone();
        thread::Builder::new()
            .name("memory-nats-accept".into())
            .spawn(move || accept_loop(&listener, addr, &accepting))?;
        Ok(Self { addr, shared })
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// The socket address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many clients are connected now.
    pub fn connections(&self) -> usize {
        self.shared.state().clients.len()
    }

    /// How many messages the server has handed to subscriptions (a message that two
    /// subscriptions receive counts twice; "no responders" statuses count too).
    pub fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::Relaxed)
    }

    /// Closes every client connection, as a lost server or network would; the server keeps
    /// listening, so the clients reconnect (a link counts it in `stats().disconnects`).
    /// Messages in flight on those connections are lost, as on NATS core.
    pub fn drop_connections(&self) {
        let clients: Vec<_> = self.shared.state().clients.drain().collect();
        for (_, client) in clients {
            let _ = lock(&client.writer).shutdown(Shutdown::Both);
        }
    }
}

impl Drop for MemoryNats {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        // Wakes the accept thread, which sees `stopping` and ends, closing the listener.
        let _ = TcpStream::connect(self.addr);
        self.drop_connections();
    }
}

impl fmt::Debug for MemoryNats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryNats")
            .field("url", &self.url())
            .field("connections", &self.connections())
            .field("delivered", &self.delivered())
            .finish()
    }
}

fn lock(writer: &Mutex<TcpStream>) -> MutexGuard<'_, TcpStream> {
    // A socket: nothing a panic could leave half written that a later write would misread
    // worse than the closed connection that follows.
    writer.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(listener: &TcpListener, addr: SocketAddr, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
        let serving = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("memory-nats-client-{id}"))
            .spawn(move || {
                // A client that breaks the protocol or goes away just ends its connection.
                let _ = serve(stream, id, addr, &serving);
                if let Some(client) = serving.state().clients.remove(&id) {
                    let _ = lock(&client.writer).shutdown(Shutdown::Both);
                }
            });
        if spawned.is_err() {
            // No thread for it: the stream was moved into the failed closure and is closed.
            continue;
        }
    }
}

/// One message to write to one client.
struct Outgoing {
    writer: Arc<Mutex<TcpStream>>,
    frame: Vec<u8>,
}

/// Runs one client connection: the handshake, then its commands until it closes.
fn serve(stream: TcpStream, id: u64, addr: SocketAddr, shared: &Shared) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let writer = Arc::new(Mutex::new(stream.try_clone()?));
    let mut reader = BufReader::new(stream);
    let info = format!(
        "INFO {{\"server_id\":\"MEMORY-NATS\",\"server_name\":\"ringbus-memory-nats\",\
         \"version\":\"2.10.0\",\"proto\":1,\"go\":\"none\",\"host\":\"127.0.0.1\",\
         \"port\":{},\"headers\":true,\"max_payload\":{},\"client_id\":{id},\
         \"jetstream\":false}}\r\n",
        addr.port(),
        shared.max_payload
    );
    lock(&writer).write_all(info.as_bytes())?;
    shared.state().clients.insert(
        id,
        Client {
            writer: writer.clone(),
            echo: true,
            no_responders: false,
            subs: HashMap::new(),
        },
    );
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        let (op, args) = text.split_once([' ', '\t']).unwrap_or((text, ""));
        let args: Vec<&str> = args.split_whitespace().collect();
        match op.to_ascii_uppercase().as_str() {
            "PING" => lock(&writer).write_all(b"PONG\r\n")?,
            "PONG" | "" => {}
            "CONNECT" => connect(shared, id, text),
            "SUB" => {
                let (subject, queue, sid) = match args.as_slice() {
                    [subject, sid] => (subject, None, sid),
                    [subject, queue, sid] => (subject, Some(queue), sid),
                    _ => return refuse(&writer, "Invalid Subscription"),
                };
                match ringbus::Pattern::parse(subject) {
                    Ok(filter) => subscribe(shared, id, filter, queue, sid),
                    // As nats-server: an error, the connection kept.
                    Err(_) => lock(&writer).write_all(b"-ERR 'Invalid Subject'\r\n")?,
                }
            }
            "UNSUB" => match args.as_slice() {
                [sid] => unsubscribe(shared, id, sid, None),
                [sid, max] => match max.parse() {
                    Ok(max) => unsubscribe(shared, id, sid, Some(max)),
                    Err(_) => return refuse(&writer, "Invalid Unsubscribe"),
                },
                _ => return refuse(&writer, "Invalid Unsubscribe"),
            },
            "PUB" | "HPUB" => {
                let headers = op.eq_ignore_ascii_case("HPUB");
                let Some(publish) = Publish::parse(&args, headers) else {
                    return refuse(&writer, "Unknown Protocol Operation");
                };
                if publish.total - publish.header_len > shared.max_payload {
                    return refuse(&writer, "Maximum Payload Violation");
                }
                let mut body = vec![0; publish.total + 2];
                reader.read_exact(&mut body)?;
                body.truncate(publish.total);
                for out in route(shared, id, &publish, &body) {
                    // A receiver that went away is its own thread's business.
                    let _ = lock(&out.writer).write_all(&out.frame);
                }
            }
            _ => return refuse(&writer, "Unknown Protocol Operation"),
        }
    }
}

fn refuse(writer: &Mutex<TcpStream>, why: &str) -> io::Result<()> {
    lock(writer).write_all(format!("-ERR '{why}'\r\n").as_bytes())
}

/// `CONNECT {json}`: the options that change routing.
fn connect(shared: &Shared, id: u64, line: &str) {
    let json = line.split_once(' ').map_or("", |(_, j)| j);
    let options: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let flag = |name: &str| options.get(name).and_then(serde_json::Value::as_bool);
    let echo = flag("echo").unwrap_or(true);
    let no_responders = flag("headers").unwrap_or(false) && flag("no_responders").unwrap_or(false);
    if let Some(client) = shared.state().clients.get_mut(&id) {
        client.echo = echo;
        client.no_responders = no_responders;
    }
}

fn subscribe(shared: &Shared, id: u64, filter: ringbus::Pattern, queue: Option<&&str>, sid: &str) {
    if let Some(client) = shared.state().clients.get_mut(&id) {
        client.subs.insert(
            sid.to_string(),
            Sub {
                filter,
                queue: queue.map(|q| q.to_string()),
                max: None,
                delivered: 0,
            },
        );
    }
}

fn unsubscribe(shared: &Shared, id: u64, sid: &str, max: Option<u64>) {
    let mut state = shared.state();
    let Some(client) = state.clients.get_mut(&id) else {
        return;
    };
    match max {
        Some(max) => {
            if let Some(sub) = client.subs.get_mut(sid) {
                if sub.delivered >= max {
                    client.subs.remove(sid);
                } else {
                    sub.max = Some(max);
                }
            }
        }
        None => {
            client.subs.remove(sid);
        }
    }
}

/// A parsed `PUB subject [reply] bytes` or `HPUB subject [reply] header_bytes total_bytes`.
struct Publish {
    subject: String,
    reply: Option<String>,
    header_len: usize,
    total: usize,
}

impl Publish {
    fn parse(args: &[&str], headers: bool) -> Option<Self> {
        let number = |s: &str| s.parse::<usize>().ok();
        let (subject, reply, header_len, total) = match (headers, args) {
            (false, [s, n]) => (s, None, 0, number(n)?),
            (false, [s, r, n]) => (s, Some(r), 0, number(n)?),
            (true, [s, h, n]) => (s, None, number(h)?, number(n)?),
            (true, [s, r, h, n]) => (s, Some(r), number(h)?, number(n)?),
            _ => return None,
        };
        if header_len > total || !publishable(subject) {
            return None;
        }
        Some(Self {
            subject: subject.to_string(),
            reply: reply.map(|r| r.to_string()),
            header_len,
            total,
        })
    }
}

/// A subject a client may publish to: tokens, none empty, no wildcard.
fn publishable(subject: &str) -> bool {
    !subject.is_empty()
        && subject
            .split('.')
            .all(|t| !t.is_empty() && t != "*" && t != ">")
}

/// The JetStream API's answer: an error that says there is no JetStream here.
const NO_JETSTREAM: &str = "{\"type\":\"io.nats.jetstream.api.v1.error\",\"error\":{\"code\":503,\
     \"err_code\":10039,\"description\":\"JetStream is not implemented by the in-memory NATS \
     stand-in (ringbus_nats::testing::MemoryNats): use Mode::Core, or a nats-server \
     (testing::NatsServer)\"}}";

/// Finds who receives a message and formats their frames (under the state lock).
fn route(shared: &Shared, from: u64, publish: &Publish, body: &[u8]) -> Vec<Outgoing> {
    let mut state = shared.state();
    let State { clients, turn } = &mut *state;
    let mut out = Vec::new();
    // Queue groups: the members found for each group; one of them is picked below.
    let mut groups: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for (&client_id, client) in clients.iter() {
        if client_id == from && !client.echo {
            continue;
        }
        for (sid, sub) in &client.subs {
            if !sub.filter.matches(&publish.subject) {
                continue;
            }
            match &sub.queue {
                Some(q) => groups
                    .entry(q.clone())
                    .or_default()
                    .push((client_id, sid.clone())),
                None => out.push((client_id, sid.clone())),
            }
        }
    }
    for (_, mut members) in groups {
        members.sort();
        *turn = turn.wrapping_add(1);
        out.push(members.swap_remove(*turn % members.len()));
    }
    let mut frames = Vec::with_capacity(out.len());
    for (client_id, sid) in &out {
        if let Some(frame) = deliver(clients, *client_id, sid, publish, body) {
            frames.push(frame);
        }
    }
    if frames.is_empty() {
        if let Some(reply) = &publish.reply {
            if publish.subject.starts_with("$JS.API.") {
                let answer = Publish {
                    subject: reply.clone(),
                    reply: None,
                    header_len: 0,
                    total: NO_JETSTREAM.len(),
                };
                frames.extend(answer_to(clients, from, &answer, NO_JETSTREAM.as_bytes()));
            } else if clients.get(&from).is_some_and(|c| c.no_responders) {
                let status = Publish {
                    subject: reply.clone(),
                    reply: None,
                    header_len: NO_RESPONDERS.len(),
                    total: NO_RESPONDERS.len(),
                };
                frames.extend(answer_to(clients, from, &status, NO_RESPONDERS));
            }
        }
    }
    shared
        .delivered
        .fetch_add(frames.len() as u64, Ordering::Relaxed);
    frames
}

/// A server's own answer to a request of client `to`: to its subscription on the reply
/// subject, whatever its echo setting.
fn answer_to(
    clients: &mut HashMap<u64, Client>,
    to: u64,
    publish: &Publish,
    body: &[u8],
) -> Option<Outgoing> {
    let sid = clients
        .get(&to)?
        .subs
        .iter()
        .find(|(_, sub)| sub.filter.matches(&publish.subject))
        .map(|(sid, _)| sid.clone())?;
    deliver(clients, to, &sid, publish, body)
}

/// Counts a delivery on subscription `sid` of client `to` (removing it at its `UNSUB` limit)
/// and formats the frame.
fn deliver(
    clients: &mut HashMap<u64, Client>,
    to: u64,
    sid: &str,
    publish: &Publish,
    body: &[u8],
) -> Option<Outgoing> {
    let client = clients.get_mut(&to)?;
    let sub = client.subs.get_mut(sid)?;
    sub.delivered += 1;
    if sub.max.is_some_and(|max| sub.delivered >= max) {
        client.subs.remove(sid);
    }
    let reply = publish
        .reply
        .as_deref()
        .map_or(String::new(), |r| format!(" {r}"));
    let mut frame = if publish.header_len > 0 {
        format!(
            "HMSG {} {sid}{reply} {} {}\r\n",
            publish.subject, publish.header_len, publish.total
        )
    } else {
        format!("MSG {} {sid}{reply} {}\r\n", publish.subject, publish.total)
    }
    .into_bytes();
    frame.extend_from_slice(body);
    frame.extend_from_slice(b"\r\n");
    Some(Outgoing {
        writer: client.writer.clone(),
        frame,
    })
}
