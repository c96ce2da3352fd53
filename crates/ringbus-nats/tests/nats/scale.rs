//! Three processes of one service share a topic, or each see all of it: the
//! `ringbus-nats-worker` binary (this package's; cargo builds it before this test) run three
//! times against one `nats-server` on 127.0.0.1, while this process publishes 30,000 ids
//! through a bus export. Each worker prints a line per message it handled, before its handler
//! returns (so before a JetStream import acks it); the test reads the lines and checks:
//!
//! - core, shared (a queue group): no id handled twice; the ids never handled are the losses
//!   NATS core allows (at most once), counted and reported, and only allowed when a worker
//!   reported a slow consumer (its client dropped them);
//! - core, fan-out: every worker handled every id, once;
//! - JetStream, fan-out (a durable consumer per worker): every worker handled every id, once;
//! - JetStream, shared (one durable consumer): every id handled exactly once across the three;
//! - JetStream, shared, one worker killed with SIGKILL mid-stream: nothing acknowledged is
//!   lost: every id is handled by some worker, and the consumer ends with nothing pending
//!   and nothing awaiting an ack. Exactly once holds for acknowledged messages, not for
//!   handler runs: a message the killed worker handled but had not acked (or whose ack was
//!   still in its socket buffer) is delivered again to a survivor after `ack_wait` (2 s
//!   here), so its handler ran twice. Those duplicates are counted, bounded and reported
//!   (`cargo test -- --nocapture` shows the counts), as are any redeliveries among the
//!   survivors (a message held past `ack_wait`).
//!
//! The tests take turns (one lock), so that three workers, a server and the publisher have
//! the machine's cores to themselves. Waits poll with deadlines; none is a sleep standing in
//! for an event. Without a nats-server binary they skip, unless `REQUIRE_NATS=1` (as in CI),
//! where they fail.
//!
//! All are ignored by a plain `cargo test` (about 25 s of processes starting and stopping):
//! CI and `just test` run them with
//! `cargo test -p ringbus-nats --test nats -- --ignored --skip fifty`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringbus::Bus;
use ringbus_nats::testing::NatsServer;
use ringbus_nats::{Link, Mode};

const WORKER: &str = env!("CARGO_BIN_EXE_ringbus-nats-worker");
const PREFIX: &str = "scale";
const TOPIC: &str = "jobs";
const GROUP: &str = "workers";
const COUNT: u64 = 30_000;
const WORKERS: usize = 3;
/// How long a run may take to be handled in full before the test fails.
const WAIT: Duration = Duration::from_secs(90);
/// How long core workers get, once the server has every message, to handle them: what is
/// not handled by then counts as lost.
const CORE_SETTLE: Duration = Duration::from_secs(20);
/// How long a worker may take to start, or to stop cleanly.
const START_STOP: Duration = Duration::from_secs(20);
/// JetStream's redelivery wait in the kill test: short, so a survivor takes over soon.
const ACK_WAIT_MS: u64 = 2_000;
/// Imports a worker holds at most in the kill test (handed to its bus, not yet acked).
const MAX_IN_FLIGHT: u64 = 64;
/// Each handler's work in the kill test, in microseconds.
const WORK_US: &str = "300";
/// Messages one pull fetches (the link's default): a killed worker may have had these
/// delivered and not yet handed to its bus.
const PULL_BATCH: u64 = 64;

/// One test at a time (see the module docs).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a worker's stdout said so far.
#[derive(Default)]
struct Output {
    ready: AtomicBool,
    count: AtomicU64,
    handled: Mutex<Vec<u64>>,
    stats: Mutex<Option<String>>,
    closed: Mutex<Option<String>>,
}

/// One `ringbus-nats-worker` process, and the thread that reads its stdout.
struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<Output>,
    reader: Option<JoinHandle<()>>,
}

/// What a stopped (or killed) worker handled, in order, and its final stats line.
struct Done {
    name: String,
    handled: Vec<u64>,
    stats: Option<String>,
}

