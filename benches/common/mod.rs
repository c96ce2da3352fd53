//! What the benchmark runners that publish figures share: the statistics of their rounds and
//! the description of the machine the figures come from. Included by `compare.rs`, `nats.rs`,
//! `redis.rs` and `rabbitmq.rs` as `#[path = "common/mod.rs"] mod common;` (not a bench target of
//! its own).

use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

pub(crate) fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Rounds to 3 significant digits (the JSON need not carry the clock's noise).
pub(crate) fn sig3(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

// ---------------------------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------------------------

pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub(crate) fn command(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The 1, 5 and 15 minute load averages.
pub(crate) fn loadavg() -> [f64; 3] {
    let s = read("/proc/loadavg");
    let mut it = s.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

/// CPU time counters: (all CPUs' ticks in every state, busy ticks, steal ticks, this
/// process's ticks).
#[derive(Clone, Copy, Default)]
pub(crate) struct CpuTicks {
    total: u64,
    busy: u64,
    steal: u64,
    own: u64,
}

impl CpuTicks {
    pub(crate) fn now() -> Self {
        let stat = read("/proc/stat");
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        let total: u64 = (0..8).map(get).sum();
        let busy = total - get(3) - get(4);
        let own_stat = read("/proc/self/stat");
        // Fields after the command name (which may hold spaces) start at state (field 3);
        // utime and stime are fields 14 and 15.
        let after = own_stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let g: Vec<u64> = after
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let own = g.get(11).copied().unwrap_or(0) + g.get(12).copied().unwrap_or(0);
        Self {
            total,
            busy,
            steal: get(7),
            own,
        }
    }

    /// Over the span from `self` to `later`: (share of the machine used by other processes,
    /// share stolen by the hypervisor), both of all cores' time. `also_ns` is CPU time of
    /// other processes that counts as the run's own (`nats.rs`: the nats-server it drives).
    pub(crate) fn foreign_since(&self, later: &Self, also_ns: u64) -> (f64, f64) {
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        let busy = later.busy.saturating_sub(self.busy) as f64;
        let own = later.own.saturating_sub(self.own) as f64;
        let steal = later.steal.saturating_sub(self.steal) as f64;
        // A tick of `/proc/stat` and `/proc/self/stat` is 10 ms (USER_HZ = 100).
        let also = also_ns as f64 / 1e7;
        (
            ((busy - own - steal - also) / total).max(0.0),
            steal / total,
        )
    }
}

/// Versions from `Cargo.lock` of the `wanted` crates (those the figures depend on).
fn crate_versions(wanted: &[&str]) -> Value {
    let lock = read(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"));
    let mut out = serde_json::Map::new();
    let mut name = "";
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = \"") {
            name = n.trim_end_matches('"');
        } else if let Some(v) = line.strip_prefix("version = \"") {
            if wanted.contains(&name) {
                out.insert(name.to_string(), json!(v.trim_end_matches('"')));
            }
        }
    }
    Value::Object(out)
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// What the figures were measured on and with, `crates` the ones whose versions matter (the
/// run's own facts are added by the caller).
pub(crate) fn machine(crates: &[&str]) -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let hypervisor = field("flags").split_whitespace().any(|f| f == "hypervisor");
    let mem_kib: f64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|s| s.trim_matches('"').to_string())
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let rustc = command("rustc", &["-vV"]).unwrap_or_default();
    let rustc_line = rustc.lines().next().unwrap_or("unknown").to_string();
    let llvm = rustc
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .unwrap_or("")
        .to_string();
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(v) if v.is_empty() => "(cleared)".to_string(),
        Ok(v) => v,
        Err(_) => "(unset)".to_string(),
    };
    let mut features = Vec::new();
    if cfg!(target_feature = "sse4.2") {
        features.push("sse4.2");
    }
    if cfg!(target_feature = "avx2") {
        features.push("avx2");
    }
    if cfg!(target_feature = "avx512f") {
        features.push("avx512f");
    }
    let commit = command("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = command("git", &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    json!({
        "cpu": field("model name"),
        "cpu_family_model": format!("family {} model {}", field("cpu family"), field("model")),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "virtualized": hypervisor,
        "memory_gib": sig3(mem_kib / 1024.0 / 1024.0),
        "os": format!("{os}, Linux {kernel}"),
        "rustc": rustc_line,
        "llvm": llvm,
        "build_profile": if cfg!(debug_assertions) {
            "debug assertions ON: not for publication"
        } else {
            "bench (release: opt-level 3, debug = 1, no debug assertions)"
        },
        "rustflags": rustflags,
        "target_features_beyond_baseline": features,
        "crates": crate_versions(crates),
        "date": utc_now(),
        "commit": commit,
        "uncommitted_changes": dirty,
    })
}
