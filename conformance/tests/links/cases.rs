//! The cases. Each runs on every transport that makes the promise it checks, one after the
//! other (a transport whose server is not installed is skipped, the others still run).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ringbus::{Context, PublishError, RetryPolicy, SubscribeOptions};

use crate::pair::{
    eventually, item, Item, Kind, Msg, Pair, PatternPair, Verdict, ALL, MAX_DELIVER, NACK_DELAY,
    TOPIC, WAIT,
};

/// The transports that deliver at least once.
fn at_least_once() -> impl Iterator<Item = Kind> {
    ALL.into_iter().filter(|k| k.at_least_once())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_round_trip_of_payload_id_and_headers() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        let data: Vec<u8> = (0..=255).collect();
        let msg = Msg::new(Item { n: 1, data })
            .with_id("order-42")
            .with_header("Tenant", "acme")
            .unwrap()
            .with_header("Trace-Id", "a1b2-c3; q=\"x\"")
            .unwrap();
        let expected = crate::pair::Seen {
            id: "order-42".into(),
            headers: vec![
                ("Tenant".into(), "acme".into()),
                ("Trace-Id".into(), "a1b2-c3; q=\"x\"".into()),
            ],
            body: msg.body().clone(),
        };
        pair.publish(msg).await;
        assert_eq!(pair.next().await, expected, "{kind:?}");
        pair.close().await.close_subscriber().await;
    }
}

/// A close given no deadline to speak of (`Duration::MAX`, past what the clock can represent)
/// finishes like any other, rather than overflowing the clock as it computes its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_an_unrepresentable_deadline_finishes() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        pair.publish(item(1)).await;
        assert_eq!(pair.next().await.body, item(1).body().clone(), "{kind:?}");
        let pair = pair.close().await;
        if let Some(link) = &pair.sub_link {
            tokio::time::timeout(WAIT, link.close_with_deadline(kind, Duration::MAX))
                .await
                .unwrap_or_else(|_| panic!("{kind:?}: the close did not finish"));
        }
        pair.subscriber.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_no_link_can_carry_is_refused_in_every_mode() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        for (name, value) in [
            ("Bad Name", "v"),
            ("Colon:Name", "v"),
            ("Multi", "line\r\nbreak"),
            ("Padded", " v "),
            ("Nats-Msg-Id", "mine"),
            ("Ringbus-Topic", "other"),
        ] {
            let err = item(0).with_header(name, value).unwrap_err();
            assert!(err.to_string().contains("cannot be sent over"), "{err}");
        }
        // An id no link can carry fails the export (logged, counted), and the link goes on.
        pair.publish(item(1).with_id("two\r\nlines")).await;
        pair.publish(item(2)).await;
        let got = pair.until(2).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        if kind.linked() {
            assert_eq!(ns, [2], "{kind:?}");
            let stats = pair.pub_link().stats();
            assert_eq!(stats.export_errors, 1, "{kind:?}: {stats:?}");
        } else {
            assert_eq!(ns, [1, 2]);
        }
        pair.close().await.close_subscriber().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_with_one_subscriber_and_no_loss_right_after_linking() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        // Published the moment the link is made: nothing may be lost in any mode.
        const N: u64 = 500;
        for n in 0..N {
            pair.publish(item(n)).await;
        }
        let got = pair.until(N - 1).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        assert_eq!(ns, (0..N).collect::<Vec<_>>(), "{kind:?}");
        pair.close().await.close_subscriber().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_publish_is_not_delivered() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        let token = ringbus::CancellationToken::new();
        token.cancel();
        let ctx = Context::new().with_cancellation(token);
        match pair.publisher.publish_with(&ctx, TOPIC, item(1)).await {
            Err(PublishError::Cancelled(back)) => assert_eq!(back.body().n, 1),
            other => panic!("{kind:?}: expected Cancelled, got {other:?}"),
        }
        pair.publish(item(2)).await;
        let got = pair.until(2).await;
        assert_eq!(got.len(), 1, "{kind:?}: {got:?}");
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
        assert_eq!(pair.attempts(1), 0, "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_in_flight_work_within_its_deadline_and_later_publishes_error() {
    for kind in ALL {
        // A handler slow enough that work is still queued when close begins.
        let verdict: Verdict = Arc::new(|_, _| {
            std::thread::sleep(Duration::from_micros(200));
            true
        });
        let Some(pair) = Pair::with(kind, verdict).await else {
            continue;
        };
        const N: u64 = 300;
        for n in 0..N {
            pair.publish(item(n)).await;
        }
        // The publisher's side closes first: its exports are flushed (and, at least once,
        // stored by the server) before close returns.
        let mut pair = pair.close().await;
        match pair.publisher.publish(TOPIC, item(N)).await {
            Err(PublishError::Closed(back)) => assert_eq!(back.body().n, N),
            other => panic!("{kind:?}: expected Closed, got {other:?}"),
        }
        if kind.linked() {
            let stats = pair.pub_link().stats();
            assert_eq!(stats.exported, N, "{kind:?}: {stats:?}");
        }
        // Everything crossed; the subscriber's side closes while its handler may still be
        // busy with the queue, and returns only once all of it is handled (and acked).
        let got = pair.until(N - 1).await;
        assert_eq!(got.len() as u64, N, "{kind:?}");
        pair.close_subscriber().await;
        if kind.at_least_once() {
            let stats = pair.sub_link().stats();
            assert_eq!((stats.imported, stats.acked), (N, N), "{kind:?}: {stats:?}");
        }
    }
}

