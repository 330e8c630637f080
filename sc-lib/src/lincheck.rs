//! Checking recorded histories for linearizability: the Wing–Gong algorithm with Lowe's
//! memoisation (Wing and Gong, *Testing and verifying concurrent objects*, JPDC 1993; Lowe,
//! *Testing for linearizability*, CCPE 2017; as described by Horn and Kroening, *Faster
//! linearizability checking via P-compositionality*, FORTE 2015).
//!
//! Record the calls of a concurrent run with a [`Recorder`] (each call's invocation and response
//! instants and its return value), then [`check`] the history against a sequential [`Model`]:
//! it is linearizable iff its calls can be ordered so that the order respects real time (a call
//! that returned before another was invoked comes first) and the model, stepped through that
//! order, returns what each call returned.
//!
//! ```
//! use loco_sc::lincheck::{check, Call, Register, RegisterOp};
//!
//! // t0 writes 1 while t1 reads twice: 1, then 0. Not linearizable: the second read comes after
//! // the first in real time, and the write cannot be undone.
//! let h = vec![
//!     Call { thread: 0, invoke: 0, response: 5, op: RegisterOp::Write(1), ret: 0 },
//!     Call { thread: 1, invoke: 1, response: 2, op: RegisterOp::Read, ret: 1 },
//!     Call { thread: 1, invoke: 3, response: 4, op: RegisterOp::Read, ret: 0 },
//! ];
//! assert!(check(&Register::default(), &h).is_err());
//! ```
//!
//! Histories must be complete (every call has returned). The search is exponential in the
//! worst case, and fine for the short histories of tests (tens of calls from a few threads).

use std::collections::HashSet;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::Sequential;

/// A sequential specification: what the object does, one call at a time.
pub trait Model {
    /// The object's state (hashable: the search remembers the states it has been in).
    type State: Clone + Eq + Hash;
    /// An operation with its arguments.
    type Op;
    /// What an operation returns.
    type Ret: PartialEq;
    /// The initial state.
    fn init(&self) -> Self::State;
    /// Runs `op` on `state`: the next state and the return value.
    fn step(&self, state: &Self::State, op: &Self::Op) -> (Self::State, Self::Ret);
}

/// One completed call of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call<Op, Ret> {
    /// The calling thread (for reports only).
    pub thread: usize,
    /// When the call was invoked (any clock shared by all threads).
    pub invoke: u64,
    /// When it returned; must not be earlier than `invoke`.
    pub response: u64,
    /// The operation.
    pub op: Op,
    /// What it returned.
    pub ret: Ret,
}

/// A history that has no linearization.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("history of {calls} calls is not linearizable; the longest linearizable prefix has {} calls: {longest:?}", longest.len())]
pub struct NotLinearizable {
    /// Calls in the history.
    pub calls: usize,
    /// The longest sequence of calls (indices into the history) the search could linearize.
    pub longest: Vec<usize>,
}

/// Records the calls of a concurrent run: thread-safe, one shared logical clock.
#[derive(Debug)]
pub struct Recorder<Op, Ret> {
    clock: AtomicU64,
    calls: Mutex<Vec<Call<Op, Ret>>>,
}

