//! `Stream`: the pull subscription. It ports a `tokio::sync::broadcast` receiver loop as it is,
//! gates publishers, counts in `stats()`, unsubscribes when dropped, spends tokio's
//! cooperative budget, is cancel safe, and neither holds up nor loses anything to `close`.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use ringbus::{Bus, Context, PublishError};

/// A watchdog for waits that must end: a test that would hang fails instead.
const WATCHDOG: Duration = Duration::from_secs(10);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(WATCHDOG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WATCHDOG:?}"))
}

/// The consumer loop of a service written against `tokio::sync::broadcast` (through a
/// `Stream` of its messages), word for word. Both runs below use it unchanged.
async fn consume<S>(mut stream: S) -> Vec<u64>
where
    S: futures_core::Stream<Item = u64> + Unpin,
{
    let mut seen = Vec::new();
    while let Some(m) = stream.next().await {
        seen.push(m);
    }
    seen
}

const MESSAGES: u64 = 1_000;

/// tokio's broadcast receiver as a `Stream` (what `tokio_stream::wrappers::BroadcastStream`
/// does, minus its `Lagged` items).
fn broadcast_stream(
    rx: tokio::sync::broadcast::Receiver<u64>,
) -> impl futures_core::Stream<Item = u64> + Unpin {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.ok().map(|m| (m, rx))
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_receiver_loop_ports_unchanged() {
    let expected: Vec<u64> = (0..MESSAGES).collect();

    // Consumed while published. Before: tokio's broadcast, the sender dropped at the end.
    let (tx, rx) = tokio::sync::broadcast::channel::<u64>(MESSAGES as usize);
    let before = tokio::spawn(consume(broadcast_stream(rx)));
    for m in 0..MESSAGES {
        tx.send(m).expect("a receiver");
    }
    drop(tx);
    // After: a ringbus stream, the bus closed at the end. A queue of 4 makes the publisher
    // wait for the consumer again and again: nothing is dropped (broadcast would lag).
    let bus = Bus::builder().capacity(4).build();
    let after = tokio::spawn(consume(bus.stream::<u64>("numbers").unwrap()));
    for m in 0..MESSAGES {
        bus.publish("numbers", m).await.expect("open");
    }
    bus.close().await;
    assert_eq!(within("broadcast", before).await.unwrap(), expected);
    assert_eq!(within("ringbus stream", after).await.unwrap(), expected);

    // Consumed after the end: a receiver still gets what was sent before the senders went,
    // and a stream what was published before the close.
    let (tx, rx) = tokio::sync::broadcast::channel::<u64>(MESSAGES as usize);
    for m in 0..MESSAGES {
        tx.send(m).expect("a receiver");
    }
    drop(tx);
    assert_eq!(
        within("broadcast", consume(broadcast_stream(rx))).await,
        expected
    );
    let bus = Bus::builder().capacity(MESSAGES as usize).build();
    let stream = bus.stream::<u64>("numbers").unwrap();
    for m in 0..MESSAGES {
        bus.publish("numbers", m).await.expect("open");
    }
    bus.close().await;
    assert_eq!(within("ringbus stream", consume(stream)).await, expected);
}

#[tokio::test]
async fn the_inherent_next_loop_needs_no_trait_and_ends_at_close() {
    let bus = Bus::new();
    let mut stream = bus.stream::<String>("events").unwrap();
    let consumer = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = ringbus::Stream::next(&mut stream).await {
            seen.push(event);
        }
        (seen, stream.is_terminated())
    });
    bus.publish("events", "a".to_string()).await.unwrap();
    bus.publish("events", "b".to_string()).await.unwrap();
    bus.close().await;
    let (seen, terminated) = within("the consumer", consumer).await.unwrap();
    assert_eq!(seen, ["a", "b"]);
    assert!(terminated);
}

#[tokio::test]
async fn a_stream_gates_publishers_until_it_takes_a_message() {
    let bus = Bus::builder().capacity(2).build();
    let jobs = bus.topic::<u32>("jobs").unwrap();
    let mut stream = jobs.stream().unwrap();
    jobs.try_publish(1).unwrap();
    jobs.try_publish(2).unwrap();
    match jobs.try_publish(3) {
        Err(PublishError::Full(3)) => {}
        other => panic!("expected Full(3), got {other:?}"),
    }
    assert_eq!(stream.len(), 2);
    assert_eq!(stream.next().await, Some(1));
    jobs.try_publish(3)
        .expect("room again once the stream took one");
    assert_eq!(stream.next().await, Some(2));
    assert_eq!(stream.next().await, Some(3));
    assert!(stream.is_empty());
}

