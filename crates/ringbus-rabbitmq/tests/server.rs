//! `testing::RabbitServer`: a real `rabbitmq-server` per test, reached with lapin.
//!
//! Without the binary the tests skip with a message, unless `REQUIRE_RABBITMQ=1` (as in CI).
//! Each prints how long its server took to start (`cargo test -p ringbus-rabbitmq --
//! --nocapture` shows it). Waits are bounded by deadlines that fail the test; none is a sleep
//! standing in for an event.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use ringbus_rabbitmq::testing::RabbitServer;

/// The longest a test waits for one step (a confirm, a delivery).
const WAIT: Duration = Duration::from_secs(20);

/// Starts a server, printing how long that took; `None` when the test is skipped.
fn start() -> Option<RabbitServer> {
    let began = Instant::now();
    let server = RabbitServer::start()?;
    eprintln!(
        "RabbitServer::start took {:.2} s: {server:?}",
        began.elapsed().as_secs_f64()
    );
    Some(server)
}

/// The processes (as `/proc` entries) whose working directory is `dir` or below it, even
/// once `dir` is removed (Linux then shows it as `<dir> (deleted)`): every process a server
/// starts works in its directory. None where there is no `/proc`.
fn working_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|process| {
            fs::read_link(process.join("cwd")).is_ok_and(|cwd| {
                let cwd = cwd.to_string_lossy();
                Path::new(cwd.strip_suffix(" (deleted)").unwrap_or(&cwd)).starts_with(dir)
            })
        })
        .collect()
}

async fn connect(server: &RabbitServer) -> Connection {
    Connection::connect(&server.url(), ConnectionProperties::default())
        .await
        .unwrap()
}

/// A new channel on `connection`, in confirm mode.
async fn confirming_channel(connection: &Connection) -> Channel {
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    channel
}

/// Declares the durable queue `name` and returns how many messages it holds ready.
async fn declare(channel: &Channel, name: &str) -> u32 {
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count()
}

/// Publishes `payloads` (persistent) to queue `queue` on a channel in confirm mode, all
/// before awaiting the confirms, and checks that the broker acknowledged each.
async fn publish_confirmed(channel: &Channel, queue: &str, payloads: &[Vec<u8>]) {
    let mut confirms = Vec::with_capacity(payloads.len());
    for payload in payloads {
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                payload,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap();
        confirms.push(confirm);
    }
    for (n, confirm) in confirms.into_iter().enumerate() {
        let confirmation = tokio::time::timeout(WAIT, confirm)
            .await
            .unwrap_or_else(|_| panic!("message {n}: no confirm within {WAIT:?}"))
            .unwrap();
        assert!(confirmation.is_ack(), "message {n}: {confirmation:?}");
    }
}

