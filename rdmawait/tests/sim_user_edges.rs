//! A new user's tries at the simulator (`loco_rdmawait::sim`) that found defects: each test
//! failed before its fix.

use std::sync::atomic::{AtomicU64, Ordering};

use loco_rdmawait::sim::{self, Config, Strategy};
use loco_rdmawait::{clock, Cluster, Ctx, NodeId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const N0: NodeId = NodeId(0);

/// Under PCT every spin loop's pause drops the pausing thread's priority below every other's.
/// The priorities were `u64`s counting down from 2^20, so the 1,048,577th drop of a run
/// overflowed: in a debug build the run failed as a panic of the spinning thread ("attempt to
/// subtract with overflow"), a bug of the simulator blamed on the code under test. Two threads
/// that pause 600,000 times each (1.2 million drops) now both finish.
#[test]
fn pct_survives_more_than_a_million_pauses() {
    static DONE: AtomicU64 = AtomicU64::new(0);
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let spinner = || {
            move |_: &Ctx| {
                for _ in 0..600_000 {
                    clock::pause();
                }
                DONE.fetch_add(1, Ordering::SeqCst);
                Ok::<(), BoxError>(())
            }
        };
        let a = sim::spawn(c, N0, spinner());
        let b = sim::spawn(c, N0, spinner());
        a.join()?;
        b.join()?;
        Ok(())
    };
    let config = Config::new(1).runs(1).strategy(Strategy::Pct { depth: 3 });
    let r = sim::check(config, f).unwrap_or_else(|f| panic!("{}", f.report()));
    assert!(r.steps > 1_200_000, "{r:?}");
    assert_eq!(DONE.load(Ordering::SeqCst), 2);
}