impl Worker {
    fn spawn(name: &str, url: &str, args: &[&str]) -> Worker {
        let mut child = Command::new(WORKER)
            .args(["--url", url, "--prefix", PREFIX, "--topic", TOPIC])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {WORKER}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let output = Arc::new(Output::default());
        let out = output.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(id) = line.strip_prefix("h ") {
                    let id = id.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
                    out.handled.lock().unwrap().push(id);
                    out.count.fetch_add(1, Ordering::Relaxed);
                } else if line == "ready" {
                    out.ready.store(true, Ordering::Release);
                } else if line.starts_with("stats ") {
                    *out.stats.lock().unwrap() = Some(line);
                } else if let Some(complete) = line.strip_prefix("closed ") {
                    *out.closed.lock().unwrap() = Some(complete.to_string());
                } else {
                    panic!("unexpected line from a worker: {line:?}");
                }
            }
        });
        Worker {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            output,
            reader: Some(reader),
        }
    }

    fn count(&self) -> u64 {
        self.output.count.load(Ordering::Relaxed)
    }

    /// Fails the test if the worker exited (it runs until told to stop).
    fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("worker {} exited early: {status}", self.name);
        }
    }

    /// Closes its stdin (it closes its link, settling what it holds, then its bus) and waits
    /// for it to exit successfully.
    async fn stop(mut self) -> Done {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + START_STOP;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "worker {} failed: {status}", self.name);
                    break;
                }
                Ok(None) => {}
                Err(e) => panic!("worker {}: {e}", self.name),
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not stop within {START_STOP:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let done = self.finish();
        let closed = self.output.closed.lock().unwrap().clone();
        assert_eq!(
            closed.as_deref(),
            Some("true"),
            "worker {}: its link close was not complete",
            done.name
        );
        done
    }

    /// SIGKILL: no close, nothing settled.
    fn kill(mut self) -> Done {
        self.child.kill().expect("kill the worker");
        self.child.wait().expect("reap the worker");
        self.finish()
    }

    /// Reads the rest of its stdout (the pipe ends with the process).
    fn finish(&mut self) -> Done {
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader thread panicked");
        }
        Done {
            name: self.name.clone(),
            handled: std::mem::take(&mut *self.output.handled.lock().unwrap()),
            stats: self.output.stats.lock().unwrap().clone(),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A test that failed midway leaves no process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the workers and waits until each has its import in place.
async fn start_workers(server: &NatsServer, args: &[Vec<String>]) -> Vec<Worker> {
    let url = server.url();
    let mut workers: Vec<Worker> = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            Worker::spawn(&format!("w{i}"), &url, &a)
        })
        .collect();
    let deadline = Instant::now() + START_STOP;
    while !workers
        .iter()
        .all(|w| w.output.ready.load(Ordering::Acquire))
    {
        for w in &mut workers {
            w.check_alive();
        }
        assert!(
            Instant::now() < deadline,
            "workers not ready within {START_STOP:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    workers
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Publishes ids `0..COUNT` through a bus export in `mode`, and closes the link: on return
/// the server has every one (JetStream: acknowledged each).
async fn publish(url: String, mode: Mode) {
    let bus = Bus::new();
    let link = Link::builder(url)
        .prefix(PREFIX)
        .connect(&bus)
        .await
        .expect("the publisher connects");
    link.export::<u64>(TOPIC, mode)
        .await
        .expect("export the topic");
    let topic = bus.topic::<u64>(TOPIC).expect("the topic");
    for id in 0..COUNT {
        topic.publish(id).await.expect("publish");
    }
    let report = link.close(Duration::from_secs(30)).await;
    assert!(report.complete, "the publisher's close: {report:?}");
    assert_eq!(report.stats.exported, COUNT, "{report:?}");
    if mode == Mode::JetStream {
        assert_eq!(report.stats.export_acked, COUNT, "{report:?}");
    }
    bus.close().await;
}

/// Polls until `done` says so, for at most `limit`; `Err` says what was not reached.
async fn wait_until(
    workers: &mut [Worker],
    what: &str,
    limit: Duration,
    mut done: impl FnMut(&[Worker]) -> bool,
) -> Result<Duration, String> {
    let started = Instant::now();
    while !done(workers) {
        for w in workers.iter_mut() {
            w.check_alive();
        }
        if started.elapsed() >= limit {
            let counts: Vec<u64> = workers.iter().map(Worker::count).collect();
            return Err(format!(
                "not within {limit:?}: {what}; handled so far: {counts:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(started.elapsed())
}

fn total(workers: &[Worker]) -> u64 {
    workers.iter().map(Worker::count).sum()
}

/// How many times each id was handled, over all the workers.
fn tally(done: &[Done]) -> BTreeMap<u64, u32> {
    let mut times = BTreeMap::new();
    for d in done {
        for &id in &d.handled {
            *times.entry(id).or_insert(0) += 1;
        }
    }
    times
}

/// The distinct ids handled so far, over all the live workers.
fn distinct(workers: &[Worker]) -> u64 {
    let mut seen = vec![false; COUNT as usize];
    let mut n = 0;
    for w in workers {
        for &id in w.output.handled.lock().unwrap().iter() {
            let slot = &mut seen[id as usize];
            if !*slot {
                *slot = true;
                n += 1;
            }
        }
    }
    n
}

/// `slow_consumer=<n>` from a worker's stats line.
fn stat(done: &Done, name: &str) -> u64 {
    let stats = done
        .stats
        .as_deref()
        .unwrap_or_else(|| panic!("worker {} printed no stats", done.name));
    stats
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {stats:?}"))
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 5 s: `cargo test -p ringbus-nats --test nats scale:: -- --ignored --skip fifty`"]
async fn core_shared_three_processes_handle_each_message_at_most_once() {
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let started = Instant::now();
    // A client buffer above the run: the client should drop nothing, so losses come only
    // from NATS core itself (and must then show as slow consumers).
    let worker = args(&[
        "--mode",
        "core",
        "--sharing",
        GROUP,
        "--import-buffer",
        "65536",
    ]);
    let mut workers = start_workers(&server, &vec![worker; WORKERS]).await;
    publish(server.url(), Mode::Core).await;
    // The server has every message (the publisher's close made a round trip): each reached
    // a worker by now, or was lost. Losses are allowed (at most once): counted below.
    let _ = wait_until(&mut workers, "every id handled", CORE_SETTLE, |w| {
        total(w) >= COUNT
    })
    .await;
    let mut done = Vec::new();
    for w in workers {
        done.push(w.stop().await);
    }
    let times = tally(&done);
    let duplicates: Vec<_> = times.iter().filter(|&(_, &n)| n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "shared core import: {} ids handled more than once, first {:?}",
        duplicates.len(),
        duplicates.first()
    );
    let lost = COUNT - times.len() as u64;
    let shares: Vec<usize> = done.iter().map(|d| d.handled.len()).collect();
    let slow: u64 = done.iter().map(|d| stat(d, "slow_consumer")).sum();
    eprintln!(
        "core shared: {COUNT} published, handled {shares:?} (sum {}), lost {lost}, \
         slow-consumer events {slow}, in {:?}",
        times.len(),
        started.elapsed()
    );
    assert!(
        shares.iter().all(|&n| n > 0),
        "a worker got no share: {shares:?}"
    );
    assert!(
        lost == 0 || slow > 0,
        "{lost} ids lost with no slow consumer reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 5 s: `cargo test -p ringbus-nats --test nats scale:: -- --ignored --skip fifty`"]
async fn core_fan_out_three_processes_each_handle_every_message() {
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let started = Instant::now();
    let worker = args(&["--mode", "core", "--import-buffer", "65536"]);
    let mut workers = start_workers(&server, &vec![worker; WORKERS]).await;
    publish(server.url(), Mode::Core).await;
    wait_until(&mut workers, "every worker handled every id", WAIT, |w| {
        w.iter().all(|w| w.count() >= COUNT)
    })
    .await
    .unwrap();
    let mut done = Vec::new();
    for w in workers {
        done.push(w.stop().await);
    }
    for d in &done {
        let times = tally(std::slice::from_ref(d));
        assert_eq!(times.len() as u64, COUNT, "worker {}", d.name);
        assert!(times.values().all(|&n| n == 1), "worker {}", d.name);
    }
    eprintln!(
        "core fan-out: {COUNT} published, each of {WORKERS} workers handled all, in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 5 s: `cargo test -p ringbus-nats --test nats scale:: -- --ignored --skip fifty`"]
async fn jetstream_fan_out_three_processes_each_handle_every_message() {
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let started = Instant::now();
    // Fan-out on JetStream: a durable consumer per worker.
    let workers_args: Vec<Vec<String>> = (0..WORKERS)
        .map(|i| args(&["--mode", "jetstream", "--durable", &format!("own{i}")]))
        .collect();
    let mut workers = start_workers(&server, &workers_args).await;
    publish(server.url(), Mode::JetStream).await;
    wait_until(&mut workers, "every worker handled every id", WAIT, |w| {
        w.iter().all(|w| w.count() >= COUNT)
    })
    .await
    .unwrap();
    let mut done = Vec::new();
    for w in workers {
        done.push(w.stop().await);
    }
    for d in &done {
        let times = tally(std::slice::from_ref(d));
        assert_eq!(times.len() as u64, COUNT, "worker {}", d.name);
        let twice = times.values().filter(|&&n| n > 1).count();
        assert_eq!(twice, 0, "worker {}: ids handled twice", d.name);
    }
    eprintln!(
        "jetstream fan-out: {COUNT} published, each of {WORKERS} workers handled all, in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 5 s: `cargo test -p ringbus-nats --test nats scale:: -- --ignored --skip fifty`"]
async fn jetstream_shared_three_processes_handle_each_message_exactly_once() {
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let started = Instant::now();
    // Each worker its own durable name: only the group makes them share.
    let workers_args: Vec<Vec<String>> = (0..WORKERS)
        .map(|i| {
            args(&[
                "--mode",
                "jetstream",
                "--sharing",
                GROUP,
                "--durable",
                &format!("own{i}"),
            ])
        })
        .collect();
    let mut workers = start_workers(&server, &workers_args).await;
    publish(server.url(), Mode::JetStream).await;
    wait_until(&mut workers, "every id handled", WAIT, |w| {
        total(w) >= COUNT && distinct(w) == COUNT
    })
    .await
    .unwrap();
    let mut done = Vec::new();
    for w in workers {
        done.push(w.stop().await);
    }
    let times = tally(&done);
    let shares: Vec<usize> = done.iter().map(|d| d.handled.len()).collect();
    let duplicates = times.values().filter(|&&n| n > 1).count();
    eprintln!(
        "jetstream shared: {COUNT} published, handled {shares:?}, distinct {}, \
         duplicates {duplicates}, in {:?}",
        times.len(),
        started.elapsed()
    );
    assert_eq!(times.len() as u64, COUNT, "some id was never handled");
    assert_eq!(
        duplicates, 0,
        "exactly once: ids handled more than once across the workers"
    );
    assert!(
        shares.iter().all(|&n| n > 0),
        "a worker got no share: {shares:?}"
    );
    for d in &done {
        assert_eq!(
            stat(d, "acked"),
            d.handled.len() as u64,
            "worker {}: acked what it handled",
            d.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 5 s: `cargo test -p ringbus-nats --test nats scale:: -- --ignored --skip fifty`"]
async fn jetstream_shared_sigkill_mid_stream_loses_nothing_acknowledged() {
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let started = Instant::now();
    let worker = args(&[
        "--mode",
        "jetstream",
        "--sharing",
        GROUP,
        "--ack-wait-ms",
        &ACK_WAIT_MS.to_string(),
        "--max-in-flight",
        &MAX_IN_FLIGHT.to_string(),
        // Handlers that take time, so each worker holds messages it has not handled (up to
        // MAX_IN_FLIGHT) when the kill comes: without this the victim's bus is empty
        // and an import that acked on receipt would pass.
        "--work-us",
        WORK_US,
    ]);
    let mut workers = start_workers(&server, &vec![worker; WORKERS]).await;
    let publisher = tokio::spawn(publish(server.url(), Mode::JetStream));

    // Mid-stream: the victim has handled a tenth of the run, the others are at work.
    wait_until(&mut workers, "the victim's first tenth", WAIT, |w| {
        w[0].count() >= COUNT / 10
    })
    .await
    .unwrap();
    let victim = workers.remove(0).kill();
    let killed_at = total(&workers) + victim.handled.len() as u64;
    publisher.await.expect("the publisher");

    // The survivors handle the rest, and what the victim took without acking comes back to
    // them after the ack wait: wait until the consumer has nothing left, neither pending nor
    // awaiting an ack, and every id was handled somewhere.
    let js = async_nats::jetstream::new(
        async_nats::connect(server.url())
            .await
            .expect("a client for the consumer's state"),
    );
    let consumer_name = format!("{GROUP}_{TOPIC}");
    let stream = js
        .get_stream(PREFIX.to_ascii_uppercase())
        .await
        .expect("the stream");
    let victim_ids = {
        let mut seen = vec![false; COUNT as usize];
        for &id in &victim.handled {
            seen[id as usize] = true;
        }
        seen
    };
    let deadline = Instant::now() + WAIT;
    loop {
        for w in workers.iter_mut() {
            w.check_alive();
        }
        let info = stream
            .consumer_info(&consumer_name)
            .await
            .expect("the consumer's info");
        let union = {
            let mut seen = victim_ids.clone();
            for w in &workers {
                for &id in w.output.handled.lock().unwrap().iter() {
                    seen[id as usize] = true;
                }
            }
            seen.iter().filter(|&&s| s).count() as u64
        };
        if info.num_pending == 0 && info.num_ack_pending == 0 && union == COUNT {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not within {WAIT:?}: {union} of {COUNT} handled, consumer pending {} \
             ack-pending {} redelivered {}",
            info.num_pending,
            info.num_ack_pending,
            info.num_redelivered
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut survivors = Vec::new();
    for w in workers {
        survivors.push(w.stop().await);
    }

    // Nothing acknowledged is lost: every id was handled, by the victim before the kill or by
    // a survivor (which took over whatever the victim held unacked).
    let all = tally(&survivors);
    let mut union = all.clone();
    for &id in &victim.handled {
        *union.entry(id).or_insert(0) += 1;
    }
    let lost = COUNT - union.len() as u64;
    // Duplicates: the victim's handled-but-unacked messages, handled again by a survivor,
    // and messages redelivered among the survivors (held past the ack wait).
    let taken_over = victim
        .handled
        .iter()
        .filter(|&&id| all.contains_key(&id))
        .count() as u64;
    let among_survivors = all.values().filter(|&&n| n > 1).count() as u64;
    let shares: Vec<usize> = survivors.iter().map(|d| d.handled.len()).collect();
    eprintln!(
        "jetstream shared, SIGKILL: {COUNT} published; victim handled {} before the kill \
         (total handled then {killed_at}); survivors handled {shares:?}; lost {lost}; \
         duplicates: {taken_over} handled by the victim and again by a survivor, \
         {among_survivors} handled twice among the survivors; in {:?}",
        victim.handled.len(),
        started.elapsed()
    );
    assert_eq!(lost, 0, "ids never handled after the kill");
    assert!(
        shares.iter().all(|&n| n > 0),
        "a survivor got no share: {shares:?}"
    );
    // What the victim handled without its ack reaching the server: at most what it held
    // (handed to its bus, or acked into its socket buffer) and one pull's worth.
    assert!(
        taken_over <= 2 * MAX_IN_FLIGHT + PULL_BATCH,
        "{taken_over} of the victim's messages handled again: more than it could hold"
    );
}

/// The resident set of process `pid`, in KiB (0 if it cannot be read).
fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse().ok())
        })
        .unwrap_or(0)
}

/// Fifty worker processes against one nats-server on loopback, in three arrangements (core
/// shared, core fan-out, JetStream shared): how long they take to start, how long 30,000 ids
/// take to reach them, what each holds in memory, and what they lost or handled twice. A
/// measurement for `docs/scale.md`, not a CI test (about two minutes on 2 cores):
/// `cargo test --release -p ringbus-nats --test nats scale::fifty -- --ignored --nocapture`.
/// It still asserts what the three-process tests assert, so a run that lost what it must not
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 50 processes, about two minutes"]
async fn fifty_processes_on_loopback() {
    const FIFTY: usize = 50;
    let _turn = TURN.lock().await;
    let Some(server) = NatsServer::start() else {
        return;
    };
    let arrangements: [(&str, Vec<String>, Mode); 3] = [
        (
            "core shared",
            args(&[
                "--mode",
                "core",
                "--sharing",
                GROUP,
                "--import-buffer",
                "65536",
            ]),
            Mode::Core,
        ),
        (
            "core fan-out",
            args(&["--mode", "core", "--import-buffer", "65536"]),
            Mode::Core,
        ),
        (
            "jetstream shared",
            args(&[
                "--mode",
                "jetstream",
                "--sharing",
                GROUP,
                "--durable",
                "fifty",
            ]),
            Mode::JetStream,
        ),
    ];
    for (label, worker_args, mode) in arrangements {
        let started = Instant::now();
        let mut workers = start_workers(&server, &vec![worker_args; FIFTY]).await;
        let ready = started.elapsed();
        let mut resident: Vec<u64> = workers.iter().map(|w| resident_kib(w.child.id())).collect();
        resident.sort_unstable();
        let publishing = Instant::now();
        publish(server.url(), mode).await;
        let published = publishing.elapsed();
        let fan_out = label.ends_with("fan-out");
        let waited = if fan_out {
            wait_until(&mut workers, "every worker handled every id", WAIT, |w| {
                w.iter().all(|w| w.count() >= COUNT)
            })
            .await
        } else if mode == Mode::JetStream {
            wait_until(&mut workers, "every id handled", WAIT, |w| {
                total(w) >= COUNT && distinct(w) == COUNT
            })
            .await
        } else {
            // Core shared: what the group did not get within the settle time is lost.
            let _ = wait_until(&mut workers, "every id handled", CORE_SETTLE, |w| {
                distinct(w) == COUNT
            })
            .await;
            Ok(Duration::ZERO)
        };
        if let Err(e) = waited {
            panic!("{label}: {e}");
        }
        let reached = publishing.elapsed();
        let mut done = Vec::new();
        for w in workers {
            done.push(w.stop().await);
        }
        let times = tally(&done);
        let mut shares: Vec<usize> = done.iter().map(|d| d.handled.len()).collect();
        shares.sort_unstable();
        let duplicates = times
            .values()
            .filter(|&&n| n > if fan_out { FIFTY as u32 } else { 1 })
            .count();
        let server_kib = server.pid().map_or(0, resident_kib);
        eprintln!(
            "fifty, {label}: ready in {:.2} s; {COUNT} published in {:.2} s, every \
             worker's target reached {:.2} s after the first publish; distinct {} of {COUNT}, \
             ids handled more often than each worker once {duplicates}; shares min {} median {} max {}; worker resident \
             set min {} median {} max {} KiB; nats-server {} KiB",
            ready.as_secs_f64(),
            published.as_secs_f64(),
            reached.as_secs_f64(),
            times.len(),
            shares[0],
            shares[FIFTY / 2],
            shares[FIFTY - 1],
            resident[0],
            resident[FIFTY / 2],
            resident[FIFTY - 1],
            server_kib,
        );
        if fan_out {
            for d in &done {
                assert_eq!(d.handled.len() as u64, COUNT, "{label}: worker {}", d.name);
            }
        } else {
            assert_eq!(duplicates, 0, "{label}: an id handled twice");
            if mode == Mode::JetStream {
                assert_eq!(times.len() as u64, COUNT, "{label}: an id never handled");
            } else {
                let slow: u64 = done.iter().map(|d| stat(d, "slow_consumer")).sum();
                let lost = COUNT - times.len() as u64;
                assert!(
                    lost == 0 || slow > 0,
                    "{label}: {lost} lost, no slow consumer"
                );
            }
        }
    }
}
