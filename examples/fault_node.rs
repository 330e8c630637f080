//! Fault injection across processes on the verbs backend: N processes do remote FAAs on each
//! other; one of them (the victim) stops at a chosen point and waits to be killed (`kill -9`)
//! or stopped (`kill -STOP`). The survivors must get typed errors about the victim within the
//! peer timeout, keep working with each other, and lose none of their own updates.
//!
//! ```text
//! cargo build --features verbs --example fault_node
//! P=127.0.0.1:7470,127.0.0.1:7471,127.0.0.1:7472
//! export LOCO_CLUSTER_KEY=$(loco keygen)
//! for i in 0 1 2; do target/debug/examples/fault_node --node $i --peers $P --victim 2 --at faa-wait & done
//! # once n2 printed "n2: at faa-wait", kill -9 it; n0 and n1 print their checks and exit 0
//! ```
//!
//! Stop points (`--at`): `faa-wait` (FAAs posted, not waited for), `critical-section` (holding
//! an NLock the survivors then try to take), `gf` (looping in the global fence `gf_all`, so a
//! kill lands inside one), `rejoin` (like `critical-section`; then the victim is started again
//! with `--restarted`, under the same node id).
//!
//! `rejoin`: once the survivors have recovered the lock and checked their FAAs, they print
//! `nX: waiting for rejoin` and wait for the victim's new incarnation (`Cluster::incarnation`).
//! The restarted victim joins them (fresh memory and queue pairs), and every process opens a
//! new context and does `--increments` NLock-protected increments of one counter word on n0
//! (get, +1, put, all inside the critical section). Each tells n0 how many it saw complete;
//! n0 checks that the counter holds exactly their sum (`n0: rejoin check OK` or `... LOST`).
//! The survivors also show that their old context reports the restart (`PeerDead`). Every survivor FAAs on its own counter word on every other node and
//! counts the FAAs whose completion it saw; at the end it tells each live node that count
//! (an RDMA WRITE of count + 1 into its slot there), and each node checks that its counter words
//! hold exactly what each live survivor said it added.
//!
//! With `--sc-history DIR`, the survivors then run SC operations (`read_sc`, `write_sc`,
//! `cas_sc`, `faa_sc`) on one `ScLoc` on n0, each recording its calls with wall-clock instants
//! (one kernel's clock, so the processes must share a host) into `DIR/nX.sc`; the lowest live
//! survivor gathers them and checks the merged history for linearizability
//! (`loco::sc::lincheck`): `nX: sc history ...: linearizable` or `... NOT LINEARIZABLE`.
//!
//! Output lines the CI greps: `nX: ready`, `nX: at POINT` (the victim), `nX: peer nV dead at
//! UNIX_MS: ERROR` (a survivor's first error about the victim), `nX: lock: ...` (the outcome of
//! taking the victim's lock), `nX: survivor check OK` or `... LOST`. Exit status: 0 when the
//! check passed, 1 when an update was lost, 2 on any other error.

