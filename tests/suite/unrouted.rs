//! No silent drops: a publish to a topic with no subscriber is counted per topic
//! (`TopicStats::unrouted`) and logged once per topic at `warn` (a misspelled topic shows); on a
//! strict bus it is refused with `PublishError::NoSubscriber`, which names the topic and gives
//! the message back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ringbus::{Bus, Context, Error, PublishError, TopicStats};

fn topic(bus: &Bus, name: &str) -> TopicStats {
    bus.stats()
        .topics
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no topic {name}"))
}

#[tokio::test]
async fn a_publish_with_no_subscriber_is_counted_per_topic() {
    let bus = Bus::new();
    let sub = bus.subscribe("orders", async |_: &u64| {}).unwrap();
    bus.publish("orders", 1u64).await.unwrap();
    // A misspelled topic: accepted, reaches nobody, and shows in the stats.
    bus.publish("ordrs", 2u64).await.unwrap();
    bus.try_publish("ordrs", 3u64).unwrap();
    assert_eq!(bus.publish_batch("ordrs", [4u64, 5, 6]).await.unwrap(), 3);
    let typed = bus.topic::<u64>("ordrs").unwrap();
    typed.publish(7).await.unwrap();
    let _receipt = typed.publish_tracked(&Context::new(), 8).await.unwrap();

    let ordrs = topic(&bus, "ordrs");
    assert_eq!((ordrs.published, ordrs.unrouted), (7, 7));
    let orders = topic(&bus, "orders");
    assert_eq!((orders.published, orders.unrouted), (1, 0));

    // Once its only subscriber has gone, a topic's publishes are unrouted too.
    sub.unsubscribe().await;
    bus.publish("orders", 9u64).await.unwrap();
    assert_eq!(topic(&bus, "orders").unrouted, 1);
    bus.close().await;
}

#[tokio::test]
async fn a_strict_bus_refuses_a_publish_with_no_subscriber_and_gives_the_message_back() {
    let bus = Bus::builder().strict(true).build();
    match bus.publish("ordrs", 1u64).await {
        Err(PublishError::NoSubscriber(back, topic)) => assert_eq!((back, &*topic), (1, "ordrs")),
        other => panic!("expected NoSubscriber, got {other:?}"),
    }
    match bus.try_publish("ordrs", 2u64) {
        Err(e @ PublishError::NoSubscriber(..)) => {
            assert_eq!(
                e.to_string(),
                "topic \"ordrs\" has no subscriber (strict bus); the message was not published"
            );
            assert!(
                format!("{e:?}").ends_with("(NoSubscriber(.., \"ordrs\"))"),
                "{e:?}"
            );
            assert_eq!(e.into_inner(), 2);
        }
        other => panic!("expected NoSubscriber, got {other:?}"),
    }
    match bus.publish_batch("ordrs", vec![3u64, 4]).await {
        Err(PublishError::NoSubscriber(rest, topic)) => {
            assert_eq!((rest.collect::<Vec<_>>(), &*topic), (vec![3, 4], "ordrs"));
        }
        other => panic!("expected NoSubscriber, got {other:?}"),
    }
    // What `?` makes of it names the topic too.
    let e = Error::from(bus.publish("ordrs", 0u64).await.unwrap_err());
    assert_eq!(
        e,
        Error::NoSubscriber {
            topic: Arc::from("ordrs")
        }
    );
    assert!(
        e.to_string()
            .starts_with("topic \"ordrs\" has no subscriber"),
        "{e}"
    );
    let typed = bus.topic::<u64>("ordrs").unwrap();
    match typed.publish_tracked(&Context::new(), 5).await {
        Err(PublishError::NoSubscriber(back, topic)) => assert_eq!((back, &*topic), (5, "ordrs")),
        other => panic!("expected NoSubscriber, got {:?}", other.map(|_| ())),
    }
    let ordrs = topic(&bus, "ordrs");
    assert_eq!(
        (ordrs.published, ordrs.unrouted),
        (0, 0),
        "nothing was published"
    );

    // With a subscriber, the same topic takes messages.
    let seen = Arc::new(AtomicUsize::new(0));
    let sub = bus
        .subscribe(
            "ordrs",
            ringbus::with_state(seen.clone(), async |seen: &Arc<AtomicUsize>, _: &u64| {
                seen.fetch_add(1, Ordering::Relaxed);
            }),
        )
        .unwrap();
    bus.publish("ordrs", 6u64).await.unwrap();
    sub.unsubscribe().await;
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    bus.close().await;
}

/// Counts the bus's "no subscriber" warnings that name their topic and say how to refuse such
/// publishes, per thread (installed with `with_default` on a current-thread runtime, where the
/// publishes run).
struct Events(Arc<AtomicUsize>);

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    let text = format!("{value:?}");
                    self.0 |= text.contains("no subscriber")
                        && (text.contains("topic \"a\"") || text.contains("topic \"b\""))
                        && text.contains("Bus::builder().strict(true)");
                }
            }
        }
        let mut message = Message(false);
        event.record(&mut message);
        let meta = event.metadata();
        if message.0
            && *meta.level() == tracing::Level::WARN
            && meta.target() == "ringbus::unrouted"
        {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn an_unrouted_topic_is_warned_of_once() {
    let logged = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let keep = tracing::Dispatch::new(Events(Arc::new(AtomicUsize::new(0))));
    tracing::subscriber::with_default(Events(logged.clone()), || {
        // Every callsite registered while one dispatcher exists is given the interest of
        // whichever thread registers it (tracing-core's single-dispatcher shortcut), and the
        // other tests of this binary hit the bus's callsites from threads with no subscriber:
        // cached as "never", our thread would count nothing (it did, 26 of 300 runs of this
        // binary). With `keep` registered too, interest is asked of every registered
        // dispatcher instead; recompute it now that both are.
        tracing::callsite::rebuild_interest_cache();
        runtime.block_on(async {
            let bus = Bus::new();
            for n in 0..3u64 {
                bus.publish("a", n).await.unwrap();
            }
            bus.publish("b", 0u64).await.unwrap();
            bus.try_publish("b", 1u64).unwrap();
            assert_eq!(topic(&bus, "a").unrouted, 3);
            assert_eq!(topic(&bus, "b").unrouted, 2);
            bus.close().await;
        })
    });
    drop(keep);
    assert_eq!(logged.load(Ordering::Relaxed), 2, "once for a, once for b");
}
