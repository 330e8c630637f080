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

use clap::Parser;
use loco::aio::AsyncCtx;
use loco::prelude::*;

#[derive(Parser)]
struct Args {
    /// OS threads (each with its own runtime and context), spread over n0 and n2.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Tasks per thread.
    #[arg(long, default_value_t = 500)]
    tasks: u64,
    /// Tickets (remote FAAs) per task.
    #[arg(long, default_value_t = 10)]
    faas: u64,
}

/// One thread: a current-thread runtime, one context on `node`, `tasks` tasks.
fn thread_main(c: &Cluster, node: NodeId, a: &Args, lock: &NLock, tickets: Loc, counter: Loc) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let local = tokio::task::LocalSet::new();
    let actx = AsyncCtx::open(c, node).expect("a context");
    let mut handles = Vec::new();
    for _ in 0..a.tasks {
        let (actx, lock, faas) = (actx.clone(), lock.clone(), a.faas);
        let (old, tmp) = (c.alloc_word(node).unwrap(), c.alloc_word(node).unwrap());
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
            h.await.expect("a task panicked").expect("a task failed");
        }
    }));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let c = Cluster::builder().nodes(3).backend_from_env()?.build()?;
    let lock = NLock::new(&c, NodeId(1))?;
    let tickets = c.alloc_word(NodeId(1))?;
    let counter = c.alloc_word(NodeId(1))?;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..a.threads {
            let node = NodeId(if t % 2 == 0 { 0 } else { 2 });
            let (c, a, lock) = (&c, &a, &lock);
            s.spawn(move || thread_main(c, node, a, lock, tickets, counter));
        }
    });
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
