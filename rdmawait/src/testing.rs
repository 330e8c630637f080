//! Backend-generic tests: one test body that runs on the soft NIC by default and on a real RDMA
//! device when `LOCO_BACKEND=verbs` (what `soft-roce-ci/run.sh` does), without being copied.
//!
//! A backend-generic test builds its clusters with [`cluster`] (or
//! [`ClusterBuilder::backend_from_env`](crate::ClusterBuilder::backend_from_env)), sizes its loops
//! with [`runs`] (a device pays real I/O per operation, and a cluster set-up per run; an override
//! variable such as `LOCO_SC_RUNS` goes through [`runs_override`], which rejects 0), checks
//! forbidden outcomes on every backend, and asserts that an allowed weak outcome *was observed*
//! only when [`shows_weak_outcomes`]: the soft NIC's `Chaos` schedule is built to make them
//! common, a real NIC may never show them.
//!
//! ```
//! use loco_rdmawait::{testing, NodeId, Schedule, WorkId};
//!
//! for seed in 0..testing::runs(100, 10) {
//!     let c = testing::cluster(2, 4096, Schedule::Chaos { seed })?;
//!     let (x, y) = (c.alloc_word(NodeId(0))?, c.alloc_word(NodeId(1))?);
//!     let ctx = c.context(NodeId(0))?;
//!     ctx.put(&y, &x, WorkId::new(1))?;
//!     ctx.wait(WorkId::new(1))?;
//! }
//! # Ok::<(), loco_rdmawait::Error>(())
//! ```

use std::fmt::Debug;
use std::time::Duration;

use crate::{BackendKind, Cluster, Error, NodeId, RdmaCause, Result, Schedule};

/// The backend `LOCO_BACKEND` names ([`BackendKind::from_env`]); a bad value counts as
/// [`BackendKind::Soft`] here, and fails the test when it builds a cluster with [`cluster`].
pub fn backend() -> BackendKind {
    BackendKind::from_env().unwrap_or_default()
}

/// `soft` on the soft NIC, `device` on a real one: loop counts, seeds, iterations.
pub fn runs(soft: u64, device: u64) -> u64 {
    match backend() {
        BackendKind::Soft => soft,
        _ => device,
    }
}

/// The run count an override variable such as `LOCO_SC_RUNS` sets, if it is set (to something
/// other than blanks), for quick local runs or longer soaks.
///
/// # Panics
/// If the variable holds anything but a positive integer: a count of 0 would run nothing and
/// pass, and a typo would silently fall back to the default, so both stop the test instead, with
/// a message naming the variable.
pub fn runs_override(var: &str) -> Option<u64> {
    override_from(var, std::env::var(var).ok().as_deref())
}

/// [`runs_override`] on a given value of `var` (so that tests need not set the environment).
fn override_from(var: &str, value: Option<&str>) -> Option<u64> {
    parse_runs(var, value).unwrap_or_else(|e| panic!("{e}"))
}

/// [`runs_override`] on a given value of `var`: `Ok(None)` when unset or blank, `Ok(Some(n))`
/// for a positive integer `n`, otherwise the message to fail with.
fn parse_runs(var: &str, value: Option<&str>) -> std::result::Result<Option<u64>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match v.parse::<u64>() {
        Ok(0) => Err(format!(
            "{var}=0: a run count of 0 would run nothing and pass; unset {var} for the default"
        )),
        Ok(n) => Ok(Some(n)),
        Err(e) => Err(format!(
            "{var}={v:?} is not a run count ({e}): expected a positive integer, or {var} unset"
        )),
    }
}

/// Whether tests should expect allowed weak outcomes to show up: true on the soft NIC (in its
/// `Chaos` schedule), false on a real device, where only forbidden outcomes are checked.
pub fn shows_weak_outcomes() -> bool {
    backend() == BackendKind::Soft
}

/// A cluster of `nodes` nodes with `bytes` of memory each on the backend `LOCO_BACKEND` names:
/// the soft NIC with `schedule`, or the verbs backend as `LOCO_RDMA_DEVICE` and the other
/// variables of `VerbsConfig::from_env` say (the schedule is then
/// ignored). Without a device the error says how to get one; without the `verbs` feature it is
/// [`Error::BackendNotBuilt`].
pub fn cluster(nodes: usize, bytes: u64, schedule: Schedule) -> Result<Cluster> {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(bytes)
        .soft(schedule)
        .backend_from_env()?
        .build()
}

