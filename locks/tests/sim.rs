//! The locks under the deterministic simulator (`loco_rdmawait::sim`): several threads per node,
//! many seeded schedules, on the soft NIC's adversarial model with virtual time. Each run checks
//! mutual exclusion (a host-side occupancy count, bumped at every entry, with NIC operations
//! inside the critical section so that other threads get scheduled there), and that a thread
//! that waits as long as it takes always gets in, also when others give their tickets up after
//! a short timed acquire (abandoned tickets must be passed on).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, SLock, WLock};
use loco_rdmawait::sim::{self, Config, Strategy};
use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Threads per run, over the 3 nodes.
const THREADS: usize = 5;
/// Critical sections each thread tries.
const ROUNDS: usize = 3;

/// One thread's work: `ROUNDS` critical sections; `impatient` threads use a short timed
/// acquire and go on without the lock when it times out.
fn worker<R: RawLock + Send + Sync + 'static>(
    lock: Arc<Lock<R>>,
    inside: Arc<AtomicUsize>,
    word: loco_rdmawait::Loc,
    scratch: loco_rdmawait::Loc,
    impatient: bool,
) -> impl FnOnce(&Ctx) -> Result<(), BoxError> + Send + 'static {
    move |ctx: &Ctx| {
        for _ in 0..ROUNDS {
            let g = if impatient {
                match lock.acquire_timeout(ctx, Duration::from_micros(30)) {
                    Ok(g) => g,
                    Err(Error::Timeout { .. }) => continue, // the ticket is abandoned
                    Err(e) => return Err(e.into()),
                }
            } else {
                lock.acquire(ctx)?
            };
            let before = inside.fetch_add(1, SeqCst);
            if before != 0 {
                return Err(format!("mutual exclusion broken: {before} other holder(s)").into());
            }
            // Remote work inside: scheduling points, NIC steps.
            ctx.get(&scratch, &word, WorkId::new(7))?;
            ctx.wait(WorkId::new(7))?;
            ctx.put(&word, &scratch, WorkId::new(7))?;
            ctx.wait(WorkId::new(7))?;
            inside.fetch_sub(1, SeqCst);
            LockGuard::release(g)?;
        }
        Ok(())
    }
}

/// A run: `THREADS` threads on the lock `make` builds, every other one impatient if `giving_up`.
fn run<R, M>(make: M, giving_up: bool) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + 'static,
{
    move |cluster: &Cluster| {
        let lock = Arc::new(make(cluster)?);
        let inside = Arc::new(AtomicUsize::new(0));
        let word = cluster.alloc_word(NodeId(2))?;
        let mut hs = Vec::new();
        for t in 0..THREADS {
            let node = NodeId((t % 3) as u16);
            let scratch = cluster.alloc_word(node)?;
            let impatient = giving_up && t % 2 == 1;
            hs.push(sim::spawn(
                cluster,
                node,
                worker(lock.clone(), inside.clone(), word, scratch, impatient),
            ));
        }
        for h in hs {
            h.join()?;
        }
        Ok(())
    }
}

fn config(runs: u64) -> Config {
    // A patient thread waits up to the cluster's timeout: far more than any schedule needs
    // unless a ticket is stranded.
    Config::new(3).runs(runs).timeout(Duration::from_millis(20))
}

fn check<R, M>(name: &str, make: M)
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + Clone + 'static,
{
    for giving_up in [false, true] {
        for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
            let r = sim::check(config(20).strategy(strategy), run(make.clone(), giving_up))
                .unwrap_or_else(|f| panic!("{name}, give-ups {giving_up}:\n{}", f.report()));
            eprintln!("{name} give-ups={giving_up} {strategy:?}: {r:?}");
            assert_eq!(r.runs, 20);
        }
    }
}

#[test]
fn wlock_under_simulation() {
    check("wlock", |c: &Cluster| WLock::new(c, NodeId(1), THREADS));
}

#[test]
fn slock_under_simulation() {
    check("slock", |c: &Cluster| SLock::new(c, NodeId(2), THREADS));
}

#[test]
fn nlock_under_simulation() {
    check("nlock", |c: &Cluster| NLock::new(c, NodeId(0)));
}
