//! A JetStream link on a 3-node nats-server cluster (`ringbus_nats::testing::NatsCluster`, all
//! on 127.0.0.1) with a stream of 3 replicas, losing a node mid-stream: the node the importing
//! link is connected to, or (separately) the stream's leader. Both links are given every
//! node's URL. The checks:
//!
//! - nothing acknowledged is lost: every message the exporter had acknowledged by the stream
//!   (all of them: its close waits for every ack, and reports none failed) is handled;
//! - duplicates (a message delivered again because its ack was lost with the node, or a
//!   re-sent export the stream did not deduplicate) are counted and removed by message id:
//!   the distinct ids handled are exactly the messages published, each with its own body;
//! - the link reports the reconnect (`LinkStats::disconnects` and `connects`) when its node
//!   was the one killed.
//!
//! Message counts are small and the ack wait short (1 s) so both cases fit in CI's time.
//! `cargo test -- --nocapture` prints the counts. Without a nats-server binary the tests
//! skip, unless `REQUIRE_NATS=1` (as in CI), where they fail. Both are ignored by a plain
//! `cargo test` (three servers started, one killed and waited for: about 20 s); CI and
//! `just test` run them with `cargo test -p ringbus-nats --test nats cluster:: -- --ignored`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringbus::Bus;
use ringbus_nats::testing::NatsCluster;
use ringbus_nats::{Envelope, JetStreamOptions, Link, LinkStats, Mode};

const PREFIX: &str = "clu";
const TOPIC: &str = "orders";
const COUNT: u64 = 2_000;
const WAIT: Duration = Duration::from_secs(60);

type Msg = Envelope<u64>;

/// One test at a time: each runs three servers.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    /// The node the importing link is connected to.
    ImportersNode,
    /// The node leading the stream's RAFT group.
    StreamLeader,
}

fn options() -> JetStreamOptions {
    JetStreamOptions {
        replicas: 3,
        ack_wait: Duration::from_secs(1),
        // A failover may fail a few deliveries: never dead-letter in this test.
        max_deliver: 100,
        nack_delay: Duration::from_millis(100),
        ..JetStreamOptions::default()
    }
}

async fn connect(cluster: &NatsCluster, bus: &Bus, name: &str) -> Link {
    Link::builder(cluster.urls())
        .prefix(PREFIX)
        .name(name)
        .jetstream(options())
        .connect(bus)
        .await
        .expect("connect to the cluster")
}

/// What the importer's handler saw: (message id, body), in order.
type Seen = Arc<Mutex<Vec<(String, u64)>>>;

