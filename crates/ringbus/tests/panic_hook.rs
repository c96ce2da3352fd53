//! Guarantee 9: the bus never changes process-wide state to work around what a runtime lacks.
//! Here, the panic hook: the application installs its own, every timer path of the bus runs
//! (a `Context` deadline, a stall timeout, a retry backoff, bounded closes, the test
//! `Recorder`, publishes with a deadline from a plain thread), and the hook in place
//! afterwards is still the application's, which saw exactly the panics that happened: none
//! where a time driver is there, and tokio's own (not hidden by the bus) where it is not.
//!
//! Its own test binary with a single test: the panic hook is one for the whole process, and
//! the tests of another binary would panic through it in parallel.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringbus::testing::Recorder;
use ringbus::{Bus, CancellationToken, Context, RetryPolicy, SubscribeOptions};

/// The address of the hook in place: the same `Box` while nobody replaced it.
fn hook_address() -> *const () {
    let hook = panic::take_hook();
    let address = std::ptr::from_ref(&*hook).cast::<()>();
    panic::set_hook(hook);
    address
}

/// Every timer the bus has, on a runtime with tokio's time driver: none may panic.
fn every_timer_with_a_time_driver() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(2).build();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let held = gate.clone();
        let _stuck = bus
            .subscribe_with(
                "t",
                SubscribeOptions::new().stall_timeout(Duration::from_secs(60)),
                move |_: &u64| {
                    let held = held.clone();
                    async move {
                        let _ = held.acquire().await;
                    }
                },
            )
            .unwrap();
        bus.publish("t", 1u64).await.unwrap();
        bus.publish("t", 2u64).await.unwrap(); // the handler holds 1, the ring is full
        let ctx = Context::new().with_timeout(Duration::from_millis(20));
        assert!(bus.publish_with(&ctx, "t", 3u64).await.is_err());
        Context::new()
            .with_timeout(Duration::from_millis(1))
            .with_cancellation(CancellationToken::new())
            .done()
            .await;

        // A retry that sleeps its backoff, and a stall timeout from the builder's default.
        let (calls, mut called) = tokio::sync::mpsc::unbounded_channel();
        let retrying = bus
            .subscribe_with(
                "r",
                SubscribeOptions::new()
                    .retry(RetryPolicy::new(2).backoff(Duration::from_millis(1))),
                move |_: &u64| {
                    static CALLS: AtomicUsize = AtomicUsize::new(0);
                    let _ = calls.send(());
                    let first = CALLS.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            Err("once".to_string())
                        } else {
                            Ok(())
                        }
                    }
                },
            )
            .unwrap();
        let defaulted = Bus::builder()
            .stall_timeout(Duration::from_secs(60))
            .build();
        let _timed = defaulted.subscribe("r", |_: &u64| async {}).unwrap();
        let recorder = Recorder::<u64>::new(&bus, "r").unwrap();
        bus.publish("r", 7u64).await.unwrap();
        assert_eq!(recorder.wait_for(1).await, [7]);
        called.recv().await.unwrap();
        called.recv().await.unwrap(); // the retry, after its backoff
        defaulted.close().await;

        // A bounded close by deadline, meeting the stuck handler.
        let report = bus
            .close_with(&Context::new().with_timeout(Duration::from_millis(20)))
            .await;
        assert!(!report.complete, "{report:?}");
        // And one by token.
        let token = CancellationToken::new();
        token.cancel();
        bus.close_with(&Context::from(token)).await;
        gate.close();
        drop(retrying);
    });
}

/// A publish with a deadline from a plain thread, where no runtime is reachable: an `Err`,
/// and no panic.
fn a_deadline_off_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bus = Bus::builder().capacity(1).build();
    // A subscriber on a runtime nobody drives: it never takes message 1, so the ring is full.
    let _idle = {
        let _inside = runtime.enter();
        bus.subscribe("t", |_: &u64| async {}).unwrap()
    };
    bus.try_publish("t", 1u64).unwrap();
    let ctx = Context::new().with_timeout(Duration::from_millis(20));
    let result = ringbus::ring::block_on(bus.publish_with(&ctx, "t", 2u64));
    assert!(result.is_err(), "{result:?}");
}

/// The timers on a runtime built without its time driver: tokio panics, as `tokio::time`
/// does, and each panic goes through the application's hook. Returns how many panicked.
fn timers_without_a_time_driver() -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _inside = runtime.enter();
    let bus = Bus::new();
    let attempts: [&dyn Fn(); 3] = [
        &|| {
            let options = SubscribeOptions::new().stall_timeout(Duration::from_secs(1));
            let _ = bus.subscribe_with("t", options, |_: &u64| async {});
        },
        &|| {
            let options = SubscribeOptions::new().retry(RetryPolicy::new(2));
            let _ = bus.subscribe_with("t", options, |_: &u64| async {});
        },
        &|| {
            let token = CancellationToken::new();
            token.cancel();
            runtime.block_on(bus.close_with(&Context::from(token)));
        },
    ];
    attempts
        .iter()
        .filter(|attempt| panic::catch_unwind(AssertUnwindSafe(attempt)).is_err())
        .count()
}

#[test]
fn the_bus_never_replaces_the_applications_panic_hook() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    panic::set_hook(Box::new(move |info| {
        counter.fetch_add(1, Ordering::SeqCst);
        eprintln!("the application's hook: {info}");
    }));
    let ours = hook_address();
    let hook_saw = |panics: usize, why: &str| {
        assert_eq!(
            hook_address(),
            ours,
            "the bus replaced the application's panic hook"
        );
        assert_eq!(seen.load(Ordering::SeqCst), panics, "{why}");
    };

    every_timer_with_a_time_driver();
    a_deadline_off_runtime();
    hook_saw(0, "a timer panicked with a time driver");

    let panicked = timers_without_a_time_driver();
    assert_eq!(
        panicked, 3,
        "each timer without a time driver panics, as tokio's do"
    );
    hook_saw(panicked, "a panic was kept from the application's hook");
    drop(panic::take_hook());
}
