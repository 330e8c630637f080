//! A bank: concurrent transfers between accounts from threads on every node; the total balance
//! is conserved. Two ways, run one after the other:
//!
//! 1. **SC locations**: one [`ScLoc`] per account, spread over the nodes. A transfer withdraws with
//!    a `read_sc` + `cas_sc` loop (never below zero) and deposits with `faa_sc`. Money is in flight
//!    between the two, so only the final total is checked.
//! 2. **A ported ledger**: all balances in one user-defined [`Sequential`] structure on one node.
//!    A transfer is one linearizable operation, so an auditor thread sees the exact total at any
//!    moment, and checks it while the transfers run.
//!
//! ```text
//! cargo run --release --example bank
//! cargo run --example bank -- --schedule chaos --transfers 100
//! ```

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use common::Sched;
use loco::prelude::*;
use loco::sc::{Decoder, Encoder, LayoutError, Words};

#[derive(Parser)]
#[command(
    name = "bank",
    about = "concurrent transfers between accounts; the total balance is conserved"
)]
struct Args {
    /// Nodes in the cluster (1 to 65535; node memory is sized to the run, within 4 GiB in all).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=65535))]
    nodes: u16,
    /// Threads making transfers, spread round-robin over the nodes (1 to 1024).
    #[arg(long, default_value_t = 6, value_parser = RangedU64ValueParser::<usize>::from(1..=1024))]
    threads: usize,
    /// Accounts (2 to 65536).
    #[arg(long, default_value_t = 12, value_parser = RangedU64ValueParser::<usize>::from(2..=65536))]
    accounts: usize,
    /// Initial balance of every account (the total, balance x accounts, must fit in 64 bits).
    #[arg(long, default_value_t = 1000)]
    balance: u64,
    /// Transfers per thread (1 to 2^40).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    transfers: u64,
    /// When the soft NIC does its work.
    #[arg(long, value_enum, default_value = "threaded")]
    schedule: Sched,
    /// Seed of the chaos schedule and of the transfers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// A small xorshift generator: the transfers are reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, thread: usize) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((thread as u64 + 1) << 17) | 1)
    }
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
    /// A transfer: two distinct accounts and an amount.
    fn transfer(&mut self, accounts: usize) -> (usize, usize, u64) {
        let from = self.next(accounts as u64) as usize;
        let to = (from + 1 + self.next(accounts as u64 - 1) as usize) % accounts;
        (from, to, 1 + self.next(100))
    }
}

/// The ledger: every balance, in one structure.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ledger {
    balances: Vec<u64>,
}

#[derive(Debug, Clone, Copy)]
enum LedgerOp {
    /// Moves `amount` if `from` has it; returns whether it moved.
    Transfer { from: usize, to: usize, amount: u64 },
    /// The sum of all balances.
    Total,
}

impl Sequential for Ledger {
    type Op = LedgerOp;
    type Ret = u64;

    fn words(&self) -> usize {
        self.balances.len()
    }

    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        let mut e = Encoder::new(out);
        self.balances.iter().for_each(|b| e.push(*b));
        e.finish()
    }

    fn decode(words: &[u64]) -> Result<Self, LayoutError> {
        let mut d = Decoder::new(words);
        let balances = (0..words.len())
            .map(|_| d.next())
            .collect::<Result<_, _>>()?;
        Ok(Ledger { balances })
    }

    /// The ordinary sequential code.
    fn apply(&mut self, op: LedgerOp) -> u64 {
        match op {
            LedgerOp::Transfer { from, to, amount } if self.balances[from] >= amount => {
                self.balances[from] -= amount;
                self.balances[to] += amount;
                1
            }
            LedgerOp::Transfer { .. } => 0,
            LedgerOp::Total => self.balances.iter().sum(),
        }
    }

    /// A transfer fetches just its two accounts (two gets, one round trip); the audit fetches
    /// everything, as the default would.
    fn apply_words(words: &mut Words<'_>, op: LedgerOp) -> loco::sc::Result<u64> {
        match op {
            LedgerOp::Transfer { from, to, amount } => {
                words.prefetch_all(&[from..from + 1, to..to + 1])?;
                let (a, b) = (words.read(from)?, words.read(to)?);
                if a < amount {
                    return Ok(0);
                }
                words.write(from, a - amount)?;
                words.write(to, b + amount)?;
                Ok(1)
            }
            LedgerOp::Total => Ok(words.read_range(0..words.len())?.iter().sum()),
        }
    }
}