#[cfg(not(feature = "verbs"))]
fn main() {
    eprintln!(
        "fault_node needs the verbs backend: cargo run --features verbs --example fault_node"
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
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use super::member::Member;

    use clap::{Parser, ValueEnum};
    use loco::prelude::*;
    use loco::rdmawait::backend::verbs::Process;

    #[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
    enum At {
        /// FAAs posted towards every node, not waited for.
        FaaWait,
        /// Holding an NLock on node 0.
        CriticalSection,
        /// Looping in gf_all.
        Gf,
        /// Holding an NLock on node 0, then killed and started again (`--restarted`).
        Rejoin,
    }

    #[derive(Parser)]
    #[command(about = "remote FAAs between N processes while one of them is killed")]
    struct Args {
        #[command(flatten)]
        member: Member,
        /// The node that stops (and is killed by whoever runs this).
        #[arg(long)]
        victim: u16,
        /// Where the victim stops.
        #[arg(long, value_enum)]
        at: At,
        /// How long the survivors wait, doing FAAs, for the victim's death, in milliseconds (they
        /// go on for 2 s after it).
        #[arg(long, default_value_t = 60000)]
        work_ms: u64,
        /// Rendezvous and wait timeout, in seconds (1 to 86400).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=86400))]
        timeout: u64,
        /// Survivors: after the check, stay up this long (milliseconds) and check that the
        /// victim's counter word here does not change (a stopped victim resumes meanwhile).
        #[arg(long, default_value_t = 0)]
        linger_ms: u64,
        /// Victim at `faa-wait`: after this many milliseconds there (0: never), try one FAA
        /// towards every other node, as after a stop (`resumed after a stop: ...`): what a host
        /// cut off by a partition does once the partition heals. Exit 0 iff none landed.
        #[arg(long, default_value_t = 0)]
        probe_after_ms: u64,
        /// This process is the victim, started again after it was killed (`--at rejoin`).
        #[arg(long)]
        restarted: bool,
        /// Lock-protected increments per process after the rejoin (`--at rejoin`; 0 to 2^32).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(..=1 << 32))]
        increments: u64,
        /// Survivors: after the check, run SC operations on an `ScLoc` on n0 and write their
        /// history into this directory; the lowest survivor checks the merged history for
        /// linearizability (the processes must share a host: instants are wall-clock).
        #[arg(long)]
        sc_history: Option<std::path::PathBuf>,
        /// Instead of joining: 5 times, connect to this rendezvous address as `--node`, prove
        /// the cluster key and leave before joining (as a process dying half-way through its
        /// join), then exit. The members must not notice.
        #[arg(long)]
        hello_and_leave: Option<String>,
        /// Instead of joining: send connect requests that must be refused to the rdma_cm
        /// listener at this address (no private data, random bytes, a wrong key, an
        /// incarnation that never joined, incarnation 0), print each refusal's reason, then
        /// exit (0 iff every one was refused).
        #[arg(long)]
        cm_stranger: Option<String>,
        /// Instead of joining: act as a fuzzing client, sending up to 3000 malformed frames
        /// (at most 1000 connections, 10 s) to this rendezvous address, then exit.
        #[arg(long)]
        fuzz: Option<String>,
    }

    /// Malformed frames to `addr`: random bytes, random bodies behind plausible lengths, huge
    /// lengths, a Hello-shaped frame with random fields. Bounded in count and time.
    fn fuzz(addr: &str) -> i32 {
        use std::io::Write;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ unix_ms() as u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let start = Instant::now();
        let (mut conns, mut frames) = (0, 0);
        while frames < 3000 && conns < 1000 && start.elapsed() < Duration::from_secs(10) {
            let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            conns += 1;
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            for _ in 0..1 + next() % 8 {
                frames += 1;
                let mut f: Vec<u8> = match next() % 4 {
                    0 => Vec::new(),
                    1 => ((next() % 2048) as u32 + 1).to_le_bytes().to_vec(),
                    2 => (next() as u32 | 0x8000_0000).to_le_bytes().to_vec(),
                    _ => {
                        let mut h = 49u32.to_le_bytes().to_vec();
                        h.push(1); // the Hello tag, then random fields
                        h
                    }
                };
                let extra = next() % 64;
                f.extend((0..extra).map(|_| next() as u8));
                if s.write_all(&f).is_err() {
                    break;
                }
            }
        }
        println!(
            "fuzz: {frames} malformed frames over {conns} connections to {addr} in {:.2?}",
            start.elapsed()
        );
        0
    }

    pub(super) fn main() -> i32 {
        let args = Args::parse();
        if let Some(addr) = &args.fuzz {
            return fuzz(addr);
        }
        if let Some(addr) = &args.cm_stranger {
            return cm_stranger(&args, addr);
        }
        if let Some(addr) = &args.hello_and_leave {
            return hello_and_leave(&args, addr);
        }
        match run(&args) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                println!("n{}: error: {e}", args.member.node);
                2
            }
        }
    }

    /// `--cm-stranger`: connect requests n0's rdma_cm listener at `addr` must refuse, as
    /// `--node`. Exit 0 iff every one was refused.
    fn cm_stranger(args: &Args, addr: &str) -> i32 {
        let key = std::env::var("LOCO_CLUSTER_KEY").unwrap_or_default();
        let nodes = args.member.peers.len() as u16;
        let timeout = Duration::from_secs(args.timeout);
        let me = args.member.node;
        match loco::rdmawait::backend::verbs::cm_stranger(addr, &key, nodes, me, 0, timeout) {
            Ok(reasons) => {
                for r in reasons {
                    println!("cm-stranger refused ({r})");
                }
                0
            }
            Err(e) => {
                println!("cm-stranger: {e}");
                2
            }
        }
    }

    /// `--hello-and-leave`: five authenticated hellos as `--node` towards node 0 at `addr`,
    /// each closed before its join. Exit 0 iff every handshake succeeded.
    fn hello_and_leave(args: &Args, addr: &str) -> i32 {
        let key = std::env::var("LOCO_CLUSTER_KEY").unwrap_or_default();
        let nodes = args.member.peers.len() as u16;
        for i in 0..5 {
            let r = loco::rdmawait::backend::verbs::hello_and_leave(
                addr,
                &key,
                nodes,
                args.member.node,
                0,
                Duration::from_secs(args.timeout),
            );
            match r {
                Ok(inc) => println!(
                    "hello-and-leave {i}: proved the key to {addr} (incarnation {inc:#x}), left before joining"
                ),
                Err(e) => {
                    println!("hello-and-leave {i}: {e}");
                    return 2;
                }
            }
        }
        0
    }

    fn unix_ms() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    }

    fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
        let me = args.member.me();
        let victim = NodeId(args.victim);
        let n = args.member.peers.len();
        let timeout = Duration::from_secs(args.timeout);
        let (cluster, process) = args.member.cluster(64 * 1024, timeout)?;
        let ids: Vec<NodeId> = cluster.node_ids().collect();
        // Same allocation order everywhere: per node, a counter word and a slot per writer.
        let counters: Vec<Loc> = ids
            .iter()
            .map(|&i| cluster.alloc_words(i, n as u64))
            .collect::<Result<_, _>>()?;
        let slots: Vec<Loc> = ids
            .iter()
            .map(|&i| cluster.alloc_words(i, n as u64))
            .collect::<Result<_, _>>()?;
        let scratch: Vec<Loc> = ids
            .iter()
            .map(|&i| cluster.alloc_words(i, 2 * n as u64 + 1))
            .collect::<Result<_, _>>()?;
        // After the rejoin: the counter the lock protects, and each process's count of its
        // increments (count + 1), both on n0.
        let total = cluster.alloc_word(NodeId(0))?;
        let said = cluster.alloc_words(NodeId(0), n as u64)?;
        let lock = NLock::new(&cluster, NodeId(0))?;
        // The SC location the survivors check after the fault (its own node lock on n0).
        let sc = ScLoc::new_on(&cluster, NodeId(0), 0)?;
        if args.restarted {
            // Same objects, same order: the layouts agree with the survivors'.
            println!(
                "{me}: rejoined as incarnation {:#x}",
                cluster.incarnation(me)?
            );
            return after_rejoin(args, &cluster, &process, &lock, &total, &said, &scratch);
        }
        process.barrier()?;
        let ctx = cluster.context(me)?;
        println!("{me}: ready");
        let d = WorkId::new(1);
        let others: Vec<NodeId> = ids.iter().copied().filter(|&q| q != me).collect();

        if me == victim {
            // Some work first, so that the kill lands in a running cluster.
            for &q in &others {
                let ret = scratch[me.index()].word(q.0 as u64)?;
                ctx.rfaa(&counters[q.index()].word(me.0 as u64)?, 1, &ret, d)?;
            }
            ctx.wait(d)?;
            match args.at {
                At::FaaWait => {
                    for &q in &others {
                        let ret = scratch[me.index()].word(q.0 as u64)?;
                        ctx.rfaa(&counters[q.index()].word(me.0 as u64)?, 1, &ret, d)?;
                    }
                    println!("{me}: at faa-wait");
                    // Sleeps in slices: a slice that took much longer means the process was
                    // stopped (SIGSTOP) and resumed: then it tries to write into the others'
                    // memory, which must fail (they declared it dead and fenced it out).
                    let start = Instant::now();
                    let probe = Duration::from_millis(args.probe_after_ms);
                    while start.elapsed() < timeout * 3 {
                        let t = Instant::now();
                        std::thread::sleep(Duration::from_millis(100));
                        if t.elapsed() > Duration::from_secs(1)
                            || (args.probe_after_ms > 0 && start.elapsed() >= probe)
                        {
                            return resumed(&ctx, me, &others, &counters, &scratch);
                        }
                    }
                }
                At::CriticalSection | At::Rejoin => {
                    let _guard = lock.acquire(&ctx)?;
                    // Its hold announcement has landed on n0 (see the locks' Failures section).
                    cluster.quiesce()?;
                    println!(
                        "{me}: at {}",
                        if args.at == At::Rejoin {
                            "rejoin"
                        } else {
                            "critical-section"
                        }
                    );
                    std::thread::sleep(timeout * 3);
                }
                At::Gf => {
                    let start = Instant::now();
                    let mut said = false;
                    while start.elapsed() < timeout * 3 {
                        ctx.gf_all()?;
                        if !said {
                            println!("{me}: at gf");
                            said = true;
                        }
                    }
                }
            }
            println!("{me}: was not killed");
            return Ok(false);
        }

        // A survivor: FAAs on its own word of every other node's counter, counting the ones
        // whose completion it saw (one at a time: an FAA waited for has landed).
        let mut acked = vec![0u64; n];
        let mut dead = vec![false; n];
        // Until the victim is found dead (at most `work_ms`), then 2 s more with the others.
        let start = Instant::now();
        let mut died: Option<Instant> = None;
        while start.elapsed() < Duration::from_millis(args.work_ms)
            && died.is_none_or(|t| t.elapsed() < Duration::from_secs(2))
        {
            for &q in &others {
                if dead[q.index()] {
                    continue;
                }
                let ret = scratch[me.index()].word(q.0 as u64)?;
                let r = ctx
                    .rfaa(&counters[q.index()].word(me.0 as u64)?, 1, &ret, d)
                    .and_then(|()| ctx.wait(d));
                match r {
                    Ok(()) => acked[q.index()] += 1,
                    Err(e) if q == victim => {
                        println!("{me}: peer {q} dead at {}: {e}", unix_ms());
                        dead[q.index()] = true;
                        died = Some(Instant::now());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        if !dead[victim.index()] {
            println!("{me}: the victim was never reported dead");
            return Ok(false);
        }
        if matches!(args.at, At::CriticalSection | At::Rejoin) {
            let t = Instant::now();
            // FIFO acquire: a waiter passes the dead holder's ticket on (its node announced
            // the hold), and is told the critical section before did not finish.
            match lock.acquire_timeout(&ctx, timeout) {
                Ok(g) => {
                    let poisoned = loco::locks::LockGuard::was_poisoned(&g);
                    println!(
                        "{me}: lock: acquired after {:.2?} (recovered; poisoned: {poisoned})",
                        t.elapsed()
                    );
                    drop(g);
                }
                Err(e) => println!("{me}: lock: typed error after {:.2?}: {e}", t.elapsed()),
            }
        }
        // Tell every live node how many FAAs landed there (count + 1: zero means "not yet").
        let live: Vec<NodeId> = others.iter().copied().filter(|&q| q != victim).collect();
        for &q in &live {
            let src = scratch[me.index()].word((n + q.index()) as u64)?;
            ctx.store(&src, acked[q.index()] + 1)?;
            ctx.put(&slots[q.index()].word(me.0 as u64)?, &src, d)?;
        }
        ctx.wait(d)?;
        // Check our own counter words against what each live survivor said.
        let t = Instant::now();
        let mut ok = true;
        for &q in &live {
            let slot = slots[me.index()].word(q.0 as u64)?;
            let said = loop {
                let v = cluster.peek(&slot)?;
                if v != 0 {
                    break v - 1;
                }
                if t.elapsed() > timeout {
                    println!("{me}: {q} never reported its count");
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let got = cluster.peek(&counters[me.index()].word(q.0 as u64)?)?;
            if got != said {
                println!("{me}: counter of {q} holds {got}, {q} saw {said} FAAs complete: LOST");
                ok = false;
            }
        }
        if ok {
            let total: u64 = live.iter().map(|q| acked[q.index()]).sum();
            println!(
                "{me}: survivor check OK ({total} FAAs acknowledged to live nodes, every one counted)"
            );
            if let Some(dir) = &args.sc_history {
                let survivors: Vec<NodeId> = ids.iter().copied().filter(|&q| q != victim).collect();
                ok = sc_after_fault(&ctx, me, &survivors, &sc, dir, timeout)?;
            }
        }
        if args.linger_ms > 0 && ok {
            // Stay up while a stopped victim resumes (the runner sends SIGCONT now): it must not
            // be able to write into our memory any more.
            let word = counters[me.index()].word(victim.0 as u64)?;
            let seen = cluster.peek(&word)?;
            println!("{me}: lingering");
            std::thread::sleep(Duration::from_millis(args.linger_ms));
            let now = cluster.peek(&word)?;
            if now != seen {
                println!("{me}: {victim} wrote its counter word here after it was declared dead ({seen} -> {now}): NOT FENCED");
                return Ok(false);
            }
            println!(
                "{me}: fenced: {victim}'s counter word here unchanged ({now}) while it ran again"
            );
        }
        if args.at != At::Rejoin || !ok {
            return Ok(ok);
        }
        // Wait for the victim's new incarnation (the runner starts it once both survivors
        // print this line, so that the dead holder's ticket was skipped before).
        let old = cluster.incarnation(victim)?;
        println!("{me}: waiting for rejoin");
        let t = Instant::now();
        while !(cluster.is_alive(victim) && cluster.incarnation(victim)? != old) {
            if t.elapsed() > timeout * 3 {
                println!("{me}: {victim} did not rejoin within {:?}", timeout * 3);
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "{me}: {victim} rejoined as incarnation {:#x} after {:.2?}",
            cluster.incarnation(victim)?,
            t.elapsed()
        );
        // The old context's queue pair led to the dead incarnation: reported, not reused.
        let ret = scratch[me.index()].word(victim.0 as u64)?;
        match ctx
            .rfaa(&counters[victim.index()].word(me.0 as u64)?, 1, &ret, d)
            .and_then(|()| ctx.wait(d))
        {
            Err(e @ loco::rdmawait::Error::PeerDead { .. }) => {
                println!("{me}: old context towards {victim}: {e}")
            }
            other => {
                println!("{me}: old context towards {victim} answered {other:?}, not PeerDead");
                return Ok(false);
            }
        }
        drop(ctx);
        after_rejoin(args, &cluster, &process, &lock, &total, &said, &scratch)
    }

    /// SC calls per survivor after the fault.
    const SC_CALLS: u64 = 24;

    fn unix_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// `--sc-history`: [`SC_CALLS`] SC operations on `sc` by this survivor, recorded and written
    /// to `dir/nX.sc`; the lowest survivor then reads every survivor's file and checks the
    /// merged history against the register model. Returns whether the check passed (true for
    /// the others).
    fn sc_after_fault(
        ctx: &Ctx,
        me: NodeId,
        survivors: &[NodeId],
        sc: &ScLoc,
        dir: &std::path::Path,
        timeout: Duration,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        use loco::sc::lincheck::{check, Call, Register, RegisterOp};
        let mine = 1000 * (me.0 as u64 + 1);
        let mut calls = Vec::new();
        let mut last = 0;
        for i in 0..SC_CALLS {
            let op = match i % 4 {
                0 => RegisterOp::Write(mine + i),
                1 => RegisterOp::Read,
                2 => RegisterOp::Faa(1),
                _ => RegisterOp::Cas(last, mine + 500 + i),
            };
            let invoke = unix_ns();
            let ret = match op {
                RegisterOp::Read => ctx.read_sc(sc)?,
                RegisterOp::Write(v) => {
                    ctx.write_sc(sc, v)?;
                    0
                }
                RegisterOp::Faa(k) => ctx.faa_sc(sc, k)?,
                RegisterOp::Cas(e, v) => ctx.cas_sc(sc, e, v)?,
            };
            let response = unix_ns();
            if !matches!(op, RegisterOp::Write(_)) {
                last = ret;
            }
            calls.push(Call {
                thread: me.index(),
                invoke,
                response,
                op,
                ret,
            });
        }
        let line = |c: &Call<RegisterOp, u64>| {
            let (kind, a, b) = match c.op {
                RegisterOp::Read => ("r", 0, 0),
                RegisterOp::Write(v) => ("w", v, 0),
                RegisterOp::Faa(k) => ("f", k, 0),
                RegisterOp::Cas(e, v) => ("c", e, v),
            };
            format!(
                "{} {} {} {kind} {a} {b} {}\n",
                c.thread, c.invoke, c.response, c.ret
            )
        };
        let file = |q: NodeId| dir.join(format!("{q}.sc"));
        let tmp = dir.join(format!("{me}.sc.tmp"));
        std::fs::write(&tmp, calls.iter().map(line).collect::<String>())?;
        std::fs::rename(&tmp, file(me))?;
        if survivors.first() != Some(&me) {
            return Ok(true);
        }
        let parse = |text: &str| -> Option<Vec<Call<RegisterOp, u64>>> {
            text.lines()
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    let n = |i: usize| f.get(i)?.parse::<u64>().ok();
                    let op = match *f.get(3)? {
                        "r" => RegisterOp::Read,
                        "w" => RegisterOp::Write(n(4)?),
                        "f" => RegisterOp::Faa(n(4)?),
                        "c" => RegisterOp::Cas(n(4)?, n(5)?),
                        _ => return None,
                    };
                    Some(Call {
                        thread: n(0)? as usize,
                        invoke: n(1)?,
                        response: n(2)?,
                        op,
                        ret: n(6)?,
                    })
                })
                .collect()
        };
        let t = Instant::now();
        let mut history = calls;
        for &q in survivors.iter().filter(|&&q| q != me) {
            let text = loop {
                if let Ok(text) = std::fs::read_to_string(file(q)) {
                    break text;
                }
                if t.elapsed() > timeout {
                    println!("{me}: sc history: {q} never wrote its calls");
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let Some(theirs) = parse(&text) else {
                println!("{me}: sc history: {q}'s file is malformed");
                return Ok(false);
            };
            history.extend(theirs);
        }
        match check(&Register { init: 0 }, &history) {
            Ok(()) => println!(
                "{me}: sc history of {} calls from {} survivors after the fault: linearizable",
                history.len(),
                survivors.len()
            ),
            Err(e) => {
                println!(
                    "{me}: sc history of {} calls: NOT LINEARIZABLE: {e}",
                    history.len()
                );
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The victim resumed after a stop: tries one FAA towards every other node and reports
    /// each result (`nV: resumed after a stop: ...`); one that completes means it was not fenced.
    fn resumed(
        ctx: &Ctx,
        me: NodeId,
        others: &[NodeId],
        counters: &[Loc],
        scratch: &[Loc],
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let d = WorkId::new(3);
        let mut fenced = true;
        for &q in others {
            let ret = scratch[me.index()].word(q.0 as u64)?;
            let r = ctx
                .rfaa(&counters[q.index()].word(me.0 as u64)?, 1, &ret, d)
                .and_then(|()| ctx.wait(d));
            match r {
                Ok(()) => {
                    println!("{me}: resumed after a stop: an FAA towards {q} LANDED");
                    fenced = false;
                }
                Err(e) => println!("{me}: resumed after a stop: towards {q}: {e}"),
            }
        }
        Ok(fenced)
    }

    /// Every process (the survivors and the restarted victim), in a new context: `increments`
    /// lock-protected increments of `total` on n0, then each tells n0 how many completed; n0
    /// checks the sum.
    fn after_rejoin(
        args: &Args,
        cluster: &Cluster,
        process: &Process,
        lock: &NLock,
        total: &Loc,
        said: &Loc,
        scratch: &[Loc],
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let me = args.member.me();
        let n = cluster.nodes();
        let timeout = Duration::from_secs(args.timeout);
        process.barrier()?;
        let ctx = cluster.context(me)?;
        let d = WorkId::new(2);
        let tmp = scratch[me.index()].word(2 * n as u64)?;
        let mut done = 0u64;
        let mut poisoned = 0u64;
        for _ in 0..args.increments {
            let g = lock.acquire_timeout(&ctx, timeout)?;
            poisoned += u64::from(loco::locks::LockGuard::was_poisoned(&g));
            ctx.get(&tmp, total, d)?;
            ctx.wait(d)?;
            let v = ctx.load(&tmp)?;
            ctx.store(&tmp, v + 1)?;
            ctx.put(total, &tmp, d)?;
            ctx.wait(d)?;
            drop(g);
            done += 1;
        }
        ctx.store(&tmp, done + 1)?;
        ctx.put(&said.word(me.0 as u64)?, &tmp, d)?;
        ctx.wait(d)?;
        println!("{me}: rejoin done ({done} lock-protected increments; {poisoned} poisoned)");
        process.barrier()?;
        if me != NodeId(0) {
            return Ok(true);
        }
        let mut sum = 0;
        for i in 0..n as u64 {
            let v = cluster.peek(&said.word(i)?)?;
            if v == 0 {
                println!("{me}: n{i} never reported its increments");
                return Ok(false);
            }
            sum += v - 1;
        }
        let got = cluster.peek(total)?;
        if got == sum {
            println!("{me}: rejoin check OK (counter {got} = the {sum} acknowledged increments)");
            Ok(true)
        } else {
            println!("{me}: counter holds {got}, {sum} increments were acknowledged: LOST");
            Ok(false)
        }
    }
}
