//! Bounded exhaustive search ([`Strategy::Exhaustive`](super::Strategy::Exhaustive)): every
//! choice of a run (which thread goes next, which NIC step is taken, when a random fault
//! strikes) comes from one [`Explorer`], which walks the tree of choices depth first, one run
//! per leaf, as loom does for shared memory.
//!
//! **Delay bounding** (Emmi, Qadeer, Rakamarić, *Delay-bounded scheduling*, POPL 2011) keeps
//! the tree finite and small: each choice point has a default (the running thread goes on; at
//! a spin loop's pause, the next thread in turn; the NIC takes no step until a thread polls or
//! pauses), and a run may deviate from the defaults at most `max_delays` times. Runs are
//! finite because the defaults make progress: a pause lets the NIC take every enabled step
//! and hands over to the next thread. A search that never had to refuse a deviation for want
//! of budget has run every schedule there is ([`Search::Complete`](super::Search)).

use std::sync::Mutex;

/// The choices of the current run, and where the depth-first walk is.
#[derive(Debug, Default)]
struct Path {
    /// Each choice point of the current run that had alternatives: (taken, how many).
    branches: Vec<(u32, u32)>,
    /// How far into `branches` the current run has come.
    pos: usize,
    /// Deviations from the defaults so far in this run.
    delays: usize,
    /// Whether some run came to a choice point it could not branch at for want of delays.
    cut: bool,
    /// Whether a replayed choice point offered another number of alternatives than when it was
    /// recorded (the program under test is not deterministic: it reads real time, or threads
    /// outside the simulator).
    diverged: bool,
    /// The run is over (teardown, or a failure's unwinding): every choice takes the default
    /// and nothing is recorded.
    closed: bool,
}

/// The source of a run's choices under exhaustive search.
#[derive(Debug)]
pub(crate) struct Explorer {
    max_delays: usize,
    path: Mutex<Path>,
}

impl Explorer {
    pub(crate) fn new(max_delays: usize) -> Self {
        Explorer {
            max_delays,
            path: Mutex::default(),
        }
    }

    fn path(&self) -> std::sync::MutexGuard<'_, Path> {
        self.path.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One of `n` alternatives, the default being 0. Taking another costs a delay, unless
    /// `free` (whether a random fault strikes here, which is not a scheduling decision).
    pub(crate) fn choose(&self, n: usize, free: bool) -> usize {
        let mut p = self.path();
        if n <= 1 || p.closed {
            return 0;
        }
        // A scheduling choice once the run has used up its delays takes the default and is
        // not recorded, replayed as much as new: the replayed prefix has the same delays at
        // each point as when it was recorded, so such a point is cut then too, and must not
        // take the recorded choice in its place (that of a later free choice, a random
        // fault's "strike here", which is recorded past the delay bound: taken by the cut
        // point, it made it deviate past the bound, and the run came to other choice points
        // than the recorded ones, reported as `Nondeterministic`).
        if !free && p.delays >= self.max_delays {
            p.cut = true;
            return 0;
        }
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(&(k, m)) = p.branches.get(p.pos) {
            p.pos += 1;
            if m != n32 {
                p.diverged = true;
            }
            if k > 0 && !free {
                p.delays += 1;
            }
            return (k as usize).min(n - 1);
        }
        p.branches.push((0, n32));
        p.pos += 1;
        0
    }

    /// The run is over: later choices (teardown) take the default unrecorded.
    pub(crate) fn close(&self) {
        self.path().closed = true;
    }

    /// Moves on to the next run's choices; false when the tree is exhausted.
    pub(crate) fn advance(&self) -> bool {
        let mut p = self.path();
        // Choice points past `pos` were not reached in the run that just ended (a diverging
        // run): they are not part of its tree.
        let pos = p.pos;
        p.branches.truncate(pos);
        while let Some(&(k, n)) = p.branches.last() {
            if k + 1 < n {
                let last = p.branches.len() - 1;
                p.branches[last].0 += 1;
                p.pos = 0;
                p.delays = 0;
                p.closed = false;
                return true;
            }
            p.branches.pop();
        }
        false
    }

    /// (some run was cut by the delay bound, some run diverged from its recorded prefix).
    pub(crate) fn flags(&self) -> (bool, bool) {
        let p = self.path();
        (p.cut, p.diverged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the tree whose choice points are `shape` (alternatives per point, in order) and
    /// returns every run's choices.
    fn walk(shape: &[usize], max_delays: usize) -> (Vec<Vec<usize>>, bool) {
        let e = Explorer::new(max_delays);
        let mut runs = Vec::new();
        loop {
            runs.push(shape.iter().map(|&n| e.choose(n, false)).collect());
            e.close();
            if !e.advance() {
                break;
            }
        }
        (runs, e.flags().0)
    }

    #[test]
    fn every_leaf_once_without_a_bound() {
        let (runs, cut) = walk(&[2, 3, 1, 2], 10);
        assert_eq!(runs.len(), 12);
        let set: std::collections::HashSet<_> = runs.iter().cloned().collect();
        assert_eq!(set.len(), 12);
        assert!(!cut);
    }

    #[test]
    fn the_delay_bound_limits_deviations_and_says_so() {
        let (runs, cut) = walk(&[3, 3, 3], 1);
        // The all-default run, plus 2 deviations at each of the 3 points.
        assert_eq!(runs.len(), 1 + 3 * 2);
        assert!(runs
            .iter()
            .all(|r| r.iter().filter(|&&k| k != 0).count() <= 1));
        assert!(cut);
        let (runs, cut) = walk(&[3, 3, 3], 0);
        assert_eq!(runs, vec![vec![0, 0, 0]]);
        assert!(cut);
    }

    /// A free choice (a random fault's "strike here / not yet") after the run has used up its
    /// delays is recorded, the scheduling choices cut before it are not: replayed, a cut
    /// choice is cut again rather than taking the free choice's record. It used to take it:
    /// with one delay, runs deviated at both scheduling choices.
    #[test]
    fn a_free_choice_past_the_delay_bound_replays_in_its_place() {
        let e = Explorer::new(1);
        let mut runs = Vec::new();
        loop {
            runs.push((e.choose(2, false), e.choose(2, false), e.choose(2, true)));
            e.close();
            if !e.advance() {
                break;
            }
        }
        let mut sorted = runs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), runs.len(), "{runs:?}");
        assert_eq!(
            sorted,
            [
                (0, 0, 0),
                (0, 0, 1),
                (0, 1, 0),
                (0, 1, 1),
                (1, 0, 0),
                (1, 0, 1)
            ],
            "{runs:?}"
        );
        assert_eq!(e.flags(), (true, false));
    }

    #[test]
    fn free_choices_cost_no_delay() {
        let e = Explorer::new(0);
        let mut seen = Vec::new();
        loop {
            seen.push((e.choose(3, true), e.choose(2, false)));
            e.close();
            if !e.advance() {
                break;
            }
        }
        assert_eq!(seen, vec![(0, 0), (1, 0), (2, 0)]);
    }
}