/// The registered memory the busiest node needs, at most, in bytes: the accounts placed on it
/// (one word and a node lock each), the ledger (a word per account and a node lock), and for
/// each thread on it (the transfer threads, and the auditor on n0) its use of every account's
/// lock and scratch words and of the ledger's.
fn memory_needed(args: &Args) -> u128 {
    let (nodes, accounts) = (args.nodes as u128, args.accounts as u128);
    let lock = common::node_lock_bytes(args.nodes);
    let user = common::lock_user_bytes(args.nodes);
    let objects = accounts.div_ceil(nodes) * (8 + lock) + 8 * accounts + lock;
    let per_thread = accounts * (user + 16) + user + 8 * accounts;
    let threads = (args.threads as u128).div_ceil(nodes) + 1;
    objects + threads * per_thread
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // The total is conserved, so no balance ever exceeds it: it is the only sum to check.
    let Some(total) = args.balance.checked_mul(args.accounts as u64) else {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                format!(
                    "the total balance, --balance x --accounts, must fit in 64 bits: with \
                     --accounts {}, --balance is at most {}",
                    args.accounts,
                    u64::MAX / args.accounts as u64
                ),
            )
            .exit();
    };
    let memory = common::memory_per_node(
        memory_needed(&args),
        args.nodes,
        "--nodes, --accounts or --threads",
    )
    .unwrap_or_else(|e| Args::command().error(ErrorKind::ValueValidation, e).exit());
    let schedule = args.schedule.schedule(args.seed);
    let cluster = Cluster::builder()
        .nodes(args.nodes as usize)
        .memory_per_node(memory)
        .soft(schedule)
        .build()?;
    let node_of = |t: usize| NodeId((t % args.nodes as usize) as u16);
    println!(
        "bank: {} accounts of {} on {} nodes, {} threads x {} transfers ({schedule:?})",
        args.accounts, args.balance, args.nodes, args.threads, args.transfers
    );

    // 1. One SC location per account.
    let accounts: Vec<ScLoc> = (0..args.accounts)
        .map(|_| ScLoc::new(&cluster, args.balance))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    let moved: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (cluster, accounts, args) = (&cluster, &accounts, &args);
                s.spawn(move || -> loco::sc::Result<u64> {
                    let ctx = cluster.context(node_of(t))?;
                    let mut rng = Rng::new(args.seed, t);
                    let mut moved = 0;
                    for _ in 0..args.transfers {
                        let (from, to, amount) = rng.transfer(args.accounts);
                        // Withdraw: never below zero, retried on a concurrent change.
                        let mut b = ctx.read_sc(&accounts[from])?;
                        let withdrawn = loop {
                            if b < amount {
                                break false;
                            }
                            let seen = ctx.cas_sc(&accounts[from], b, b - amount)?;
                            if seen == b {
                                break true;
                            }
                            b = seen;
                        };
                        if withdrawn {
                            ctx.faa_sc(&accounts[to], amount)?;
                            moved += 1;
                        }
                    }
                    Ok(moved)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked"))
            .collect::<Result<_, _>>()
    })?;
    let elapsed = start.elapsed();
    cluster.quiesce()?;
    let balances: Vec<u64> = accounts
        .iter()
        .map(|a| a.peek(&cluster))
        .collect::<Result<_, _>>()?;
    let sum: u64 = balances.iter().sum();
    let n = args.threads as u64 * args.transfers;
    println!(
        "1. SC accounts: {n} transfers ({} made, the rest refused for want of funds) in {elapsed:.2?}: \
         {:.0} transfers/s; total {sum} (expected {total}): {}",
        moved.iter().sum::<u64>(),
        n as f64 / elapsed.as_secs_f64(),
        if sum == total { "ok" } else { "VIOLATED" }
    );
    assert_eq!(sum, total, "the total balance is conserved");

    // 2. One ported ledger on the last node, and an auditor on n0 while transfers run.
    let ledger = Ported::new_on(
        &cluster,
        NodeId(args.nodes - 1),
        &Ledger {
            balances: vec![args.balance; args.accounts],
        },
    )?;
    let running = AtomicBool::new(true);
    let start = Instant::now();
    let (moved, audits) = std::thread::scope(|s| -> loco::sc::Result<(u64, u64)> {
        let auditor = s.spawn(|| -> loco::sc::Result<u64> {
            let ctx = cluster.context(NodeId(0))?;
            let mut audits = 0;
            while running.load(Ordering::Relaxed) {
                let seen = ledger.apply(&ctx, LedgerOp::Total)?;
                assert_eq!(seen, total, "an audit saw money in flight");
                audits += 1;
            }
            Ok(audits)
        });
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (cluster, ledger, args) = (&cluster, &ledger, &args);
                s.spawn(move || -> loco::sc::Result<u64> {
                    let ctx = cluster.context(node_of(t))?;
                    let mut rng = Rng::new(args.seed, t);
                    let mut moved = 0;
                    for _ in 0..args.transfers {
                        let (from, to, amount) = rng.transfer(args.accounts);
                        moved += ledger.apply(&ctx, LedgerOp::Transfer { from, to, amount })?;
                    }
                    Ok(moved)
                })
            })
            .collect();
        // Every transfer thread is joined, and the auditor stopped, before a failure is
        // returned: the scope waits for the auditor, which runs until it is told to stop.
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        running.store(false, Ordering::Relaxed);
        let audits = auditor.join().expect("auditor panicked")?;
        let moved = results
            .into_iter()
            .map(|r| r.expect("thread panicked"))
            .sum::<loco::sc::Result<u64>>()?;
        Ok((moved, audits))
    })?;
    let elapsed = start.elapsed();
    cluster.quiesce()?;
    let sum: u64 = ledger.peek(&cluster)?.balances.iter().sum();
    println!(
        "2. ported ledger on n{}: {n} transfers ({moved} made) in {elapsed:.2?}: {:.0} transfers/s; \
         {audits} audits during the run, all {total}; final total {sum}: {}",
        args.nodes - 1,
        n as f64 / elapsed.as_secs_f64(),
        if sum == total { "ok" } else { "VIOLATED" }
    );
    assert_eq!(sum, total, "the total balance is conserved");
    Ok(())
}
