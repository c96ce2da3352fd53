//! NATS servers for tests: [`MemoryNats`], a NATS core server inside the test process, and
//! [`NatsServer`] / [`NatsCluster`], a real `nats-server` child process (or several).
//!
//! # How to test a service that uses ringbus and ringbus-nats
//!
//! Test the service whole, link included, against [`MemoryNats`]: start the stand-in,
//! run the service's own setup against its URL (the same `Link::builder(url)`, imports and
//! exports as in `main`), and stand for the rest of the system with a second bus linked the
//! other way round: publish into what the service imports, record (with
//! [`ringbus::testing::Recorder`]) what it exports, and make the requests it answers. No
//! binary, no ports to choose, no sleeps, and it runs in every `cargo test`. Only JetStream
//! needs the real server: test a topic linked in [`Mode::JetStream`](crate::Mode) (its
//! acks, redelivery and dead letters) with [`NatsServer`], and the rest with the stand-in.
//! The service's handlers alone need neither: test them on the bus with `Recorder` and
//! `Bus::wait_idle` (see [`ringbus::testing`]).
//!
//! ```
//! use ringbus::testing::Recorder;
//! use ringbus::{subscriber, Bus, Context, Request};
//! use ringbus_nats::testing::MemoryNats;
//! use ringbus_nats::{Link, Mode};
//! use std::time::Duration;
//!
//! #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
//! struct Order { id: u64, cents: u64 }
//! #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
//! struct Receipt { order: u64 }
//!
//! // The service: bills orders from NATS, sends receipts back, answers price requests.
//! #[subscriber("orders", publish("receipts"))]
//! async fn bill(order: &Order) -> Receipt { Receipt { order: order.id } }
//! #[subscriber("prices", reply)]
//! async fn price(sku: &u32) -> u64 { u64::from(*sku) * 100 }
//!
//! async fn start_service(url: &str) -> Result<(Bus, Link), Box<dyn std::error::Error>> {
//!     let bus = Bus::new();
//!     bus.register(bill)?;
//!     bus.register(price)?;
//!     let link = Link::builder(url).prefix("shop").connect(&bus).await?;
//!     link.import::<Order>("orders", Mode::Core).await?;
//!     link.export::<Receipt>("receipts", Mode::Core).await?;
//!     link.import_requests::<u32, u64>("prices").await?;
//!     Ok((bus, link))
//! }
//!
//! // The test (in a real crate: `#[tokio::test] async fn bills_orders_from_nats()`).
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nats = MemoryNats::start()?;
//! let (service, service_link) = start_service(&nats.url()).await?;
//!
//! // The rest of the system: a bus linked the other way round.
//! let world = Bus::new();
//! let receipts = Recorder::<Receipt>::new(&world, "receipts")?;
//! let link = Link::builder(nats.url()).prefix("shop").connect(&world).await?;
//! link.export::<Order>("orders", Mode::Core).await?;
//! link.import::<Receipt>("receipts", Mode::Core).await?;
//! link.export_requests::<u32, u64>("prices").await?;
//!
//! world.publish("orders", Order { id: 7, cents: 500 }).await?;
//! assert_eq!(receipts.wait_for(1).await, [Receipt { order: 7 }]);
//! let prices = world.topic::<Request<u32, u64>>("prices")?;
//! let ctx = Context::new().with_timeout(Duration::from_secs(5));
//! assert_eq!(prices.request_with(&ctx, 3).await?, 300);
//!
//! assert!(link.close(Duration::from_secs(5)).await.complete);
//! assert!(service_link.close(Duration::from_secs(5)).await.complete);
//! world.close().await;
//! service.close().await;
//! # Ok(()) }
//! ```
//!
//! # The real server
//!
//! [`NatsServer::start`] finds a `nats-server` binary, starts it on a free port with a fresh
//! temporary directory (JetStream store, logs, config file), waits until it serves clients, and
//! kills it and removes the directory when dropped. [`NatsServer::restart`], [`NatsServer::kill`]
//! and [`NatsServer::start_again`] stop and restart it on the same port with the same store, for
//! tests of reconnection and of JetStream durability. [`NatsCluster::start`] starts several
//! such servers as one cluster (routes on free ports, a JetStream store per node), for tests
//! that lose a node.
//!
//! The server binds `127.0.0.1` only: it is never reachable from another host. The monitoring
//! (HTTP) port is not enabled, and the server's log goes to a file in its temporary directory,
//! not to the test output.
//!
//! The binary is `$NATS_SERVER_BIN` if set, else `nats-server` on `PATH`, else
//! `/usr/sbin/nats-server` or `/usr/local/bin/nats-server`. When none exists, [`NatsServer::start`]
//! prints a `SKIPPED:` line to stderr and returns `None`, so the caller can skip its test, unless
//! `REQUIRE_NATS=1` is set (as in CI), in which case it panics.
//!
//! This module uses only `std` threads: no async runtime is needed to start or stop a
//! server, real or in memory.
//!
//! ```no_run
//! use ringbus_nats::testing::{NatsServer, ServerOptions};
//!
//! let Some(server) = NatsServer::start_with(ServerOptions::new().user_password("app", "secret"))
//! else {
//!     return; // no nats-server binary, and REQUIRE_NATS is not set: skip
//! };
//! let url = server.url(); // "nats://127.0.0.1:<port>"
//! # let _ = url;
//! ```

