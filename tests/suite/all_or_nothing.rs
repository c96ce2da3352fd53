//! Guarantee 3, all or nothing: a publish that fails, is cancelled through its `Context`, or is
//! dropped before it completes has reached no subscriber, and an error gives the very message
//! back. Driven at poll level (tokio-test) on paused time, so every step is deterministic.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Gate, Log};
use ringbus::{Bus, CancellationToken, Context, PublishError, SubscribeOptions, Subscription};
use tokio::sync::mpsc;
use tokio_test::{assert_pending, assert_ready, task};

/// A message that is not `Clone`, with a witness to tell the very same message apart and to
/// see when it is dropped.
#[derive(Debug)]
struct Msg {
    id: u64,
    witness: Arc<()>,
}

fn msg(id: u64) -> (Msg, Arc<()>) {
    let witness = Arc::new(());
    (
        Msg {
            id,
            witness: witness.clone(),
        },
        witness,
    )
}

/// A subscriber that reports each message it starts on, passes `gate`, then logs it.
fn gated(bus: &Bus, gate: &Gate) -> (Subscription, Log<u64>, mpsc::UnboundedReceiver<u64>) {
    let log = Log::new();
    let (tx, entered) = mpsc::unbounded_channel();
    let (gate, logged) = (gate.clone(), log.clone());
    let sub = bus
        .subscribe_with("t", SubscribeOptions::new().name("slow"), move |m: &Msg| {
            let (id, gate, logged, tx) = (m.id, gate.clone(), logged.clone(), tx.clone());
            async move {
                let _ = tx.send(id);
                gate.pass().await;
                logged.push(id);
            }
        })
        .unwrap();
    (sub, log, entered)
}

/// A bus whose topic "t" (capacity 2) is full, its only subscriber held on message 0.
async fn full_topic() -> (Bus, Gate, Subscription, Log<u64>) {
    let bus = Bus::builder().capacity(2).build();
    let gate = Gate::closed();
    let (sub, log, mut entered) = gated(&bus, &gate);
    bus.try_publish("t", msg(0).0).unwrap();
    bus.try_publish("t", msg(1).0).unwrap();
    assert_eq!(entered.recv().await, Some(0));
    assert!(matches!(
        bus.try_publish("t", msg(2).0),
        Err(PublishError::Full(m)) if m.id == 2
    ));
    (bus, gate, sub, log)
}

