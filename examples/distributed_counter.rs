//! A cluster of N processes on real RDMA devices (the verbs backend): each process is one node,
//! does remote FAAs on every other node's counter and puts a stamp into every other node's slot,
//! then checks that its own counter and slots hold exactly what the others sent.
//!
//! ```text
//! cargo build --release --features verbs --example distributed_counter
//! # one process per node, same peer list everywhere, node ids 0..N (here 3 on one host):
//! P=127.0.0.1:7470,127.0.0.1:7471,127.0.0.1:7472
//! for i in 0 1 2; do
//!     target/release/examples/distributed_counter --node $i --peers $P &
//! done; wait
//! ```
//!
//! Flags fall back to the environment: `--node` to `LOCO_NODE_ID`, `--peers` to `LOCO_PEERS`
//! (comma-separated `host:port`, one per node, this process listening on its own entry's port);
//! the device to `LOCO_RDMA_DEVICE` / `LOCO_RDMA_PORT` / `LOCO_GID_INDEX` (default: the first
//! active port). On several hosts, give each host's reachable address in the peer list.
//!
//! Exit status: 0 when the totals are right, 1 when they are not, 2 on any error. If a process
//! dies mid-run, the others fail with "peer nX is not responding" within about a second
//! (the rendezvous connection drops), or after the transport's retries at the latest.

#[cfg(not(feature = "verbs"))]
fn main() {
    eprintln!(
        "distributed_counter needs the verbs backend: \
         cargo run --features verbs --example distributed_counter -- --help"
    );
    std::process::exit(2);
}

#[cfg(feature = "verbs")]
fn main() {
    std::process::exit(verbs_main::main());
}

#[cfg(feature = "verbs")]
#[path = "common/member.rs"]
mod member;

#[cfg(feature = "verbs")]
mod verbs_main {
    use std::time::{Duration, Instant};

    use super::member::Member;

    use clap::Parser;
    use loco::prelude::*;

    #[derive(Parser)]
    #[command(about = "remote FAAs and puts between N processes, one node each, over RDMA")]
    struct Args {
        #[command(flatten)]
        member: Member,
        /// Remote FAAs on each other node's counter (0 to 2^40).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(..=1 << 40))]
        ops: u64,
        /// Pause between rounds, in microseconds (to make a run last, e.g. to kill a process).
        #[arg(long, default_value_t = 0)]
        pace_us: u64,
        /// Rendezvous, barrier and wait timeout, in seconds (1 to 86400).
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86400))]
        timeout: u64,
    }

    /// Where everything lives; every process allocates in the same order, so the locations agree.
    struct Layout {
        /// One FAA counter per node.
        counters: Vec<Loc>,
        /// Per node, one slot per writer.
        slots: Vec<Loc>,
        /// Per node, scratch words: FAA results and put sources, one per other node.
        scratch: Vec<Loc>,
    }

    fn stamp(from: NodeId, to: NodeId) -> u64 {
        ((from.0 as u64 + 1) << 32) | to.0 as u64
    }

    pub(super) fn main() -> i32 {
        let args = Args::parse();
        match run(&args) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("n{}: error: {e}", args.member.node);
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    eprintln!("  caused by: {s}");
                    source = s.source();
                }
                2
            }
        }
    }

    fn run(args: &Args) -> Result<bool, loco::rdmawait::Error> {
        let me = args.member.me();
        let n = args.member.peers.len();
        let started = Instant::now();
        let (cluster, process) = args
            .member
            .cluster(64 * 1024, Duration::from_secs(args.timeout))?;
        let ids: Vec<NodeId> = cluster.node_ids().collect();
        let l = Layout {
            counters: ids
                .iter()
                .map(|&i| cluster.alloc_word(i))
                .collect::<Result<_, _>>()?,
            slots: ids
                .iter()
                .map(|&i| cluster.alloc_words(i, n as u64))
                .collect::<Result<_, _>>()?,
            scratch: ids
                .iter()
                .map(|&i| cluster.alloc_words(i, 2 * n as u64))
                .collect::<Result<_, _>>()?,
        };
        process.barrier()?;
        println!(
            "{me}: joined {n} processes on {} in {:.2?}",
            process.device(),
            started.elapsed()
        );

        let ctx = cluster.context(me)?;
        let others: Vec<NodeId> = ids.iter().copied().filter(|&q| q != me).collect();
        let d = WorkId::new(1);
        let t = Instant::now();
        for k in 0..args.ops {
            for &q in &others {
                let ret = l.scratch[me.index()].word(q.0 as u64)?;
                ctx.rfaa(&l.counters[q.index()], 1, &ret, d)?;
            }
            if k % 32 == 31 {
                ctx.wait(d)?;
            }
            if args.pace_us > 0 {
                std::thread::sleep(Duration::from_micros(args.pace_us));
            }
        }
        for &q in &others {
            // A put reads its source when the NIC gets to it: one source word per target.
            let src = l.scratch[me.index()].word((n + q.index()) as u64)?;
            ctx.store(&src, stamp(me, q))?;
            ctx.put(&l.slots[q.index()].word(me.0 as u64)?, &src, d)?;
        }
        ctx.wait(d)?;
        // Global fence towards every node: after an rfence, a get completes only once the
        // earlier writes on that queue pair have landed (docs/model.md §5.2).
        for &q in &others {
            ctx.rfence(q)?;
            let tmp = l.scratch[me.index()].word(q.0 as u64)?;
            ctx.get(&tmp, &l.counters[q.index()], d)?;
        }
        ctx.wait(d)?;
        let elapsed = t.elapsed();
        process.barrier()?; // every process's operations have landed everywhere

        let expected = args.ops * others.len() as u64;
        let total = cluster.peek(&l.counters[me.index()])?;
        let mut ok = total == expected;
        for &q in &others {
            let got = cluster.peek(&l.slots[me.index()].word(q.0 as u64)?)?;
            if got != stamp(q, me) {
                println!(
                    "{me}: slot of {q} holds {got:#x}, expected {:#x}",
                    stamp(q, me)
                );
                ok = false;
            }
        }
        let ops = args.ops * others.len() as u64;
        println!(
            "{me}: counter {total} (expected {expected}) {}; {ops} remote FAAs in {elapsed:.2?} ({:.1} µs each)",
            if ok { "OK" } else { "WRONG" },
            elapsed.as_secs_f64() * 1e6 / ops.max(1) as f64
        );
        process.barrier()?; // nobody leaves while another still reads
        Ok(ok)
    }
}
