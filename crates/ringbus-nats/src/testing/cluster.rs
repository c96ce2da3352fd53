//! A cluster of `nats-server` nodes on 127.0.0.1, for tests that lose a node.
//!
//! [`NatsCluster::start`] picks a free client port and a free route port for each node, writes
//! each node's config (its `server_name`, the cluster's name, its route listener and routes to
//! every node), starts the nodes as [`NatsServer`]s (each with its own temporary directory and
//! JetStream store), and waits until every node has seen a JetStream metadata leader elected,
//! so streams can be created at once. Each node is a [`NatsServer`]: [`NatsServer::kill`] and
//! [`NatsServer::start_again`] take one down and bring it back on the same ports with the same
//! store, and it rejoins the cluster.

use std::fmt;
use std::fs;
use std::thread;
use std::time::Instant;

use super::{free_port, NatsServer, ServerOptions, NATS_SERVER, POLL, READY_TIMEOUT};

/// The cluster's name, as the nodes know it.
const CLUSTER_NAME: &str = "ringbus-test";
/// What every node logs once a JetStream metadata leader is elected (nats-server 2.9: "JetStream
/// cluster new metadata leader: n1/ringbus-test" on the others, "Self is new JetStream cluster
/// metadata leader" on the leader).
const META_LEADER: &str = "metadata leader";

/// The cluster part of one node's config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NodeConfig {
    server_name: String,
    route_port: u16,
    routes: Vec<u16>,
}

impl NodeConfig {
    /// The `server_name` line and the `cluster` block.
    pub(super) fn config(&self) -> String {
        let routes: Vec<String> = self
            .routes
            .iter()
            .map(|port| format!("nats-route://127.0.0.1:{port}"))
            .collect();
        format!(
            "server_name: {}\ncluster {{\n  name: {CLUSTER_NAME}\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
            self.server_name,
            self.route_port,
            routes.join(", ")
        )
    }
}

/// `size` nodes of one nats-server cluster on 127.0.0.1 (free client and route ports, JetStream
/// on by default, a store directory per node); every node is killed, and its directory
/// removed, on drop.
///
/// ```no_run
/// use ringbus_nats::testing::NatsCluster;
///
/// let Some(mut cluster) = NatsCluster::start(3) else {
///     return; // no nats-server binary, and REQUIRE_NATS is not set: skip
/// };
/// let urls = cluster.urls(); // "nats://127.0.0.1:<p0>,nats://127.0.0.1:<p1>,nats://127.0.0.1:<p2>"
/// let leader = cluster.node_by_name("n1").unwrap();
/// cluster.node_mut(leader).kill(); // lose a node ...
/// cluster.node_mut(leader).start_again(); // ... and bring it back
/// # let _ = urls;
/// ```
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts a cluster of `size` nodes with the default [`ServerOptions`] (JetStream on).
    ///
    /// Returns `None`, after printing a `SKIPPED:` line, when no `nats-server` binary is found
    /// and `REQUIRE_NATS` is not set.
    ///
    /// # Panics
    ///
    /// As [`NatsCluster::start_with`].
    pub fn start(size: usize) -> Option<Self> {
        Self::start_with(size, ServerOptions::new())
    }

    /// Starts a cluster of `size` nodes, each with `options` (and its cluster settings), named
    /// `n0`, `n1`, ..., and waits until every node accepts clients and (with JetStream) has
    /// seen a metadata leader elected.
    ///
    /// # Panics
    ///
    /// - When `size` is less than 2.
    /// - As [`NatsServer::start_with`], for any node.
    /// - When a metadata leader is not elected within 10 s (the message quotes the node's log).
    pub fn start_with(size: usize, options: ServerOptions) -> Option<Self> {
        assert!(size >= 2, "a cluster needs at least 2 nodes, not {size}");
        let binary = NATS_SERVER.find_or_skip()?;
        let ports = distinct_free_ports(2 * size);
        let (client_ports, route_ports) = ports.split_at(size);
        let mut nodes = Vec::with_capacity(size);
        for (i, &port) in client_ports.iter().enumerate() {
            let mut node_options = options.clone();
            node_options.cluster = Some(NodeConfig {
                server_name: format!("n{i}"),
                route_port: route_ports[i],
                routes: route_ports.to_vec(),
            });
            // A node that panics while starting drops the ones started before it.
            nodes.push(NatsServer::start_at(
                binary.clone(),
                node_options,
                Some(port),
            ));
        }
        let cluster = Self { nodes };
        if options.jetstream_enabled() {
            cluster.wait_for_meta_leader();
        }
        Some(cluster)
    }

    /// The client URLs of every node, comma-separated, as a NATS client (and
    /// [`Link::builder`](crate::Link::builder)) takes them.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes, in the order of their names (`n0` first).
    pub fn nodes(&self) -> &[NatsServer] {
        &self.nodes
    }

    /// Node `index`, to kill it or start it again.
    ///
    /// # Panics
    ///
    /// When `index` is not less than the cluster's size.
    pub fn node_mut(&mut self, index: usize) -> &mut NatsServer {
        let size = self.nodes.len();
        self.nodes
            .get_mut(index)
            .unwrap_or_else(|| panic!("no node {index} in a cluster of {size}"))
    }

    /// The index of the node whose `server_name` is `name` (`n0`, `n1`, ...), as JetStream
    /// names stream leaders.
    pub fn node_by_name(&self, name: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| format!("n{i}") == name)
    }

    /// The index of the node listening for clients on `port`, as a client's server info says.
    pub fn node_by_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|node| node.port() == port)
    }

    /// Polls every node's log until it names a metadata leader.
    fn wait_for_meta_leader(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        for node in &self.nodes {
            loop {
                let log = fs::read_to_string(node.log_path()).unwrap_or_default();
                if log.contains(META_LEADER) {
                    break;
                }
                if Instant::now() >= deadline {
                    panic!(
                        "{}",
                        node.failure_report(&format!(
                            "no JetStream metadata leader within {READY_TIMEOUT:?}"
                        ))
                    );
                }
                thread::sleep(POLL);
            }
        }
    }
}