/// Checks that `result` is `Cancelled` carrying the very message behind `witness`, and that
/// nothing else holds it once given back.
fn assert_cancelled_with(result: Result<(), PublishError<Msg>>, id: u64, witness: &Arc<()>) {
    match result {
        Err(PublishError::Cancelled(m)) => {
            assert_eq!(m.id, id);
            assert!(
                Arc::ptr_eq(&m.witness, witness),
                "another message came back"
            );
            drop(m);
            assert_eq!(Arc::strong_count(witness), 1, "the bus kept the message");
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

/// Opens the gate, closes the bus (which drains it) and returns what the subscriber handled.
async fn drain(bus: &Bus, gate: &Gate, log: &Log<u64>) -> Vec<u64> {
    gate.open();
    bus.close().await;
    log.snapshot()
}

#[tokio::test(start_paused = true)]
async fn deadline_passing_while_waiting_for_room_gives_the_message_back() {
    let (bus, gate, _sub, log) = full_topic().await;
    let ctx = Context::new().with_timeout(Duration::from_millis(100));
    let (m, witness) = msg(99);
    let mut publish = task::spawn(bus.publish_with(&ctx, "t", m));
    assert_pending!(publish.poll());
    tokio::time::advance(Duration::from_millis(99)).await;
    assert_pending!(publish.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        publish.is_woken(),
        "the deadline did not wake the publisher"
    );
    assert_cancelled_with(assert_ready!(publish.poll()), 99, &witness);
    drop(publish);

    assert_eq!(drain(&bus, &gate, &log).await, [0, 1]);
}

#[tokio::test(start_paused = true)]
async fn deadline_passing_while_waiting_for_another_publisher() {
    let (bus, gate, _sub, log) = full_topic().await;
    // The first publisher holds the topic while it waits for room; the second waits for it.
    let mut first = task::spawn(bus.publish("t", msg(2).0));
    assert_pending!(first.poll());
    let ctx = Context::new().with_deadline(tokio::time::Instant::now() + Duration::from_secs(1));
    let (m, witness) = msg(99);
    let mut second = task::spawn(bus.publish_with(&ctx, "t", m));
    assert_pending!(second.poll());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_cancelled_with(assert_ready!(second.poll()), 99, &witness);
    assert_pending!(first.poll());

    gate.open();
    first.await.unwrap();
    assert_eq!(drain(&bus, &gate, &log).await, [0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn token_cancelled_while_waiting_for_room_gives_the_message_back() {
    let (bus, gate, _sub, log) = full_topic().await;
    let shutdown = CancellationToken::new();
    let ctx = Context::from(shutdown.child_token());
    let (m, witness) = msg(99);
    let mut publish = task::spawn(bus.publish_with(&ctx, "t", m));
    assert_pending!(publish.poll());
    // Time alone does nothing to a context without a deadline.
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_pending!(publish.poll());
    shutdown.cancel();
    assert!(
        publish.is_woken(),
        "the cancellation did not wake the publisher"
    );
    assert_cancelled_with(assert_ready!(publish.poll()), 99, &witness);
    drop(publish);

    // The same through a typed handle, with a token cancelled before the publish.
    let topic = bus.topic::<Msg>("t").unwrap();
    let (m, witness) = msg(98);
    let done = Context::new().with_cancellation(CancellationToken::new());
    let token = CancellationToken::new();
    token.cancel();
    let done = done.with_cancellation(token);
    assert_cancelled_with(topic.publish_with(&done, m).await, 98, &witness);

    assert_eq!(drain(&bus, &gate, &log).await, [0, 1]);
}

#[tokio::test(start_paused = true)]
async fn dropped_pending_publish_reaches_nobody() {
    let (bus, gate, _sub, log) = full_topic().await;
    let (m, witness) = msg(99);
    let mut publish = task::spawn(bus.publish("t", m));
    assert_pending!(publish.poll());
    drop(publish);
    assert_eq!(
        Arc::strong_count(&witness),
        1,
        "the message outlived its publish"
    );

    // A dropped publish that waited on the topic's lock behind another publisher.
    let mut first = task::spawn(bus.publish("t", msg(2).0));
    assert_pending!(first.poll());
    let (m, witness) = msg(98);
    let mut second = task::spawn(bus.publish("t", m));
    assert_pending!(second.poll());
    drop(second);
    assert_eq!(Arc::strong_count(&witness), 1);

    gate.open();
    first.await.unwrap();
    assert_eq!(drain(&bus, &gate, &log).await, [0, 1, 2]);
}

/// A batch is all or nothing per message: what was published is handled, what comes back in
/// the error never is.
#[tokio::test(start_paused = true)]
async fn cancelled_batch_gives_back_exactly_the_unpublished_messages() {
    let bus = Bus::builder().capacity(4).build();
    let gate = Gate::closed();
    let (_sub, log, mut entered) = gated(&bus, &gate);
    let topic = bus.topic::<Msg>("t").unwrap();
    topic.try_publish(msg(0).0).unwrap();
    topic.try_publish(msg(1).0).unwrap();
    assert_eq!(entered.recv().await, Some(0));
    // Two slots are free: ids 2 and 3 fit, 4..8 wait.
    let ctx = Context::new().with_timeout(Duration::from_millis(10));
    let mut publish = task::spawn(topic.publish_batch(&ctx, (2..8).map(|id| msg(id).0)));
    assert_pending!(publish.poll());
    tokio::time::advance(Duration::from_millis(10)).await;
    match assert_ready!(publish.poll()) {
        Err(PublishError::Cancelled(rest)) => {
            assert_eq!(rest.map(|m| m.id).collect::<Vec<_>>(), [4, 5, 6, 7]);
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    drop(publish);
    assert_eq!(drain(&bus, &gate, &log).await, [0, 1, 2, 3]);
}

/// A context that is already done refuses every kind of publish up front, with room in the
/// topic and the writer free: nothing is published, everything comes back.
#[tokio::test(start_paused = true)]
async fn an_already_cancelled_context_publishes_nothing() {
    let bus = Bus::builder().capacity(8).build();
    let gate = Gate::closed();
    let (_sub, log, _entered) = gated(&bus, &gate);
    let topic = bus.topic::<Msg>("t").unwrap();
    let token = CancellationToken::new();
    token.cancel();
    let ctx = Context::new().with_cancellation(token);

    let (m, witness) = msg(1);
    assert_cancelled_with(topic.publish_with(&ctx, m).await, 1, &witness);
    match topic.publish_batch(&ctx, (2..5).map(|id| msg(id).0)).await {
        Err(PublishError::Cancelled(rest)) => {
            assert_eq!(rest.map(|m| m.id).collect::<Vec<_>>(), [2, 3, 4]);
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    match topic.publish_tracked(&ctx, msg(5).0).await {
        Err(PublishError::Cancelled(m)) => assert_eq!(m.id, 5),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(drain(&bus, &gate, &log).await, Vec::<u64>::new());
}

/// On an unbuffered topic the message enters at once; the publish then waits for the
/// subscribers to handle it. A deadline passing during that wait must not turn the publish
/// into `Cancelled` (the message was delivered): it completes `Ok` once handled.
#[tokio::test(start_paused = true)]
async fn unbuffered_publish_never_reports_cancelled_for_a_delivered_message() {
    let bus = Bus::builder().capacity(0).build();
    let gate = Gate::closed();
    let (_sub, log, mut entered) = gated(&bus, &gate);
    let ctx = Context::new().with_timeout(Duration::from_millis(10));
    let mut publish = task::spawn(bus.publish_with(&ctx, "t", msg(0).0));
    assert_pending!(publish.poll());
    assert_eq!(entered.recv().await, Some(0));
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_pending!(publish.poll());
    gate.open();
    publish.await.unwrap();
    assert_eq!(log.snapshot(), [0]);
}

/// On an unbuffered topic a publish first enters the topic, then waits for every subscriber
/// to handle it. Once in, it is published (a handler may already be running on it): dropping
/// the future in that second wait does not take it back, and every subscriber handles it
/// exactly once, as `BusBuilder::capacity` documents.
#[tokio::test(start_paused = true)]
async fn unbuffered_publish_dropped_while_being_handled() {
    let bus = Bus::builder().capacity(0).build();
    let gate = Gate::closed();
    let (_sub, log, mut entered) = gated(&bus, &gate);
    let mut publish = task::spawn(bus.publish("t", msg(0).0));
    assert_pending!(publish.poll());
    assert_eq!(entered.recv().await, Some(0));
    drop(publish);
    assert_eq!(drain(&bus, &gate, &log).await, vec![0]);
}

/// An unbuffered topic's batch goes in one message at a time; when one is refused (here the
/// bus closes while the one before waits to be handled), the error gives back that message
/// and everything after it, in order: nothing is dropped.
#[tokio::test]
async fn unbuffered_batch_gives_back_the_refused_message_and_the_rest() {
    let bus = Bus::builder().capacity(0).build();
    let gate = Gate::closed();
    let (_sub, log, mut entered) = gated(&bus, &gate);
    let (ids, witnesses): (Vec<Msg>, Vec<Arc<()>>) = (0..3).map(msg).unzip();
    let mut batch = task::spawn(bus.publish_batch("t", ids));
    assert_pending!(batch.poll());
    // Message 0 is in, its publish waiting for the subscriber to handle it.
    assert_eq!(entered.recv().await, Some(0));

    let mut close = task::spawn(bus.close());
    assert_pending!(close.poll());
    match assert_ready!(batch.poll()) {
        Err(PublishError::Closed(rest)) => {
            assert_eq!(rest.map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
        }
        other => panic!("expected Closed, got {other:?}"),
    }
    drop(batch);
    // 1 and 2 were given back, then dropped above; 0 is in the topic.
    assert_eq!(
        witnesses.iter().map(Arc::strong_count).collect::<Vec<_>>(),
        [2, 1, 1]
    );
    gate.open();
    close.await;
    assert_eq!(log.snapshot(), [0]);
}
