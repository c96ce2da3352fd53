//! A real `rabbitmq-server` for tests: [`RabbitServer`] starts one as a child process on
//! `127.0.0.1`, on free ports, with a fresh temporary directory, and stops it, the `epmd` it
//! registered with and every process they started, and removes the directory, when dropped.
//!
//! # Isolation
//!
//! A node shares nothing with a system instance (Debian's package installs one, as user
//! `rabbitmq`, on port 5672 with `epmd` on 4369) nor with the other servers of a test run:
//!
//! | what | where |
//! |---|---|
//! | node name | `ringbus-<pid>-<n>@localhost`, unique per server |
//! | AMQP listener | `listeners.tcp.default = 127.0.0.1:<free port>` in its own `rabbitmq.conf` |
//! | distribution | `RABBITMQ_DIST_PORT`, a free port, on 127.0.0.1 only |
//! | `epmd` | one of its own, started by the harness on a free port (`ERL_EPMD_PORT`) |
//! | data, logs, plugins | `RABBITMQ_MNESIA_BASE`, `RABBITMQ_LOG_BASE`, `RABBITMQ_ENABLED_PLUGINS_FILE` (no plugins) in the directory |
//! | configuration | `RABBITMQ_CONFIG_FILE`, `RABBITMQ_CONFIG_FILES`, `RABBITMQ_ADVANCED_CONFIG_FILE`, `RABBITMQ_CONF_ENV_FILE`, `RABBITMQ_MOTD_FILE` in the directory: nothing of `/etc/rabbitmq` is read |
//! | Erlang cookie | `$HOME/.erlang.cookie`, with `HOME` set to the directory |
//!
//! Every `RABBITMQ_*` and `ERL_*` variable of the test's own environment is removed from the
//! server's, as is `NOTIFY_SOCKET` (with it the start script would talk to systemd). The
//! server's working directory, where the Erlang VM would write a crash dump, is the directory.
//!
//! # Start and stop
//!
//! The harness starts `epmd` (as its own child, so that it knows the process to stop), then
//! the `rabbitmq-server` script, in a process group of its own. The script runs the Erlang VM
//! as its child and, on `SIGTERM`, stops it gracefully; the VM's own helpers (`erl_child_setup`,
//! `inet_gethost`, the disk monitor's shell) end with it. The server is ready once its log
//! shows the listener on its own port (so that a stranger that took the port in between is
//! not mistaken for it) and an AMQP connection with lapin (`guest`/`guest`, allowed on
//! loopback only) succeeds. A start that does not get there within 60 s panics with the tail
//! of the server's log; one whose port was taken between [`free_port`] and the bind starts
//! again on new ports (up to 5 times).
//!
//! On drop the harness sends the script `SIGTERM`, waits up to 15 s for it to end (a clean
//! stop takes about 2 s), then kills the process group (`SIGKILL`) if it has not, and kills
//! its `epmd`. The VM's helpers end when the VM does, but can outlive it by a moment; the
//! harness finds them by their working directory, the server's (Linux's `/proc`), waits up
//! to 5 s for them to end and kills what is left. Then it removes the directory: once the
//! drop returns, nothing the server started runs.
//!
//! # Finding the binary
//!
//! The binary is `$RABBITMQ_SERVER_BIN` if set, else `rabbitmq-server` on `PATH`, else
//! `/usr/lib/rabbitmq/bin/rabbitmq-server` or `/usr/sbin/rabbitmq-server` (Debian's
//! `rabbitmq-server` package). Debian's `/usr/sbin/rabbitmq-server` is a wrapper that runs
//! the server as the system instance (user `rabbitmq`, `/var/lib/rabbitmq`); the harness
//! runs the script it wraps instead. `epmd` is `$EPMD_BIN`, `epmd` on `PATH` or
//! `/usr/lib/erlang/bin/epmd`. When either is missing, [`RabbitServer::start`] prints a
//! `SKIPPED:` line to stderr and returns `None`, so the caller can skip its test, unless
//! `REQUIRE_RABBITMQ=1` is set (as in CI), in which case it panics.
//!
//! Unix only (the server is a shell script, stopped with signals). Starting and stopping
//! block the calling thread; the readiness probe runs on a thread of its own with a runtime
//! of its own, so a server can be started from plain and from async code alike.
//!
//! ```no_run
//! use lapin::{Connection, ConnectionProperties};
//! use ringbus_rabbitmq::testing::RabbitServer;
//!
//! # #[tokio::main] async fn main() -> Result<(), lapin::Error> {
//! let Some(server) = RabbitServer::start() else {
//!     return Ok(()); // no rabbitmq-server binary, and REQUIRE_RABBITMQ is not set: skip
//! };
//! // "amqp://guest:guest@127.0.0.1:<port>/%2f"
//! let connection = Connection::connect(&server.url(), ConnectionProperties::default()).await?;
//! let channel = connection.create_channel().await?;
//! # let _ = channel;
//! # Ok(()) }
//! ```

