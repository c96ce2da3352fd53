//! Guarantee 9, no runtime, no panic: where no tokio runtime is reachable, subscribing is
//! `Err(Error::NoRuntime)`. Publishing needs no runtime (a plain thread can publish with any
//! executor, here `ringbus_core::block_on`).
//!
//! Plain `#[test]`s: no runtime unless a test builds one.

use ringbus::{Batch, Bus, Error, PublishError, SubscribeOptions, Subscription};
use ringbus_core::block_on;

struct Registered;

impl ringbus::Subscriber for Registered {
    type Message = u64;
    fn topic(&self) -> &str {
        "t"
    }
    fn subscribe(self, bus: &Bus) -> Result<Subscription, Error> {
        bus.subscribe(self.topic(), |_: &u64| async {})
    }
}

fn assert_no_runtime(result: Result<Subscription, Error>) {
    match result {
        Err(Error::NoRuntime) => {}
        Err(other) => panic!("expected NoRuntime, got {other:?}"),
        Ok(sub) => panic!("subscribed without a runtime: {sub:?}"),
    }
}

#[test]
fn subscribing_without_a_runtime_is_an_error() {
    assert!(tokio::runtime::Handle::try_current().is_err());
    let bus = Bus::builder().capacity(8).build();
    assert_no_runtime(bus.subscribe("t", |_: &u64| async {}));
    assert_no_runtime(bus.subscribe_with(
        "t",
        SubscribeOptions::new().name("x"),
        |_: &u64| async {},
    ));
    assert_no_runtime(bus.subscribe_batch(
        "t",
        SubscribeOptions::new(),
        |_: Batch<'_, u64>| async {},
    ));
    assert_no_runtime(bus.register(Registered));
    let topic = bus.topic::<u64>("t").unwrap();
    assert_no_runtime(topic.subscribe(SubscribeOptions::new(), |_: &u64| async {}));

    let text = Error::NoRuntime.to_string();
    assert!(text.contains("runtime"), "{text}");
    // Nothing was left half made.
    let stats = bus.stats();
    assert_eq!(stats.topics.len(), 1);
    assert!(stats.topics[0].subscribers.is_empty());
}

#[test]
fn publishing_and_closing_need_no_runtime() {
    let bus = Bus::new();
    bus.try_publish("t", 1u64).unwrap();
    block_on(bus.publish("t", 2u64)).unwrap();
    assert_eq!(block_on(bus.publish_batch("t", 3..6u64)).unwrap(), 3);
    block_on(bus.close());
    match block_on(bus.publish("t", 7u64)) {
        Err(PublishError::Closed(7)) => {}
        other => panic!("expected Closed(7), got {other:?}"),
    }
}

/// Subscribers run on a runtime; plain threads publish into their topic, waiting for room by
/// blocking. Subscribing from those threads is still `NoRuntime`.
#[test]
fn plain_threads_publish_to_subscribers_on_a_runtime() {
    const PER_THREAD: u64 = 500;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bus = Bus::builder().capacity(4).build();
    let (tx, rx) = std::sync::mpsc::channel();
    let sub = {
        let _inside = runtime.enter();
        bus.subscribe("t", move |m: &u64| {
            let (m, tx) = (*m, tx.clone());
            async move { tx.send(m).unwrap() }
        })
        .unwrap()
    };
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let bus = &bus;
            s.spawn(move || {
                assert_no_runtime(bus.subscribe("t", |_: &u64| async {}));
                for i in 0..PER_THREAD {
                    block_on(bus.publish("t", t * PER_THREAD + i)).unwrap();
                }
            });
        }
    });
    runtime.block_on(bus.close());
    let mut got: Vec<u64> = rx.try_iter().collect();
    got.sort_unstable();
    assert_eq!(got, (0..2 * PER_THREAD).collect::<Vec<_>>());
    assert!(sub.is_finished());
}

/// A publish with a deadline that has to wait for room, from a thread without a runtime:
/// the deadline runs on a helper thread instead of tokio's timer, so the publish gives the
/// message back as `Cancelled` rather than panicking (guarantee 9).
#[test]
fn publish_with_a_deadline_off_runtime_does_not_panic() {
    use std::time::Duration;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bus = Bus::builder().capacity(1).build();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let _sub = {
        let _inside = runtime.enter();
        bus.subscribe("t", move |_: &u64| {
            let held = held.clone();
            async move {
                let _ = held.acquire().await;
            }
        })
        .unwrap()
    };
    block_on(bus.publish("t", 1u64)).unwrap(); // the only slot, held by the handler
    let ctx = ringbus::Context::new()
        .with_deadline(tokio::time::Instant::now() + Duration::from_millis(100));
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        block_on(bus.publish_with(&ctx, "t", 2u64))
    }));
    gate.close();
    runtime.block_on(bus.close());
    match waited {
        Ok(Err(ringbus::PublishError::Cancelled(back))) => assert_eq!(back, 2),
        Ok(other) => panic!("expected Cancelled(2) after the deadline, got {other:?}"),
        Err(_) => panic!("publish_with panicked off-runtime"),
    }
}

