//! Retries with backoff and dead-letter topics: counted, timed (paused time), in order, with
//! the dead letter carrying what failed; panics retried only when asked; a dead letter that
//! cannot be published counted; mismatched and unsupported options refused at subscribe; a
//! bounded close during a backoff sleep returns at its deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringbus::testing::Recorder;
use ringbus::{
    subscriber, with_state, Bus, Context, DeadLetter, Error, RetryPolicy, SubscribeOptions,
};
use tokio::time::Instant;

/// A job that fails its first `fails` handler calls.
#[derive(Clone, Debug, PartialEq)]
struct Job {
    id: u64,
    fails: u32,
}

/// Every handler call, in order: the job's id and when (tokio time).
type Calls = Arc<Mutex<Vec<(u64, Instant)>>>;

/// A handler that logs each call and fails a job's first `fails` calls with
/// "job <id> attempt <n>".
fn flaky(calls: Calls) -> impl ringbus::Handler<Job> {
    with_state(calls, async |calls: &Calls, job: &Job| {
        let attempt = {
            let mut calls = calls.lock().unwrap();
            calls.push((job.id, Instant::now()));
            calls.iter().filter(|(id, _)| *id == job.id).count() as u32
        };
        tokio::task::yield_now().await; // a handler that is not done at its first poll
        if attempt <= job.fails {
            Err(format!("job {} attempt {attempt}", job.id))
        } else {
            Ok(())
        }
    })
}

fn ids(calls: &Calls) -> Vec<u64> {
    calls.lock().unwrap().iter().map(|(id, _)| *id).collect()
}

fn policy(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(attempts)
        .backoff(Duration::from_millis(10))
        .jitter(false)
}