use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lapin::{Connection, ConnectionProperties};
use ringbus_link::server::{self, free_port, Binary};

/// How long a start may take before it is reported as failed. A node starts in about 5 s
/// on two cores; parallel tests start several at once on the same cores.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one AMQP connection attempt of the readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a graceful stop may take before the server's processes are killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the VM's helper processes may outlive it before they are killed.
const HELPERS_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval between readiness and exit checks.
const POLL: Duration = Duration::from_millis(50);
/// How many times a start is tried, each on new ports, while its ports are taken.
const START_ATTEMPTS: u32 = 5;
/// How many lines of a log a failure report quotes.
const TAIL_LINES: usize = 40;
/// What RabbitMQ reports, lowercased, when its AMQP or its distribution port is taken.
const ADDR_IN_USE: [&str; 2] = ["eaddrinuse", "could not bind to distribution port"];

/// The `rabbitmq-server` script, found in `RABBITMQ_SERVER_BIN`, on `PATH` or where Debian
/// puts it.
const RABBITMQ_SERVER: Binary = Binary {
    name: "rabbitmq-server",
    explicit: "RABBITMQ_SERVER_BIN",
    well_known: &[
        "/usr/lib/rabbitmq/bin/rabbitmq-server",
        "/usr/sbin/rabbitmq-server",
    ],
    require: "REQUIRE_RABBITMQ",
};

/// Erlang's port mapper, which the node registers with: Debian's `erlang-base` package, a
/// dependency of `rabbitmq-server`.
const EPMD: Binary = Binary {
    name: "epmd",
    explicit: "EPMD_BIN",
    well_known: &["/usr/lib/erlang/bin/epmd", "/usr/local/lib/erlang/bin/epmd"],
    require: "REQUIRE_RABBITMQ",
};

/// The file Debian's `/usr/sbin/rabbitmq-server` links to: a wrapper that switches to the
/// system instance's user and directories.
const DEBIAN_WRAPPER: &str = "rabbitmq-script-wrapper";

/// Whether `REQUIRE_RABBITMQ` is set to `1` (or `true`/`yes`): RabbitMQ tests must then fail,
/// not skip, when no `rabbitmq-server` binary is found. CI sets it.
pub fn require_rabbitmq() -> bool {
    server::required(RABBITMQ_SERVER.require)
}

/// The ports of one server, all on 127.0.0.1 and all different.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ports {
    amqp: u16,
    dist: u16,
    epmd: u16,
}

impl Ports {
    fn free() -> Self {
        loop {
            let ports = Self {
                amqp: free_port(),
                dist: free_port(),
                epmd: free_port(),
            };
            if ports.amqp != ports.dist && ports.amqp != ports.epmd && ports.dist != ports.epmd {
                return ports;
            }
        }
    }
}

