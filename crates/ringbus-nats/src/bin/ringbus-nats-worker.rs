//! `ringbus-nats-worker`: one instance of a service that imports a topic of `u64` ids from NATS
//! into a local bus, where a handler records each one. The scale tests (`tests/nats/scale.rs`) run
//! three of them as separate processes; it also serves to try fan-out and shared imports by
//! hand against a server of your own.
//!
//! ```text
//! ringbus-nats-worker --url nats://127.0.0.1:4222 --topic jobs --mode core|jetstream
//!     [--sharing fan-out|GROUP] [--prefix P] [--durable NAME] [--ack-wait-ms N]
//!     [--max-in-flight N] [--import-buffer N] [--work-us N]
//! ```
//!
//! `--sharing fan-out` (the default) imports with `Link::import` (every instance sees every
//! message); any other value is a group name for `Link::import_shared` (each message goes to
//! one instance of the group). `--work-us N` makes the handler take N microseconds per message
//! (an asynchronous wait, paid a millisecond at a time), so that messages queue in the local
//! bus.
//!
//! What it prints on stdout, one line each, written before the handler returns (so before a
//! JetStream import acks the message: a line for every acked message is out even if the
//! process is killed):
//! - `ready` once the import is subscribed (core) or its consumer exists (JetStream);
//! - `h <id>` for each message handled (again for a redelivery);
//! - on a clean stop, `stats <name>=<value> ...` (the link's counters) and `closed <complete>`.
//!
//! It stops cleanly, closing the link (settling what it holds) and then the bus, when its
//! stdin reaches end of file. Errors (bad arguments, no server) go to stderr with exit
//! status 2 or 1.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ringbus::Bus;
use ringbus_nats::{JetStreamOptions, Json, Link, Mode, Sharing};

/// How long the clean stop may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The command line.
#[derive(Debug)]
struct Args {
    url: String,
    prefix: String,
    topic: String,
    mode: Mode,
    sharing: Sharing,
    jetstream: JetStreamOptions,
    import_buffer: usize,
    work: Duration,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        url: "nats://127.0.0.1:4222".to_string(),
        prefix: "ringbus".to_string(),
        topic: "jobs".to_string(),
        mode: Mode::Core,
        sharing: Sharing::FanOut,
        jetstream: JetStreamOptions::default(),
        import_buffer: 4096,
        work: Duration::ZERO,
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|e| format!("{flag}: {v:?} is not a number ({e})"))
        };
        match flag.as_str() {
            "--url" => parsed.url = value()?,
            "--prefix" => parsed.prefix = value()?,
            "--topic" => parsed.topic = value()?,
            "--mode" => {
                parsed.mode = match value()?.as_str() {
                    "core" => Mode::Core,
                    "jetstream" => Mode::JetStream,
                    other => return Err(format!("--mode {other:?}: core or jetstream")),
                }
            }
            "--sharing" => {
                parsed.sharing = match value()? {
                    v if v == "fan-out" => Sharing::FanOut,
                    group => Sharing::Shared(group),
                }
            }
            "--durable" => parsed.jetstream.durable = value()?,
            "--ack-wait-ms" => {
                parsed.jetstream.ack_wait = Duration::from_millis(number(value()?)?);
            }
            "--max-in-flight" => {
                parsed.jetstream.max_in_flight = usize::try_from(number(value()?)?)
                    .map_err(|e| format!("--max-in-flight: {e}"))?;
            }
            "--import-buffer" => {
                parsed.import_buffer = usize::try_from(number(value()?)?)
                    .map_err(|e| format!("--import-buffer: {e}"))?;
            }
            "--work-us" => parsed.work = Duration::from_micros(number(value()?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

/// Writes one line to stdout, unbuffered past the line (Rust's stdout is line-buffered). A
/// closed stdout (the parent went away) is ignored: the process stops when stdin closes.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let bus = Bus::new();
    // The work is a wait (the runtime goes on meanwhile, as for a handler awaiting I/O), paid
    // in steps of at least a millisecond, tokio's timer resolution: each message adds its
    // share and the handler sleeps once a millisecond is owed.
    // (Relaxed: the handler runs one message at a time; the atomic is only for `Sync`.)
    let work = u64::try_from(args.work.as_nanos()).unwrap_or(u64::MAX);
    let owed_nanos = AtomicU64::new(0);
    let _record = bus.subscribe(&args.topic, move |id: &u64| {
        say(format_args!("h {id}"));
        let owed = owed_nanos.load(Ordering::Relaxed).saturating_add(work);
        let pause = if owed >= 1_000_000 {
            owed_nanos.store(0, Ordering::Relaxed);
            Duration::from_nanos(owed)
        } else {
            owed_nanos.store(owed, Ordering::Relaxed);
            Duration::ZERO
        };
        async move {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    })?;
    let link = Link::builder(args.url.as_str())
        .prefix(args.prefix.as_str())
        .import_buffer(args.import_buffer)
        .jetstream(args.jetstream.clone())
        .connect(&bus)
        .await?;
    link.import_as::<u64, _>(&args.topic, args.mode, args.sharing.clone(), Json)
        .await?;
    say(format_args!("ready"));

    // Stop when stdin ends: a thread reads it to the end (std's stdin has no async form here).
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().lock().read_to_end(&mut Vec::new());
        let _ = stop.send(());
    });
    let _ = stopped.await;

    let report = link.close(CLOSE_TIMEOUT).await;
    let s = &report.stats;
    say(format_args!(
        "stats imported={} acked={} nacked={} slow_consumer={} connects={} disconnects={} \
         import_errors={} ack_errors={}",
        s.imported,
        s.acked,
        s.nacked,
        s.slow_consumer,
        s.connects,
        s.disconnects,
        s.import_errors,
        s.ack_errors
    ));
    bus.close().await;
    say(format_args!("closed {}", report.complete));
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("ringbus-nats-worker: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ringbus-nats-worker: cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringbus-nats-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