/// A message a subscriber never handled because the bus's bounded close stopped it is given
/// back while the link closes, and comes again (to the next importer of the same group)
/// after the nack delay: not after the server's own redelivery timeout (JetStream's
/// `ack_wait`, 5 s in this suite), and not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_given_back_while_closing_comes_again_after_the_nack_delay() {
    for kind in at_least_once() {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        // A second subscriber that never finishes: the bounded close stops it.
        let _stuck = pair
            .subscriber
            .subscribe(TOPIC, |_: &Msg| std::future::pending::<()>())
            .unwrap();
        pair.publish(item(1)).await;
        assert_eq!(pair.next().await.body.n, 1, "{kind:?}");
        let sub_link = pair.sub_link.take().unwrap();
        let bounded = Context::new().with_timeout(Duration::from_millis(300));
        let (report, _) = tokio::join!(
            sub_link.close_report(WAIT),
            pair.subscriber.close_with(&bounded)
        );
        assert!(report.0, "{kind:?}: {}", report.1);
        let stats = sub_link.stats();
        assert_eq!((stats.acked, stats.nacked), (0, 1), "{kind:?}: {stats:?}");
        let closed = tokio::time::Instant::now();
        let (bus, again, mut seen) = pair.subscriber_again().await;
        let got = tokio::time::timeout(WAIT, seen.recv()).await;
        assert_eq!(got, Ok(Some(1)), "{kind:?}");
        assert!(
            closed.elapsed() < Duration::from_secs(4),
            "{kind:?}: given back only after {:?}",
            closed.elapsed()
        );
        again.close(kind).await;
        bus.close().await;
        pair.close().await;
    }
}

/// A failing handler is retried by its own retry policy, in process, on every transport: the
/// broker delivers the message once and has it acknowledged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_is_retried_by_its_own_policy_and_the_broker_settled_once() {
    for kind in ALL {
        // Message 1 fails on its first attempt only.
        let verdict: Verdict = Arc::new(|m, attempt| !(m.body().n == 1 && attempt == 1));
        let retry = RetryPolicy::new(2).backoff(NACK_DELAY).jitter(false);
        let options = SubscribeOptions::new().retry(retry);
        let Some(mut pair) = Pair::with_options(kind, verdict, options).await else {
            continue;
        };
        let started = tokio::time::Instant::now();
        pair.publish(item(1)).await;
        let got = pair.next().await;
        assert_eq!(got.body.n, 1, "{kind:?}");
        assert_eq!(pair.attempts(1), 2, "{kind:?}");
        // The retry waited for the policy's backoff.
        assert!(started.elapsed() >= NACK_DELAY, "{kind:?}");
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
        if kind.at_least_once() {
            let stats = pair.sub_link().stats();
            let settled = (
                stats.imported,
                stats.nacked,
                stats.acked,
                stats.dead_lettered,
            );
            assert_eq!(settled, (1, 0, 1, 0), "{kind:?}: {stats:?}");
        }
    }
}