impl<Op, Ret> Default for Recorder<Op, Ret> {
    fn default() -> Self {
        Recorder {
            clock: AtomicU64::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }
}

impl<Op, Ret: Clone> Recorder<Op, Ret> {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` as a call of `op` by `thread` and records it, with instants taken just before
    /// and just after. A call that fails is not recorded (the history must then be discarded:
    /// its effect is unknown).
    pub fn record<E>(
        &self,
        thread: usize,
        op: Op,
        f: impl FnOnce(&Op) -> Result<Ret, E>,
    ) -> Result<Ret, E> {
        let invoke = self.clock.fetch_add(1, Ordering::SeqCst);
        let ret = f(&op)?;
        let response = self.clock.fetch_add(1, Ordering::SeqCst);
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Call {
                thread,
                invoke,
                response,
                op,
                ret: ret.clone(),
            });
        Ok(ret)
    }

    /// The recorded calls.
    pub fn into_history(self) -> Vec<Call<Op, Ret>> {
        self.calls.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

const NIL: usize = usize::MAX;

/// Checks that `history` is linearizable with respect to `model`.
///
/// Instants are compared as given; a call whose response is not after another's invocation is
/// taken to overlap it (ties count as concurrent).
pub fn check<M: Model>(model: &M, history: &[Call<M::Op, M::Ret>]) -> Result<(), NotLinearizable> {
    let n = history.len();
    // Events: (instant, is_response, call), invocations before responses at equal instants.
    let mut events: Vec<(u64, bool, usize)> = history
        .iter()
        .enumerate()
        .flat_map(|(i, c)| [(c.invoke, false, i), (c.response.max(c.invoke), true, i)])
        .collect();
    events.sort_unstable();
    let mut response_at = vec![0; n];
    for (pos, &(_, is_resp, i)) in events.iter().enumerate() {
        if is_resp {
            response_at[i] = pos;
        }
    }
    // A doubly linked list of the events not yet linearized, with a head sentinel at index 2n.
    let head = 2 * n;
    let mut next: Vec<usize> = (1..=2 * n)
        .map(|k| if k == 2 * n { NIL } else { k })
        .collect();
    next.push(if n == 0 { NIL } else { 0 });
    let mut prev: Vec<usize> = (0..2 * n)
        .map(|k| if k == 0 { head } else { k - 1 })
        .collect();
    prev.push(NIL);
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        next[prev[x]] = next[x];
        if next[x] != NIL {
            prev[next[x]] = prev[x];
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        next[prev[x]] = x;
        if next[x] != NIL {
            prev[next[x]] = x;
        }
    };

    let mut state = model.init();
    let mut linearized = vec![0u64; n.div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, M::State)> = HashSet::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut cur = next[head];
    while next[head] != NIL {
        let (_, is_resp, i) = events[cur];
        if !is_resp {
            let (after, ret) = model.step(&state, &history[i].op);
            let mut fresh = false;
            if ret == history[i].ret {
                linearized[i / 64] |= 1 << (i % 64);
                fresh = seen.insert((linearized.clone(), after.clone()));
                if !fresh {
                    linearized[i / 64] &= !(1 << (i % 64));
                }
            }
            if fresh {
                stack.push((cur, std::mem::replace(&mut state, after)));
                unlink(&mut next, &mut prev, cur);
                unlink(&mut next, &mut prev, response_at[i]);
                if stack.len() > longest.len() {
                    longest = stack.iter().map(|(pos, _)| events[*pos].2).collect();
                }
                cur = next[head];
            } else {
                cur = next[cur];
            }
        } else {
            // The first pending response: every call before it is tried. Backtrack.
            let Some((pos, before)) = stack.pop() else {
                return Err(NotLinearizable { calls: n, longest });
            };
            let i = events[pos].2;
            linearized[i / 64] &= !(1 << (i % 64));
            state = before;
            relink(&mut next, &mut prev, response_at[i]);
            relink(&mut next, &mut prev, pos);
            cur = next[pos];
        }
    }
    Ok(())
}

/// An operation of a [`Register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOp {
    /// `read_sc`: returns the value.
    Read,
    /// `write_sc(v)`: returns 0.
    Write(u64),
    /// `cas_sc(e, v)`: returns the old value.
    Cas(u64, u64),
    /// `faa_sc(k)`: returns the old value.
    Faa(u64),
}

/// The sequential specification of an [`ScLoc`](crate::ScLoc): a word register with read,
/// write, compare-and-swap and fetch-and-add.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register {
    /// The initial value.
    pub init: u64,
}

impl Model for Register {
    type State = u64;
    type Op = RegisterOp;
    type Ret = u64;

    fn init(&self) -> u64 {
        self.init
    }

