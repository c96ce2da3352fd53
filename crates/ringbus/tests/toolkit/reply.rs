//! Request/reply: a replier's return value reaches its own requester; nobody subscribed is
//! `NoResponders` at once (the message back); subscribers that do not reply make it
//! `Unanswered` without waiting for the deadline; a deadline or a cancellation ends the wait
//! (paused time), and the reply that comes later is dropped and counted, never given to the
//! next request; a handler's `Err` or panic reaches the requester as `Failed`; a closed bus
//! is `Closed` with the message back; with two repliers the first answer wins and the other
//! is counted; repliers refuse retry options; `#[subscriber(.., reply)]` makes a replier.

use std::sync::Arc;
use std::time::Duration;

use ringbus::{
    subscriber, Bus, CancellationToken, Context, Error, Request, RequestError, RetryPolicy,
    SubscribeOptions,
};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// A request topic: a quantity in, a price in cents out.
type Prices = Request<u32, u64>;

/// A replier that answers `n * 10` once `gate` gives it a permit, notifying `entered` when a
/// request reaches it.
fn gated(gate: Arc<Semaphore>, entered: Arc<Notify>) -> impl ringbus::Replier<u32, u64> {
    move |n: &u32| {
        let (n, gate) = (*n, gate.clone());
        entered.notify_one();
        async move {
            gate.acquire().await.expect("gate closed").forget();
            u64::from(n) * 10
        }
    }
}