/// A handler that gives up on a message (its retries spent) has it dead-lettered at once,
/// the delivery settled: the broker does not deliver it again to the handlers that did not fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_gives_up_has_the_message_dead_lettered_at_once() {
    for kind in at_least_once() {
        // Message 1 always fails; message 2 is fine.
        let verdict: Verdict = Arc::new(|m, _| m.body().n != 1);
        let retry = RetryPolicy::new(MAX_DELIVER).backoff(Duration::from_millis(1));
        let options = SubscribeOptions::new().retry(retry);
        let Some(mut pair) = Pair::with_options(kind, verdict, options).await else {
            continue;
        };
        pair.publish(item(1).with_id("doomed")).await;
        pair.publish(item(2)).await;
        assert_eq!(pair.next().await.body.n, 2, "{kind:?}");
        let sub_link = pair.sub_link();
        eventually("message 1 dead-lettered", || {
            sub_link.stats().dead_lettered == 1
        })
        .await;
        // Every attempt was the handler's own retry, on the first delivery.
        assert_eq!(pair.attempts(1), MAX_DELIVER, "{kind:?}");
        assert_eq!(
            sub_link.stats().nacked,
            0,
            "{kind:?}: {:?}",
            sub_link.stats()
        );
        // The dead letter keeps the body and the id, and says why.
        let dead = sub_link.last_dead_letter().await;
        assert_eq!((dead.body.n, dead.id.as_str()), (1, "doomed"), "{kind:?}");
        assert!(
            dead.reason
                .contains("1 of 1 handlers gave up on it on delivery 1"),
            "{kind:?}: {}",
            dead.reason
        );
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
    }
}