/// A consumer with manual acks on `queue`.
async fn consume(channel: &Channel, queue: &str, tag: &str) -> Consumer {
    channel
        .basic_consume(
            queue.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap()
}

async fn next(consumer: &mut Consumer) -> Delivery {
    tokio::time::timeout(WAIT, consumer.next())
        .await
        .unwrap_or_else(|_| panic!("no delivery within {WAIT:?}"))
        .expect("the consumer ended")
        .unwrap()
}

/// Cancels the consumer `tag` and closes `channel`, which gives back to `queue` what it left
/// unacknowledged; then checks, on a new channel, that `queue` holds nothing (none ready and
/// none unacknowledged), and closes the connection.
async fn finish(connection: Connection, channel: Channel, tag: &str, queue: &str) {
    channel
        .basic_cancel(tag.into(), BasicCancelOptions::default())
        .await
        .unwrap();
    channel.close(200, "done".into()).await.unwrap();

    let channel = connection.create_channel().await.unwrap();
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::durable().passive(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(declared.message_count(), 0, "{queue} holds messages");
    assert_eq!(declared.consumer_count(), 0, "{queue} has consumers");
    let got = channel
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .unwrap();
    assert!(got.is_none(), "{queue} gave a message: {got:?}");
    connection.close(200, "done".into()).await.unwrap();
}

/// 100 persistent messages, each confirmed by the broker, come out of a durable queue in
/// the order they went in, each acknowledged by hand; the queue is empty afterwards.
#[tokio::test]
async fn a_durable_queue_delivers_100_confirmed_messages_in_order() {
    let Some(server) = start() else { return };
    let connection = connect(&server).await;
    let channel = confirming_channel(&connection).await;
    assert_eq!(declare(&channel, "orders").await, 0);

    let payloads: Vec<Vec<u8>> = (0..100u32).map(|n| n.to_be_bytes().to_vec()).collect();
    publish_confirmed(&channel, "orders", &payloads).await;
    assert_eq!(declare(&channel, "orders").await, 100);

    channel
        .basic_qos(10, BasicQosOptions::default())
        .await
        .unwrap();
    let mut consumer = consume(&channel, "orders", "in-order").await;
    for (n, payload) in payloads.iter().enumerate() {
        let delivery = next(&mut consumer).await;
        assert_eq!(&delivery.data, payload, "delivery {n} is out of order");
        assert!(!delivery.redelivered, "delivery {n} is a redelivery");
        assert!(delivery.ack(BasicAckOptions::default()).await.unwrap());
    }
    finish(connection, channel, "in-order", "orders").await;
}

/// A message nacked with `requeue` is delivered again, marked `redelivered`.
#[tokio::test]
async fn a_message_nacked_with_requeue_comes_back_redelivered() {
    let Some(server) = start() else { return };
    let connection = connect(&server).await;
    let channel = confirming_channel(&connection).await;
    declare(&channel, "retry").await;
    publish_confirmed(&channel, "retry", &[b"again".to_vec()]).await;

    let mut consumer = consume(&channel, "retry", "nacker").await;
    let first = next(&mut consumer).await;
    assert_eq!(first.data, b"again");
    assert!(!first.redelivered);
    let requeue = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    assert!(first.nack(requeue).await.unwrap());

    let second = next(&mut consumer).await;
    assert_eq!(second.data, b"again");
    assert!(
        second.redelivered,
        "a requeued message must come back redelivered"
    );
    assert!(second.ack(BasicAckOptions::default()).await.unwrap());
    finish(connection, channel, "nacker", "retry").await;
}

/// Two servers started at the same moment come up side by side, each with its own node,
/// ports and directory, and hold separate queues; dropped, they leave no port listening and
/// no directory behind.
#[tokio::test]
async fn two_servers_start_side_by_side_without_interfering() {
    let (Some(a), Some(b)) = thread::scope(|scope| {
        let a = scope.spawn(start);
        let b = scope.spawn(start);
        (a.join().unwrap(), b.join().unwrap())
    }) else {
        return;
    };
    assert_ne!(a.node_name(), b.node_name());
    assert_ne!(a.dir(), b.dir());
    let ports = |s: &RabbitServer| [s.port(), s.dist_port(), s.epmd_port()];
    for port in ports(&a) {
        assert!(!ports(&b).contains(&port), "both servers use port {port}");
    }

    // The same queue name on each holds only what was published to that server.
    let mut connections = Vec::new();
    for (server, payload) in [(&a, b"to a"), (&b, b"to b")] {
        let connection = connect(server).await;
        let channel = confirming_channel(&connection).await;
        assert_eq!(declare(&channel, "shared-name").await, 0);
        publish_confirmed(&channel, "shared-name", &[payload.to_vec()]).await;
        connections.push((connection, channel, payload));
    }
    for (connection, channel, payload) in connections {
        let got = channel
            .basic_get("shared-name".into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("each server holds the message published to it");
        assert_eq!(&got.delivery.data, payload);
        assert_eq!(got.message_count, 0, "one message per server");
        connection.close(200, "done".into()).await.unwrap();
    }

    let (dirs, ports) = ([a.dir().to_owned(), b.dir().to_owned()], {
        let mut all = ports(&a).to_vec();
        all.extend(ports(&b));
        all
    });
    let began = Instant::now();
    drop((a, b));
    eprintln!(
        "dropping both servers took {:.2} s",
        began.elapsed().as_secs_f64()
    );
    for dir in dirs {
        assert!(!dir.exists(), "{} was not removed", dir.display());
        let left = working_in(&dir);
        assert!(
            left.is_empty(),
            "processes left in {}: {left:?}",
            dir.display()
        );
    }
    for port in ports {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err(),
            "port {port} still accepts connections after the drop"
        );
    }
}
