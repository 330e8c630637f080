//! Bug hunting with the deterministic simulator: a writer publishes data and then a flag with
//! puts, waiting for each put before the next. `wait` only says the put has read its source; it
//! says nothing about the put having landed, and puts towards different nodes are unordered. So a
//! reader that sees the flag may still read the old data. The simulator finds such a run, prints
//! its seed and last steps, replays it, and then checks the fix (a global fence `gf` before the
//! flag) over as many runs.
//!
//! ```text
//! cargo run --example sim_bug_hunt
//! cargo run --example sim_bug_hunt -- --runs 5000 --strategy pct
//! LOCO_SIM_SEED=7 cargo run --example sim_bug_hunt    # another base seed
//! ```

use clap::{Parser, ValueEnum};
use loco::prelude::*;
use loco::sim::{self, Config, FailureKind, Strategy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, ValueEnum)]
enum Strat {
    Random,
    Pct,
}

/// The most `--runs`: more took hours (the fenced program runs every one of them) and the
/// memory of a hash per run, with nothing printed meanwhile.
const MAX_RUNS: u64 = 1_000_000;

#[derive(Parser)]
#[command(about = "loco-rs: find a missing fence with the deterministic simulator")]
struct Args {
    /// Runs to try, each a different schedule (1 to 1000000: a million runs of each program
    /// take a few minutes, and the check keeps a hash of every run's schedule).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=MAX_RUNS))]
    runs: u64,
    /// Scheduling strategy.
    #[arg(long, value_enum, default_value = "random")]
    strategy: Strat,
}

/// The program under test: data lives on n1, the flag on n2; the writer runs on n0, the reader
/// on n2. With `fenced`, the writer fences n1 (`gf`) before raising the flag.
fn publish(fenced: bool) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync + 'static {
    move |cluster: &Cluster| {
        let data = cluster.alloc_word(NodeId(1))?;
        let flag = cluster.alloc_word(NodeId(2))?;
        let src = cluster.alloc_word(NodeId(0))?;
        let seen = cluster.alloc_word(NodeId(2))?;
        let writer = sim::spawn(
            cluster,
            NodeId(0),
            move |ctx: &Ctx| -> Result<(), BoxError> {
                ctx.store(&src, 42)?;
                ctx.put(&data, &src, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
                if fenced {
                    ctx.gf([NodeId(1)])?;
                }
                ctx.put(&flag, &src, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
                Ok(())
            },
        );
        let reader = sim::spawn(
            cluster,
            NodeId(2),
            move |ctx: &Ctx| -> Result<(), BoxError> {
                while ctx.load(&flag)? == 0 {
                    loco::clock::pause();
                }
                ctx.get(&seen, &data, WorkId::new(2))?;
                ctx.wait(WorkId::new(2))?;
                let v = ctx.load(&seen)?;
                if v != 42 {
                    return Err(format!("the flag is up but the data reads {v}").into());
                }
                Ok(())
            },
        );
        writer.join()?;
        reader.join()?;
        Ok(())
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let strategy = match args.strategy {
        Strat::Random => Strategy::Random,
        Strat::Pct => Strategy::Pct { depth: 3 },
    };
    let config = || Config::new(3).runs(args.runs).strategy(strategy);
    // A LOCO_SIM_SEED that does not parse is refused here, before a seed is printed that the
    // check would not use.
    let seed = config().try_base_seed().map_err(|e| {
        eprintln!("{e}");
        "the check could not start"
    })?;
    println!(
        "checking the unfenced publication over up to {} runs (base seed {seed:#x})...",
        args.runs
    );
    match sim::check(config(), publish(false)) {
        Ok(r) => println!(
            "no failing run in {} runs ({} distinct schedules): try more runs",
            r.runs, r.schedules
        ),
        // A mistake in the set-up is not the bug hunted here.
        Err(f) if f.kind() == FailureKind::Setup => {
            eprint!("{}", f.report());
            return Err("the check could not start".into());
        }
        Err(f) => {
            print!("{}", f.report());
            let again = sim::replay(config(), f.seed(), publish(false))
                .expect_err("the replay fails the same way");
            println!(
                "replayed seed {:#x}: same failure ({}), same {} last steps: {}",
                f.seed(),
                again.message(),
                again.trace().len(),
                again.trace() == f.trace()
            );
        }
    }
    println!("checking the fenced publication over {} runs...", args.runs);
    let r = sim::check(config(), publish(true)).map_err(|f| f.report())?;
    println!(
        "fenced: all {} runs passed ({} distinct schedules, {} steps, longest run {:?} simulated)",
        r.runs, r.schedules, r.steps, r.max_time
    );
    Ok(())
}