#[tokio::test]
async fn a_stream_counts_in_stats_and_subscriber_count() {
    let bus = Bus::new();
    let ticks = bus.topic::<u64>("ticks").unwrap();
    let mut stream = ticks.stream().unwrap();
    assert_eq!(ticks.subscriber_count(), 1);
    for t in 0..3 {
        ticks.publish(t).await.unwrap();
    }
    assert_eq!(stream.next().await, Some(0));
    let stats = bus.stats();
    let topic = &stats.topics[0];
    assert_eq!(topic.unrouted, 0, "the stream is a subscriber");
    assert_eq!(topic.subscribers.len(), 1);
    let sub = &topic.subscribers[0];
    assert_eq!((sub.id, sub.handled, sub.lag), (stream.id(), 1, 2));
    assert!(sub.running);
    assert_eq!(stream.stats().handled, 1);
    drop(stream);
    assert_eq!(ticks.subscriber_count(), 0);
    assert!(!bus.stats().topics[0].subscribers[0].running);
}

#[tokio::test]
async fn dropping_a_stream_releases_a_publisher_waiting_for_it() {
    let bus = Bus::builder().capacity(1).build();
    let stream = bus.stream::<u32>("jobs").unwrap();
    bus.publish("jobs", 1u32).await.unwrap();
    let waiting = tokio::spawn({
        let bus = bus.clone();
        async move { bus.publish("jobs", 2u32).await }
    });
    tokio::task::yield_now().await; // let it find the queue full (it would wait for good)
    drop(stream);
    within("the waiting publisher", waiting)
        .await
        .unwrap()
        .expect("released, then published to a topic with no subscriber");
}

#[tokio::test]
async fn close_neither_waits_for_an_unpolled_stream_nor_loses_what_it_holds() {
    let bus = Bus::builder().capacity(4).build();
    let handled = Arc::new(AtomicU64::new(0));
    let _handler = bus
        .subscribe("jobs", {
            let handled = handled.clone();
            move |_: &u32| {
                handled.fetch_add(1, SeqCst);
                async {}
            }
        })
        .unwrap();
    let mut unpolled = bus.stream::<u32>("jobs").unwrap();
    for job in 0..4u32 {
        bus.publish("jobs", job).await.unwrap(); // the stream's queue is now full
    }
    within("close", bus.close()).await;
    assert_eq!(handled.load(SeqCst), 4, "close drained the handler");
    // The stream kept its place: everything published before the close, then the end.
    let mut rest = Vec::new();
    while let Some(job) = unpolled.next().await {
        rest.push(job);
    }
    assert_eq!(rest, [0, 1, 2, 3]);
    assert_eq!(unpolled.next().await, None, "fused");
    assert!(matches!(
        bus.stream::<u32>("jobs"),
        Err(ringbus::Error::Closed)
    ));
}

#[tokio::test]
async fn a_bounded_close_does_not_stop_or_report_a_stream() {
    let bus = Bus::builder().capacity(4).build();
    let mut stream = bus.stream::<u32>("jobs").unwrap();
    bus.publish("jobs", 7u32).await.unwrap();
    let ctx = Context::new().with_timeout(Duration::from_secs(5));
    let report = within("close_with", bus.close_with(&ctx)).await;
    assert!(report.complete, "{report}");
    assert!(report.unfinished.is_empty());
    assert_eq!(stream.next().await, Some(7));
    assert_eq!(stream.next().await, None);
}

#[tokio::test]
async fn next_ref_lends_in_place_and_gates_until_dropped() {
    #[derive(Debug, PartialEq)]
    struct Frame(Vec<u8>); // not Clone

    let bus = Bus::builder().capacity(1).build();
    let frames = bus.topic::<Frame>("frames").unwrap();
    let mut stream = frames.stream().unwrap();
    frames.publish(Frame(vec![1, 2, 3])).await.unwrap();
    let frame = stream.next_ref().await.expect("a frame");
    assert_eq!(*frame, Frame(vec![1, 2, 3]));
    assert_eq!(frame.position(), 0);
    assert!(
        matches!(
            frames.try_publish(Frame(vec![4])),
            Err(PublishError::Full(_))
        ),
        "the lent frame still holds its slot"
    );
    drop(frame);
    frames.try_publish(Frame(vec![4])).expect("released");
    assert_eq!(stream.stats().handled, 1);
    assert_eq!(stream.next_ref().await.as_deref(), Some(&Frame(vec![4])));
}