#[tokio::test]
async fn each_request_gets_its_own_reply() {
    let bus = Bus::new();
    let replier = bus
        .reply("prices", async |n: &u32| u64::from(*n) * 10)
        .unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    for n in 1..=3 {
        assert_eq!(prices.request(n).await.unwrap(), u64::from(n) * 10);
    }
    let (a, b) = tokio::join!(prices.request(4), prices.request(5));
    assert_eq!((a.unwrap(), b.unwrap()), (40, 50));
    bus.close().await;
    let stats = replier.stats();
    assert_eq!(
        (stats.handled, stats.late_replies, stats.duplicate_replies),
        (5, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn no_subscriber_is_no_responders_at_once_with_the_message_back() {
    let bus = Bus::new();
    let prices = bus.topic::<Prices>("prices").unwrap();
    let start = Instant::now();
    let ctx = Context::new().with_timeout(Duration::from_secs(60));
    match prices.request_with(&ctx, 7).await {
        Err(RequestError::NoResponders(7)) => {}
        other => panic!("expected NoResponders(7), got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "waited for the deadline");
    assert_eq!(prices.published(), 0, "the request was sent to nobody");
}

#[tokio::test(start_paused = true)]
async fn subscribers_that_do_not_reply_leave_it_unanswered_before_the_deadline() {
    let bus = Bus::new();
    // A plain handler of the request topic sees the request but cannot answer it.
    let seen = bus
        .subscribe("prices", async |request: &Prices| {
            assert_eq!(*request.message(), 3)
        })
        .unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    let start = Instant::now();
    let ctx = Context::new().with_timeout(Duration::from_secs(60));
    match prices.request_with(&ctx, 3).await {
        Err(e @ RequestError::Unanswered) => assert!(e.was_sent()),
        other => panic!("expected Unanswered, got {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "waited for the deadline"
    );
    assert_eq!(seen.stats().handled, 1);
}

/// The first request times out while its replier is held; the replier then answers it
/// late, and answers the second request. The second gets its own reply (20), never the
/// first's (10), and the late one is counted.
#[tokio::test(start_paused = true)]
async fn a_late_reply_is_dropped_and_counted_never_given_to_the_next_request() {
    let bus = Bus::new();
    let gate = Arc::new(Semaphore::new(0));
    let replier = bus
        .reply("prices", gated(gate.clone(), Arc::new(Notify::new())))
        .unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();

    let start = Instant::now();
    let ctx = Context::new().with_timeout(Duration::from_millis(50));
    match prices.request_with(&ctx, 1).await {
        Err(RequestError::Timeout(None)) => {}
        other => panic!("expected Timeout(None), got {other:?}"),
    }
    let waited = start.elapsed();
    assert!(
        (Duration::from_millis(50)..Duration::from_millis(51)).contains(&waited),
        "timed out after {waited:?}"
    );
    assert_eq!(replier.stats().late_replies, 0);

    let second = tokio::spawn({
        let prices = prices.clone();
        async move { prices.request(2).await }
    });
    gate.add_permits(2);
    assert_eq!(second.await.unwrap().unwrap(), 20);
    bus.wait_idle().await;
    let stats = replier.stats();
    assert_eq!((stats.handled, stats.late_replies), (2, 1));
}

#[tokio::test]
async fn a_cancelled_or_dropped_request_counts_its_reply_late() {
    let bus = Bus::new();
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Notify::new());
    let replier = bus
        .reply("prices", gated(gate.clone(), entered.clone()))
        .unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();

    // Cancelled through the context's token once the replier has the request.
    let token = CancellationToken::new();
    let ctx = Context::from(token.clone());
    let request = prices.request_with(&ctx, 1);
    let cancel = async {
        entered.notified().await;
        token.cancel();
        std::future::pending::<()>().await
    };
    tokio::select! {
        outcome = request => match outcome {
            Err(RequestError::Cancelled(None)) => {}
            other => panic!("expected Cancelled(None), got {other:?}"),
        },
        _ = cancel => unreachable!(),
    }

    // Dropped once the replier has it (it answers the first one, late, first): the future
    // is the cancellation.
    gate.add_permits(1);
    tokio::select! {
        outcome = prices.request(2) => panic!("answered while the replier was held: {outcome:?}"),
        _ = entered.notified() => {}
    }

    gate.add_permits(1);
    bus.wait_idle().await;
    let stats = replier.stats();
    assert_eq!((stats.handled, stats.late_replies), (2, 2));
}

#[tokio::test]
async fn a_cancelled_context_before_sending_gives_the_message_back() {
    let bus = Bus::new();
    let replier = bus.reply("prices", async |n: &u32| u64::from(*n)).unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    let token = CancellationToken::new();
    token.cancel();
    match prices.request_with(&Context::from(token), 4).await {
        Err(e @ RequestError::Cancelled(Some(4))) => assert!(!e.was_sent()),
        other => panic!("expected Cancelled(Some(4)), got {other:?}"),
    }
    bus.close().await;
    assert_eq!(replier.stats().handled, 0, "a cancelled request was sent");
}

#[tokio::test]
async fn an_error_or_a_panic_reaches_the_requester_as_failed() {
    let bus = Bus::new();
    let replier = bus
        .reply::<u32, u64, _>("prices", async |n: &u32| match *n {
            0 => Err(format!("no price for {n}")),
            13 => panic!("unlucky {n}"),
            n => Ok(u64::from(n)),
        })
        .unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    match prices.request(0).await {
        Err(RequestError::Failed(why)) => assert_eq!(why, "no price for 0"),
        other => panic!("expected Failed, got {other:?}"),
    }
    match prices.request(13).await {
        Err(RequestError::Failed(why)) => assert_eq!(why, "panicked: unlucky 13"),
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(prices.request(2).await.unwrap(), 2, "the replier went on");
    bus.close().await;
    let stats = replier.stats();
    // Counted as any handler's failures, too.
    assert_eq!((stats.handled, stats.errors, stats.panics), (3, 1, 1));
}

#[tokio::test]
async fn a_closed_bus_refuses_with_the_message_back() {
    let bus = Bus::new();
    let _replier = bus.reply("prices", async |n: &u32| u64::from(*n)).unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    bus.close().await;
    match prices.request(9).await {
        Err(e @ RequestError::Closed(9)) => {
            assert_eq!(e.into_message(), Some(9));
        }
        other => panic!("expected Closed(9), got {other:?}"),
    }
    // A stream outlives the close (close does not wait for streams): the topic still has a
    // subscriber, and the publish itself refuses the request.
    let bus = Bus::new();
    let prices = bus.topic::<Prices>("prices").unwrap();
    let _stream = prices.stream().unwrap();
    bus.close().await;
    assert_eq!(prices.subscriber_count(), 1);
    match prices.request(10).await {
        Err(RequestError::Closed(10)) => {}
        other => panic!("expected Closed(10), got {other:?}"),
    }
}

#[tokio::test]
async fn with_two_repliers_the_first_answer_wins_and_the_other_is_counted() {
    let bus = Bus::new();
    let one = bus.reply("prices", async |_: &u32| 1u64).unwrap();
    let two = bus.reply("prices", async |_: &u32| 2u64).unwrap();
    let prices = bus.topic::<Prices>("prices").unwrap();
    let reply = prices.request(0).await.unwrap();
    bus.close().await;
    let (one, two) = (one.stats(), two.stats());
    assert_eq!(one.handled + two.handled, 2);
    // The loser is the one that counted a duplicate.
    let loser = if reply == 1 { &two } else { &one };
    assert_eq!(loser.duplicate_replies, 1);
    assert_eq!(one.duplicate_replies + two.duplicate_replies, 1);
    assert_eq!(one.late_replies + two.late_replies, 0);
}

#[tokio::test]
async fn request_topics_are_typed_and_repliers_do_not_retry() {
    let bus = Bus::new();
    let _replier = bus.reply("prices", async |n: &u32| u64::from(*n)).unwrap();
    assert!(matches!(
        bus.topic::<u32>("prices"),
        Err(Error::TypeMismatch(_))
    ));
    assert!(matches!(
        bus.topic::<Request<u32, String>>("prices"),
        Err(Error::TypeMismatch(_))
    ));
    let _plain = bus.subscribe("plain", async |_: &u32| {}).unwrap();
    assert!(matches!(
        bus.reply("plain", async |n: &u32| u64::from(*n)),
        Err(Error::TypeMismatch(_))
    ));
    let retrying = SubscribeOptions::new().retry(RetryPolicy::new(2));
    assert!(matches!(
        bus.reply_with("prices", retrying, async |n: &u32| u64::from(*n)),
        Err(Error::Unsupported(_))
    ));
}

#[subscriber("quotes", reply)]
async fn quote(quantity: &u32) -> u64 {
    u64::from(*quantity) * 99
}

#[subscriber("checked_quotes", reply, name = "checked")]
async fn checked_quote(quantity: &u32) -> Result<u64, String> {
    if *quantity == 0 {
        return Err("no quantity".to_string());
    }
    Ok(u64::from(*quantity))
}

#[tokio::test]
async fn subscriber_functions_with_reply_answer_requests() {
    let bus = Bus::new();
    bus.register(quote).unwrap();
    let checked = bus.register(checked_quote).unwrap();
    assert_eq!(checked.name(), "checked");
    let quotes = bus.topic::<Request<u32, u64>>("quotes").unwrap();
    assert_eq!(quotes.request(2).await.unwrap(), 198);
    let checked_quotes = bus.topic::<Request<u32, u64>>("checked_quotes").unwrap();
    assert_eq!(checked_quotes.request(5).await.unwrap(), 5);
    assert!(matches!(
        checked_quotes.request(0).await,
        Err(RequestError::Failed(why)) if why == "no quantity"
    ));
    bus.close().await;
}

/// Compile-time: requests and their errors cross tasks, and a request future is `Send`.
#[allow(dead_code)]
fn send_sync_unpin(prices: ringbus::Topic<Prices>, mut responder: ringbus::Responder<u64>) {
    fn all<T: Send + Sync + Unpin>() {}
    fn send<T: Send>(_: T) {}
    all::<Request<u32, u64>>();
    all::<RequestError<u32>>();
    all::<ringbus::Responder<u64>>();
    send(async move { prices.request(1).await });
    send(async move { responder.closed().await });
}

/// A subscriber that takes the request over answers it from another task, after its
/// handler returned; each way a responder can end reaches the requester as documented.
#[tokio::test]
async fn a_responder_answers_after_its_handler_returned() {
    let bus = Bus::new();
    let (tx, mut taken) = tokio::sync::mpsc::unbounded_channel();
    let _forward = bus
        .subscribe("forwarded", move |request: &Prices| {
            let _ = tx.send((*request.message(), request.responder(), request.deadline()));
            async {}
        })
        .unwrap();
    let topic = bus.topic::<Prices>("forwarded").unwrap();
    let ctx = Context::new().with_timeout(Duration::from_secs(10));

    // Answered after the handler returned (and after the bus went idle).
    let asking = tokio::spawn({
        let (topic, ctx) = (topic.clone(), ctx.clone());
        async move { topic.request_with(&ctx, 1).await }
    });
    let (n, responder, deadline) = taken.recv().await.unwrap();
    assert_eq!((n, deadline), (1, ctx.deadline()));
    bus.wait_idle().await;
    assert!(responder.unwrap().reply(10).is_ok());
    assert_eq!(asking.await.unwrap().unwrap(), 10);

    // Dropped without an answer: unanswered, at once.
    let asking = tokio::spawn({
        let (topic, ctx) = (topic.clone(), ctx.clone());
        async move { topic.request_with(&ctx, 2).await }
    });
    drop(taken.recv().await.unwrap().1);
    assert!(matches!(
        asking.await.unwrap(),
        Err(RequestError::Unanswered)
    ));

    // Failed and timed out.
    for fail in [true, false] {
        let asking = tokio::spawn({
            let (topic, ctx) = (topic.clone(), ctx.clone());
            async move { topic.request_with(&ctx, 3).await }
        });
        let responder = taken.recv().await.unwrap().1.unwrap();
        assert!(if fail {
            responder.fail("remote said no")
        } else {
            responder.time_out()
        });
        match (fail, asking.await.unwrap()) {
            (true, Err(RequestError::Failed(why))) => assert_eq!(why, "remote said no"),
            (false, Err(RequestError::Timeout(None))) => {}
            (_, other) => panic!("{other:?}"),
        }
    }

    // The requester stopped waiting: the reply comes back to the responder.
    let short = Context::new().with_timeout(Duration::from_millis(20));
    let asked = topic.request_with(&short, 4).await;
    assert!(
        matches!(asked, Err(RequestError::Timeout(None))),
        "{asked:?}"
    );
    let mut responder = taken.recv().await.unwrap().1.unwrap();
    responder.closed().await;
    assert!(responder.is_closed());
    assert_eq!(responder.reply(40), Err(40));
    bus.close().await;
}

/// A request taken over leaves the replier's later answer a counted duplicate.
#[tokio::test]
async fn a_request_taken_over_is_not_answered_again_by_a_replier() {
    let bus = Bus::new();
    let (tx, mut taken) = tokio::sync::mpsc::unbounded_channel();
    let _forward = bus
        .subscribe("once", move |request: &Prices| {
            let _ = tx.send(request.responder());
            async {}
        })
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let replier = bus
        .reply("once", gated(gate.clone(), Arc::new(Notify::new())))
        .unwrap();
    let topic = bus.topic::<Prices>("once").unwrap();
    let asking = tokio::spawn({
        let topic = topic.clone();
        async move { topic.request(7).await }
    });
    let responder = taken.recv().await.unwrap().expect("nobody answered yet");
    assert!(responder.reply(1).is_ok());
    assert_eq!(asking.await.unwrap().unwrap(), 1);
    gate.add_permits(1);
    bus.wait_idle().await;
    assert_eq!(replier.stats().duplicate_replies, 1);
    bus.close().await;
}