use std::fmt;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ringbus_link::server::{self, free_port, Binary};

mod cluster;
mod memory;

pub use cluster::NatsCluster;
pub use memory::MemoryNats;

/// JetStream's memory-store limit, in bytes (64 MiB): small enough for CI machines.
pub const JETSTREAM_MAX_MEMORY: u64 = 64 * 1024 * 1024;

/// JetStream's file-store limit, in bytes (256 MiB): small enough for CI machines.
pub const JETSTREAM_MAX_FILE: u64 = 256 * 1024 * 1024;

/// How long a start may take before it is reported as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a restart keeps retrying while its port is still in use.
const PORT_RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between readiness checks.
const POLL: Duration = Duration::from_millis(10);
/// Interval between attempts to bind a port that is still in use.
const PORT_RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// The line nats-server (2.9) logs once it accepts clients, with or without JetStream.
const READY_LINE: &str = "Server is ready";
/// What nats-server logs (fatally) when its port is taken.
const ADDR_IN_USE: &str = "address already in use";
/// Lines of the server's log quoted when a start fails.
const TAIL_LINES: usize = 40;

/// The `nats-server` binary, found in `NATS_SERVER_BIN`, on `PATH` or where Debian puts it.
const NATS_SERVER: Binary = Binary {
    name: "nats-server",
    explicit: "NATS_SERVER_BIN",
    well_known: &["/usr/sbin/nats-server", "/usr/local/bin/nats-server"],
    require: "REQUIRE_NATS",
};

/// Whether `REQUIRE_NATS` is set to `1` (or `true`/`yes`): NATS tests must then fail, not skip,
/// when no `nats-server` binary is found. CI sets it.
pub fn require_nats() -> bool {
    server::required("REQUIRE_NATS")
}

/// How to run a [`NatsServer`]: JetStream on or off, credentials, payload limit.
///
/// The defaults ([`ServerOptions::new`]): JetStream on (limited to [`JETSTREAM_MAX_MEMORY`] and
/// [`JETSTREAM_MAX_FILE`]), no authentication, the server's default maximum payload (1 MiB).
#[derive(Clone, PartialEq, Eq)]
pub struct ServerOptions {
    jetstream: bool,
    credentials: Option<(String, String)>,
    max_payload: Option<u32>,
    /// Set by [`NatsCluster`] for each of its nodes.
    cluster: Option<cluster::NodeConfig>,
}

impl ServerOptions {
    /// The default options: JetStream on, no authentication, default maximum payload.
    #[must_use]
    pub fn new() -> Self {
        Self {
            jetstream: true,
            credentials: None,
            max_payload: None,
            cluster: None,
        }
    }

    /// Turns JetStream on (the default) or off.
    #[must_use]
    pub fn jetstream(mut self, enabled: bool) -> Self {
        self.jetstream = enabled;
        self
    }

