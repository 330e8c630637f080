//! Latency of one remote operation and its wait on the verbs backend: `put`+`wait`,
//! `get`+`wait` and `rfaa`+`wait` of one 8-byte word, from a thread on n0 to n1's memory (two
//! protection domains on one device: a loop-back through the NIC, like perftest run with client
//! and server on one host). `soft-roce-ci/bench.sh --hosts 2` sets it beside perftest's `ib_write_lat`,
//! `ib_read_lat` and `ib_atomic_lat` on the same device.
//!
//! ```text
//! cargo run --release --features verbs --example verbs_latency -- --iters 1000
//! ```
//!
//! Across hosts: with `LOCO_NODE_ID` and `LOCO_PEERS` set (two entries), each of two processes
//! is one node and n0's process measures towards n1's, over the network (what
//! `soft-roce-ci/bench.sh --hosts 2` runs on two VMs of `soft-roce-ci/cluster.sh`); n1's
//! process only serves and waits at the closing barrier.
//!
//! Each operation is a full round trip: the wait returns once the completion is polled. Output:
//! a table, then one `RESULT <op> <iters> <avg µs> <median µs> <min µs> <p99 µs>` line per
//! operation for scripts.

#[cfg(not(feature = "verbs"))]
fn main() {
    eprintln!("verbs_latency needs the verbs backend: cargo run --release --features verbs --example verbs_latency");
    std::process::exit(2);
}

#[cfg(feature = "verbs")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::time::{Duration, Instant};

    use clap::Parser;
    use loco::prelude::*;
    use loco::rdmawait::backend::verbs::{Process, VerbsConfig};

    #[derive(Parser)]
    #[command(about = "latency of put+wait, get+wait and rfaa+wait on an RDMA device")]
    struct Args {
        /// Measured iterations per operation (1 to 1000000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        iters: u32,
        /// Unmeasured iterations first.
        #[arg(long, default_value_t = 100)]
        warmup: u32,
    }

    let args = Args::parse();
    let cluster = Cluster::builder()
        .nodes(2)
        .memory_per_node(4096)
        .verbs(VerbsConfig::from_env()?)
        .build()?;
    let process = Process::of(&cluster)?;
    let device = process.device().to_string();
    let (n0, n1) = (NodeId(0), NodeId(1));
    let remote = cluster.alloc_word(n1)?;
    let local = cluster.alloc_word(n0)?;
    // Two processes: n1's serves (its memory is the target) until n0's is done.
    if process.node() == Some(n1) {
        process.barrier()?;
        process.barrier()?;
        println!("loco verbs latency: n1 served n0's operations on {device}");
        return Ok(());
    }
    let distributed = process.node().is_some();
    if distributed {
        process.barrier()?;
    }
    let ctx = cluster.context(n0)?;
    let d = WorkId::new(1);
    type Op<'a> = Box<dyn Fn() -> Result<(), loco::rdmawait::Error> + 'a>;
    let ops: Vec<(&str, Op)> = vec![
        ("put+wait", Box::new(|| ctx.put(&remote, &local, d))),
        ("get+wait", Box::new(|| ctx.get(&local, &remote, d))),
        ("rfaa+wait", Box::new(|| ctx.rfaa(&remote, 1, &local, d))),
    ];
    println!(
        "loco verbs latency on {device}: {} iterations (+{} warm-up), 8 bytes, n0 -> n1",
        args.iters, args.warmup
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "op", "avg µs", "median µs", "min µs", "p99 µs", "max µs"
    );
    let mut results = Vec::new();
    for (name, op) in &ops {
        for _ in 0..args.warmup {
            op()?;
            ctx.wait(d)?;
        }
        let mut t: Vec<Duration> = Vec::with_capacity(args.iters as usize);
        for _ in 0..args.iters {
            let start = Instant::now();
            op()?;
            ctx.wait(d)?;
            t.push(start.elapsed());
        }
        t.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let avg = t.iter().map(|&d| us(d)).sum::<f64>() / t.len().max(1) as f64;
        let at = |q: f64| us(t[((t.len() - 1) as f64 * q) as usize]);
        println!(
            "{name:<10} {avg:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            at(0.5),
            at(0.0),
            at(0.99),
            at(1.0)
        );
        results.push(format!(
            "RESULT {name} {} {avg:.3} {:.3} {:.3} {:.3}",
            t.len(),
            at(0.5),
            at(0.0),
            at(0.99)
        ));
    }
    for r in results {
        println!("{r}");
    }
    if distributed {
        process.barrier()?;
    }
    Ok(())
}
