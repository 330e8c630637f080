//! The behavioural checks of the locks, sv and SC libraries in their multi-process form: N
//! processes on real RDMA devices (the verbs backend), one node each, e.g. one per VM of
//! `soft-roce-ci/cluster.sh`. Every process runs the same phases, separated by barriers:
//!
//! 1. **Locks** (`NLock` on n0, `WLock` and `SLock` with ticket node n0): each process does
//!    `--rounds` critical sections per lock that read a counter on the data node (the last
//!    node), add one and write it back, with a remote FAA on an occupancy word at entry and exit
//!    (a value other than 0 at entry means two holders at once). The weak lock publishes with
//!    `gf` towards the data node before its release, as its guarantee asks (docs/model.md §5.3).
//!    Checked on the data node: each counter is exactly N × rounds; no overlap was seen.
//! 2. **sv publication** (docs/model.md §5.1-5.2): n0 stores round r's data into a shared
//!    variable, broadcasts it, fences (`gf`), then broadcasts the flag r; every other process
//!    waits for flag r on its own copy and must then read round r's data on its own copy. Rounds
//!    are lock-stepped by acknowledgements (remote FAAs on n0).
//! 3. **SC** (`loco-sc`): every process does `--rounds` `faa_sc(1)` on one SC location and puts
//!    the values it got into a table on n0, which checks that they are exactly 0..N × rounds
//!    (a linearizable counter hands out every value once).
//!
//! ```text
//! cargo build --features verbs --example cluster_checks
//! soft-roce-ci/cluster.sh --vms 3 -- target/debug/examples/cluster_checks
//! ```
//!
//! Output lines: `nX: locks ...`, `nX: sv ...`, `nX: sc ...`, and `nX: checks OK` or
//! `nX: checks FAILED`. Exit status: 0 when every check passed, 1 when one failed, 2 on any
//! other error.

