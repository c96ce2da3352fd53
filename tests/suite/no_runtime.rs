//! Guarantee 9, no runtime, no panic: where no tokio runtime is reachable, subscribing is
//! `Err(Error::NoRuntime)`, and so is a publish with a deadline (`PublishError::NoRuntime`).
//! Publishing without a deadline needs no runtime (a plain thread can publish with any
//! executor, here `ringbus_core::block_on`). Timers run on tokio's time driver: on a runtime
//! built without one they panic as tokio's do, each case below.
//!
//! Plain `#[test]`s: no runtime unless a test builds one.

use ringbus::{
    Batch, Bus, CancellationToken, Context, Error, PublishError, SubscribeOptions, Subscription,
};
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

/// A runtime and a one-slot topic whose only slot is taken: its subscriber runs on a runtime
/// nobody drives, so message 1 stays in the ring and any further publish has to wait.
fn full_topic(runtime: &tokio::runtime::Runtime) -> (Bus, Subscription) {
    let bus = Bus::builder().capacity(1).build();
    let sub = {
        let _inside = runtime.enter();
        bus.subscribe("t", |_: &u64| async {}).unwrap()
    };
    bus.try_publish("t", 1u64).unwrap();
    (bus, sub)
}

/// A publish with a deadline, from a thread where no runtime is reachable: the deadline runs
/// on tokio's time driver, so the publish is `Err(NoRuntime(msg))` at once, whether or not it
/// would have to wait (guarantee 9: a clear `Err`, no panic, no helper thread). A deadline
/// already passed needs no timer (`Cancelled`), nor does a context with only a token; with a
/// runtime entered on the thread, the deadline is timed there (`Cancelled` once it passes).
#[test]
fn publish_with_a_deadline_off_runtime_is_no_runtime() {
    use std::time::Duration;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (bus, _sub) = full_topic(&runtime);
    let ctx = || Context::new().with_timeout(Duration::from_secs(60));
    match block_on(bus.publish_with(&ctx(), "t", 2u64)) {
        Err(e @ PublishError::NoRuntime(2)) => {
            assert!(e.to_string().contains("runtime"), "{e}");
            assert_eq!(Error::from(e), Error::NoRuntime);
        }
        other => panic!("expected NoRuntime(2), got {other:?}"),
    }
    // The same with room (another topic): the answer does not depend on the ring.
    match block_on(bus.publish_with(&ctx(), "roomy", 3u64)) {
        Err(PublishError::NoRuntime(3)) => {}
        other => panic!("expected NoRuntime(3), got {other:?}"),
    }
    let topic = bus.topic::<u64>("roomy").unwrap();
    match block_on(topic.publish_with(&ctx(), 4)) {
        Err(PublishError::NoRuntime(4)) => {}
        other => panic!("expected NoRuntime(4), got {other:?}"),
    }
    let passed = Context::new().with_deadline(tokio::time::Instant::now());
    match block_on(bus.publish_with(&passed, "t", 7u64)) {
        Err(PublishError::Cancelled(7)) => {}
        other => panic!("expected Cancelled(7), got {other:?}"),
    }
    let token = CancellationToken::new();
    let (cancel, by_token) = (token.clone(), Context::from(token));
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            cancel.cancel();
        });
        match block_on(bus.publish_with(&by_token, "t", 8u64)) {
            Err(PublishError::Cancelled(8)) => {}
            other => panic!("expected Cancelled(8), got {other:?}"),
        }
    });

    // A runtime entered on this thread (one whose own threads drive its timer) times it.
    let timed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _inside = timed.enter();
    let soon = Context::new().with_timeout(Duration::from_millis(20));
    match block_on(bus.publish_with(&soon, "t", 9u64)) {
        Err(PublishError::Cancelled(9)) => {}
        other => panic!("expected Cancelled(9) after the deadline, got {other:?}"),
    }
}

/// A request with a deadline, off-runtime: not sent, the message back (`NoRuntime`).
#[test]
fn a_request_with_a_deadline_off_runtime_is_no_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bus = Bus::new();
    let prices = bus.topic::<ringbus::Request<u64, u64>>("prices").unwrap();
    let _replier = {
        let _inside = runtime.enter();
        bus.reply("prices", async |n: &u64| *n).unwrap()
    };
    let ctx = Context::new().with_timeout(std::time::Duration::from_secs(60));
    match block_on(prices.request_with(&ctx, 5)) {
        Err(e @ ringbus::RequestError::NoRuntime(5)) => assert!(!e.was_sent()),
        other => panic!("expected NoRuntime(5), got {other:?}"),
    }
}

/// A `Context` with a deadline awaited where no runtime is reachable panics as
/// `tokio::time::sleep_until` does (`Context::done` and a bounded close cannot return an
/// `Err`); one with only a token needs no timer, and a bounded close by token from a plain
/// thread works (it gives no grace, having no timer).
#[test]
fn waiting_for_a_deadline_off_runtime_panics_as_tokio_does() {
    use std::time::Duration;
    let ctx = Context::new().with_timeout(Duration::from_secs(60));
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(ctx.done())));
    assert_tokio_panic(done.expect_err("Context::done off-runtime"), "runtime");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (bus, _sub) = full_topic(&runtime);
    let close = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        block_on(bus.close_with(&ctx))
    }));
    assert_tokio_panic(close.expect_err("close_with off-runtime"), "runtime");

    let token = CancellationToken::new();
    token.cancel();
    let report = block_on(bus.close_with(&Context::from(token)));
    assert!(!report.complete, "message 1 was never handled: {report:?}");
}