/// The soft NIC's three schedules, `Chaos` with `seed`: for tests that check an error or an edge
/// value under each (they differ in when requests execute, so in which check meets them first).
pub const fn soft_schedules(seed: u64) -> [Schedule; 3] {
    [
        Schedule::Immediate,
        Schedule::Chaos { seed },
        Schedule::Threaded,
    ]
}

/// How long the waits of a [`short_cluster`] may block.
pub const SHORT_TIMEOUT: Duration = Duration::from_millis(500);

/// A soft-NIC cluster of `nodes` nodes with `bytes` of memory each and a timeout of
/// [`SHORT_TIMEOUT`]: an operation that wrongly blocks fails its test quickly instead of hanging
/// it.
///
/// # Panics
/// If the cluster cannot be built (a test's own mistake: too many nodes or bytes).
pub fn short_cluster(nodes: usize, bytes: u64, schedule: Schedule) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(bytes)
        .soft(schedule)
        .timeout(SHORT_TIMEOUT)
        .build()
        .unwrap_or_else(|e| panic!("a cluster of {nodes} nodes with {bytes} bytes each: {e}"))
}

/// Asserts that `r` failed with an rdmawait error (itself or wrapped by a layer above) for which
/// `expected` holds; `what` names it in the failure message.
#[track_caller]
fn assert_rdma<T: Debug, E: RdmaCause + Debug>(
    r: std::result::Result<T, E>,
    what: &str,
    expected: impl Fn(&Error) -> bool,
) {
    match r {
        Ok(v) => panic!("expected {what}, got Ok({v:?})"),
        Err(e) => assert!(e.rdma().is_some_and(expected), "expected {what}, got {e:?}"),
    }
}

/// Asserts that `r` failed with [`Error::UnknownNode`] (itself or wrapped by a layer above).
#[track_caller]
pub fn assert_unknown_node<T: Debug, E: RdmaCause + Debug>(r: std::result::Result<T, E>) {
    assert_rdma(r, "UnknownNode", |e| matches!(e, Error::UnknownNode { .. }));
}

/// Asserts that `r` failed with [`Error::Shutdown`] (itself or wrapped by a layer above).
#[track_caller]
pub fn assert_shutdown<T: Debug, E: RdmaCause + Debug>(r: std::result::Result<T, E>) {
    assert_rdma(r, "Shutdown", |e| matches!(e, Error::Shutdown));
}

/// Asserts that `r` failed with [`Error::PeerDead`] naming `node` (itself or wrapped by a layer
/// above).
#[track_caller]
pub fn assert_peer_dead<T: Debug, E: RdmaCause + Debug>(
    r: std::result::Result<T, E>,
    node: NodeId,
) {
    assert_rdma(
        r,
        &format!("PeerDead naming {node}"),
        |e| matches!(e, Error::PeerDead { node: n, .. } if *n == node),
    );
}

/// A current-thread tokio runtime with timers and I/O, for tests of the async API (feature
/// `tokio`).
///
/// # Panics
/// If the runtime cannot be built.
#[cfg(feature = "tokio")]
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_count_override_is_a_positive_integer() {
        let parse = |v| parse_runs("LOCO_X_RUNS", v);
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some("")), Ok(None));
        assert_eq!(parse(Some("  ")), Ok(None));
        assert_eq!(parse(Some("1")), Ok(Some(1)));
        assert_eq!(parse(Some(" 250\n")), Ok(Some(250)));
        let zero = parse(Some("0")).unwrap_err();
        assert!(
            zero.contains("LOCO_X_RUNS=0") && zero.contains("run nothing"),
            "{zero}"
        );
        assert!(parse(Some(" 00 ")).is_err());
        for bad in ["-1", "ten", "1e3", "1_000", "3.5", "18446744073709551616"] {
            let e = parse(Some(bad)).unwrap_err();
            assert!(
                e.contains("LOCO_X_RUNS") && e.contains("not a run count"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "LOCO_X_RUNS=0: a run count of 0")]
    fn a_zero_override_panics() {
        override_from("LOCO_X_RUNS", Some("0"));
    }

    #[test]
    #[should_panic(expected = "LOCO_X_RUNS=\"lots\" is not a run count")]
    fn an_unparseable_override_panics() {
        override_from("LOCO_X_RUNS", Some("lots"));
    }

    #[test]
    fn an_override_passes_its_count_through() {
        assert_eq!(override_from("LOCO_X_RUNS", Some("7")), Some(7));
        assert_eq!(override_from("LOCO_X_RUNS", None), None);
    }

    #[test]
    fn an_unset_override_is_none() {
        assert_eq!(runs_override("LOCO_TESTING_UNIT_UNSET_RUNS"), None);
    }
}
