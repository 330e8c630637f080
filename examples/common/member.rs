//! What the multi-process verbs examples share: which node this process is, every node's
//! rendezvous address, and the cluster they make.

use std::sync::Arc;
use std::time::Duration;

use loco::prelude::{Cluster, NodeId};
use loco::rdmawait::backend::verbs::{Process, VerbsConfig};
use loco::rdmawait::Result;

/// `--node` and `--peers` (falling back to `LOCO_NODE_ID` and `LOCO_PEERS`).
#[derive(clap::Args)]
pub struct Member {
    /// This process's node id (0..N).
    #[arg(long, env = "LOCO_NODE_ID")]
    pub node: u16,
    /// Every node's rendezvous address, in node order: host:port,host:port,...
    #[arg(long, env = "LOCO_PEERS", value_delimiter = ',', required = true)]
    pub peers: Vec<String>,
}

impl Member {
    /// This process's node.
    pub fn me(&self) -> NodeId {
        NodeId(self.node)
    }

    /// The cluster of every peer, this process being `--node` (the device and the cluster
    /// key from the environment), with `memory` bytes per node and `timeout`, and this
    /// process's handle on it.
    pub fn cluster(&self, memory: u64, timeout: Duration) -> Result<(Cluster, Arc<Process>)> {
        let config = VerbsConfig::from_env()?.distributed(self.me(), self.peers.clone());
        let cluster = Cluster::builder()
            .nodes(self.peers.len())
            .memory_per_node(memory)
            .timeout(timeout)
            .verbs(config)
            .build()?;
        let process = Process::of(&cluster)?;
        Ok((cluster, process))
    }
}
