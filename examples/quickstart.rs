//! Quickstart: three nodes, one thread on each, doing puts, gets and remote FAA counters on the
//! soft NIC, and printing what they did.
//!
//! ```text
//! cargo run --example quickstart                      # Threaded soft NIC
//! cargo run --example quickstart -- --schedule chaos --seed 7
//! ```

mod common;

use std::time::Instant;

use clap::{CommandFactory, Parser};
use common::Sched;
use loco::prelude::*;

#[derive(Parser)]
#[command(
    name = "quickstart",
    about = "loco-rs quickstart: puts, gets and remote FAAs on a 3-node soft cluster"
)]
struct Args {
    /// When the soft NIC does its work.
    #[arg(long, value_enum, default_value = "threaded")]
    schedule: Sched,
    /// Seed of the chaos schedule (with `--schedule chaos` only; default 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Remote FAAs per thread on the shared counter (0 to 2^40).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(..=1 << 40))]
    faas: u64,
}

const NODES: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // The other schedules take no seed: `--seed 7` alone ran the same threaded demo as ever.
    if args.seed.is_some() && !matches!(args.schedule, Sched::Chaos) {
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--seed seeds the chaos schedule only: add --schedule chaos",
            )
            .exit();
    }
    let schedule = args.schedule.schedule(args.seed.unwrap_or(1));
    let cluster = Cluster::builder().nodes(NODES).soft(schedule).build()?;
    println!(
        "cluster: {NODES} nodes on the {} NIC ({schedule:?})",
        cluster.backend_name()
    );

    // A counter on n0 that every thread increments with remote FAAs, and on every node a mailbox
    // with one word per sender.
    let counter = cluster.alloc_word(NodeId(0))?;
    let mailboxes: Vec<Loc> = cluster
        .node_ids()
        .map(|n| cluster.alloc_words(n, NODES as u64))
        .collect::<Result<_, _>>()?;
    println!(
        "counter at {counter}; mailboxes at {}",
        mailboxes
            .iter()
            .map(Loc::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );

    let start = Instant::now();
    let reports: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cluster
            .node_ids()
            .map(|me| {
                let (cluster, counter, mailboxes) = (&cluster, &counter, &mailboxes);
                s.spawn(move || -> Result<String, loco::rdmawait::Error> {
                    let ctx = cluster.context(me)?;
                    let d = WorkId::new(1);
                    // Remote FAAs: the old values come back in `old`.
                    let old = cluster.alloc_word(me)?;
                    let mut last = 0;
                    for _ in 0..args.faas {
                        ctx.rfaa(counter, 1, &old, d)?;
                        ctx.wait(d)?;
                        last = ctx.load(&old)?;
                    }
                    // Puts: write my id + 100 into my slot of every other node's mailbox.
                    let src = cluster.alloc_word(me)?;
                    ctx.store(&src, 100 + me.0 as u64)?;
                    for peer in cluster.node_ids().filter(|&p| p != me) {
                        ctx.put(&mailboxes[peer.index()].word(me.0 as u64)?, &src, d)?;
                    }
                    // A global fence is loco-sv's job; here a get after the put on the same queue
                    // pair is enough to read it back (a remote read flushes earlier writes).
                    let back = cluster.alloc_word(me)?;
                    let next = NodeId(((me.index() + 1) % NODES) as u16);
                    ctx.get(&back, &mailboxes[next.index()].word(me.0 as u64)?, d)?;
                    ctx.wait(d)?;
                    Ok(format!(
                        "{me}: {} remote FAAs on {} (last old value {last}), put {} to {} peers, read back {} from {next}",
                        args.faas,
                        counter.node(),
                        100 + me.0,
                        NODES - 1,
                        ctx.load(&back)?
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked"))
            .collect::<Result<_, _>>()
    })?;
    let elapsed = start.elapsed();
    for r in &reports {
        println!("  {r}");
    }

    cluster.quiesce()?;
    let total = cluster.peek(&counter)?;
    println!(
        "counter = {total} (expected {}) after {elapsed:?}",
        NODES as u64 * args.faas
    );
    for n in cluster.node_ids() {
        println!(
            "  mailbox on {n}: {:?}",
            cluster.peek_words(&mailboxes[n.index()])?
        );
    }
    assert_eq!(
        total,
        NODES as u64 * args.faas,
        "remote FAAs are atomic among themselves"
    );
    println!("ok");
    Ok(())
}