    fn step(&self, &x: &u64, op: &RegisterOp) -> (u64, u64) {
        match *op {
            RegisterOp::Read => (x, x),
            RegisterOp::Write(v) => (v, 0),
            RegisterOp::Cas(e, v) => (if x == e { v } else { x }, x),
            RegisterOp::Faa(k) => (x.wrapping_add(k), x),
        }
    }
}

/// The specification of a [`Sequential`] structure: its own sequential code, from an initial
/// state. States are compared by their encoding.
pub struct SequentialModel<S> {
    init: Vec<u64>,
    _s: PhantomData<fn() -> S>,
}

impl<S: Sequential> SequentialModel<S> {
    /// The model starting from `initial`. Panics if `initial` does not fit its own layout, or its
    /// layout does not decode (a structure that could not be made either: [`Ported::new`]
    /// refuses both).
    ///
    /// [`Ported::new`]: crate::Ported::new
    pub fn new(initial: &S) -> Self {
        let mut init = vec![0; initial.words()];
        initial
            .encode(&mut init)
            .expect("the initial state fits its layout");
        // Checked here, where it is documented: `step` decodes every state, and an initial one
        // it cannot read (a queue of no slot) panicked there, in the middle of `check`.
        if let Err(e) = S::decode(&init) {
            panic!("the initial state's layout does not decode: {e}");
        }
        SequentialModel {
            init,
            _s: PhantomData,
        }
    }
}

impl<S> Model for SequentialModel<S>
where
    S: Sequential,
    S::Op: Clone,
    S::Ret: PartialEq,
{
    type State = Vec<u64>;
    type Op = S::Op;
    type Ret = S::Ret;

    fn init(&self) -> Vec<u64> {
        self.init.clone()
    }

    fn step(&self, state: &Vec<u64>, op: &S::Op) -> (Vec<u64>, S::Ret) {
        let mut s = S::decode(state).expect("model states are valid encodings");
        let ret = s.apply(op.clone());
        let mut out = vec![0; state.len()];
        match s.encode(&mut out) {
            Ok(()) => (out, ret),
            // The real object fails such an operation and writes nothing: so does the model.
            Err(_) => (state.clone(), ret),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BoundedQueue, QueueOp, QueueRet};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn call<Op, Ret>(thread: usize, invoke: u64, response: u64, op: Op, ret: Ret) -> Call<Op, Ret> {
        Call {
            thread,
            invoke,
            response,
            op,
            ret,
        }
    }

    use RegisterOp::{Cas, Faa, Read, Write};

    #[test]
    fn empty_and_sequential_histories_are_linearizable() {
        let r = Register::default();
        assert_eq!(check(&r, &[]), Ok(()));
        let h = [
            call(0, 0, 1, Write(3), 0),
            call(1, 2, 3, Read, 3),
            call(0, 4, 5, Cas(3, 4), 3),
            call(1, 6, 7, Faa(2), 4),
            call(0, 8, 9, Read, 6),
        ];
        assert_eq!(check(&r, &h), Ok(()));
    }

    #[test]
    fn concurrent_calls_may_take_effect_in_either_order() {
        // t0 |--- W(1) ---|
        // t1    |- R:0 -|       (the read took effect before the write)
        // t2      |- R:1 -|     (... and this one after)
        let h = [
            call(0, 0, 10, Write(1), 0),
            call(1, 1, 5, Read, 0),
            call(2, 2, 6, Read, 1),
        ];
        assert_eq!(check(&Register::default(), &h), Ok(()));
    }

    #[test]
    fn a_stale_read_after_a_newer_one_is_rejected() {
        let h = [
            call(0, 0, 10, Write(1), 0),
            call(1, 1, 2, Read, 1),
            call(1, 3, 4, Read, 0),
        ];
        let e = check(&Register::default(), &h).unwrap_err();
        assert_eq!(e.calls, 3);
        assert!(e.longest.len() < 3);
    }

    #[test]
    fn a_read_of_a_value_never_written_is_rejected() {
        let h = [call(0, 0, 1, Write(1), 0), call(1, 0, 1, Read, 2)];
        assert!(check(&Register::default(), &h).is_err());
    }

    #[test]
    fn two_successful_cas_from_the_same_value_are_rejected() {
        let h = [
            call(0, 0, 3, Cas(0, 1), 0),
            call(1, 1, 4, Cas(0, 2), 0),
            call(2, 2, 5, Read, 2),
        ];
        assert!(check(&Register::default(), &h).is_err());
        // One of them failing is fine.
        let h = [
            call(0, 0, 3, Cas(0, 1), 0),
            call(1, 1, 4, Cas(0, 2), 1),
            call(2, 2, 5, Read, 1),
        ];
        assert_eq!(check(&Register::default(), &h), Ok(()));
    }

    #[test]
    fn fifo_order_violations_are_rejected() {
        let m = SequentialModel::new(&BoundedQueue::new(4));
        use QueueOp::{Pop, Push};
        use QueueRet::{Popped, Pushed};
        // push 1 returns before push 2 starts; pops see 2 then 1: not FIFO.
        let h = [
            call(0, 0, 1, Push(1), Pushed),
            call(0, 2, 3, Push(2), Pushed),
            call(1, 4, 5, Pop, Popped(Some(2))),
            call(1, 6, 7, Pop, Popped(Some(1))),
        ];
        assert!(check(&m, &h).is_err());
        // With overlapping pushes it is fine.
        let h = [
            call(0, 0, 3, Push(1), Pushed),
            call(2, 1, 2, Push(2), Pushed),
            call(1, 4, 5, Pop, Popped(Some(2))),
            call(1, 6, 7, Pop, Popped(Some(1))),
        ];
        assert_eq!(check(&m, &h), Ok(()));
    }

    #[test]
    fn a_full_queue_is_part_of_the_model() {
        let m = SequentialModel::new(&BoundedQueue::new(1));
        let h = [
            call(0, 0, 1, QueueOp::Push(1), QueueRet::Pushed),
            call(1, 2, 3, QueueOp::Push(2), QueueRet::Full),
            call(0, 4, 5, QueueOp::Pop, QueueRet::Popped(Some(1))),
        ];
        assert_eq!(check(&m, &h), Ok(()));
        let h = [
            call(0, 0, 1, QueueOp::Push(1), QueueRet::Pushed),
            call(1, 2, 3, QueueOp::Push(2), QueueRet::Pushed),
        ];
        assert!(check(&m, &h).is_err());
    }

    /// Random histories made linearizable by construction (each call's effect at a random point
    /// inside its interval, in a sequential run) are accepted; breaking one return value of a
    /// read that is alone in its interval is detected.
    #[test]
    fn random_linearizable_histories_are_accepted() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let r = Register::default();
        for _ in 0..300 {
            let calls = rng.random_range(1..24);
            // Linearization points 0, 10, 20, ...; each interval spans its point.
            let mut x = 0;
            let mut h = Vec::new();
            for k in 0..calls {
                let p = 10 * k as u64 + 5;
                let op = match rng.random_range(0..4) {
                    0 => Read,
                    1 => Write(rng.random_range(0..3)),
                    2 => Cas(rng.random_range(0..3), rng.random_range(0..3)),
                    _ => Faa(1),
                };
                let (nx, ret) = r.step(&x, &op);
                x = nx;
                let invoke = p - rng.random_range(0..=p.min(25));
                let response = p + rng.random_range(0..25);
                h.push(call(k % 4, invoke, response, op, ret));
            }
            assert_eq!(check(&r, &h), Ok(()), "{h:?}");
        }
    }

    #[test]
    fn a_wrong_return_in_a_sequential_history_is_found() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let r = Register::default();
        for _ in 0..200 {
            let mut x = 0;
            let mut h = Vec::new();
            for k in 0..16u64 {
                let op = if rng.random_bool(0.5) { Read } else { Faa(1) };
                let (nx, ret) = r.step(&x, &op);
                x = nx;
                h.push(call(0, 2 * k, 2 * k + 1, op, ret));
            }
            let k = rng.random_range(0..16);
            h[k].ret += 1;
            assert!(check(&r, &h).is_err());
        }
    }