#[tokio::test]
async fn a_dropped_next_loses_nothing() {
    let bus = Bus::new();
    let mut stream = bus.stream::<u32>("jobs").unwrap();
    {
        let mut next = tokio_test::task::spawn(stream.next());
        assert!(next.poll().is_pending(), "nothing published yet");
    } // dropped while waiting, as the losing branch of a select! would be
    bus.publish("jobs", 1u32).await.unwrap();
    // A select! whose other branch is ready first never polls the stream's future.
    tokio::select! {
        biased;
        _ = std::future::ready(()) => {}
        _ = stream.next() => panic!("the biased branch goes first"),
    }
    assert_eq!(stream.next().await, Some(1));
    assert_eq!(stream.stats().handled, 1);
    {
        let mut next_ref = tokio_test::task::spawn(stream.next_ref());
        assert!(next_ref.poll().is_pending(), "nothing published since");
    }
    bus.publish("jobs", 2u32).await.unwrap();
    assert_eq!(stream.next_ref().await.as_deref(), Some(&2));
}

#[test]
fn a_stream_that_always_finds_a_message_lets_its_neighbours_run() {
    const MESSAGES: u64 = 20_000;
    const BUDGET: u64 = 128;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let bus = Bus::builder().capacity(32_768).build();
        let mut stream = bus.stream::<u64>("t").unwrap();
        for m in 0..MESSAGES {
            bus.try_publish("t", m).unwrap();
        }
        let taken = Arc::new(AtomicU64::new(0));
        let busy = tokio::spawn({
            let taken = taken.clone();
            async move {
                while taken.load(SeqCst) < MESSAGES {
                    stream.next().await.expect("a message");
                    taken.fetch_add(1, SeqCst);
                }
            }
        });
        let seen = taken.clone();
        let neighbour = tokio::spawn(async move { seen.load(SeqCst) });
        let at = neighbour.await.unwrap();
        busy.await.unwrap();
        assert_eq!(taken.load(SeqCst), MESSAGES);
        assert!(
            at <= BUDGET,
            "the neighbour ran only after {at} messages (budget {BUDGET})"
        );
    });
}

#[tokio::test]
async fn a_stream_needs_a_matching_type() {
    let bus = Bus::new();
    let _numbers = bus.topic::<u64>("numbers").unwrap();
    match bus.stream::<String>("numbers") {
        Err(ringbus::Error::TypeMismatch(e)) => assert_eq!(&*e.topic, "numbers"),
        other => panic!("expected a type mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn delivery_receipts_wait_for_a_stream() {
    let bus = Bus::new();
    let jobs = bus.topic::<u32>("jobs").unwrap();
    let mut stream = jobs.stream().unwrap();
    let receipt = jobs.publish_tracked(&Context::new(), 5).await.unwrap();
    let mut wait = tokio_test::task::spawn(receipt.wait());
    assert!(wait.poll().is_pending(), "the stream has not taken it");
    assert_eq!(stream.next().await, Some(5));
    let delivered = within("the receipt", wait).await;
    assert_eq!((delivered.handled, delivered.failed), (1, 0));
}

/// Compile-time: the new types and their futures can cross tasks.
#[allow(dead_code)]
fn send_sync_unpin() {
    fn send<T: Send>(_: &T) {}
    fn sync<T: Sync>(_: &T) {}
    fn unpin<T: Unpin>(_: &T) {}
    fn check(mut stream: ringbus::Stream<String>, recorder: ringbus::testing::Recorder<u64>) {
        send(&stream);
        sync(&stream);
        unpin(&stream);
        send(&recorder);
        sync(&recorder);
        send(&Bus::new().wait_idle());
        send(&recorder.wait_for(1));
        send(&stream.next());
        send(&stream.next_ref());
    }
    fn check_ref(item: ringbus::StreamRef<'_, String>) {
        send(&item);
        sync(&item);
    }
}