async fn lose_a_node(victim: Victim) {
    let _turn = TURN.lock().await;
    let Some(mut cluster) = NatsCluster::start(3) else {
        return;
    };
    let started = Instant::now();

    let importer_bus = Bus::new();
    let seen = Seen::default();
    let record = seen.clone();
    importer_bus
        .subscribe(TOPIC, move |m: &Msg| {
            record.lock().unwrap().push((m.id().to_string(), *m.body()));
            async {}
        })
        .unwrap();
    let importer = connect(&cluster, &importer_bus, "importer").await;
    importer
        .import::<Msg>(TOPIC, Mode::JetStream)
        .await
        .expect("import");

    let exporter_bus = Bus::new();
    let exporter = connect(&cluster, &exporter_bus, "exporter").await;
    exporter
        .export::<Msg>(TOPIC, Mode::JetStream)
        .await
        .expect("export");
    let stream = ringbus_nats_stream(&importer).await;
    let info = stream.clone().info().await.expect("stream info").clone();
    assert_eq!(info.config.num_replicas, 3, "{:?}", info.config);

    let topic = exporter_bus.topic::<Msg>(TOPIC).unwrap();
    let publisher = tokio::spawn(async move {
        for n in 0..COUNT {
            topic.publish(Envelope::new(n)).await.expect("publish");
        }
    });

    // Mid-stream: a quarter handled.
    let deadline = Instant::now() + WAIT;
    while (seen.lock().unwrap().len() as u64) < COUNT / 4 {
        assert!(Instant::now() < deadline, "no progress before the kill");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let importer_node = cluster
        .node_by_port(importer.client().server_info().port)
        .expect("the importer's node");
    let exporter_node = cluster.node_by_port(exporter.client().server_info().port);
    let leader = stream
        .clone()
        .info()
        .await
        .expect("stream info")
        .cluster
        .clone()
        .and_then(|c| c.leader)
        .expect("the stream has a leader");
    let leader_node = cluster.node_by_name(&leader).expect("the leader's node");
    let killed = match victim {
        Victim::ImportersNode => importer_node,
        Victim::StreamLeader => leader_node,
    };
    let handled_at_kill = seen.lock().unwrap().len();
    let before: LinkStats = importer.stats();
    cluster.node_mut(killed).kill();
    let killed_at = Instant::now();

    publisher.await.expect("the publisher");
    let export = exporter.close(WAIT).await;
    assert!(export.complete, "the exporter's close: {export:?}");
    assert_eq!(export.stats.export_errors, 0, "{export:?}");
    assert_eq!(export.stats.exported, COUNT, "{export:?}");

    // Every message the stream acknowledged is handled.
    let deadline = Instant::now() + WAIT;
    let distinct = |seen: &Seen| {
        seen.lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect::<std::collections::HashSet<_>>()
            .len() as u64
    };
    while distinct(&seen) < COUNT {
        let s = importer.stats();
        assert!(
            Instant::now() < deadline,
            "{victim:?}: {} of {COUNT} distinct messages handled within {WAIT:?}; {s:?}",
            distinct(&seen)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovered = killed_at.elapsed();
    if killed == importer_node {
        // The reconnect, as the link reports it.
        let deadline = Instant::now() + WAIT;
        loop {
            let s = importer.stats();
            if s.disconnects > before.disconnects && s.connects > before.connects {
                break;
            }
            assert!(Instant::now() < deadline, "no reconnect reported: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let now = cluster.node_by_port(importer.client().server_info().port);
        assert_ne!(now, Some(killed), "still on the killed node");
    }
    let report = importer.close(WAIT).await;
    assert!(report.complete, "the importer's close: {report:?}");
    importer_bus.close().await;
    exporter_bus.close().await;

    // Duplicates removed by message id: one body per id, and the bodies are 0..COUNT.
    let seen = seen.lock().unwrap().clone();
    let mut by_id: BTreeMap<String, (u64, u32)> = BTreeMap::new();
    for (id, body) in &seen {
        let entry = by_id.entry(id.clone()).or_insert((*body, 0));
        assert_eq!(entry.0, *body, "id {id} carried two bodies");
        entry.1 += 1;
    }
    let mut bodies: Vec<u64> = by_id.values().map(|(body, _)| *body).collect();
    bodies.sort_unstable();
    let lost = COUNT - bodies.len() as u64;
    let duplicates = seen.len() - by_id.len();
    eprintln!(
        "cluster, killed {victim:?} (node n{killed}; importer on n{importer_node}, exporter \
         on {exporter_node:?}, stream leader {leader}) after {handled_at_kill} of {COUNT} \
         handled: lost {lost}, duplicates {duplicates} (removed by id), all handled {:?} \
         after the kill; importer stats {:?}; exporter retries {} duplicates {}; in {:?}",
        recovered,
        report.stats,
        export.stats.export_retries,
        export.stats.export_duplicates,
        started.elapsed()
    );
    assert_eq!(
        bodies,
        (0..COUNT).collect::<Vec<_>>(),
        "every published message, once after dedup"
    );
}

/// The link's stream, through a JetStream context on the link's own client.
async fn ringbus_nats_stream(link: &Link) -> async_nats::jetstream::stream::Stream {
    async_nats::jetstream::new(link.client().clone())
        .get_stream(link.stream_name())
        .await
        .expect("the link's stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 10 s: `cargo test -p ringbus-nats --test nats cluster:: -- --ignored`"]
async fn killing_the_importers_node_loses_no_acknowledged_message() {
    lose_a_node(Victim::ImportersNode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "multi-process, about 10 s: `cargo test -p ringbus-nats --test nats cluster:: -- --ignored`"]
async fn killing_the_stream_leader_loses_no_acknowledged_message() {
    lose_a_node(Victim::StreamLeader).await;
}