/// Three local handlers of one import, one of which fails: the other two see the message
/// exactly once, as in process, and the message is dead-lettered once. No nack: nothing asked
/// the broker for a redelivery (and after the close, none can come).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_handler_does_not_run_the_others_again() {
    for kind in ALL {
        // The pair's own handler fails on message 1, every time, with no retry policy.
        let verdict: Verdict = Arc::new(|m, _| m.body().n != 1);
        let Some(mut pair) = Pair::with(kind, verdict).await else {
            continue;
        };
        let seen = Arc::new(std::sync::Mutex::new(BTreeMap::<(usize, u64), u32>::new()));
        let mut others = Vec::new();
        for handler in 0..2 {
            let seen = seen.clone();
            let sub = pair.subscriber.subscribe(TOPIC, move |m: &Msg| {
                *seen
                    .lock()
                    .unwrap()
                    .entry((handler, m.body().n))
                    .or_default() += 1;
                async {}
            });
            others.push(sub.unwrap());
        }
        pair.publish(item(1)).await;
        pair.publish(item(2)).await;
        assert_eq!(pair.next().await.body.n, 2, "{kind:?}");
        if kind.at_least_once() {
            let sub_link = pair.sub_link();
            eventually("message 1 dead-lettered", || {
                sub_link.stats().dead_lettered == 1
            })
            .await;
        }
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
        let seen = seen.lock().unwrap().clone();
        let once: BTreeMap<(usize, u64), u32> =
            [((0, 1), 1), ((0, 2), 1), ((1, 1), 1), ((1, 2), 1)].into();
        assert_eq!(seen, once, "{kind:?}");
        assert_eq!(pair.attempts(1), 1, "{kind:?}");
        if kind.at_least_once() {
            let stats = pair.sub_link().stats();
            let settled = (stats.nacked, stats.acked, stats.dead_lettered);
            assert_eq!(settled, (0, 1, 1), "{kind:?}: {stats:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_sent_id_is_delivered_once() {
    for kind in at_least_once() {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        pair.publish(item(1).with_id("once")).await;
        pair.publish(item(2).with_id("once")).await; // a re-send of "once": dropped
        pair.publish(item(3)).await;
        let got = pair.until(3).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        assert_eq!(ns, [1, 3], "{kind:?}");
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
        // JetStream drops the copy when it is stored, Redis when it is imported.
        let dropped = pair.pub_link().stats().duplicates + pair.sub_link().stats().duplicates;
        assert_eq!(dropped, 1, "{kind:?}");
    }
}

/// The exports in flight at the kill lose their answers; they are re-sent with the same id,
/// and every message arrives at least once (duplicates are allowed). Then new messages still
/// cross.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_across_a_server_kill_and_restart() {
    for kind in at_least_once() {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        const N: u64 = 400;
        let publisher = pair.publisher.clone();
        let publishing = tokio::spawn(async move {
            for n in 0..N {
                publisher.publish(TOPIC, item(n)).await.unwrap();
                if n % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        // Kill the server (SIGKILL) once some messages went through, and bring it back on
        // the same port with the same store.
        let first = pair.next().await;
        pair.restart_server().await;
        publishing.await.unwrap();

        let mut count: BTreeMap<u64, u32> = BTreeMap::new();
        *count.entry(first.body.n).or_default() += 1;
        while count.len() < N as usize {
            let seen = pair.next().await;
            *count.entry(seen.body.n).or_default() += 1;
        }
        let duplicates: u32 = count.values().map(|c| c - 1).sum();
        eprintln!("{kind:?} restart: {N} messages, {duplicates} delivered more than once");
        // Still linked: a message published now arrives.
        pair.publish(item(N)).await;
        pair.until(N).await;
        let stats = pair.pub_link().stats();
        assert!(
            stats.disconnects >= 1 && stats.connects >= 1,
            "{kind:?}: {stats:?}"
        );
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
    }
}

/// After a lost connection (a killed server, or the stand-in dropping every connection) the
/// link reconnects by itself and carries messages again. At most once transports may lose
/// what was sent before the subscription was back, so this publishes until one arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn still_linked_after_the_connections_drop() {
    for kind in ALL.into_iter().filter(|k| k.linked()) {
        let Some(mut pair) = Pair::new(kind).await else {
            continue;
        };
        pair.publish(item(0)).await;
        assert_eq!(pair.next().await.body.n, 0, "{kind:?}");
        pair.restart_server().await;
        let (pub_link, sub_link) = (pair.pub_link(), pair.sub_link());
        if !kind.at_least_once() {
            // NATS core: the client reconnects by itself and says so.
            eventually("both links reconnected", || {
                let (p, s) = (pub_link.stats(), sub_link.stats());
                p.disconnects >= 1 && s.disconnects >= 1 && p.connected && s.connected
            })
            .await;
        }
        let mut n = 1;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            pair.publish(item(n)).await;
            match tokio::time::timeout(Duration::from_millis(100), pair.seen.recv()).await {
                // At least once: message 0 again (its ack may not have reached the server
                // before the kill) is allowed; at most once it is not.
                Ok(Some(seen)) if seen.body.n == 0 => {
                    assert!(kind.at_least_once(), "{kind:?}: message 0 delivered twice")
                }
                Ok(Some(_)) => break,
                _ => assert!(
                    tokio::time::Instant::now() < deadline,
                    "{kind:?}: no delivery after reconnecting"
                ),
            }
            n += 1;
        }
        // A link whose connection is made again at its next command (Redis: the importer's
        // acknowledgement of what it just handled) says so a moment after the delivery.
        let (pub_link, sub_link) = (pair.pub_link(), pair.sub_link());
        eventually("both links connected", || {
            pub_link.stats().connected && sub_link.stats().connected
        })
        .await;
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
    }
}

/// A pattern export sends every topic, made after it, and a pattern import brings every one
/// its pattern matches, each into its own local topic (the subscriber is told which) and in
/// its publish order; order across topics is not promised. Redis imports no pattern (see its
/// crate): skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_carry_each_matching_topic_in_order() {
    const N: u64 = 100;
    let matching = ["items.a", "items.b"];
    let topics = ["items.a", "items.b", "items.a.deep", "other"];
    for kind in ALL {
        let Some(mut pair) = PatternPair::new(kind, "items.*").await else {
            continue;
        };
        for n in 0..N {
            for topic in topics {
                pair.publisher.publish(topic, item(n)).await.unwrap();
            }
        }
        let got = pair.take(matching.len() * N as usize).await;
        for topic in matching {
            let ns: Vec<u64> = got
                .iter()
                .filter(|(t, _)| t == topic)
                .map(|(_, n)| *n)
                .collect();
            assert_eq!(ns, (0..N).collect::<Vec<_>>(), "{kind:?} {topic}");
        }
        let subscriber = pair.subscriber.clone();
        pair.close().await;
        if kind.linked() {
            // Nothing outside the pattern was imported: no local topic was made for it.
            let names: Vec<String> = subscriber
                .stats()
                .topics
                .into_iter()
                .map(|t| t.name)
                .collect();
            for unmatched in ["items.a.deep", "other"] {
                assert!(!names.iter().any(|t| t == unmatched), "{kind:?}: {names:?}");
            }
        }
    }
}
