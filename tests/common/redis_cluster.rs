//! A throwaway Redis Cluster for the cluster tests: `masters` primaries
//! (and as many replicas, one per primary, if asked) on loopback ports,
//! each a [`RedisServer`] with `--cluster-enabled yes` in its own
//! temporary directory, joined by `redis-cli --cluster create`.

use super::redis_server::RedisServer;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The primary's id, for a replica.
    pub replica_of: Option<String>,
    /// The slot ranges it serves (a primary's).
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts and joins a cluster of `masters` primaries, each with
    /// `replicas` replicas; waits until every node reports `cluster_state:ok`.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let count = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                RedisServer::start_with_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .args(["--cluster-replicas", &replicas.to_string()])
            .arg("--cluster-yes");
        let output = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli --cluster create: {e}"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until(
            "every node sees the cluster ok and agrees on every slot",
            |c| {
                c.nodes.iter().all(|n| {
                    n.cli(&["CLUSTER", "INFO"])
                        .lines()
                        .any(|l| l.trim() == "cluster_state:ok")
                }) && c.nodes.iter().all(|n| {
                    let nodes = parse_nodes(&n.cli(&["CLUSTER", "NODES"]));
                    nodes.iter().filter(|x| x.master).count() == masters
                        && nodes.len() == count
                        && nodes.iter().map(|x| covered(&x.slots)).sum::<u32>() == 16384
                })
            },
        );
        cluster
    }

    /// `redis://127.0.0.1:<port>/` of node `i`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// The node with `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// `CLUSTER NODES` as node `via` sees it.
    pub fn topology(&self, via: usize) -> Vec<Node> {
        parse_nodes(&self.nodes[via].cli(&["CLUSTER", "NODES"]))
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot")
    }

    /// The primary serving `slot`, as every node sees it (they agree).
    pub fn owner(&self, slot: u16) -> Node {
        self.topology(0)
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }

    /// Queue names whose slots lie on each primary in turn, in the order of
    /// the primaries' ports: `prefix-<n>` for the first `n` that fits.
    pub fn names_on_each_master(&self, prefix: &str) -> Vec<String> {
        let mut masters: Vec<Node> = self.topology(0).into_iter().filter(|n| n.master).collect();
        masters.sort_by_key(|n| n.port);
        masters
            .iter()
            .map(|m| {
                (0..)
                    .map(|n| format!("{prefix}-{n}"))
                    .find(|name| {
                        let slot = self.slot(&format!("punctual:{{{name}}}:schedule"));
                        m.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
                    })
                    .expect("some name lands there")
            })
            .collect()
    }

    /// Polls `check` every 50 ms for up to 30 s; panics naming `what`.
    #[allow(clippy::disallowed_methods)] // real time: the cluster's own
    pub fn wait_until(&self, what: &str, check: impl Fn(&RedisCluster) -> bool) {
        let give_up = Instant::now() + Duration::from_secs(30);
        while !check(self) {
            assert!(Instant::now() < give_up, "{what}: not true after 30 s");
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn covered(slots: &[(u16, u16)]) -> u32 {
    slots.iter().map(|&(a, b)| u32::from(b - a) + 1).sum()
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport> <flags> <master> <ping>
/// <pong> <epoch> <link> <slot> <slot> ...`; importing/migrating markers
/// (`[...]`) are skipped.
pub fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(Node {
                id: fields[0].to_owned(),
                port,
                master: fields[2].split(',').any(|f| f == "master") && !fields[2].contains("fail"),
                replica_of: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}