impl fmt::Debug for NatsCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsCluster")
            .field("name", &CLUSTER_NAME)
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// `n` ports that were free a moment ago, all different.
fn distinct_free_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    while ports.len() < n {
        let port = free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpStream;
    use std::time::Duration;

    /// The INFO line a node greets a client with.
    fn greeting(node: &NatsServer) -> String {
        let stream =
            TcpStream::connect_timeout(&node.addr(), Duration::from_secs(5)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("set read timeout");
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .expect("read the greeting");
        line
    }

    #[test]
    fn three_nodes_form_one_cluster_and_a_node_comes_back() {
        let Some(mut cluster) = NatsCluster::start(3) else {
            return;
        };
        let urls = cluster.urls();
        assert_eq!(urls.split(',').count(), 3, "{urls}");
        let mut ports: Vec<u16> = cluster.nodes().iter().map(NatsServer::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        for (i, node) in cluster.nodes().iter().enumerate() {
            let info = greeting(node);
            assert!(
                info.contains(&format!("\"server_name\":\"n{i}\"")),
                "{info}"
            );
            assert!(
                info.contains(&format!("\"cluster\":\"{CLUSTER_NAME}\"")),
                "{info}"
            );
            assert!(info.contains("\"jetstream\":true"), "{info}");
            assert_eq!(cluster.node_by_port(node.port()), Some(i));
            assert_eq!(cluster.node_by_name(&format!("n{i}")), Some(i));
        }
        assert_eq!(cluster.node_by_name("n9"), None);
        // The store directories are distinct.
        let dirs: std::collections::HashSet<_> =
            cluster.nodes().iter().map(NatsServer::store_dir).collect();
        assert_eq!(dirs.len(), 3);

        cluster.node_mut(1).kill();
        assert!(
            TcpStream::connect_timeout(&cluster.nodes()[1].addr(), Duration::from_millis(500))
                .is_err()
        );
        cluster.node_mut(1).start_again();
        let info = greeting(&cluster.nodes()[1]);
        assert!(info.contains("\"server_name\":\"n1\""), "{info}");
        // Back in the cluster: its routes reconnect (the log says so).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = fs::read_to_string(cluster.nodes()[1].log_path()).unwrap_or_default();
            if log.matches("Route connection created").count() >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "n1 did not rejoin:\n{log}");
            thread::sleep(POLL);
        }
    }
}