    /// Two word registers (locations 0 and 1): the test's model of histories over more than one
    /// location, each call on one of them.
    struct TwoRegisters;

    impl Model for TwoRegisters {
        type State = [u64; 2];
        type Op = (usize, RegisterOp);
        type Ret = u64;

        fn init(&self) -> [u64; 2] {
            [0; 2]
        }

        fn step(&self, s: &[u64; 2], &(x, op): &(usize, RegisterOp)) -> ([u64; 2], u64) {
            let (v, ret) = Register::default().step(&s[x], &op);
            let mut next = *s;
            next[x] = v;
            (next, ret)
        }
    }

    /// The definition, by brute force: some order of all the calls that respects real time (a
    /// call whose response is before another's invocation comes first; ties overlap, as in
    /// [`check`]) and that the model, stepped through, answers as each call did.
    fn brute_force<M: Model>(model: &M, h: &[Call<M::Op, M::Ret>]) -> bool {
        brute_force_with(model, h, true)
    }

    /// [`brute_force`], or with `real_time` false, any order at all (sequential consistency
    /// without program order: what a checker that forgot real time would accept).
    fn brute_force_with<M: Model>(model: &M, h: &[Call<M::Op, M::Ret>], real_time: bool) -> bool {
        fn extend<M: Model>(
            model: &M,
            h: &[Call<M::Op, M::Ret>],
            real_time: bool,
            done: &mut [bool],
            state: &M::State,
        ) -> bool {
            if done.iter().all(|&d| d) {
                return true;
            }
            for i in 0..h.len() {
                // `i` may come next iff it is pending and no pending call returned before it began.
                let blocked = real_time
                    && (0..h.len()).any(|j| !done[j] && j != i && h[j].response < h[i].invoke);
                if done[i] || blocked {
                    continue;
                }
                let (after, ret) = model.step(state, &h[i].op);
                if ret != h[i].ret {
                    continue;
                }
                done[i] = true;
                if extend(model, h, real_time, done, &after) {
                    return true;
                }
                done[i] = false;
            }
            false
        }
        extend(
            model,
            h,
            real_time,
            &mut vec![false; h.len()],
            &model.init(),
        )
    }

