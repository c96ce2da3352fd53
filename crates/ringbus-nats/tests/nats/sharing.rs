//! Fan-out and shared imports ([`Sharing`]): two importing links in one process stand for two
//! instances of a service. Fan-out: each sees every message. Shared: each message goes to
//! exactly one of them (on core, barring losses the test rules out by keeping the client's
//! buffer larger than the run). Each case runs twice: the topic imported by name, and through
//! the pattern `*`, which matches it. Against a real `nats-server` on 127.0.0.1 (skipped without
//! one unless `REQUIRE_NATS=1`). The multi-process version is `tests/nats/scale.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringbus::Bus;
use ringbus_nats::testing::NatsServer;
use ringbus_nats::{JetStreamOptions, Link, LinkError, Mode, Sharing};

const TOPIC: &str = "jobs";
const COUNT: u64 = 2_000;
const WAIT: Duration = Duration::from_secs(20);

/// Ids handled by one instance, with how many times each.
type Handled = Arc<Mutex<BTreeMap<u64, u32>>>;

struct Instance {
    bus: Bus,
    link: Link,
    handled: Handled,
}

/// An instance importing `TOPIC` by name, or through `pattern`.
async fn instance(
    server: &NatsServer,
    durable: &str,
    mode: Mode,
    sharing: Sharing,
    pattern: Option<&str>,
) -> Instance {
    let bus = Bus::new();
    let handled = Handled::default();
    let record = handled.clone();
    bus.subscribe(TOPIC, move |n: &u64| {
        *record.lock().unwrap().entry(*n).or_insert(0) += 1;
        async {}
    })
    .unwrap();
    let link = Link::builder(server.url())
        .prefix("share")
        .import_buffer(2 * COUNT as usize)
        .jetstream(JetStreamOptions {
            durable: durable.to_string(),
            ..JetStreamOptions::default()
        })
        .connect(&bus)
        .await
        .unwrap();
    let imported = match pattern {
        None => {
            link.import_as::<u64, _>(TOPIC, mode, sharing, ringbus_nats::Json)
                .await
        }
        Some(pattern) => {
            link.import_pattern_as::<u64, _>(pattern, mode, sharing, ringbus_nats::Json)
                .await
        }
    };
    imported.unwrap();
    Instance { bus, link, handled }
}

fn total(handled: &Handled) -> u64 {
    handled
        .lock()
        .unwrap()
        .values()
        .map(|&n| u64::from(n))
        .sum()
}

/// Publishes `COUNT` messages through an export, waits until the instances handled `expect`
/// in all, and returns what each handled.
async fn run(
    server: &NatsServer,
    mode: Mode,
    instances: Vec<Instance>,
    expect: u64,
) -> Vec<BTreeMap<u64, u32>> {
    let bus = Bus::new();
    let link = Link::builder(server.url())
        .prefix("share")
        .connect(&bus)
        .await
        .unwrap();
    link.export::<u64>(TOPIC, mode).await.unwrap();
    let topic = bus.topic::<u64>(TOPIC).unwrap();
    for n in 0..COUNT {
        topic.publish(n).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got: u64 = instances.iter().map(|i| total(&i.handled)).sum();
        if got >= expect {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{mode:?}: {got} of {expect} handled within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(link.close(WAIT).await.complete);
    bus.close().await;
    let mut out = Vec::new();
    for i in instances {
        // A close settles (JetStream: acks) what was handled; anything more would have
        // arrived before it.
        assert!(i.link.close(WAIT).await.complete);
        i.bus.close().await;
        out.push(i.handled.lock().unwrap().clone());
    }
    out
}

/// Each mode, with the topic imported by name and through a pattern.
fn cases() -> [(Mode, Option<&'static str>); 4] {
    [
        (Mode::Core, None),
        (Mode::JetStream, None),
        (Mode::Core, Some("*")),
        (Mode::JetStream, Some("*")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_imports_give_every_instance_every_message() {
    for (mode, pattern) in cases() {
        let Some(server) = NatsServer::start() else {
            return;
        };
        // JetStream fan-out: a durable name per instance.
        let a = instance(&server, "a", mode, Sharing::FanOut, pattern).await;
        let b = instance(&server, "b", mode, Sharing::FanOut, pattern).await;
        let handled = run(&server, mode, vec![a, b], 2 * COUNT).await;
        for (i, seen) in handled.iter().enumerate() {
            assert_eq!(
                seen.len() as u64,
                COUNT,
                "{mode:?} {pattern:?}: instance {i}"
            );
            assert!(
                seen.values().all(|&n| n == 1),
                "{mode:?} {pattern:?}: instance {i}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_imports_give_each_message_to_one_instance() {
    for (mode, pattern) in cases() {
        let Some(server) = NatsServer::start() else {
            return;
        };
        // Different durable names: only the group makes them share.
        let a = instance(&server, "a", mode, Sharing::shared("workers"), pattern).await;
        let b = instance(&server, "b", mode, Sharing::shared("workers"), pattern).await;
        let handled = run(&server, mode, vec![a, b], COUNT).await;
        let mut union = BTreeMap::new();
        for seen in &handled {
            assert!(
                !seen.is_empty(),
                "{mode:?} {pattern:?}: an instance got no share: {:?}",
                handled.iter().map(BTreeMap::len).collect::<Vec<_>>()
            );
            for (&id, &n) in seen {
                *union.entry(id).or_insert(0) += n;
            }
        }
        assert_eq!(
            union.len() as u64,
            COUNT,
            "{mode:?} {pattern:?}: some message not handled"
        );
        let twice: Vec<_> = union.iter().filter(|&(_, &n)| n > 1).collect();
        assert!(
            twice.is_empty(),
            "{mode:?} {pattern:?}: handled by more than one instance: {} ids, first {:?}",
            twice.len(),
            twice.first()
        );
    }
}

#[tokio::test]
async fn a_group_nats_cannot_route_is_refused_at_import() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    let link = Link::builder(server.url()).connect(&bus).await.unwrap();
    for group in ["", "two words", "any.*", ">"] {
        for mode in [Mode::Core, Mode::JetStream] {
            let err = link
                .import_shared::<u64>(TOPIC, mode, group)
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    LinkError::BadName {
                        what: "queue group",
                        ..
                    }
                ),
                "{group:?}: {err}"
            );
        }
    }
    // The refusals left the topic free.
    link.import_shared::<u64>(TOPIC, Mode::Core, "workers")
        .await
        .unwrap();
    assert!(link.close(WAIT).await.complete);
    bus.close().await;
}
