//! Many tokio tasks per thread on loco-rs (feature `tokio`), thread-per-core: each OS thread runs
//! a current-thread runtime with one `AsyncCtx` (one context, one thread of the model) shared by
//! its tasks. Every task takes tickets from a counter on n1 with remote FAAs, then increments a
//! counter on n1 inside an awaited node lock; while a task waits for the lock, the thread's
//! other tasks run.
//!
//! ```sh
//! cargo run --release --features tokio --example tokio_tasks -- --threads 2 --tasks 500
//! ```
//!
//! On a device: `LOCO_BACKEND=verbs` with `--features tokio,verbs` (tasks then sleep on the
//! completion channel once an operation takes longer than a few polls).

use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use loco::aio::AsyncCtx;
use loco::prelude::*;

#[derive(Parser)]
#[command(name = "tokio_tasks")]
struct Args {
    /// OS threads (each with its own runtime and context), spread over n0 and n2 (1 to 1024).
    #[arg(long, default_value_t = 2, value_parser = RangedU64ValueParser::<usize>::from(1..=1024))]
    threads: usize,
    /// Tasks per thread (1 to 32768; each takes two words of its node's 1 MiB, so
    /// --threads x --tasks is at most about 2 x 60000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=32768))]
    tasks: u64,
    /// Tickets (remote FAAs) per task (0 to 2^20).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(..=1 << 20))]
    faas: u64,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One thread: a current-thread runtime, one context on `node`, `tasks` tasks. Fails when the
/// node's memory cannot hold the tasks' words, or with the first task's error.
fn thread_main(
    c: &Cluster,
    node: NodeId,
    a: &Args,
    lock: &NLock,
    tickets: Loc,
    counter: Loc,
) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let actx = AsyncCtx::open(c, node)?;
    let mut handles = Vec::new();
    for _ in 0..a.tasks {
        let (actx, lock, faas) = (actx.clone(), lock.clone(), a.faas);
        let (old, tmp) = (c.alloc_word(node)?, c.alloc_word(node)?);
        handles.push(local.spawn_local(async move {
            // Remote FAAs, each with its own work id: no task waits for another's.
            for _ in 0..faas {
                actx.issue(|ctx, d| ctx.rfaa(&tickets, 1, &old, d))?.await?;
            }
            // An awaited node lock: the increment is a get, a CPU add and a put.
            let g = lock.acquire_async(&actx).await?;
            actx.get(&tmp, &counter)?.await?;
            actx.ctx().store(&tmp, actx.ctx().load(&tmp)? + 1)?;
            actx.put(&counter, &tmp)?.await?;
            LockGuard::release(g)?;
            Ok::<_, loco::locks::Error>(())
        }));
    }
    rt.block_on(local.run_until(async {
        for h in handles {
            h.await.expect("a task panicked")?;
        }
        Ok::<(), BoxError>(())
    }))
}

/// Bytes of node memory the tasks may take on n0 (the busier of n0 and n2): the default 1 MiB,
/// less room for the threads' lock state and the library's own words.
const TASK_MEMORY: u64 = loco::rdmawait::DEFAULT_MEMORY - (64 << 10);

fn main() -> Result<(), BoxError> {
    let a = Args::parse();
    // Every task's two words are allocated up front on its thread's node: refused here, with
    // the numbers, rather than as an out-of-memory error once the threads run.
    let per_node = (a.threads as u64).div_ceil(2) * a.tasks * 16;
    if per_node > TASK_MEMORY {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                format!(
                    "--threads {} x --tasks {} puts {} tasks on n0, {per_node} bytes of words, \
                     more than the {TASK_MEMORY} its 1 MiB leaves them: at most {} tasks per \
                     thread with --threads {}",
                    a.threads,
                    a.tasks,
                    (a.threads as u64).div_ceil(2) * a.tasks,
                    TASK_MEMORY / 16 / (a.threads as u64).div_ceil(2),
                    a.threads
                ),
            )
            .exit();
    }
    let c = Cluster::builder().nodes(3).backend_from_env()?.build()?;
    let lock = NLock::new(&c, NodeId(1))?;
    let tickets = c.alloc_word(NodeId(1))?;
    let counter = c.alloc_word(NodeId(1))?;
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                let node = NodeId(if t % 2 == 0 { 0 } else { 2 });
                let (c, a, lock) = (&c, &a, &lock);
                s.spawn(move || thread_main(c, node, a, lock, tickets, counter))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("a thread panicked"))
    })?;
    let secs = start.elapsed().as_secs_f64();
    c.quiesce()?;
    let tasks = a.threads as u64 * a.tasks;
    let (t, n) = (c.peek(&tickets)?, c.peek(&counter)?);
    println!(
        "{} threads x {} tasks on the {} backend: {t} tickets (want {}), {n} locked increments (want {tasks}), {:.0} ops/s",
        a.threads,
        a.tasks,
        c.backend_name(),
        tasks * a.faas,
        (t + n) as f64 / secs
    );
    if t != tasks * a.faas || n != tasks {
        return Err("a count is wrong".into());
    }
    Ok(())
}