/// A runtime built without its time driver (`enable_time` not called).
fn runtime_without_timers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// A stall timeout needs tokio's timer: on a runtime without one, subscribing with it (or
/// under a builder default) is a clear `Err`, not a panic inside the subscriber later.
#[test]
fn a_stall_timeout_without_a_time_driver_is_an_error() {
    use std::time::Duration;
    let runtime = runtime_without_timers();
    let _inside = runtime.enter();
    let bus = Bus::builder().capacity(4).build();
    let options = SubscribeOptions::new().stall_timeout(Duration::from_secs(1));
    let refused = [
        bus.subscribe_with("t", options.clone(), |_: &u64| async {}),
        bus.subscribe_batch("t", options, |_: Batch<'_, u64>| async {}),
        Bus::builder()
            .stall_timeout(Duration::from_secs(1))
            .build()
            .subscribe("t", |_: &u64| async {}),
    ];
    for result in refused {
        match result {
            Err(e @ Error::NoTimer) => assert!(e.to_string().contains("enable_time"), "{e}"),
            Err(other) => panic!("expected NoTimer, got {other:?}"),
            Ok(sub) => panic!("subscribed with a stall timeout and no timer: {sub:?}"),
        }
    }
    // Nothing was left half made; without a stall timeout the runtime serves.
    assert!(bus.stats().topics.is_empty(), "{:?}", bus.stats());
    let sub = bus.subscribe("t", |_: &u64| async {}).unwrap();
    runtime.block_on(async {
        bus.publish("t", 1u64).await.unwrap();
        bus.close().await;
    });
    assert_eq!(sub.stats().handled, 1);
}

/// A retry policy sleeps between attempts: without a time driver, subscribing with one is a
/// clear `Err` on every route, by name and through a topic handle, not a panic at the first
/// retry's backoff.
#[test]
fn a_retry_policy_without_a_time_driver_is_an_error() {
    let runtime = runtime_without_timers();
    let _inside = runtime.enter();
    let bus = Bus::builder().capacity(4).build();
    let options = || SubscribeOptions::new().retry(ringbus::RetryPolicy::new(3));
    let handle = bus.topic::<u64>("t").unwrap();
    let refused = [
        bus.subscribe_with("t", options(), |_: &u64| async {}),
        handle.subscribe(options(), |_: &u64| async {}),
    ];
    for result in refused {
        match result {
            Err(e @ Error::NoTimer) => assert!(e.to_string().contains("enable_time"), "{e}"),
            Err(other) => panic!("expected NoTimer, got {other:?}"),
            Ok(sub) => panic!("subscribed with a retry policy and no timer: {sub:?}"),
        }
    }
    assert_eq!(handle.subscriber_count(), 0);
}

/// A `Context` deadline on a runtime without a time driver: a publish that has to wait, and a
/// bounded close, end at the deadline (a helper thread keeps time) instead of panicking.
#[test]
fn a_deadline_without_a_time_driver_does_not_panic() {
    use std::time::Duration;
    let runtime = runtime_without_timers();
    let bus = Bus::builder().capacity(1).build();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let _stuck = bus
                .subscribe("t", |_: &u64| std::future::pending::<()>())
                .unwrap();
            bus.publish("t", 1u64).await.unwrap(); // the only slot, held by the handler
            let ctx = ringbus::Context::new().with_timeout(Duration::from_millis(50));
            let publish = bus.publish_with(&ctx, "t", 2u64).await;
            let ctx = ringbus::Context::new().with_timeout(Duration::from_millis(50));
            let report = bus.close_with(&ctx).await;
            (publish, report.complete)
        })
    }));
    match outcome {
        Ok((Err(PublishError::Cancelled(2)), false)) => {}
        Ok(other) => panic!("expected Cancelled(2) and an incomplete close, got {other:?}"),
        Err(_) => panic!("a deadline panicked on a runtime without a time driver"),
    }
}

/// A bounded close that meets a subscriber in the middle of a poll gives that poll a grace
/// before reporting it running. On a runtime without a time driver the grace cannot use a
/// timer: the close still reports the truth, and does not panic.
#[test]
fn a_bounded_close_meeting_a_busy_handler_without_a_time_driver_does_not_panic() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let bus = Bus::builder().capacity(4).build();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let blocked = bus
                .subscribe("t", move |_: &u64| {
                    let _ = entered_tx.send(());
                    if let Ok(released) = released.lock() {
                        let _ = released.recv(); // blocks its worker thread: no yield
                    }
                    std::future::ready(())
                })
                .unwrap();
            bus.publish("t", 1u64).await.unwrap();
            entered.recv().unwrap();
            let token = ringbus::CancellationToken::new();
            token.cancel();
            let report = bus.close_with(&ringbus::Context::from(token)).await;
            let _ = release.send(());
            blocked.unsubscribe().await;
            report
        })
    }));
    let report = outcome.expect("a bounded close panicked on a runtime without timers");
    assert!(!report.complete, "{report:?}");
    assert_eq!(report.unfinished.len(), 1, "{report:?}");
    assert!(report.unfinished[0].running, "{report:?}");
}