/// Why a start did not get to a ready server.
#[derive(Debug)]
enum Failure {
    /// A port was taken between [`free_port`] and the bind: start again on other ports.
    PortTaken,
    /// The server exited.
    Exited(ExitStatus),
    /// Not ready within [`READY_TIMEOUT`]; the probe's last error, if it ran.
    TimedOut(Option<String>),
    /// The probe's runtime could not be built.
    Runtime(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PortTaken => write!(
                f,
                "a port it was given was taken, on each of {START_ATTEMPTS} attempts"
            ),
            Self::Exited(status) => write!(f, "it exited ({status})"),
            Self::TimedOut(None) => write!(f, "it did not start within {READY_TIMEOUT:?}"),
            Self::TimedOut(Some(error)) => write!(
                f,
                "it did not accept an AMQP connection within {READY_TIMEOUT:?}; the last \
                 attempt: {error}"
            ),
            Self::Runtime(error) => write!(f, "the probe's runtime: {error}"),
        }
    }
}

/// A `rabbitmq-server` node on `127.0.0.1`, on free ports, with its own `epmd` and temporary
/// directory; stopped, with everything it started, and the directory removed, on drop.
///
/// See the [module documentation](self) for what is isolated and how.
pub struct RabbitServer {
    binary: PathBuf,
    epmd_binary: PathBuf,
    node: String,
    ports: Ports,
    dir: PathBuf,
    /// The `rabbitmq-server` script, leader of its own process group (the Erlang VM is in it).
    server: Option<Child>,
    epmd: Option<Child>,
}

impl RabbitServer {
    /// Starts a server and waits until it accepts an AMQP connection.
    ///
    /// Returns `None`, after printing a `SKIPPED:` line to stderr, when no `rabbitmq-server`
    /// (or `epmd`) binary is found and `REQUIRE_RABBITMQ` is not set.
    ///
    /// # Panics
    ///
    /// When no binary is found and `REQUIRE_RABBITMQ=1`; when `RABBITMQ_SERVER_BIN` or
    /// `EPMD_BIN` is not an executable file; when the directory cannot be made, a process
    /// cannot be spawned, or the server exits or is not ready within 60 s (the message quotes
    /// the tail of its log).
    pub fn start() -> Option<Self> {
        let binary = unwrap_debian_wrapper(RABBITMQ_SERVER.find_or_skip()?);
        let epmd_binary = match EPMD.find() {
            Ok(Some(epmd)) => epmd,
            Ok(None) => {
                return server::skip_or_panic(
                    EPMD.require,
                    "no epmd binary found (Erlang's, which rabbitmq-server needs); install \
                     erlang-base or set EPMD_BIN",
                );
            }
            Err(message) => panic!("{message}"),
        };
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let mut server = Self {
            binary,
            epmd_binary,
            node: format!("ringbus-{}-{n}@localhost", std::process::id()),
            ports: Ports::default(),
            dir: server::make_temp_dir("ringbus-rabbitmq"),
            server: None,
            epmd: None,
        };
        server.launch();
        Some(server)
    }