/// The message of a panic raised by tokio: it contains `what`.
fn assert_tokio_panic(panic: Box<dyn std::any::Any + Send>, what: &str) {
    let message = (panic.downcast_ref::<String>().map(String::as_str))
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(
        message.contains(what),
        "expected tokio's panic about {what}, got {message:?}"
    );
}

/// A runtime built without its time driver (`enable_time` not called).
fn runtime_without_timers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Subscribes with `options` on `bus`, which must panic as tokio's timers do on a runtime
/// without a time driver (at subscribe, not later in the subscriber's task).
fn assert_subscribe_panics(subscribe: impl FnOnce() -> Result<Subscription, Error>) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(subscribe)) {
        Err(panic) => assert_tokio_panic(panic, "enable_time"),
        Ok(result) => panic!("subscribed with a timer and no time driver: {result:?}"),
    }
}

/// A stall timeout runs on tokio's time driver: on a runtime without one, subscribing with it
/// (or under a builder default) panics at subscribe with tokio's message (tokio cannot be
/// asked whether a runtime has one without making a timer), before anything is made.
#[test]
fn a_stall_timeout_without_a_time_driver_panics_at_subscribe() {
    use std::time::Duration;
    let runtime = runtime_without_timers();
    let _inside = runtime.enter();
    let bus = Bus::builder().capacity(4).build();
    let options = SubscribeOptions::new().stall_timeout(Duration::from_secs(1));
    assert_subscribe_panics(|| bus.subscribe_with("t", options.clone(), |_: &u64| async {}));
    assert_subscribe_panics(|| {
        bus.subscribe_batch("t", options.clone(), |_: Batch<'_, u64>| async {})
    });
    let defaulted = Bus::builder().stall_timeout(Duration::from_secs(1)).build();
    assert_subscribe_panics(|| defaulted.subscribe("t", |_: &u64| async {}));
    // Nothing was left half made; without a stall timeout the runtime serves.
    assert!(bus.stats().topics.is_empty(), "{:?}", bus.stats());
    let sub = bus.subscribe("t", |_: &u64| async {}).unwrap();
    runtime.block_on(async {
        bus.publish("t", 1u64).await.unwrap();
        bus.close().await;
    });
    assert_eq!(sub.stats().handled, 1);
}

/// A retry policy sleeps between attempts on tokio's time driver: without one, subscribing
/// with it panics at subscribe (not at the first retry's backoff), on every route.
#[test]
fn a_retry_policy_without_a_time_driver_panics_at_subscribe() {
    let runtime = runtime_without_timers();
    let _inside = runtime.enter();
    let bus = Bus::builder().capacity(4).build();
    let options = || SubscribeOptions::new().retry(ringbus::RetryPolicy::new(3));
    let handle = bus.topic::<u64>("t").unwrap();
    assert_subscribe_panics(|| bus.subscribe_with("t", options(), |_: &u64| async {}));
    assert_subscribe_panics(|| handle.subscribe(options(), |_: &u64| async {}));
    assert_eq!(handle.subscriber_count(), 0);
}

/// A `Context` deadline on a runtime without a time driver: a publish that has to wait, and
/// a bounded close, panic with tokio's message, as a `tokio::time` timer made there does.
/// A publish with a deadline that finds room makes no timer.
#[test]
fn a_deadline_without_a_time_driver_panics_as_tokio_does() {
    use std::time::Duration;
    let runtime = runtime_without_timers();
    let bus = Bus::builder().capacity(1).build();
    let _stuck = runtime.block_on(async {
        let stuck = bus
            .subscribe("t", |_: &u64| std::future::pending::<()>())
            .unwrap();
        let ctx = Context::new().with_timeout(Duration::from_millis(50));
        bus.publish_with(&ctx, "t", 1u64).await.unwrap(); // room: no timer
        stuck
    });
    let publish = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let ctx = Context::new().with_timeout(Duration::from_millis(50));
            bus.publish_with(&ctx, "t", 2u64).await
        })
    }));
    assert_tokio_panic(
        publish.expect_err("a publish waited without timers"),
        "enable_time",
    );
    let close = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let ctx = Context::new().with_timeout(Duration::from_millis(50));
            bus.close_with(&ctx).await
        })
    }));
    assert_tokio_panic(
        close.expect_err("a bounded close without timers"),
        "enable_time",
    );
}

/// A bounded close by token alone on a runtime without a time driver: its grace (for a
/// subscriber met in the middle of a poll) runs on tokio's timer, made when the close starts,
/// so it panics with tokio's message every time, not only when it meets a busy handler; and
/// it never blocks its worker spinning. `close` itself needs no timer.
#[test]
fn a_bounded_close_by_token_without_a_time_driver_panics_as_tokio_does() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let bus = Bus::builder().capacity(4).build();
    let _idle = runtime.block_on(async { bus.subscribe("t", |_: &u64| async {}).unwrap() });
    let token = CancellationToken::new();
    token.cancel();
    let close = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(bus.close_with(&Context::from(token)))
    }));
    assert_tokio_panic(
        close.expect_err("a bounded close without timers"),
        "enable_time",
    );
    runtime.block_on(bus.close());
}
