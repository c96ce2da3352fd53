//! A real `redis-server` for tests: [`RedisServer`] starts one as a child process on
//! `127.0.0.1`, on a free port, with a fresh temporary directory, and kills it and removes the
//! directory when dropped.
//!
//! By default the server keeps nothing on disk (`--save "" --appendonly no`).
//! [`ServerOptions::persistent`] turns on the append-only file with an `fsync` per write
//! (`--appendonly yes --appendfsync always`), so that everything the server answered survives
//! [`RedisServer::kill`] (SIGKILL) and [`RedisServer::start_again`] on the same port and
//! directory: what a kill-and-restart test needs.
//!
//! The binary is `$REDIS_SERVER_BIN` if set, else `redis-server` on `PATH`, else
//! `/usr/bin/redis-server` or `/usr/local/bin/redis-server` (Debian's `redis-server`
//! package). When none exists, [`RedisServer::start`] prints a `SKIPPED:` line to stderr and
//! returns `None`, so the caller can skip its test, unless `REQUIRE_REDIS=1` is set (as in
//! CI), in which case it panics.
//!
//! [`ServerOptions::tls`] serves TLS only (`rediss://`), with a certificate for `127.0.0.1`
//! signed by a certificate authority made for that server
//! ([`RedisServer::tls_root_certificate`]); making them needs the `openssl` command.
//!
//! This module uses only `std` threads: no async runtime is needed to start or stop a server.
//!
//! ```no_run
//! use ringbus_redis::testing::{RedisServer, ServerOptions};
//!
//! let Some(server) = RedisServer::start_with(ServerOptions::new().password("secret")) else {
//!     return; // no redis-server binary, and REQUIRE_REDIS is not set: skip
//! };
//! let url = server.url(); // "redis://:secret@127.0.0.1:<port>"
//! # let _ = url;
//! ```

use std::fmt;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ringbus_link::server::{self, free_port, Binary};

/// How long a start may take before it is reported as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a restart keeps retrying while its port is still in use.
const PORT_RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between readiness checks.
const POLL: Duration = Duration::from_millis(10);
/// What redis-server logs once it accepts clients.
const READY_LINE: &str = "Ready to accept connections";
/// What redis-server logs (fatally) when its port is taken.
const ADDR_IN_USE: &str = "Address already in use";

/// The `redis-server` binary, found in `REDIS_SERVER_BIN`, on `PATH` or where Debian puts it.
const REDIS_SERVER: Binary = Binary {
    name: "redis-server",
    explicit: "REDIS_SERVER_BIN",
    well_known: &["/usr/bin/redis-server", "/usr/local/bin/redis-server"],
    require: "REQUIRE_REDIS",
};

/// Whether `REQUIRE_REDIS` is set to `1` (or `true`/`yes`): Redis tests must then fail, not
/// skip, when no `redis-server` binary is found. CI sets it.
pub fn require_redis() -> bool {
    server::required("REQUIRE_REDIS")
}

/// How to run a [`RedisServer`]: persistence and a password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ServerOptions {
    persistent: bool,
    password: Option<String>,
    tls: bool,
}

impl ServerOptions {
    /// No persistence, no password.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps every write in an append-only file, fsynced before the server answers, so that
    /// what it answered survives a kill and restart.
    #[must_use]
    pub fn persistent(mut self, on: bool) -> Self {
        self.persistent = on;
        self
    }

    /// Requires clients to authenticate with this password (`requirepass`).
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Serves TLS only (no plain port): a certificate for `127.0.0.1`, signed by a
    /// certificate authority made for this server (see
    /// [`RedisServer::tls_root_certificate`]); clients are not asked for certificates.
    /// Making them needs the `openssl` command: without it the start skips, or panics under
    /// `REQUIRE_REDIS=1`, as without `redis-server`.
    #[must_use]
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }
}

impl fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerOptions")
            .field("persistent", &self.persistent)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// A `redis-server` child process on `127.0.0.1`, on a free port, with its own temporary
/// directory; killed, and the directory removed, on drop. Its `Debug` output never shows the
/// password.
pub struct RedisServer {
    binary: PathBuf,
    options: ServerOptions,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Numbers the starts, so each has its own log file.
    generation: u32,
}

impl RedisServer {
    /// Starts a server with the default [`ServerOptions`].
    ///
    /// Returns `None`, after printing a `SKIPPED:` line to stderr, when no `redis-server`
    /// binary is found and `REQUIRE_REDIS` is not set.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start_with`].
    pub fn start() -> Option<Self> {
        Self::start_with(ServerOptions::new())
    }

    /// Starts a server with these options and waits until it accepts clients.
    ///
    /// Returns `None`, after printing a `SKIPPED:` line to stderr, when no `redis-server`
    /// binary is found and `REQUIRE_REDIS` is not set.
    ///
    /// # Panics
    ///
    /// When no binary is found and `REQUIRE_REDIS=1`; when `REDIS_SERVER_BIN` is not an
    /// executable file; when the directory cannot be made, the process cannot be spawned, or
    /// the server exits or is not ready within 10 s (the message quotes its log's tail).
    pub fn start_with(options: ServerOptions) -> Option<Self> {
        let binary = REDIS_SERVER.find_or_skip()?;
        let dir = server::make_temp_dir("ringbus-redis");
        if options.tls {
            match make_certificates(&dir) {
                Ok(()) => {}
                Err(Certificates::NoOpenssl(why)) => {
                    let _ = fs::remove_dir_all(&dir);
                    return server::skip_or_panic("REQUIRE_REDIS", &why);
                }
                Err(Certificates::Failed(why)) => {
                    let _ = fs::remove_dir_all(&dir);
                    panic!("cannot make the TLS certificates: {why}");
                }
            }
        }
        let mut server = Self {
            binary,
            options,
            port: 0,
            dir,
            child: None,
            generation: 0,
        };
        server.launch(true);
        Some(server)
    }