    /// Requires clients to authenticate with this user name and password.
    #[must_use]
    pub fn user_password(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Sets the largest message payload the server accepts, in bytes (the server's default is
    /// 1 MiB; it refuses to start with more than 64 MiB).
    #[must_use]
    pub fn max_payload(mut self, bytes: u32) -> Self {
        self.max_payload = Some(bytes);
        self
    }

    /// Whether JetStream is on.
    pub fn jetstream_enabled(&self) -> bool {
        self.jetstream
    }

    /// The user name and password clients must present, if any.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str()))
    }

    /// The configured maximum payload, if set.
    pub fn max_payload_bytes(&self) -> Option<u32> {
        self.max_payload
    }

    /// The config file for the settings nats-server 2.9 has no flags for. A `jetstream` block
    /// enables JetStream by itself, so it is written only when JetStream is on.
    fn config_file(&self) -> String {
        let mut config = String::from("# written by ringbus_nats::testing\n");
        if let Some(bytes) = self.max_payload {
            config.push_str(&format!("max_payload: {bytes}\n"));
        }
        if self.jetstream {
            config.push_str(&format!(
                "jetstream {{\n  max_memory_store: {JETSTREAM_MAX_MEMORY}\n  max_file_store: {JETSTREAM_MAX_FILE}\n}}\n"
            ));
        }
        if let Some(node) = &self.cluster {
            config.push_str(&node.config());
        }
        config
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerOptions")
            .field("jetstream", &self.jetstream)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("password", &self.credentials.as_ref().map(|_| Redacted))
            .field("max_payload", &self.max_payload)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// Prints as `<redacted>` in place of a password.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A `nats-server` child process listening on `127.0.0.1` on a free port, with its own temporary
/// directory; killed, and the directory removed, on drop.
///
/// Its `Debug` output shows the URL, process id, directory and user, never the password.
pub struct NatsServer {
    binary: PathBuf,
    options: ServerOptions,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Numbers the starts, so each has its own log file.
    generation: u32,
}

/// Why one attempt to start the server failed.
enum StartFailure {
    /// The port was taken (the server logged "address already in use" and exited).
    AddrInUse,
    /// Anything else; the message says what, with the log's tail.
    Other(String),
}

impl NatsServer {
    /// Starts a server with the default [`ServerOptions`] (JetStream on, no authentication).
    ///
    /// Returns `None`, after printing a `SKIPPED:` line to stderr, when no `nats-server` binary is
    /// found and `REQUIRE_NATS` is not set; see [`NatsServer::start_with`].
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start_with`].
    pub fn start() -> Option<Self> {
        Self::start_with(ServerOptions::new())
    }

    /// Starts a server with these options and waits until it accepts clients.
    ///
    /// Returns `None`, after printing a `SKIPPED:` line to stderr (bypassing the test harness's
    /// output capture, so it is visible), when no `nats-server` binary is found and
    /// `REQUIRE_NATS` is not set.
    ///
    /// # Panics
    ///
    /// - When no binary is found and `REQUIRE_NATS=1`.
    /// - When `NATS_SERVER_BIN` is set but is not an executable file.
    /// - When the temporary directory or config file cannot be created, the process cannot be
    ///   spawned, or the server exits or is not ready within 10 s (the message quotes the tail of
    ///   the server's log).
    pub fn start_with(options: ServerOptions) -> Option<Self> {
        let binary = NATS_SERVER.find_or_skip()?;
        Some(Self::start_at(binary, options, None))
    }

    /// Starts a server with `binary` and `options` on `port` (a fresh free port if `None`) and
    /// waits until it accepts clients.
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start_with`].
    fn start_at(binary: PathBuf, options: ServerOptions, port: Option<u16>) -> Self {
        let dir = server::make_temp_dir("ringbus-nats");
        // Built before anything else can fail, so that a panic below kills the child and removes
        // the directory as it unwinds.
        let mut server = Self {
            binary,
            options,
            port: port.unwrap_or(0),
            dir,
            child: None,
            generation: 0,
        };
        let config = server.config_path();
        if let Err(err) = fs::write(&config, server.options.config_file()) {
            panic!(
                "cannot write nats-server config {}: {err}",
                config.display()
            );
        }
        server.launch(port.is_none());
        server
    }

    /// The client URL, `nats://127.0.0.1:<port>` (credentials are not included; see
    /// [`ServerOptions::credentials`] through [`NatsServer::options`]).
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port. It stays the same across [`NatsServer::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address clients connect to: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id of the running server; `None` after [`NatsServer::kill`]. It changes on
    /// every restart.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server process is alive (it is not after [`NatsServer::kill`], nor if it
    /// exited by itself).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The server's temporary directory, also its JetStream store directory (`-sd`; the server
    /// keeps its data in `jetstream/` under it). It stays the same across restarts and is
    /// removed on drop.
    pub fn store_dir(&self) -> &Path {
        &self.dir
    }

    /// The log file of the current (or last) server process, in [`NatsServer::store_dir`].
    pub fn log_path(&self) -> PathBuf {
        self.dir
            .join(format!("nats-server.{}.log", self.generation))
    }

    /// The options the server runs with.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Kills the server (SIGKILL, no graceful shutdown) and starts a new one on the same port
    /// with the same store directory and options, then waits until it accepts clients. Retries
    /// for up to 10 s while the port is still in use.
    ///
    /// # Panics
    ///
    /// When the new server cannot be started or is not ready in time; see
    /// [`NatsServer::start_with`].
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Kills the server (SIGKILL) and waits for the process to end, leaving the port closed
    /// until [`NatsServer::start_again`]. Does nothing if it is already stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Errors mean the process has already exited; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again after [`NatsServer::kill`] (or after it exited by itself), on the
    /// same port with the same store directory and options, and waits until it accepts clients.
    /// Does nothing if it is running.
    ///
    /// # Panics
    ///
    /// As [`NatsServer::restart`].
    pub fn start_again(&mut self) {
        if self.is_running() {
            return;
        }
        self.kill(); // reaps a process that exited by itself
        self.launch(false);
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("nats-server.conf")
    }

    fn output_path(&self) -> PathBuf {
        self.dir
            .join(format!("nats-server.{}.out", self.generation))
    }

    /// Spawns the server and waits until it is ready: on a fresh free port (trying another if
    /// that one is taken in the meantime), or on the current port (retrying while it is in use).
    fn launch(&mut self, fresh_port: bool) {
        let retry_deadline = Instant::now() + PORT_RETRY_TIMEOUT;
        loop {
            if fresh_port {
                self.port = free_port();
            }
            self.spawn();
            match self.wait_ready() {
                Ok(()) => return,
                Err(StartFailure::AddrInUse) if Instant::now() < retry_deadline => {
                    self.kill();
                    // The failed attempt's files say only that the port was taken.
                    let _ = fs::remove_file(self.log_path());
                    let _ = fs::remove_file(self.output_path());
                    if !fresh_port {
                        thread::sleep(PORT_RETRY_INTERVAL);
                    }
                }
                Err(StartFailure::AddrInUse) => {
                    let message = self.failure_report("port still in use after 10 s of retries");
                    self.kill();
                    panic!("{message}");
                }
                Err(StartFailure::Other(message)) => {
                    self.kill();
                    panic!("{message}");
                }
            }
        }
    }

    fn spawn(&mut self) {
        self.generation += 1;
        let output_path = self.output_path();
        let output = match File::create(&output_path) {
            Ok(file) => file,
            Err(err) => panic!("cannot create {}: {err}", output_path.display()),
        };
        let output_err = match output.try_clone() {
            Ok(file) => file,
            Err(err) => panic!("cannot duplicate {}: {err}", output_path.display()),
        };
        let mut command = Command::new(&self.binary);
        command
            .arg("-c")
            .arg(self.config_path())
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-l")
            .arg(self.log_path());
        if self.options.jetstream {
            command.arg("-js").arg("-sd").arg(&self.dir);
        }
        if let Some((user, password)) = &self.options.credentials {
            command.arg("--user").arg(user).arg("--pass").arg(password);
        }
        command
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(output_err);
        match command.spawn() {
            Ok(child) => self.child = Some(child),
            Err(err) => panic!("cannot start {}: {err}", self.binary.display()),
        }
    }

    /// Polls until the server logs that it is ready and its port accepts a connection, it
    /// exits, or [`READY_TIMEOUT`] passes.
    ///
    /// The log line is required with or without JetStream (nats-server 2.9 prints it in both
    /// cases): a connection alone could reach another process that took the port.
    fn wait_ready(&mut self) -> Result<(), StartFailure> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = self.addr();
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(None)) => None,
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(err)) => Some(format!("unknown status ({err})")),
                None => Some("not running".to_owned()),
            };
            let log = fs::read_to_string(self.log_path()).unwrap_or_default();
            if let Some(status) = exited {
                if log.contains(ADDR_IN_USE) {
                    return Err(StartFailure::AddrInUse);
                }
                return Err(StartFailure::Other(
                    self.failure_report(&format!("nats-server exited early: {status}")),
                ));
            }
            if log.contains(READY_LINE)
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartFailure::Other(self.failure_report(&format!(
                    "nats-server not ready within {READY_TIMEOUT:?}"
                ))));
            }
            thread::sleep(POLL);
        }
    }

    /// A panic message: what failed, the command line (password hidden), the tail of the log
    /// and anything the process wrote to stdout/stderr.
    fn failure_report(&self, what: &str) -> String {
        let log_path = self.log_path();
        let log = fs::read_to_string(&log_path)
            .unwrap_or_else(|err| format!("(cannot read {}: {err})", log_path.display()));
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
        let output = fs::read_to_string(self.output_path()).unwrap_or_default();
        format!(
            "{what}\nserver: {self:?}\nbinary: {}\n--- tail of {} ---\n{tail}\n--- stdout/stderr ---\n{}",
            self.binary.display(),
            log_path.display(),
            output.trim_end(),
        )
    }
}

impl fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsServer")
            .field("url", &self.url())
            .field("pid", &self.pid())
            .field("store_dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    const IO_TIMEOUT: Duration = Duration::from_secs(5);

    fn connect(server: &NatsServer) -> (BufReader<TcpStream>, TcpStream) {
        let stream = TcpStream::connect_timeout(&server.addr(), IO_TIMEOUT)
            .unwrap_or_else(|err| panic!("cannot connect to {server:?}: {err}"));
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .expect("set read timeout");
        let writer = stream.try_clone().expect("clone stream");
        (BufReader::new(stream), writer)
    }

    fn read_line(reader: &mut BufReader<TcpStream>) -> String {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .unwrap_or_else(|err| panic!("cannot read from the server: {err}"));
        line
    }

    /// Connects and returns the greeting, asserting it is a NATS `INFO` for this port.
    fn info(server: &NatsServer) -> String {
        let (mut reader, _writer) = connect(server);
        let line = read_line(&mut reader);
        assert!(line.starts_with("INFO {"), "not a NATS greeting: {line:?}");
        assert!(
            line.contains(&format!("\"port\":{}", server.port())),
            "greeting for another port: {line:?}"
        );
        line
    }

    /// Sends CONNECT with these credentials and a PING; returns the server's answer.
    fn connect_as(server: &NatsServer, user: &str, password: &str) -> String {
        let (mut reader, mut writer) = connect(server);
        let greeting = read_line(&mut reader);
        assert!(greeting.starts_with("INFO {"), "{greeting:?}");
        write!(
            writer,
            "CONNECT {{\"user\":\"{user}\",\"pass\":\"{password}\",\"verbose\":false,\"pedantic\":false}}\r\nPING\r\n"
        )
        .expect("write CONNECT");
        read_line(&mut reader)
    }

    fn process_exists(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn start_serves_nats_on_localhost() {
        let Some(server) = NatsServer::start() else {
            return;
        };
        assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
        assert!(server.pid().is_some());
        let greeting = info(&server);
        assert!(greeting.contains("\"host\":\"127.0.0.1\""), "{greeting}");
        assert!(greeting.contains("\"jetstream\":true"), "{greeting}");
        assert!(!greeting.contains("auth_required"), "{greeting}");
        assert!(server.store_dir().join("jetstream").is_dir());
        let log = fs::read_to_string(server.log_path()).expect("read the log");
        assert!(log.contains(READY_LINE), "{log}");
    }

    #[test]
    fn options_without_jetstream_and_with_max_payload() {
        let options = ServerOptions::new().jetstream(false).max_payload(4096);
        let Some(server) = NatsServer::start_with(options) else {
            return;
        };
        let greeting = info(&server);
        assert!(!greeting.contains("\"jetstream\":true"), "{greeting}");
        assert!(greeting.contains("\"max_payload\":4096"), "{greeting}");
        assert!(!server.store_dir().join("jetstream").exists());
    }

    #[test]
    fn restart_keeps_port_and_store_and_changes_pid() {
        let Some(mut server) = NatsServer::start() else {
            return;
        };
        let port = server.port();
        let dir = server.store_dir().to_path_buf();
        let pid = server.pid().expect("running");
        info(&server);
        // A marker file in the JetStream store must survive the restart.
        let marker = dir.join("jetstream").join("marker");
        fs::write(&marker, b"kept").expect("write marker");

        server.restart();

        assert_eq!(server.port(), port);
        assert_eq!(server.store_dir(), dir);
        let new_pid = server.pid().expect("running after restart");
        assert_ne!(new_pid, pid);
        assert!(!process_exists(pid), "old server {pid} still exists");
        assert!(marker.exists());
        info(&server);
    }

    #[test]
    fn kill_closes_the_port_until_start_again() {
        let Some(mut server) = NatsServer::start() else {
            return;
        };
        let pid = server.pid().expect("running");
        server.kill();
        assert_eq!(server.pid(), None);
        assert!(!server.is_running());
        assert!(!process_exists(pid));
        assert!(
            TcpStream::connect_timeout(&server.addr(), Duration::from_millis(500)).is_err(),
            "port {} still accepts connections after kill",
            server.port()
        );
        server.kill(); // a second kill is a no-op

        server.start_again();
        assert!(server.is_running());
        assert_ne!(server.pid(), Some(pid));
        info(&server);
        let running = server.pid();
        server.start_again(); // no-op while running
        assert_eq!(server.pid(), running);
    }

    #[test]
    fn drop_kills_the_process_and_removes_the_directory() {
        let Some(server) = NatsServer::start() else {
            return;
        };
        let pid = server.pid().expect("running");
        let dir = server.store_dir().to_path_buf();
        assert!(process_exists(pid));
        assert!(dir.is_dir());
        drop(server);
        assert!(!process_exists(pid), "server {pid} survived drop");
        assert!(!dir.exists(), "{} survived drop", dir.display());
    }

    #[test]
    fn password_is_enforced_and_never_printed() {
        let options = ServerOptions::new()
            .jetstream(false)
            .user_password("u", "s3cret-pw");
        assert!(!format!("{options:?}").contains("s3cret-pw"));
        let Some(server) = NatsServer::start_with(options) else {
            return;
        };
        let debug = format!("{server:?}");
        assert!(!debug.contains("s3cret-pw"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        assert_eq!(server.options().credentials(), Some(("u", "s3cret-pw")));
        assert!(info(&server).contains("\"auth_required\":true"));

        let refused = connect_as(&server, "u", "bad");
        assert_eq!(refused.trim_end(), "-ERR 'Authorization Violation'");
        let accepted = connect_as(&server, "u", "s3cret-pw");
        assert_eq!(accepted.trim_end(), "PONG");
    }

    #[test]
    fn options_defaults() {
        let options = ServerOptions::default();
        assert_eq!(options, ServerOptions::new());
        assert!(options.jetstream_enabled());
        assert_eq!(options.credentials(), None);
        assert_eq!(options.max_payload_bytes(), None);
        let config = options.config_file();
        assert!(config.contains("jetstream {"), "{config}");
        assert!(!ServerOptions::new()
            .jetstream(false)
            .config_file()
            .contains("jetstream"));
    }
}