    /// The client URL: `amqp://guest:guest@127.0.0.1:<port>/%2f` (the default virtual host).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.ports.amqp)
    }

    /// The AMQP port.
    pub fn port(&self) -> u16 {
        self.ports.amqp
    }

    /// The port of the node's own `epmd`.
    pub fn epmd_port(&self) -> u16 {
        self.ports.epmd
    }

    /// The node's distribution port (inter-node and CLI tool traffic).
    pub fn dist_port(&self) -> u16 {
        self.ports.dist
    }

    /// The node's name: `ringbus-<pid>-<n>@localhost`.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The process id of the `rabbitmq-server` script (the Erlang VM is its child).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// The server's directory (data, logs, configuration, Erlang cookie); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server (SIGKILL to the VM, no graceful shutdown) and starts it again on the
    /// same ports, node name and directory: durable exchanges and queues, and the persistent
    /// messages they held, are there again. Its `epmd` keeps running.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), if it does not come back within 60 s.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Starts the server again after [`kill`](Self::kill), on the same ports, node name and
    /// directory. Does nothing if it is running.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), if it does not come back within 60 s.
    pub fn start_again(&mut self) {
        if self.server.is_some() {
            return;
        }
        // A fresh log, so readiness is read from the new run's lines only.
        let _ = fs::remove_file(self.log_path());
        self.start_server();
        if let Err(failure) = self.wait_ready(Instant::now() + READY_TIMEOUT) {
            let report = self.failure_report(&failure);
            self.stop();
            panic!("{report}");
        }
    }

    /// Kills the server (SIGKILL to its process group: the script and the VM) and waits until
    /// none of its processes but `epmd` is left. Does nothing if it is not running.
    pub fn kill(&mut self) {
        let Some(mut script) = self.server.take() else {
            return;
        };
        signal("KILL", &format!("-{}", script.id()));
        let _ = script.kill();
        let _ = script.wait();
        let epmd = self.epmd.as_ref().map(Child::id);
        let deadline = Instant::now() + HELPERS_TIMEOUT;
        loop {
            let left: Vec<String> = processes_in(&self.dir)
                .into_iter()
                .filter(|pid| Some(*pid) != epmd)
                .map(|pid| pid.to_string())
                .collect();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                signal("KILL", &left.join(" "));
                return;
            }
            thread::sleep(POLL);
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("log").join("rabbit.log")
    }

    /// The script's and the VM's stdout and stderr: what they print before the log is open.
    fn output_path(&self) -> PathBuf {
        self.dir.join("server.out")
    }

    fn epmd_output_path(&self) -> PathBuf {
        self.dir.join("epmd.out")
    }

    fn launch(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        for attempt in 1.. {
            self.ports = Ports::free();
            let started = self.start_epmd(deadline).and_then(|()| {
                self.start_server();
                self.wait_ready(deadline)
            });
            match started {
                Ok(()) => return,
                Err(Failure::PortTaken)
                    if attempt < START_ATTEMPTS && Instant::now() < deadline =>
                {
                    self.stop();
                    // A fresh start: no data or log of the attempt that lost its port.
                    for sub in ["mnesia", "log"] {
                        let _ = fs::remove_dir_all(self.dir.join(sub));
                    }
                }
                Err(failure) => {
                    let report = self.failure_report(&failure);
                    self.stop();
                    panic!("{report}");
                }
            }
        }
    }

    /// Starts `epmd` on its port and waits until it answers there.
    fn start_epmd(&mut self, deadline: Instant) -> Result<(), Failure> {
        let output = create(&self.epmd_output_path());
        let mut command = Command::new(&self.epmd_binary);
        command
            .args(["-address", "127.0.0.1", "-port"])
            .arg(self.ports.epmd.to_string())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(clone(&output))
            .stderr(output);
        let port = self.ports.epmd;
        let epmd = self.epmd.insert(spawn(&mut command, &self.epmd_binary));
        loop {
            // A new epmd ends by itself only when it cannot bind its port, and says so only
            // in debug mode.
            if !matches!(epmd.try_wait(), Ok(None)) {
                return Err(Failure::PortTaken);
            }
            if epmd_answers(port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Failure::TimedOut(None));
            }
            thread::sleep(POLL);
        }
    }

    /// Writes the configuration files and spawns the `rabbitmq-server` script.
    fn start_server(&mut self) {
        let files = [
            (
                "rabbitmq.conf",
                format!(
                    "# Written by ringbus_rabbitmq::testing::RabbitServer.\n\
                     listeners.tcp.default = 127.0.0.1:{}\n",
                    self.ports.amqp
                ),
            ),
            // Empty: read instead of /etc/rabbitmq/rabbitmq-env.conf.
            ("rabbitmq-env.conf", String::new()),
            // No plugins (the management UI and the rest stay off): a faster start.
            ("enabled_plugins", "[].\n".to_owned()),
        ];
        for (name, text) in files {
            let path = self.dir.join(name);
            if let Err(err) = fs::write(&path, text) {
                panic!("cannot write {}: {err}", path.display());
            }
        }
        let dir = &self.dir;
        let mut command = Command::new(&self.binary);
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("RABBITMQ_") || name.starts_with("ERL_") || name == "NOTIFY_SOCKET"
            {
                command.env_remove(&key);
            }
        }
        let output = create(&self.output_path());
        command
            .env("HOME", dir)
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_CONFIG_FILES", dir.join("conf.d").join("*.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MOTD_FILE", dir.join("motd"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_LOGS", self.log_path())
            .env("RABBITMQ_DIST_PORT", self.ports.dist.to_string())
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env("ERL_EPMD_PORT", self.ports.epmd.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_CRASH_DUMP", dir.join("erl_crash.dump"))
            .current_dir(dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(clone(&output))
            .stderr(output);
        self.server = Some(spawn(&mut command, &self.binary));
    }

    /// Polls until the server's log shows its listener and an AMQP connection succeeds
    /// (`Ok`), it exits, or `deadline` passes.
    fn wait_ready(&mut self, deadline: Instant) -> Result<(), Failure> {
        let url = self.url();
        let listening = format!("started TCP listener on 127.0.0.1:{}", self.ports.amqp);
        let (log, output) = (self.log_path(), self.output_path());
        let Some(child) = self.server.as_mut() else {
            unreachable!("wait_ready runs after start_server");
        };
        // A thread of its own, with a runtime of its own: `start` may be called on a thread
        // that runs a runtime already (an async test), where `block_on` panics. Several
        // threads: lapin's I/O thread needs the runtime's drivers between `block_on`s.
        let probe_loop = || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|err| Failure::Runtime(err.to_string()))?;
            let mut last_error = None;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(if mentions_port_taken(&[&log, &output]) {
                        Failure::PortTaken
                    } else {
                        Failure::Exited(status)
                    });
                }
                if read(&log).contains(&listening) {
                    match runtime.block_on(probe(&url)) {
                        Ok(connection) => {
                            // Joins lapin's I/O thread, so that none outlives the probe.
                            let _ = connection.run();
                            return Ok(());
                        }
                        Err(error) => last_error = Some(error),
                    }
                }
                if Instant::now() >= deadline {
                    return Err(Failure::TimedOut(last_error));
                }
                thread::sleep(POLL);
            }
        };
        thread::scope(|scope| {
            scope
                .spawn(probe_loop)
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Stops the server gracefully (`SIGTERM` to the script, which stops the VM), kills its
    /// process group if it has not ended within [`STOP_TIMEOUT`], kills `epmd`, then waits
    /// for every other process working in the server's directory (the VM's helpers) to end,
    /// killing those still there after [`HELPERS_TIMEOUT`]. Does nothing for what is not
    /// running.
    fn stop(&mut self) {
        if let Some(mut script) = self.server.take() {
            if matches!(script.try_wait(), Ok(None)) {
                let pid = script.id().to_string();
                signal("TERM", &pid);
                if !wait_for_exit(&mut script, STOP_TIMEOUT) {
                    // The group's id is the script's pid: it leads the group.
                    signal("KILL", &format!("-{pid}"));
                }
            }
            // Errors mean the process has already exited; `wait` reaps it either way.
            let _ = script.kill();
            let _ = script.wait();
        }
        if let Some(mut epmd) = self.epmd.take() {
            let _ = epmd.kill();
            let _ = epmd.wait();
        }
        // The VM's helpers end when it does, but can outlive it by a moment (reparented to
        // init): waited for, so that nothing of the server runs once `stop` returns.
        let mut deadline = Instant::now() + HELPERS_TIMEOUT;
        let mut killed = false;
        loop {
            let left = processes_in(&self.dir);
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                if killed {
                    return; // Not even SIGKILL ended them: nothing more to do.
                }
                let pids: Vec<String> = left.iter().map(u32::to_string).collect();
                signal("KILL", &pids.join(" "));
                killed = true;
                deadline = Instant::now() + HELPERS_TIMEOUT;
            }
            thread::sleep(POLL);
        }
    }

    fn failure_report(&self, failure: &Failure) -> String {
        format!(
            "rabbitmq-server did not start: {failure}\nserver: {self:?}\nbinary: {}\n\
             --- tail of its log ({}) ---\n{}\n--- tail of its output ---\n{}\n\
             --- epmd's output ---\n{}",
            self.binary.display(),
            self.log_path().display(),
            tail(&read(&self.log_path())),
            tail(&read(&self.output_path())),
            tail(&read(&self.epmd_output_path())),
        )
    }
}