    /// The client URL, with the password if there is one:
    /// `redis[s]://[:password@]127.0.0.1:<port>` (`rediss` with [`ServerOptions::tls`]).
    pub fn url(&self) -> String {
        let scheme = if self.options.tls { "rediss" } else { "redis" };
        match &self.options.password {
            Some(password) => format!("{scheme}://:{password}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// With [`ServerOptions::tls`]: the PEM certificate of the authority that signed the
    /// server's certificate, for the client to trust.
    pub fn tls_root_certificate(&self) -> Option<Vec<u8>> {
        if !self.options.tls {
            return None;
        }
        match fs::read(self.dir.join(CA_CERT)) {
            Ok(pem) => Some(pem),
            Err(err) => panic!("cannot read the test CA's certificate: {err}"),
        }
    }

    /// The port; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the running server; `None` after [`RedisServer::kill`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server process is alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The server's directory (its append-only file, logs); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server (SIGKILL, no graceful shutdown) and starts it again on the same port
    /// and directory; see [`RedisServer::start_again`].
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start_with`].
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Kills the server (SIGKILL) and waits for the process to end. Does nothing if it is
    /// already stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Errors mean the process has already exited; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again after [`RedisServer::kill`], on the same port and directory
    /// (with [`ServerOptions::persistent`], with everything it had answered), retrying for up
    /// to 10 s while the port is still in use. Does nothing if it is running.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start_with`].
    pub fn start_again(&mut self) {
        if self.is_running() {
            return;
        }
        self.kill();
        self.launch(false);
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("redis.{}.log", self.generation))
    }

    fn launch(&mut self, fresh_port: bool) {
        let retry_deadline = Instant::now() + PORT_RETRY_TIMEOUT;
        loop {
            if fresh_port {
                self.port = free_port();
            }
            self.spawn();
            match self.wait_ready() {
                Ok(()) => return,
                Err(in_use) if in_use && Instant::now() < retry_deadline => {
                    self.kill();
                    if !fresh_port {
                        thread::sleep(Duration::from_millis(50));
                    }
                }
                Err(_) => {
                    let message = self.failure_report();
                    self.kill();
                    panic!("{message}");
                }
            }
        }
    }

    fn spawn(&mut self) {
        self.generation += 1;
        let mut command = Command::new(&self.binary);
        command.args(["--bind", "127.0.0.1"]);
        if self.options.tls {
            command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(self.dir.join(SERVER_CERT))
                .arg("--tls-key-file")
                .arg(self.dir.join(SERVER_KEY))
                .arg("--tls-ca-cert-file")
                .arg(self.dir.join(CA_CERT))
                .args(["--tls-auth-clients", "no"]);
        } else {
            command.arg("--port").arg(self.port.to_string());
        }
        command
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.log_path())
            .args(["--save", "", "--daemonize", "no"]);
        if self.options.persistent {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        if let Some(password) = &self.options.password {
            command.arg("--requirepass").arg(password);
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match command.spawn() {
            Ok(child) => self.child = Some(child),
            Err(err) => panic!("cannot start {}: {err}", self.binary.display()),
        }
    }

    /// Polls until the server logs that it is ready and its port accepts a connection
    /// (`Ok`), it exits (`Err(true)` if its port was taken), or 10 s pass (`Err(false)`).
    fn wait_ready(&mut self) -> Result<(), bool> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            let exited = !self.is_running();
            let log = fs::read_to_string(self.log_path()).unwrap_or_default();
            if exited {
                return Err(log.contains(ADDR_IN_USE));
            }
            if log.contains(READY_LINE)
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(false);
            }
            thread::sleep(POLL);
        }
    }

    fn failure_report(&self) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "redis-server did not start within {READY_TIMEOUT:?}\nserver: {self:?}\nbinary: {}\n--- tail of its log ---\n{tail}",
            self.binary.display()
        )
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Why [`make_certificates`] made none.
enum Certificates {
    /// No `openssl` command: skip, as without `redis-server`.
    NoOpenssl(String),
    Failed(String),
}

/// The files [`make_certificates`] writes in a server's directory.
const CA_CERT: &str = "ca.crt";
const SERVER_CERT: &str = "server.crt";
const SERVER_KEY: &str = "server.key";

/// Makes, in `dir`, a certificate authority (`ca.crt`, `ca.key`) and a server certificate
/// it signed for `127.0.0.1` (`server.crt`, `server.key`), P-256 keys, valid for two days,
/// with the `openssl` command.
fn make_certificates(dir: &Path) -> Result<(), Certificates> {
    let extensions = dir.join("server.ext");
    fs::write(
        &extensions,
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n\
         keyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n",
    )
    .map_err(|e| Certificates::Failed(format!("cannot write {}: {e}", extensions.display())))?;
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: [Vec<&str>; 3] = [
        [
            &["req", "-x509"][..],
            &new_key,
            &["-keyout", "ca.key", "-out", CA_CERT, "-days", "2"],
            &["-subj", "/CN=ringbus-redis test CA"],
        ]
        .concat(),
        [
            &["req"][..],
            &new_key,
            &[
                "-keyout",
                SERVER_KEY,
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            CA_CERT,
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            SERVER_CERT,
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => Certificates::NoOpenssl(
                    "no openssl command found to make TLS certificates; install it \
                     (apt-get install openssl)"
                        .to_string(),
                ),
                _ => Certificates::Failed(format!("cannot run openssl: {e}")),
            })?;
        if !out.status.success() {
            return Err(Certificates::Failed(format!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}
