//! For engines: what the test-server harnesses of the engines share (feature `engine`):
//! finding the server's binary, skipping without one, a free port and a fresh directory.
//!
//! `ringbus_nats::testing::NatsServer` and `ringbus_redis::testing::RedisServer` start a
//! real server as a child process for tests; how each starts, waits for and reports on its
//! server is its own. These helpers use only `std`: no runtime is needed.

use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Whether the environment variable `var` (`REQUIRE_NATS`, `REQUIRE_REDIS`) is set to `1`
/// (or `true`/`yes`): tests must then fail, not skip, when no server binary is found.
pub fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|value| {
        let value = value.trim();
        value == "1" || value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("yes")
    })
}

/// `None` after a `SKIPPED: {why}` line on stderr, or a panic when `require` (the
/// environment variable of [`required`]) is set.
///
/// # Panics
///
/// When `require` is set.
pub fn skip_or_panic<T>(require: &str, why: &str) -> Option<T> {
    if required(require) {
        panic!("{require}=1 but {why}");
    }
    // Written to the real stderr, not through `eprintln!`, which the test harness captures:
    // a skipped test should be visible.
    let _ = writeln!(
        io::stderr(),
        "SKIPPED: {why} (set {require}=1 to make this an error)"
    );
    None
}

/// A server binary a harness runs, and where to look for it.
#[derive(Clone, Copy, Debug)]
pub struct Binary {
    /// Its name on `PATH`, which is also its Debian package's: `"nats-server"`.
    pub name: &'static str,
    /// The environment variable that names it explicitly: `"NATS_SERVER_BIN"`.
    pub explicit: &'static str,
    /// Where to look after `PATH`.
    pub well_known: &'static [&'static str],
    /// The environment variable that makes a missing binary a panic instead of a skip
    /// (see [`required`]): `"REQUIRE_NATS"`.
    pub require: &'static str,
}

impl Binary {
    /// Finds the binary: the path in [`explicit`](Self::explicit) if set, else
    /// [`name`](Self::name) on `PATH`, else the first of [`well_known`](Self::well_known)
    /// that exists. `Ok(None)` if there is none, `Err` if `explicit` names something that is
    /// not an executable file.
    pub fn find(&self) -> Result<Option<PathBuf>, String> {
        if let Some(value) = std::env::var_os(self.explicit).filter(|value| !value.is_empty()) {
            let path = PathBuf::from(&value);
            if is_executable(&path) {
                return Ok(Some(path));
            }
            return Err(format!(
                "{}={} is not an executable file",
                self.explicit,
                path.display()
            ));
        }
        let on_path = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
            .map(|dir| dir.join(self.name));
        let well_known = self.well_known.iter().map(PathBuf::from);
        Ok(on_path.chain(well_known).find(|path| is_executable(path)))
    }

    /// The binary, or `None` (after printing a `SKIPPED:` line, see [`skip_or_panic`]) when
    /// there is none and [`require`](Self::require) is not set.
    ///
    /// # Panics
    ///
    /// When no binary is found and `require` is set, or `explicit` is not an executable file.
    pub fn find_or_skip(&self) -> Option<PathBuf> {
        match self.find() {
            Ok(Some(binary)) => Some(binary),
            Ok(None) => skip_or_panic(
                self.require,
                &format!(
                    "no {name} binary found; install it (apt-get install {name}) or set {}",
                    self.explicit,
                    name = self.name
                ),
            ),
            Err(message) => panic!("{message}"),
        }
    }
}

/// Whether `path` is a file that can be run (on Unix: with an execute bit set).
pub fn is_executable(path: &Path) -> bool {
    let Ok(metadata) = fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        metadata.is_file()
    }
}

/// A port that was free a moment ago: bound on 127.0.0.1:0, then released for the server
/// (another process could take it before the server binds it, which the harnesses retry).
///
/// # Panics
///
/// When no port can be bound on 127.0.0.1.
pub fn free_port() -> u16 {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("cannot find a free port on 127.0.0.1: {err}"),
    }
}

/// A new, empty directory under the system temp dir, named `<prefix>-<pid>-<count>-<nanos>`:
/// unique by process id, counter and time, and never one that existed before.
///
/// # Panics
///
/// When no such directory can be created.
pub fn make_temp_dir(prefix: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    let mut last_err = None;
    for _ in 0..100 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("{prefix}-{}-{count}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last_err = Some(err),
            Err(err) => panic!("cannot create a directory in {}: {err}", base.display()),
        }
    }
    panic!(
        "cannot create a unique directory in {}: {last_err:?}",
        base.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_unique_and_new() {
        let (a, b) = (make_temp_dir("ringbus-link"), make_temp_dir("ringbus-link"));
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
        assert!(a.starts_with(std::env::temp_dir()));
        fs::remove_dir(a).unwrap();
        fs::remove_dir(b).unwrap();
    }

    #[test]
    fn a_missing_binary_is_none() {
        let missing = Binary {
            name: "ringbus-no-such-binary",
            explicit: "RINGBUS_LINK_TEST_NO_SUCH_VAR",
            well_known: &["/nonexistent/ringbus"],
            require: "RINGBUS_LINK_TEST_NO_SUCH_VAR",
        };
        assert_eq!(missing.find(), Ok(None));
        assert!(!is_executable(Path::new("/nonexistent/ringbus")));
    }
}