impl fmt::Debug for RabbitServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitServer")
            .field("node", &self.node)
            .field("ports", &self.ports)
            .field("pid", &self.pid())
            .field("epmd_pid", &self.epmd.as_ref().map(Child::id))
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for RabbitServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// One AMQP connection to `url` (as `guest`, on loopback), closed again; the connection is
/// returned for its I/O thread to be joined outside the runtime.
async fn probe(url: &str) -> Result<Connection, String> {
    let connect = Connection::connect(url, ConnectionProperties::default());
    let connection = tokio::time::timeout(PROBE_TIMEOUT, connect)
        .await
        .map_err(|_| format!("no connection within {PROBE_TIMEOUT:?}"))?
        .map_err(|err| err.to_string())?;
    connection
        .close(200, "ready".into())
        .await
        .map_err(|err| err.to_string())?;
    Ok(connection)
}

/// Whether an `epmd` answers on 127.0.0.1:`port`: one asked for its names (`NAMES_REQ`, a
/// two-byte length of 1 and `n`) answers with the port it listens on, in four bytes, first.
fn epmd_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, POLL) else {
        return false;
    };
    let mut answer = [0; 4];
    stream.set_read_timeout(Some(POLL)).is_ok()
        && stream.write_all(&[0, 1, b'n']).is_ok()
        && stream.read_exact(&mut answer).is_ok()
        && u32::from_be_bytes(answer) == u32::from(port)
}