#[tokio::test(start_paused = true)]
async fn a_failed_job_is_retried_after_the_backoff_and_counted() {
    let bus = Bus::new();
    let calls = Calls::default();
    let options = SubscribeOptions::new().name("worker").retry(policy(3));
    let sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    let start = Instant::now();
    bus.publish("jobs", Job { id: 1, fails: 2 }).await.unwrap();
    bus.close().await;

    assert_eq!(ids(&calls), [1, 1, 1]);
    let at: Vec<Duration> = calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| *t - start)
        .collect();
    // 10 ms, then 20 ms (doubling), each on tokio's 1 ms timer.
    assert!(
        at[1] >= Duration::from_millis(10) && at[1] < Duration::from_millis(12),
        "{at:?}"
    );
    assert!(
        at[2] - at[1] >= Duration::from_millis(20) && at[2] - at[1] < Duration::from_millis(22),
        "{at:?}"
    );
    let stats = sub.stats();
    assert_eq!(stats.handled, 1);
    assert_eq!(stats.retries, 2);
    assert_eq!(stats.errors, 2, "each failed call counts");
    assert_eq!((stats.dead_lettered, stats.dead_letter_failures), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn jitter_sleeps_between_half_the_backoff_and_all_of_it() {
    let bus = Bus::new();
    let calls = Calls::default();
    let options = SubscribeOptions::new().retry(
        RetryPolicy::new(2)
            .backoff(Duration::from_secs(100))
            .max_backoff(Duration::from_secs(1000))
            .jitter(true),
    );
    let _sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    for id in 0..20 {
        bus.publish("jobs", Job { id, fails: 1 }).await.unwrap();
    }
    bus.close().await;
    let calls = calls.lock().unwrap();
    let gaps: Vec<Duration> = calls.chunks(2).map(|c| c[1].1 - c[0].1).collect();
    assert!(
        gaps.iter()
            .all(|g| *g >= Duration::from_secs(50) && *g <= Duration::from_millis(100_001)),
        "{gaps:?}"
    );
    // Jittered: not all the same.
    assert!(gaps.iter().any(|g| *g != gaps[0]), "{gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn the_next_message_waits_for_the_retries_of_the_one_before() {
    let bus = Bus::new();
    let calls = Calls::default();
    let options = SubscribeOptions::new().retry(policy(3));
    let _sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    for (id, fails) in [(1, 2), (2, 0), (3, 1), (4, 0)] {
        bus.publish("jobs", Job { id, fails }).await.unwrap();
    }
    bus.close().await;
    assert_eq!(ids(&calls), [1, 1, 1, 2, 3, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn the_dead_letter_carries_the_message_the_error_and_the_attempts() {
    let bus = Bus::new();
    let calls = Calls::default();
    let dead = bus.topic::<DeadLetter<Job>>("jobs.dead").unwrap();
    let letters = Recorder::on(&dead).unwrap();
    let options = SubscribeOptions::new()
        .name("worker")
        .retry(policy(3))
        .dead_letter(&dead);
    let sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    bus.publish("jobs", Job { id: 7, fails: 99 }).await.unwrap();
    bus.publish("jobs", Job { id: 8, fails: 0 }).await.unwrap();
    bus.wait_idle().await;

    assert_eq!(ids(&calls), [7, 7, 7, 8]);
    let letters = letters.take();
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.message, Job { id: 7, fails: 99 });
    assert_eq!(letter.error, "job 7 attempt 3");
    assert!(!letter.panicked);
    assert_eq!(&*letter.topic, "jobs");
    assert_eq!(&*letter.subscriber, "worker");
    assert_eq!(letter.attempts, 3);
    let stats = sub.stats();
    assert_eq!(stats.handled, 2);
    assert_eq!(stats.errors, 3);
    assert_eq!(stats.retries, 2);
    assert_eq!(stats.dead_lettered, 1);
    bus.close().await;
}

#[tokio::test]
async fn a_dead_letter_topic_without_retries_takes_the_first_failure() {
    let bus = Bus::new();
    let dead = bus.topic::<DeadLetter<Job>>("jobs.dead").unwrap();
    let letters = Recorder::on(&dead).unwrap();
    let calls = Calls::default();
    let options = SubscribeOptions::new().dead_letter(&dead);
    let sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    bus.publish("jobs", Job { id: 1, fails: 1 }).await.unwrap();
    bus.wait_idle().await;
    let letters = letters.take();
    assert_eq!(letters.len(), 1);
    assert_eq!((letters[0].attempts, sub.stats().retries), (1, 0));
    bus.close().await;
}

/// Panics `panics` times on each message, then succeeds.
fn panicky(panics: u32) -> impl ringbus::Handler<u64> {
    with_state(Mutex::new(0u32), move |calls: &Mutex<u32>, _: &u64| {
        let call = {
            let mut calls = calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        async move {
            if call <= panics {
                panic!("panic number {call}");
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn panics_are_retried_only_when_the_policy_says_so() {
    let bus = Bus::new();
    let dead = bus.topic::<DeadLetter<u64>>("dead").unwrap();
    let letters = Recorder::on(&dead).unwrap();
    let retried = bus
        .subscribe_with(
            "a",
            SubscribeOptions::new()
                .retry(policy(3).panics(true))
                .dead_letter(&dead),
            panicky(2),
        )
        .unwrap();
    let not_retried = bus
        .subscribe_with(
            "b",
            SubscribeOptions::new().retry(policy(3)).dead_letter(&dead),
            panicky(2),
        )
        .unwrap();
    bus.publish("a", 1u64).await.unwrap();
    bus.publish("b", 2u64).await.unwrap();
    bus.wait_idle().await;

    let a = retried.stats();
    assert_eq!(
        (a.handled, a.panics, a.retries, a.dead_lettered),
        (1, 2, 2, 0)
    );
    let b = not_retried.stats();
    assert_eq!(
        (b.handled, b.panics, b.retries, b.dead_lettered),
        (1, 1, 0, 1)
    );
    let letters = letters.take();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].message, 2);
    assert!(letters[0].panicked);
    assert_eq!(letters[0].error, "panic number 1");
    assert_eq!(letters[0].attempts, 1);
    // The subscriber goes on after a panic it gave up on.
    bus.publish("b", 3u64).await.unwrap();
    bus.close().await;
    assert_eq!(not_retried.stats().handled, 2);
}

#[tokio::test]
async fn a_dead_letter_that_cannot_be_published_is_counted_and_the_subscriber_goes_on() {
    // Strict: the dead-letter topic has no subscriber, so its publish is refused.
    let bus = Bus::builder().strict(true).build();
    let dead = bus.topic::<DeadLetter<Job>>("jobs.dead").unwrap();
    let calls = Calls::default();
    let options = SubscribeOptions::new().dead_letter(&dead);
    let sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    bus.publish("jobs", Job { id: 1, fails: 9 }).await.unwrap();
    bus.publish("jobs", Job { id: 2, fails: 9 }).await.unwrap();
    bus.close().await;
    let stats = sub.stats();
    assert_eq!(stats.handled, 2);
    assert_eq!((stats.dead_lettered, stats.dead_letter_failures), (0, 2));
    assert_eq!(stats.errors, 2);
}

#[tokio::test]
async fn a_dead_letter_topic_of_another_message_type_is_an_err_at_subscribe() {
    let bus = Bus::new();
    let dead = bus.topic::<DeadLetter<u32>>("jobs.dead").unwrap();
    let options = SubscribeOptions::new().dead_letter(&dead);
    let err = bus
        .subscribe_with("jobs", options, flaky(Calls::default()))
        .unwrap_err();
    match err {
        Error::TypeMismatch(m) => {
            assert_eq!(&*m.topic, "jobs.dead");
            assert!(m.expected.contains("DeadLetter<u32>"), "{m:?}");
            assert!(m.found.contains("Job"), "{m:?}");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    // Through the typed handle as well.
    let topic = bus.topic::<Job>("jobs").unwrap();
    let options = SubscribeOptions::new().dead_letter(&dead);
    assert!(matches!(
        topic.subscribe(options, flaky(Calls::default())),
        Err(Error::TypeMismatch(_))
    ));
    assert_eq!(topic.subscriber_count(), 0);
}

#[subscriber(
    "jobs",
    name = "macro_worker",
    retry(attempts = 3, backoff = "10ms", jitter = false),
    dead_letter("jobs.dead")
)]
async fn macro_worker(job: &Job) -> Result<(), String> {
    Err(format!("job {} refused", job.id))
}

#[tokio::test(start_paused = true)]
async fn the_subscriber_macro_retries_and_dead_letters() {
    let bus = Bus::new();
    let letters = Recorder::<DeadLetter<Job>>::new(&bus, "jobs.dead").unwrap();
    let sub = bus.register(macro_worker).unwrap();
    let start = Instant::now();
    bus.publish("jobs", Job { id: 5, fails: 0 }).await.unwrap();
    bus.wait_idle().await;
    assert!(start.elapsed() >= Duration::from_millis(30));
    let letters = letters.take();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].error, "job 5 refused");
    assert_eq!(&*letters[0].subscriber, "macro_worker");
    assert_eq!(sub.stats().retries, 2);
    bus.close().await;

    // The dead-letter topic is resolved at `register`: a mismatch is an `Err` there.
    let bus = Bus::new();
    let _ = bus.topic::<String>("jobs.dead").unwrap();
    assert!(matches!(
        bus.register(macro_worker),
        Err(Error::TypeMismatch(_))
    ));
}

#[tokio::test]
async fn a_batch_subscriber_refuses_a_retry_policy() {
    let bus = Bus::new();
    let err = bus
        .subscribe_batch(
            "jobs",
            SubscribeOptions::new().retry(RetryPolicy::default()),
            async |_: ringbus::Batch<'_, u64>| {},
        )
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("batch subscribers do not retry"));
}

#[test]
fn a_retry_policy_needs_the_time_driver() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::new();
        let options = SubscribeOptions::new().retry(RetryPolicy::new(2));
        let subscribe = std::panic::AssertUnwindSafe(|| {
            bus.subscribe_with("jobs", options, flaky(Calls::default()))
        });
        // tokio's own panic, at subscribe (not at the first backoff), as `tokio::time`'s.
        let panic = std::panic::catch_unwind(subscribe).expect_err("subscribed without timers");
        let message = (panic.downcast_ref::<String>().map(String::as_str))
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        assert!(message.contains("enable_time"), "{message}");
        assert_eq!(bus.topic::<Job>("jobs").unwrap().subscriber_count(), 0);
        // A dead-letter topic alone never sleeps.
        let dead = bus.topic::<DeadLetter<Job>>("jobs.dead").unwrap();
        let options = SubscribeOptions::new().dead_letter(&dead);
        bus.subscribe_with("jobs", options, flaky(Calls::default()))
            .unwrap();
        bus.close().await;
    });
}

#[tokio::test(start_paused = true)]
async fn a_bounded_close_during_a_backoff_sleep_returns_at_its_deadline() {
    let bus = Bus::new();
    let dead = bus.topic::<DeadLetter<Job>>("jobs.dead").unwrap();
    let letters = Recorder::on(&dead).unwrap();
    let (called, mut first_call) = tokio::sync::mpsc::unbounded_channel();
    let options = SubscribeOptions::new()
        .name("sleeper")
        .retry(RetryPolicy::new(2).backoff(Duration::from_secs(3600)))
        .dead_letter(&dead);
    let sub = bus
        .subscribe_with("jobs", options, move |_: &Job| {
            let _ = called.send(());
            async { Err("down") }
        })
        .unwrap();
    bus.publish("jobs", Job { id: 1, fails: 1 }).await.unwrap();
    first_call.recv().await.unwrap();

    let start = Instant::now();
    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_millis(50)))
        .await;
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert!(!report.complete);
    let unfinished: Vec<_> = report
        .unfinished
        .iter()
        .map(|u| (u.subscriber.as_str(), u.messages, u.running))
        .collect();
    assert_eq!(unfinished, [("sleeper", 1, false)], "{report}");
    // Stopped in its sleep: not retried, not dead-lettered.
    let stats = sub.stats();
    assert_eq!(
        (stats.retries, stats.dead_lettered, stats.running),
        (1, 0, false)
    );
    assert!(letters.recorded().is_empty());
}

