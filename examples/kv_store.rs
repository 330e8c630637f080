//! A key-value store: one ported hash map on one node, T threads spread over N nodes doing a mix
//! of reads, writes and compare-and-swaps; prints the throughput and checks a final invariant.
//!
//! ```text
//! cargo run --release --example kv_store                         # 3 nodes, 6 threads, Threaded soft NIC
//! cargo run --release --example kv_store -- --nodes 4 --threads 8 --ops 5000
//! cargo run --example kv_store -- --schedule chaos --seed 3 --ops 200
//! ```
//!
//! Keys `0..K` hold data: writes put a value stamped with the writer and a sequence number, reads
//! check the stamp. Keys `K..2K` hold counters: an increment is a read then a CAS from the value
//! read to value + 1, retried until it succeeds, and each thread counts its increments. The
//! invariant at the end: every counter holds exactly the increments made to it, and every data key
//! holds a value that some thread wrote. The map is linearizable, so no increment is ever lost.

mod common;

use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use common::Sched;
use loco::prelude::*;

#[derive(Parser)]
#[command(
    name = "kv_store",
    about = "a ported hash map on one node under a read/write/CAS mix from every node"
)]
struct Args {
    /// Nodes in the cluster (1 to 65535; node memory is sized to the run, within 4 GiB in all).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=65535))]
    nodes: u16,
    /// Threads, spread round-robin over the nodes (1 to 1024).
    #[arg(long, default_value_t = 6, value_parser = RangedU64ValueParser::<usize>::from(1..=1024))]
    threads: usize,
    /// Operations per thread (1 to 2^40).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    ops: u64,
    /// Data keys, as many counter keys again (1 to 2^19, and at most half of --buckets).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1 << 19))]
    keys: u64,
    /// Buckets of the map (2 to 2^20, and at least twice --keys; 24 bytes each on the map's
    /// node, and as much again on a thread's node for each thread, for its copy of the words it
    /// fetches).
    #[arg(long, default_value_t = 64, value_parser = RangedU64ValueParser::<usize>::from(2..=1 << 20))]
    buckets: usize,
    /// The node holding the map (below --nodes).
    #[arg(long, default_value_t = 0)]
    home: u16,
    /// When the soft NIC does its work.
    #[arg(long, value_enum, default_value = "threaded")]
    schedule: Sched,
    /// Seed of the chaos schedule and of the operation mix.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What one thread did.
#[derive(Default)]
struct Tally {
    reads: u64,
    writes: u64,
    cas: u64,
    cas_failed: u64,
    /// Increments per counter key.
    increments: Vec<u64>,
}

/// A data value: writer in the top 16 bits, sequence number below (never 0).
fn stamp(thread: usize, seq: u64) -> u64 {
    ((thread as u64 + 1) << 48) | seq
}

/// A small xorshift generator: the mix is reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// The registered memory the busiest node needs, at most, in bytes: the map and its node lock
/// (on --home), and for each thread on the node its use of the lock and its copy of the map's
/// words.
fn memory_needed(args: &Args) -> u128 {
    let map = 8 * FixedHashMap::words_for(args.buckets) as u128;
    let per_thread = common::lock_user_bytes(args.nodes) + map;
    let threads = (args.threads as u128).div_ceil(args.nodes as u128);
    map + common::node_lock_bytes(args.nodes) + threads * per_thread
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if (args.buckets as u64) < 2 * args.keys {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                format!(
                    "--buckets must be at least twice --keys: --keys {} needs 2 * {} = {} \
                     buckets or more, not {}",
                    args.keys,
                    args.keys,
                    2 * args.keys,
                    args.buckets
                ),
            )
            .exit();
    }
    if args.home >= args.nodes {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                format!(
                    "--home must be a node of the cluster, 0 to {} with --nodes {}",
                    args.nodes - 1,
                    args.nodes
                ),
            )
            .exit();
    }
    let memory = common::memory_per_node(
        memory_needed(&args),
        args.nodes,
        "--nodes, --buckets or --threads",
    )
    .unwrap_or_else(|e| Args::command().error(ErrorKind::ValueValidation, e).exit());
    let schedule = args.schedule.schedule(args.seed);
    let cluster = Cluster::builder()
        .nodes(args.nodes as usize)
        .memory_per_node(memory)
        .soft(schedule)
        .build()?;
    let mut init = FixedHashMap::with_buckets(args.buckets);
    for k in 0..2 * args.keys {
        init.apply(loco::sc::MapOp::Insert(k, 0)); // every key present, 0 = never written
    }
    let map = PortedHashMap::new_on(&cluster, NodeId(args.home), &init)?;
    println!(
        "kv_store: a {}-bucket map on n{} ({} words); {} threads on {} nodes, {} ops each ({schedule:?})",
        args.buckets,
        args.home,
        map.words(),
        args.threads,
        args.nodes,
        args.ops
    );

    let start = Instant::now();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (cluster, map, args) = (&cluster, &map, &args);
                s.spawn(move || -> Result<Tally, loco::sc::Error> {
                    let ctx = cluster.context(NodeId((t % args.nodes as usize) as u16))?;
                    let mut rng =
                        Rng(args.seed.wrapping_mul(0x9E37_79B9) ^ (t as u64 + 1) << 20 | 1);
                    let mut tally = Tally {
                        increments: vec![0; args.keys as usize],
                        ..Tally::default()
                    };
                    let mut seq = 0;
                    for _ in 0..args.ops {
                        let roll = rng.next(10);
                        if roll < 5 {
                            // Read a data key: 0 or a well-formed stamp.
                            let v = map.get(&ctx, rng.next(args.keys))?.expect("key present");
                            let (writer, n) = ((v >> 48) as usize, v & 0xFFFF_FFFF_FFFF);
                            assert!(v == 0 || (writer >= 1 && writer <= args.threads && n >= 1));
                            tally.reads += 1;
                        } else if roll < 7 {
                            seq += 1;
                            map.insert(&ctx, rng.next(args.keys), stamp(t, seq))?;
                            tally.writes += 1;
                        } else {
                            // Increment a counter: read, then CAS; on failure retry from the
                            // value the CAS saw.
                            let c = rng.next(args.keys);
                            let key = args.keys + c;
                            let mut old = map.get(&ctx, key)?.expect("key present");
                            tally.reads += 1;
                            loop {
                                tally.cas += 1;
                                let seen = map.cas(&ctx, key, old, old + 1)?.expect("present");
                                if seen == old {
                                    break;
                                }
                                tally.cas_failed += 1;
                                old = seen;
                            }
                            tally.increments[c as usize] += 1;
                        }
                    }
                    Ok(tally)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked"))
            .collect::<Result<_, _>>()
    })?;
    let elapsed = start.elapsed();

    let ops: u64 = tallies.iter().map(|t| t.reads + t.writes + t.cas).sum();
    let (reads, writes, cas, failed): (u64, u64, u64, u64) =
        tallies.iter().fold((0, 0, 0, 0), |a, t| {
            (
                a.0 + t.reads,
                a.1 + t.writes,
                a.2 + t.cas,
                a.3 + t.cas_failed,
            )
        });
    println!(
        "{ops} map operations in {elapsed:.2?}: {:.0} ops/s, {:.1} µs per operation per thread",
        ops as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 * args.threads as f64 / ops as f64
    );
    println!("  reads {reads}, writes {writes}, CAS {cas} ({failed} failed and retried)");

    // The invariant, from the final state read directly from the map's node.
    cluster.quiesce()?;
    let fin = map.peek(&cluster)?;
    let mut ok = true;
    for c in 0..args.keys {
        let want: u64 = tallies.iter().map(|t| t.increments[c as usize]).sum();
        let got = fin.get(args.keys + c).expect("counter key present");
        if got != want {
            println!("  counter {c}: {got}, but {want} increments were made");
            ok = false;
        }
    }
    for k in 0..args.keys {
        let v = fin.get(k).expect("data key present");
        let (writer, n) = ((v >> 48) as usize, v & 0xFFFF_FFFF_FFFF);
        if v != 0
            && !(writer >= 1 && writer <= args.threads && n >= 1 && n <= tallies[writer - 1].writes)
        {
            println!("  data key {k}: {v:#x} was never written");
            ok = false;
        }
    }
    let total: u64 = tallies.iter().flat_map(|t| &t.increments).sum();
    println!(
        "final map: {} entries; counters sum to {total} = the increments made: {}",
        fin.len(),
        if ok { "ok" } else { "VIOLATED" }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
