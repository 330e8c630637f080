//! The SC operations written once, over a machine (see [`loco_rdmawait::protocol`]):
//! [`Sc`](crate::Sc) runs these functions on a thread context, the litmus explorer's lowering
//! runs them to produce the instructions it explores, with the node lock's own protocol
//! (`loco_locks::protocol`) as the [`Critical`] section.

use loco_rdmawait::protocol::Machine;
use loco_rdmawait::WorkId;
use loco_rdmawaitrmw::RmwMachine;

/// Work id of the SC operations that fetch a value (the get, rcas or rfaa), waited for after the
/// release.
pub const SC_FETCH: WorkId = WorkId::internal(0x5343_0001);
/// Work id of the puts that write SC locations and ported structures. Never waited for: the next
/// node-lock acquire of the thread towards the same node consumes their completions.
pub const SC_WRITE: WorkId = WorkId::internal(0x5343_0002);

/// The lock an SC location's operations run under: its node lock.
pub trait Critical<M: Machine> {
    /// What acquiring or releasing can fail with.
    type Error: From<M::Error>;
    /// Takes the lock.
    fn acquire(&mut self, m: &mut M) -> Result<(), Self::Error>;
    /// Releases it.
    fn release(&mut self, m: &mut M) -> Result<(), Self::Error>;
}

/// What an SC operation that returns a value does to the location.
#[derive(Clone, Copy, Debug)]
pub enum Access<V> {
    /// `read_sc`: a get.
    Read,
    /// `cas_sc`: a remote CAS.
    Cas {
        /// The value expected.
        expected: V,
        /// The value swapped in.
        new: V,
    },
    /// `faa_sc`: a remote FAA.
    Faa {
        /// The value added.
        add: V,
    },
}

/// `write_sc(x, v)` (docs/model.md §5.6, Fig. 14): `acquire; store(b, v); put(x, b); release`,
/// and no wait: the put reaches the next holder through the lock's guarantee.
pub fn write_sc<M: Machine, C: Critical<M>>(
    m: &mut M,
    lock: &mut C,
    x: M::Word,
    b: M::Word,
    v: M::Val,
) -> Result<(), C::Error> {
    lock.acquire(m)?;
    m.store(b, v)?;
    m.put(x, b, SC_WRITE)?;
    lock.release(m)
}

/// `read_sc`, `cas_sc`, `faa_sc` (docs/model.md §5.6, Fig. 14): `acquire; get|rcas|rfaa(x, ret =
/// a); release; wait; load(a)`. Returns the value fetched.
pub fn fetch_sc<M: RmwMachine, C: Critical<M>>(
    m: &mut M,
    lock: &mut C,
    x: M::Word,
    a: M::Word,
    access: Access<M::Val>,
) -> Result<M::Val, C::Error> {
    lock.acquire(m)?;
    match access {
        Access::Read => m.get(a, x, SC_FETCH)?,
        Access::Cas { expected, new } => m.rcas(x, expected, new, a, SC_FETCH)?,
        Access::Faa { add } => m.rfaa(x, add, a, SC_FETCH)?,
    }
    lock.release(m)?;
    m.wait(SC_FETCH)?;
    Ok(m.load(a)?)
}