/// The script Debian's `/usr/sbin/rabbitmq-server` wraps, when `found` is that wrapper (what
/// `PATH` finds first for root); `found` otherwise.
///
/// # Panics
///
/// When `found` is the wrapper and the script is not beside it.
fn unwrap_debian_wrapper(found: PathBuf) -> PathBuf {
    let Ok(real) = fs::canonicalize(&found) else {
        return found;
    };
    if real.file_name() != Some(DEBIAN_WRAPPER.as_ref()) {
        return found;
    }
    let script = real.with_file_name("rabbitmq-server");
    if !server::is_executable(&script) {
        panic!(
            "{} is Debian's wrapper for the system instance, and the script it wraps is not \
             at {}; set RABBITMQ_SERVER_BIN",
            found.display(),
            script.display()
        );
    }
    script
}

/// Sends the signal `name` to `targets` (process ids, or minus a process group's id) with
/// the shell's `kill`: `std` sends no signal but `SIGKILL` to a single process, and `sh` is
/// wherever `rabbitmq-server` (a shell script) runs. `targets` is split into words.
fn signal(name: &str, targets: &str) {
    let _ = Command::new("sh")
        .args(["-c", r#"kill -s "$0" -- $1"#, name, targets])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The processes (other than zombies) whose working directory is `dir` or below it: every
/// process a server started works in its directory, as the harness starts the script and
/// `epmd` there. Linux's `/proc`; none elsewhere.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A zombie's (and a vanished process's) `cwd` cannot be read.
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}

/// Polls `child` until it exits (`true`) or `timeout` passes (`false`).
fn wait_for_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL);
    }
}

fn spawn(command: &mut Command, binary: &Path) -> Child {
    match command.spawn() {
        Ok(child) => child,
        Err(err) => panic!("cannot start {}: {err}", binary.display()),
    }
}

fn create(path: &Path) -> File {
    match File::create(path) {
        Ok(file) => file,
        Err(err) => panic!("cannot create {}: {err}", path.display()),
    }
}

fn clone(file: &File) -> File {
    match file.try_clone() {
        Ok(file) => file,
        Err(err) => panic!("cannot duplicate an output file's handle: {err}"),
    }
}

/// The file's text; empty if it does not exist (yet).
fn read(path: &Path) -> String {
    fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Whether any of these files says that a port was taken.
fn mentions_port_taken(paths: &[&Path]) -> bool {
    paths.iter().any(|path| {
        let text = read(path).to_ascii_lowercase();
        ADDR_IN_USE.iter().any(|needle| text.contains(needle))
    })
}

/// The last [`TAIL_LINES`] lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}