/// Compile-time: the new types can cross tasks, and options carrying a dead-letter topic
/// stay `Send + Sync`.
#[allow(dead_code)]
fn send_sync_unpin() {
    fn all<T: Send + Sync + Unpin>() {}
    all::<RetryPolicy>();
    all::<DeadLetter<Job>>();
    all::<SubscribeOptions>();
}

#[tokio::test(start_paused = true)]
async fn unsubscribe_waits_for_the_retries_and_receipts_count_only_the_last_failure() {
    let bus = Bus::new();
    let calls = Calls::default();
    let sub = bus
        .subscribe_with(
            "jobs",
            SubscribeOptions::new().retry(policy(3)),
            flaky(calls.clone()),
        )
        .unwrap();
    let jobs = bus.topic::<Job>("jobs").unwrap();
    let ctx = Context::new();
    let recovered = jobs
        .publish_tracked(&ctx, Job { id: 1, fails: 2 })
        .await
        .unwrap();
    let lost = jobs
        .publish_tracked(&ctx, Job { id: 2, fails: 3 })
        .await
        .unwrap();
    sub.unsubscribe().await;
    assert_eq!(ids(&calls), [1, 1, 1, 2, 2, 2]);
    let (recovered, lost) = (recovered.wait().await, lost.wait().await);
    assert_eq!((recovered.handled, recovered.failed), (1, 0));
    assert_eq!((lost.handled, lost.failed), (1, 1));
    bus.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_stall_timeout_covers_the_retries_and_their_sleeps() {
    let bus = Bus::new();
    let calls = Calls::default();
    let options = SubscribeOptions::new()
        .retry(RetryPolicy::new(3).backoff(Duration::from_secs(60)))
        .stall_timeout(Duration::from_secs(1));
    let sub = bus
        .subscribe_with("jobs", options, flaky(calls.clone()))
        .unwrap();
    bus.publish("jobs", Job { id: 1, fails: 1 }).await.unwrap();
    bus.close().await;
    let stats = sub.stats();
    assert!(stats.detached, "{stats:?}");
    assert_eq!((stats.retries, stats.handled), (1, 0));
    assert_eq!(ids(&calls), [1]);
}