    /// A random register operation on a value domain small enough for collisions.
    fn random_op(rng: &mut ChaCha8Rng) -> RegisterOp {
        match rng.random_range(0..4) {
            0 => Read,
            1 => Write(rng.random_range(1..4)),
            2 => Cas(rng.random_range(0..3), rng.random_range(1..4)),
            _ => Faa(rng.random_range(1..3)),
        }
    }

    /// A random history of 1 to 7 calls with heavily overlapping intervals on a short clock (ties
    /// included). Returns come from a sequential run in the order of a random point inside each
    /// interval (so linearizable), then, in most histories, one to three of them are replaced by
    /// random values (often, not always, making the history non-linearizable).
    fn random_history<M: Model<Ret = u64>>(
        rng: &mut ChaCha8Rng,
        model: &M,
        mut op: impl FnMut(&mut ChaCha8Rng) -> M::Op,
    ) -> Vec<Call<M::Op, u64>> {
        let n = rng.random_range(1..=7);
        let mut h: Vec<Call<M::Op, u64>> = (0..n)
            .map(|t| {
                let invoke = rng.random_range(0..12);
                let response = invoke + rng.random_range(0..6);
                call(t, invoke, response, op(rng), 0)
            })
            .collect();
        // Linearization points, anywhere inside each interval (on a clock of half-steps); ties
        // between points are broken at random. Calls ordered in real time keep their order.
        let mut order: Vec<(u64, u64, usize)> = h
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = rng.random_range(2 * c.invoke..=2 * c.response);
                (p, rng.random(), i)
            })
            .collect();
        order.sort_unstable();
        let mut state = model.init();
        for &(_, _, i) in &order {
            let (after, ret) = model.step(&state, &h[i].op);
            h[i].ret = ret;
            state = after;
        }
        if rng.random_bool(0.7) {
            for _ in 0..rng.random_range(1..=3) {
                let i = rng.random_range(0..n);
                h[i].ret = rng.random_range(0..6);
            }
        }
        h
    }

    /// Compares [`check`] with [`brute_force`] on `histories` random histories. Both verdicts
    /// must be common, and some rejections must hinge on real time, or the comparison says
    /// little.
    fn cross_check<M: Model<Ret = u64>>(
        seed: u64,
        histories: usize,
        model: &M,
        op: impl FnMut(&mut ChaCha8Rng) -> M::Op + Copy,
    ) where
        M::Op: std::fmt::Debug,
    {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut yes, mut by_real_time) = (0, 0);
        for _ in 0..histories {
            let h = random_history(&mut rng, model, op);
            let want = brute_force(model, &h);
            let got = check(model, &h);
            assert_eq!(
                got.is_ok(),
                want,
                "check says {got:?}, brute force {want}: {h:?}"
            );
            if let Err(e) = got {
                assert_eq!(e.calls, h.len());
                assert!(e.longest.len() < h.len(), "{e:?}");
            }
            yes += usize::from(want);
            by_real_time += usize::from(!want && brute_force_with(model, &h, false));
        }
        // Some histories are rejected only for their real-time order: the intervals matter.
        assert!(
            by_real_time >= histories / 100,
            "only {by_real_time} of {histories} histories hinge on real time"
        );
        assert!(
            (histories / 5..=histories * 4 / 5).contains(&yes),
            "{yes} of {histories} histories linearizable: too one-sided to test both verdicts"
        );
        eprintln!("{yes} of {histories} linearizable, {by_real_time} rejected for real time only");
    }

    #[test]
    fn check_agrees_with_brute_force_on_one_register() {
        cross_check(11, 3_000, &Register::default(), random_op);
    }

    #[test]
    fn check_agrees_with_brute_force_on_two_registers() {
        cross_check(12, 3_000, &TwoRegisters, |rng| {
            (rng.random_range(0..2), random_op(rng))
        });
    }

    /// The brute force itself can say no and yes (else agreeing with it proves nothing).
    #[test]
    fn brute_force_knows_both_verdicts() {
        let r = Register::default();
        let stale = [
            call(0, 0, 10, Write(1), 0),
            call(1, 1, 2, Read, 1),
            call(1, 3, 4, Read, 0),
        ];
        assert!(!brute_force(&r, &stale));
        let overlapping = [
            call(0, 0, 10, Write(1), 0),
            call(1, 1, 5, Read, 0),
            call(2, 2, 6, Read, 1),
        ];
        assert!(brute_force(&r, &overlapping));
        // Ties overlap: a read invoked at the write's response instant may still see 0.
        let tie = [call(0, 0, 3, Write(1), 0), call(1, 3, 4, Read, 0)];
        assert!(brute_force(&r, &tie));
        assert_eq!(check(&r, &tie), Ok(()));
        let after = [call(0, 0, 3, Write(1), 0), call(1, 4, 5, Read, 0)];
        assert!(!brute_force(&r, &after));
    }

    #[test]
    fn the_recorder_orders_calls_by_real_time() {
        let rec: Recorder<RegisterOp, u64> = Recorder::new();
        rec.record(0, Write(1), |_| Ok::<_, ()>(0)).unwrap();
        rec.record(1, Read, |_| Ok::<_, ()>(1)).unwrap();
        assert!(rec.record(1, Read, |_| Err(())).is_err());
        let h = rec.into_history();
        assert_eq!(h.len(), 2);
        assert!(h[0].response < h[1].invoke);
        assert_eq!(check(&Register::default(), &h), Ok(()));
    }
}
