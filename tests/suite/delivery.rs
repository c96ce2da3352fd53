//! Delivery receipts (`Topic::publish_tracked`): the receipt resolves only once every
//! subscriber present at the publish has handled the message, and counts the handlers that
//! failed on it (returned `Err` or panicked) and the subscribers that ended without it.

use std::sync::Arc;
use std::time::Duration;

use ringbus::{Batch, Bus, Context, Delivered, SubscribeOptions};
use tokio::sync::Semaphore;

/// Lets the scheduler run everything that is ready, a bounded number of times.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolves_only_after_every_subscriber_handled_it() {
    let bus = Bus::new();
    let gate = Arc::new(Semaphore::new(0));
    let _fast = bus.subscribe("jobs", |_: &u32| async {}).unwrap();
    let held = gate.clone();
    let _slow = bus
        .subscribe("jobs", move |_: &u32| {
            let held = held.clone();
            async move {
                // Holds the handler until the test lets it go.
                held.acquire()
                    .await
                    .map(|p| p.forget())
                    .map_err(|_| "closed")
            }
        })
        .unwrap();
    let jobs = bus.topic::<u32>("jobs").unwrap();
    let delivery = jobs.publish_tracked(&Context::new(), 1).await.unwrap();
    assert_eq!(delivery.position(), 0);
    let waiting = tokio::spawn(delivery.wait());
    settle().await;
    assert!(!waiting.is_finished(), "resolved while a handler still ran");
    gate.add_permits(1);
    let delivered = waiting.await.unwrap();
    assert_eq!(
        (
            delivered.subscribers,
            delivered.handled,
            delivered.failed,
            delivered.missed
        ),
        (2, 2, 0, 0)
    );
    assert!(delivered.is_ok());
    bus.close().await;
}

#[tokio::test]
async fn counts_errors_and_panics_on_that_message_only() {
    let bus = Bus::new();
    let _err = bus
        .subscribe("n", |n: &u32| {
            let n = *n;
            async move {
                if n == 2 {
                    Err("two")
                } else {
                    Ok(())
                }
            }
        })
        .unwrap();
    let _panics = bus
        .subscribe("n", |n: &u32| {
            let n = *n;
            async move { assert_ne!(n, 2, "this handler refuses 2") }
        })
        .unwrap();
    let _fine = bus.subscribe("n", |_: &u32| async {}).unwrap();
    let topic = bus.topic::<u32>("n").unwrap();
    let mut receipts = Vec::new();
    for n in 0..4 {
        receipts.push(topic.publish_tracked(&Context::new(), n).await.unwrap());
    }
    let mut outcomes = Vec::new();
    for receipt in receipts {
        outcomes.push(receipt.wait().await);
    }
    let failed: Vec<usize> = outcomes.iter().map(|d| d.failed).collect();
    assert_eq!(failed, [0, 0, 2, 0]);
    assert!(outcomes.iter().all(|d| d.handled == 3 && d.missed == 0));
    bus.close().await;
}

#[tokio::test]
async fn batch_handler_failure_counts_for_every_message_of_the_batch() {
    let bus = Bus::new();
    let topic = bus.topic::<u32>("b").unwrap();
    let _sub = bus
        .subscribe_batch("b", SubscribeOptions::new(), |batch: Batch<'_, u32>| {
            let has_odd = batch.iter().any(|n| n % 2 == 1);
            async move {
                if has_odd {
                    Err("odd in batch")
                } else {
                    Ok(())
                }
            }
        })
        .unwrap();
    let even = topic.publish_tracked(&Context::new(), 2).await.unwrap();
    assert_eq!(even.wait().await.failed, 0);
    let odd = topic.publish_tracked(&Context::new(), 3).await.unwrap();
    assert_eq!(odd.wait().await.failed, 1);
    bus.close().await;
}

#[tokio::test]
async fn no_subscriber_resolves_at_once_and_later_subscribers_do_not_count() {
    let bus = Bus::new();
    let topic = bus.topic::<u32>("empty").unwrap();
    let delivered = topic
        .publish_tracked(&Context::new(), 1)
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(delivered, Delivered::default());
    assert!(delivered.is_ok());

    let receipt = topic.publish_tracked(&Context::new(), 2).await.unwrap();
    let _late = bus.subscribe("empty", |_: &u32| async {}).unwrap();
    assert_eq!(receipt.wait().await.subscribers, 0);
    bus.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_subscriber_counts_as_missed() {
    let bus = Bus::new();
    let _stuck = bus
        .subscribe_with(
            "s",
            SubscribeOptions::new().stall_timeout(Duration::from_millis(20)),
            |n: &u32| {
                let n = *n;
                async move {
                    if n == 1 {
                        std::future::pending::<()>().await;
                    }
                }
            },
        )
        .unwrap();
    let topic = bus.topic::<u32>("s").unwrap();
    let first = topic.publish_tracked(&Context::new(), 1).await.unwrap();
    let second = topic.publish_tracked(&Context::new(), 2).await.unwrap();
    // The first message stalls the handler; the subscriber is detached, its call dropped.
    let first = first.wait().await;
    let second = second.wait().await;
    assert_eq!((first.handled, first.missed), (0, 1));
    assert_eq!((second.handled, second.missed), (0, 1));
    assert!(!first.is_ok());
    bus.close().await;
}

#[tokio::test]
async fn a_refused_publish_gives_the_message_back_and_leaves_no_receipt() {
    let bus = Bus::new();
    let _sub = bus.subscribe("c", |_: &u32| async {}).unwrap();
    let topic = bus.topic::<u32>("c").unwrap();
    bus.close().await;
    match topic.publish_tracked(&Context::new(), 9).await {
        Err(ringbus::PublishError::Closed(9)) => {}
        other => panic!("expected Closed(9), got {other:?}"),
    }
}

/// A subscriber that ended before a publish is not one of its subscribers: a receipt made
/// after an unsubscribe (and before the next subscribe) neither waits for it nor counts it as
/// missed.
#[tokio::test]
async fn a_subscriber_gone_before_the_publish_is_not_counted() {
    let bus = Bus::new();
    let _stays = bus.subscribe("t", |_: &u32| async {}).unwrap();
    let leaves = bus.subscribe("t", |_: &u32| async {}).unwrap();
    leaves.unsubscribe().await;
    let topic = bus.topic::<u32>("t").unwrap();
    let delivered = topic
        .publish_tracked(&Context::new(), 1)
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(
        (delivered.subscribers, delivered.handled, delivered.missed),
        (1, 1, 0),
        "{delivered:?}"
    );
    assert!(delivered.is_ok());
    bus.close().await;
}
