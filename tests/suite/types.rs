//! Guarantee 7, types are checked: a topic carries one message type; publishing or
//! subscribing with another is an `Err` naming the topic and both types, never a panic, and a
//! refused message comes back.

use crate::common;

use ringbus::{Bus, Error, PublishError, SubscribeOptions, Subscription, TypeMismatch};

mod a {
    /// Same short name as `b::Event`: the error must tell them apart.
    #[derive(Debug, PartialEq)]
    pub(crate) struct Event(pub(crate) u32);
}

mod b {
    #[derive(Debug, PartialEq)]
    pub(crate) struct Event(pub(crate) u32);
}

/// A message type with neither `Debug` nor `Clone`: errors must not need them.
struct Opaque(#[allow(dead_code)] u8);

fn check_mismatch(e: &TypeMismatch, topic: &str, carries: &str, used: &str) {
    assert_eq!(&*e.topic, topic);
    assert!(e.expected.ends_with(carries), "{e:?}");
    assert!(e.found.ends_with(used), "{e:?}");
    let text = e.to_string();
    for part in [topic, e.expected, e.found] {
        assert!(text.contains(part), "{text:?} does not name {part:?}");
    }
}

fn check_error(e: &Error, topic: &str, carries: &str, used: &str) {
    match e {
        Error::TypeMismatch(m) => check_mismatch(m, topic, carries, used),
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains(topic) && text.contains(carries) && text.contains(used));
}

#[tokio::test]
async fn publishing_another_type_gives_the_message_back() {
    let bus = Bus::new();
    let mut rec = common::recording(&bus, "numbers", "rec");

    let s = String::from("not a number");
    match bus.publish("numbers", s.clone()).await {
        Err(PublishError::TypeMismatch(back, e)) => {
            assert_eq!(back, s);
            check_mismatch(&e, "numbers", "u64", "String");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    match bus.try_publish("numbers", 7u32) {
        Err(PublishError::TypeMismatch(back, e)) => {
            assert_eq!(back, 7);
            check_mismatch(&e, "numbers", "u64", "u32");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    let ctx = ringbus::Context::new();
    match bus.publish_with(&ctx, "numbers", -1i64).await {
        Err(e @ PublishError::TypeMismatch(..)) => {
            let text = e.to_string();
            assert!(text.contains("numbers") && text.contains("u64") && text.contains("i64"));
            assert_eq!(e.into_inner(), -1);
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    match bus.publish_batch("numbers", vec![1u8, 2, 3]).await {
        Err(PublishError::TypeMismatch(rest, e)) => {
            assert_eq!(rest.collect::<Vec<_>>(), [1, 2, 3]);
            check_mismatch(&e, "numbers", "u64", "u8");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    // `?` into `ringbus::Error` keeps the detail.
    let e: Error = bus.publish("numbers", 'x').await.unwrap_err().into();
    check_error(&e, "numbers", "u64", "char");

    // Nothing of the above reached the subscriber; the topic still works.
    bus.publish("numbers", 42u64).await.unwrap();
    assert_eq!(common::take(&mut rec.handled, 1).await, [42]);
    bus.close().await;
    assert_eq!(rec.log.snapshot(), [42]);
}

#[tokio::test]
async fn subscribing_or_resolving_another_type_is_an_error() {
    let bus = Bus::new();
    // Made by a publish, without subscribers.
    bus.publish("events", a::Event(1)).await.unwrap();

    let err = bus
        .subscribe("events", |_: &b::Event| async {})
        .unwrap_err();
    check_error(&err, "events", "a::Event", "b::Event");
    // Both full paths, so two types of the same short name are told apart.
    let text = err.to_string();
    assert!(
        text.contains("a::Event") && text.contains("b::Event"),
        "{text}"
    );

    let err = bus
        .subscribe_with(
            "events",
            SubscribeOptions::new().name("x"),
            |_: &u64| async {},
        )
        .unwrap_err();
    check_error(&err, "events", "a::Event", "u64");

    let err = bus
        .subscribe_batch(
            "events",
            SubscribeOptions::new(),
            |_: ringbus::Batch<'_, String>| async {},
        )
        .unwrap_err();
    check_error(&err, "events", "a::Event", "String");

    let err = bus.topic::<b::Event>("events").unwrap_err();
    check_error(&err, "events", "a::Event", "b::Event");

    match bus.publish("events", b::Event(2)).await {
        Err(PublishError::TypeMismatch(back, e)) => {
            assert_eq!(back, b::Event(2));
            check_mismatch(&e, "events", "a::Event", "b::Event");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }

    // The right type still works, by name and by handle.
    let topic = bus.topic::<a::Event>("events").unwrap();
    topic.publish(a::Event(3)).await.unwrap();
    assert_eq!(bus.stats().topics[0].published, 2);
    assert!(bus.stats().topics[0].message_type.ends_with("a::Event"));
}

/// `register` with a subscriber whose message type differs from the topic's.
#[tokio::test]
async fn registering_another_type_is_an_error() {
    struct Wrong;
    impl ringbus::Subscriber for Wrong {
        type Message = String;
        fn topic(&self) -> &str {
            "numbers"
        }
        fn subscribe(self, bus: &Bus) -> Result<Subscription, Error> {
            bus.subscribe(self.topic(), |_: &String| async {})
        }
    }
    let bus = Bus::new();
    let _numbers = bus.topic::<u64>("numbers").unwrap();
    let err = bus.register(Wrong).unwrap_err();
    check_error(&err, "numbers", "u64", "String");
}

/// Errors carry messages that are neither `Debug` nor `Clone`, and still print.
#[tokio::test]
async fn errors_do_not_need_debug_messages() {
    let bus = Bus::new();
    let _t = bus.topic::<u64>("t").unwrap();
    let err = bus.publish("t", Opaque(9)).await.unwrap_err();
    let debug = format!("{err:?}");
    assert!(debug.contains("TypeMismatch"), "{debug}");
    assert!(matches!(err.into_inner(), Opaque(9)));
}

/// Many tasks racing to create one topic with different types: exactly one type wins, every
/// other attempt is an `Err`, nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creators_agree_on_one_type() {
    for round in 0..50 {
        let bus = Bus::new();
        let name = format!("contested-{round}");
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (bus, name) = (bus.clone(), name.clone());
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        bus.try_publish(&name, i as u64).is_ok()
                    } else {
                        bus.try_publish(&name, i.to_string()).is_ok()
                    }
                })
            })
            .collect();
        let mut won = [0, 0];
        for (i, t) in tasks.into_iter().enumerate() {
            if t.await.unwrap() {
                won[i % 2] += 1;
            }
        }
        assert!(
            (won[0] == 4 && won[1] == 0) || (won[0] == 0 && won[1] == 4),
            "round {round}: {won:?}"
        );
    }
}

/// A publish by name looks its topic up when it is first polled, not when its future is made
/// (as an `async fn` would): a future never polled makes no topic, and the type it is checked
/// against is the topic's at that first poll.
#[tokio::test]
async fn a_publish_by_name_looks_its_topic_up_when_first_polled() {
    let bus = Bus::new();
    let publish = bus.publish("later", 1u64);
    assert!(
        bus.stats().topics.iter().all(|t| t.name != "later"),
        "a publish future that was never polled made its topic"
    );
    // The topic is made, for another type, between the future's making and its first poll.
    let _sub = bus
        .subscribe("later", |_: &u32| std::future::ready(()))
        .unwrap();
    match publish.await {
        Err(PublishError::TypeMismatch(back, e)) => {
            assert_eq!(back, 1);
            check_mismatch(&e, "later", "u32", "u64");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    let unpolled = bus.publish("never", 2u64);
    drop(unpolled);
    assert!(bus.stats().topics.iter().all(|t| t.name != "never"));
    bus.close().await;
}
