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
