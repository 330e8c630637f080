//! The [`Schedule::Immediate`](super::Schedule::Immediate) schedule: the posting thread executes
//! every request completely at post time, in program order (one valid schedule of the model), so
//! a poll only counts completions.

use std::sync::Arc;
use std::time::Duration;

use super::{DirectCpu, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::{Error, NodeId, Result};

/// The `Immediate` schedule's thread NIC: executes at post time, so a poll only counts.
#[derive(Debug)]
pub(super) struct ImmediateNic {
    cpu: DirectCpu,
    /// Completed, unpolled requests per target node.
    unpolled: Vec<u64>,
}

impl ImmediateNic {
    /// The thread NIC of a thread on `node` (an index already checked).
    pub(super) fn open(fabric: &Arc<Fabric>, node: usize) -> Self {
        ImmediateNic {
            cpu: DirectCpu {
                fabric: fabric.clone(),
                node,
            },
            unpolled: vec![0; fabric.nodes()],
        }
    }
}

impl ThreadNic for ImmediateNic {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        let DirectCpu { fabric, node } = &self.cpu;
        let to = fabric.check_post(*node, target, &wr)?;
        fabric.execute(*node, to, wr);
        if wr.completes() {
            self.unpolled[to] += 1;
        }
        Ok(())
    }

    fn poll(&mut self, target: NodeId, _timeout: Duration) -> Result<()> {
        // Everything executed at post time: a completion of a request towards a node that died
        // since is still delivered, as from a real NIC's completion queue.
        self.cpu.alive()?;
        let t = self.cpu.fabric.check_node(target)?;
        let c = &mut self.unpolled[t];
        if *c == 0 {
            return Err(Error::NothingPending { node: target });
        }
        *c -= 1;
        Ok(())
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        self.cpu.load(word)
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.cpu.store(word, value)
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        self.cpu.cas(word, expected, new)
    }

    fn mfence(&mut self) -> Result<()> {
        self.cpu.mfence()
    }
}
