//! Helpers shared by the bus's integration tests: a gate that holds handlers, a log of what a
//! subscriber handled, and a small seeded random number generator.
//!
//! Every test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use ringbus::{Bus, SubscribeOptions, Subscription};
use tokio::sync::{mpsc, Semaphore};

/// Holds handler calls until the test lets them through: [`release`](Self::release) lets `n`
/// calls pass, [`open`](Self::open) lets every call pass from then on.
#[derive(Clone, Debug)]
pub(crate) struct Gate(Arc<Semaphore>);

impl Gate {
    /// A gate that lets nothing through yet.
    pub(crate) fn closed() -> Self {
        Gate(Arc::new(Semaphore::new(0)))
    }

    /// Waits for a permit (or for the gate to be opened for good).
    pub(crate) async fn pass(&self) {
        // A closed semaphore is an open gate: `acquire` fails at once from then on.
        if let Ok(permit) = self.0.acquire().await {
            permit.forget();
        }
    }

    /// Lets `n` more calls through.
    pub(crate) fn release(&self, n: usize) {
        self.0.add_permits(n);
    }

    /// Lets every call through, now and later.
    pub(crate) fn open(&self) {
        self.0.close();
    }
}

/// What a subscriber handled, in the order it handled it.
#[derive(Debug)]
pub(crate) struct Log<T>(Arc<Mutex<Vec<T>>>);

impl<T> Clone for Log<T> {
    fn clone(&self) -> Self {
        Log(self.0.clone())
    }
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<T: Clone> Log<T> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&self, value: T) {
        self.0.lock().unwrap().push(value);
    }

    pub(crate) fn snapshot(&self) -> Vec<T> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A subscriber of `u64` messages whose handler, for each message, first reports that it
/// started on it (`entered`), then passes `gate`, then logs it.
pub(crate) struct Gated {
    pub(crate) sub: Subscription,
    pub(crate) log: Log<u64>,
    pub(crate) entered: mpsc::UnboundedReceiver<u64>,
}

/// Subscribes a [`Gated`] subscriber named `name` to `topic`.
pub(crate) fn gated(bus: &Bus, topic: &str, name: &str, gate: &Gate) -> Gated {
    gated_with(bus, topic, SubscribeOptions::new().name(name), gate)
}

/// [`gated`] with options.
pub(crate) fn gated_with(bus: &Bus, topic: &str, options: SubscribeOptions, gate: &Gate) -> Gated {
    let log = Log::new();
    let (tx, entered) = mpsc::unbounded_channel();
    let (gate, handled) = (gate.clone(), log.clone());
    let sub = bus
        .subscribe_with(topic, options, move |m: &u64| {
            let (m, gate, handled, tx) = (*m, gate.clone(), handled.clone(), tx.clone());
            async move {
                let _ = tx.send(m);
                gate.pass().await;
                handled.push(m);
            }
        })
        .expect("subscribe");
    Gated { sub, log, entered }
}

/// A subscriber of `u64` messages that logs each one and reports it on a channel once
/// handled (the report is the last thing the handler does).
pub(crate) struct Recording {
    pub(crate) sub: Subscription,
    pub(crate) log: Log<u64>,
    pub(crate) handled: mpsc::UnboundedReceiver<u64>,
}

/// Subscribes a [`Recording`] subscriber named `name` to `topic`.
pub(crate) fn recording(bus: &Bus, topic: &str, name: &str) -> Recording {
    let log = Log::new();
    let (tx, handled) = mpsc::unbounded_channel();
    let logged = log.clone();
    let sub = bus
        .subscribe_with(topic, SubscribeOptions::new().name(name), move |m: &u64| {
            let (m, logged, tx) = (*m, logged.clone(), tx.clone());
            async move {
                logged.push(m);
                let _ = tx.send(m);
            }
        })
        .expect("subscribe");
    Recording { sub, log, handled }
}

/// Receives exactly `n` values from `rx`, in order.
pub(crate) async fn take(rx: &mut mpsc::UnboundedReceiver<u64>, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(rx.recv().await.expect("the subscriber ended early"));
    }
    out
}

/// xorshift64*: a small seeded generator, so a failing run can be repeated from its seed.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A multi-thread runtime with `workers` workers and tokio's drivers.
pub(crate) fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a multi-thread runtime")
}

/// A multi-thread runtime with one worker, that worker held (blocked in a task) until the
/// returned sender sends or is dropped: what is spawned meanwhile is queued, not run, so a
/// subscriber's first look at its ring finds everything published before the release. With
/// tokio's time driver, which a bounded close needs.
pub(crate) fn runtime_with_held_worker() -> (tokio::runtime::Runtime, std::sync::mpsc::Sender<()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("a multi-thread runtime");
    let (release, hold) = std::sync::mpsc::channel::<()>();
    runtime.spawn(async move {
        let _ = hold.recv();
    });
    (runtime, release)
}
