//! What the soft-NIC examples share: the `--schedule` flag.

use clap::ValueEnum;
use loco::prelude::Schedule;

/// When the soft NIC does its work (`--schedule`).
#[derive(Clone, Copy, ValueEnum)]
pub enum Sched {
    /// Every operation at post time.
    Immediate,
    /// NIC engine threads.
    Threaded,
    /// Adversarial, seeded by `--seed`.
    Chaos,
}

impl Sched {
    /// The soft NIC schedule this flag names (`seed` is used by `chaos` only).
    pub fn schedule(self, seed: u64) -> Schedule {
        match self {
            Sched::Immediate => Schedule::Immediate,
            Sched::Threaded => Schedule::Threaded,
            Sched::Chaos => Schedule::Chaos { seed },
        }
    }
}

/// The most registered memory, every node together, that the soft-NIC examples size their
/// clusters for (4 GiB): node memory is only touched where it is used, but it is reserved.
pub const MAX_MEMORY: u128 = 4 << 30;

/// Bytes a node lock (`loco::locks::NLock`, under every SC location and ported structure)
/// takes on its node in a cluster of `nodes` nodes: `tkt`, `rel`, 16 `waiting` slots per node
/// and 16 abandon marks.
#[allow(dead_code)] // not every example that shares this module makes locks
pub fn node_lock_bytes(nodes: u16) -> u128 {
    8 * (2 + 16 * nodes as u128 + 16)
}

/// Bytes a thread's use of one node lock takes, at most, on the thread's node: three private
/// words, and the buffer it reads every node's `waiting` slots into when it is kept waiting.
#[allow(dead_code)]
pub fn lock_user_bytes(nodes: u16) -> u128 {
    8 * (3 + 16 * nodes as u128)
}

/// The registered memory per node of a cluster of `nodes` nodes whose busiest node needs
/// `needed` bytes: the default (1 MiB), or `needed` and some room when that is more. `Err`
/// with a message to show (naming `flags`, the arguments that size the run) when the whole
/// cluster would need more than [`MAX_MEMORY`]: a usage error, not an out-of-memory error
/// half-way through the run.
#[allow(dead_code)]
pub fn memory_per_node(needed: u128, nodes: u16, flags: &str) -> Result<u64, String> {
    const ROOM: u128 = 64 << 10;
    let per_node = needed
        .saturating_add(ROOM)
        .max(loco::rdmawait::DEFAULT_MEMORY as u128);
    let total = per_node.saturating_mul(nodes as u128);
    if total > MAX_MEMORY {
        return Err(format!(
            "these arguments need about {} MiB of registered memory per node, {} MiB over the \
             {nodes} nodes, and this example allows {} MiB in all: use smaller {flags}",
            per_node.div_ceil(1 << 20),
            total.div_ceil(1 << 20),
            MAX_MEMORY >> 20
        ));
    }
    Ok(per_node as u64)
}