#[cfg(not(feature = "verbs"))]
fn main() {
    eprintln!("cluster_checks needs the verbs backend: cargo run --features verbs --example cluster_checks");
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
    use loco::locks::{Lock, LockGuard, NLock, RawLock, SLock, WLock};
    use loco::prelude::*;
    use loco::rdmawaitrmw::Rmw;
    use loco::sc::{Sc, ScLoc};
    use loco::sv::{GlobalFence, SharedVar};

    #[derive(Parser)]
    #[command(about = "lock, sv and SC checks across N processes, one node each, over RDMA")]
    struct Args {
        #[command(flatten)]
        member: Member,
        /// Critical sections per lock, publication rounds, and SC FAAs, per process (1 to 2^20).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
        rounds: u64,
        /// Rendezvous, barrier, wait and lock timeout, in seconds (1 to 86400).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
        timeout: u64,
    }

    type Failure = Box<dyn std::error::Error>;

    pub(super) fn main() -> i32 {
        let args = Args::parse();
        match run(&args) {
            Ok(true) => {
                println!("n{}: checks OK", args.member.node);
                0
            }
            Ok(false) => {
                println!("n{}: checks FAILED", args.member.node);
                1
            }
            Err(e) => {
                eprintln!("n{}: error: {e}", args.member.node);
                2
            }
        }
    }

    /// One lock's shared words: the counter and the occupancy word, on the data node.
    struct Guarded<R: RawLock> {
        name: &'static str,
        lock: Lock<R>,
        counter: Loc,
        inside: Loc,
        /// Whether the critical section fences the data node before the release (WLock).
        gf: bool,
    }

    fn run(args: &Args) -> Result<bool, Failure> {
        let me = args.member.me();
        let n = args.member.peers.len();
        let (cluster, process) = args
            .member
            .cluster(256 * 1024, Duration::from_secs(args.timeout))?;
        let ids: Vec<NodeId> = cluster.node_ids().collect();
        let data = *ids.last().expect("a cluster has a node");
        let others: Vec<NodeId> = ids.iter().copied().filter(|&q| q != me).collect();
        let rounds = args.rounds;

        // Every process allocates the same objects in the same order: the locations agree.
        let words = |node| cluster.alloc_word(node);
        let nlock = Guarded {
            name: "nlock",
            lock: NLock::new(&cluster, NodeId(0))?,
            counter: words(data)?,
            inside: words(data)?,
            gf: false,
        };
        let wlock = Guarded {
            name: "wlock",
            lock: WLock::new(&cluster, NodeId(0), n)?,
            counter: words(data)?,
            inside: words(data)?,
            gf: true,
        };
        let slock = Guarded {
            name: "slock",
            lock: SLock::new(&cluster, NodeId(0), n)?,
            counter: words(data)?,
            inside: words(data)?,
            gf: false,
        };
        let payload = SharedVar::new(&cluster)?;
        let flag = SharedVar::new(&cluster)?;
        let acks = cluster.alloc_word(NodeId(0))?;
        let sc = ScLoc::new_on(&cluster, data, 0)?;
        let table = cluster.alloc_words(NodeId(0), n as u64 * rounds)?;
        // Per process: scratch words on its own node.
        let scratch: Vec<Loc> = ids
            .iter()
            .map(|&i| cluster.alloc_words(i, 4))
            .collect::<Result<_, _>>()?;
        let ctx = cluster.context(me)?;
        // The global fence's words, before anyone's first gf (see loco_sv's docs).
        loco::sv::gf_words(&ctx, &ids)?;
        process.barrier()?;

        let mut ok = true;
        let mine = &scratch[me.index()];
        let t = Instant::now();
        ok &= locked(&ctx, &nlock, mine, data, rounds)?;
        ok &= locked(&ctx, &wlock, mine, data, rounds)?;
        ok &= locked(&ctx, &slock, mine, data, rounds)?;
        process.barrier()?;
        if me == data {
            for g in [&nlock.counter, &wlock.counter, &slock.counter] {
                let v = cluster.peek(g)?;
                let want = n as u64 * rounds;
                let name = if g == &nlock.counter {
                    "nlock"
                } else if g == &wlock.counter {
                    "wlock"
                } else {
                    "slock"
                };
                println!(
                    "{me}: locks: {name} counter {v} (expected {want}) {}",
                    if v == want { "OK" } else { "LOST UPDATES" }
                );
                ok &= v == want;
            }
        }
        println!("{me}: locks done in {:.2?}", t.elapsed());

        // sv publication, lock-stepped rounds.
        let d = WorkId::new(1);
        let t = Instant::now();
        let mut stale = 0;
        for r in 1..=rounds {
            if me == NodeId(0) {
                // Every reader acknowledged round r - 1.
                let want = (r - 1) * others.len() as u64;
                wait_until(&ctx, &acks, want, args.timeout)?;
                payload.store(&ctx, r * 1000)?;
                payload.bcast(&ctx, others.iter().copied(), d)?;
                ctx.gf(others.iter().copied())?;
                flag.store(&ctx, r)?;
                flag.bcast(&ctx, others.iter().copied(), d)?;
                ctx.wait(d)?;
            } else {
                let copy = flag.local(&ctx)?;
                wait_until(&ctx, &copy, r, args.timeout)?;
                let v = payload.load(&ctx)?;
                if v != r * 1000 {
                    println!(
                        "{me}: sv: round {r}: flag seen, data {v} (expected {})",
                        r * 1000
                    );
                    stale += 1;
                }
                ctx.rfaa(&acks, 1, &mine.word(0)?, d)?;
                ctx.wait(d)?;
            }
        }
        println!(
            "{me}: sv publication: {rounds} rounds in {:.2?}, {stale} stale reads {}",
            t.elapsed(),
            if stale == 0 { "OK" } else { "WRONG" }
        );
        ok &= stale == 0;
        process.barrier()?;

        // SC: a linearizable counter hands out every value once.
        let t = Instant::now();
        for k in 0..rounds {
            let v = ctx.faa_sc(&sc, 1)?;
            let src = mine.word(1)?;
            ctx.store(&src, v + 1)?; // 0 marks an empty slot
            ctx.put(&table.word(me.0 as u64 * rounds + k)?, &src, d)?;
            ctx.wait(d)?;
        }
        ctx.gf([NodeId(0)])?;
        process.barrier()?;
        if me == NodeId(0) {
            let mut got: Vec<u64> = cluster.peek_words(&table)?;
            got.sort_unstable();
            let want: Vec<u64> = (1..=n as u64 * rounds).collect();
            let good = got == want;
            println!(
                "{me}: sc: {} faa_sc values, each of 0..{} once: {}",
                got.len(),
                n as u64 * rounds,
                if good { "OK" } else { "NOT LINEARIZABLE" }
            );
            ok &= good;
        }
        println!("{me}: sc done in {:.2?}", t.elapsed());
        process.barrier()?; // nobody leaves while another still reads
        Ok(ok)
    }

    /// `rounds` critical sections of `g`: read the counter, add one, write it back, with the
    /// occupancy word bumped at entry and exit. False if an overlap was seen.
    fn locked<R: RawLock + 'static>(
        ctx: &Ctx,
        g: &Guarded<R>,
        mine: &Loc,
        data: NodeId,
        rounds: u64,
    ) -> Result<bool, Failure> {
        let d = WorkId::new(2);
        let (old, val) = (mine.word(2)?, mine.word(3)?);
        let mut overlaps = 0;
        for _ in 0..rounds {
            let guard = g.lock.acquire(ctx)?;
            ctx.rfaa(&g.inside, 1, &old, d)?;
            ctx.wait(d)?;
            if ctx.load(&old)? != 0 {
                overlaps += 1;
            }
            ctx.get(&val, &g.counter, d)?;
            ctx.wait(d)?;
            let v = ctx.load(&val)?;
            ctx.store(&val, v + 1)?;
            ctx.put(&g.counter, &val, d)?;
            ctx.wait(d)?;
            ctx.rfaa(&g.inside, 1u64.wrapping_neg(), &old, d)?;
            ctx.wait(d)?;
            if g.gf {
                ctx.gf([data])?;
            }
            LockGuard::release(guard)?;
        }
        let me = ctx.node();
        println!(
            "{me}: locks: {} {rounds} critical sections, {overlaps} overlaps {}",
            g.name,
            if overlaps == 0 {
                "OK"
            } else {
                "MUTUAL EXCLUSION BROKEN"
            }
        );
        Ok(overlaps == 0)
    }

    /// Spins (politely) until the local word `w` holds at least `want`.
    fn wait_until(ctx: &Ctx, w: &Loc, want: u64, timeout: u64) -> Result<(), Failure> {
        let start = Instant::now();
        while ctx.load(w)? < want {
            if start.elapsed() > Duration::from_secs(timeout) {
                return Err(format!("waited {timeout} s for {want} at {w:?}").into());
            }
            std::thread::yield_now();
        }
        Ok(())
    }
}
