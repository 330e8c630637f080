//! Sequentially consistent locations and linearizable ported data structures over RDMA: the
//! paper's **SC** library (docs/model.md §2 and §5.6, Fig. 14), over the node lock of `loco-locks` and the
//! remote RMWs of `loco-rdmawaitrmw`.
//!
//! - [`ScLoc`] is an abstract location: one word and its own node lock, placed on a node of your
//!   choice or round-robin. [`Sc`] adds the paper's `read_sc`, `write_sc`, `cas_sc` and `faa_sc`
//!   to every thread context.
//! - [`Ported`] does the same for a whole sequential data structure ([`Sequential`]): its state
//!   lives in registered memory of one node and every operation runs under that node's lock.
//!   Two come ready: [`FixedHashMap`] ([`PortedHashMap`]) and [`BoundedQueue`] ([`PortedQueue`]).
//! - [`lincheck`] checks recorded histories for linearizability (Wing–Gong–Lowe), for testing
//!   structures of your own.
//!
//! ```
//! use loco_rdmawait::{Cluster, NodeId, Schedule};
//! use loco_sc::{Sc, ScLoc};
//!
//! let cluster = Cluster::builder().nodes(3).soft(Schedule::Threaded).build()?;
//! let data = ScLoc::new(&cluster, 0)?; // placed round-robin: n0 ...
//! let flag = ScLoc::new(&cluster, 0)?; // ... and n1
//!
//! let writer = {
//!     let (cluster, data, flag) = (cluster.clone(), data.clone(), flag.clone());
//!     std::thread::spawn(move || -> loco_sc::Result<()> {
//!         let ctx = cluster.context(NodeId(2))?;
//!         ctx.write_sc(&data, 42)?;
//!         ctx.write_sc(&flag, 1)?; // SC: whoever sees the flag sees the data
//!         Ok(())
//!     })
//! };
//! let ctx = cluster.context(NodeId(0))?;
//! while ctx.read_sc(&flag)? == 0 {
//!     std::thread::yield_now();
//! }
//! assert_eq!(ctx.read_sc(&data)?, 42); // message passing: never 0
//! assert_eq!(ctx.faa_sc(&data, 1)?, 42);
//! assert_eq!(ctx.cas_sc(&data, 43, 7)?, 43);
//! writer.join().unwrap()?;
//! # Ok::<(), loco_sc::Error>(())
//! ```
//!
//! Section and rule numbers cited here (`docs/model.md §5.2`, `rule 6`) are those of the
//! project's [model page][loco-model]; the [docs index][loco-docs] lists the other reference
//! pages.
//!
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//! [loco-docs]: https://github.com/loco-rs/loco-rs/blob/main/docs/README.md
//!
//! # Guarantees (docs/model.md §5.6, Fig. 14)
//! - [`Sc`] operations on [`ScLoc`]s are **sequentially consistent**: every run is explained by
//!   one interleaving of all threads' SC operations, each thread's in program order, each read
//!   seeing the latest write before it. Message passing, store buffering and IRIW shapes never
//!   show a weak outcome, whatever nodes the locations and threads are on. They are also
//!   **linearizable** (each takes effect between its call and return).
//! - Operations on one [`Ported`] structure are **linearizable**, and so are any mix of ported
//!   structures and SC locations (linearizability is local).
//! - SC operations do **not** complete or order the thread's earlier operations of other
//!   libraries: a plain `put` to another node before a `write_sc` may still be in flight when
//!   another thread reads the SC write (docs/model.md §5.6, "other libraries are not covered"). Fence it
//!   (`loco-sv`'s `gf`) if it must be visible.
//!
//! # Cost (round trips per operation, uncontended)
//! | operation | round trips | why |
//! |---|---|---|
//! | `write_sc` | 1 | acquire (remote FAA, and one get of the lock's `rel` posted behind it); the put and the release are not waited for |
//! | `read_sc`, `cas_sc`, `faa_sc` | 2 | acquire, then the get / rcas / rfaa, waited for |
//! | [`Ported`] operation, default | 2 | acquire, one get of the whole state; puts and release not waited for |
//! | [`PortedHashMap`] `get`/`insert`/`remove`/`cas` | usually 2 | acquire, one get per 4 probed buckets |
//! | [`PortedQueue`] `push`/`len` (`pop`) | 2 (3) | acquire, the header (then the popped slot) |
//!
//! Contention adds one get of `rel` per turn spent waiting. See [`port`] for the details.
//!
//! # Errors
//! [`Error::ForeignLocation`] for a location or structure of another cluster;
//! [`Error::Layout`] for a state that does not fit its structure's layout (nothing is written);
//! [`Error::QueueFull`] and [`Error::MapFull`] for full ready structures (nothing is written);
//! [`Error::Rdma`] and [`Error::Lock`] for failures of the layers below.
//!
//! # Failures
//! Every operation ends: it returns, or fails with a typed error; none hangs.
//! - The node of an object dies: every operation on it fails with
//!   [`Error::Rdma`]`(`[`PeerDead`](loco_rdmawait::Error::PeerDead)`)` naming that node (the
//!   node lock checks it before and while waiting); operations on objects of live nodes go on,
//!   and stay linearizable (tested with the `lincheck` checker while a node is killed).
//! - The node of an object restarts ([`Cluster::restart`](loco_rdmawait::Cluster::restart);
//!   [`Cluster::incarnation`](loco_rdmawait::Cluster::incarnation) changes): its memory came
//!   back zeroed, so the object's value or state, and its node lock, are gone. Every operation
//!   on it, and its `peek`, fails with [`Error::Rdma`]`(`[`PeerDead`](loco_rdmawait::Error::PeerDead)`)`
//!   naming that node from then on (the reason says so); make the object again. Objects of
//!   other nodes are unaffected.
//! - A thread whose node dies while it holds an object's lock: the object's lock skips its ticket
//!   (see `loco-locks`' Failures), so the object stays usable; the next operation on it runs
//!   after a critical section that may have stopped half-way. For SC locations that is harmless
//!   (each critical section is one remote access, which happened or did not); for a ported
//!   structure the state written by the dead thread may be partial, and the next operation's
//!   [`Words::was_poisoned`] says so (through [`Ported::with`]; the typed operations of the
//!   ready structures go on, refusing a state their layout cannot hold).
//! - The calling thread's own node dies just after an operation returned `Ok`: what the
//!   operation wrote may be lost with it. `write_sc` and a [`Ported`] operation return without
//!   waiting for their puts (and the release) to land (docs/model.md §5.6), and a dead node's
//!   requests that had not reached their target are dropped; the next holder of the object's
//!   lock then finds the value before the write (a ported structure's next operation is told,
//!   [`Words::was_poisoned`]). A write is sure to have landed once the same thread's next
//!   operation on an object of the same node has returned (its acquire's atomic waits behind
//!   the put on the queue pair), or after `loco-sv`'s `gf` towards that node. The survivors'
//!   operations stay linearizable among themselves.
//! - An operation that waits longer than the cluster's timeout (the lock, or the fetch's
//!   `wait`) fails with a timeout ([`Error::Lock`] with `Timeout`, or [`Error::Rdma`] with
//!   `Timeout`); a ticket it took is abandoned, never left blocking others. Its effect is then
//!   unknown (a fetch that timed out may still have happened).
//! - [`Cluster::shutdown`](loco_rdmawait::Cluster::shutdown): operations in progress return
//!   `Shutdown`.
//!
//! # Implementation
//! Exactly Fig. 14 (docs/model.md §5.6): each location x on node n has its own `nlock@n`; `write_sc` is
//! `acquire; store(b, v); put(x, b); release` with no wait, the others `acquire; get|rcas|rfaa(x,
//! ret = a); release; wait(d)`. The scratch words `a` and `b` are per (thread, location), on the
//! thread's node: the write's put reads `b` late, and only an operation towards the same node
//! (whose acquire waits behind the put on the same queue pair) may reuse it. The library's
//! operations use reserved work ids ([`WorkId::internal`](loco_rdmawait::WorkId::internal)), so
//! user waits never wait for them.
//!
//! Observability: `tracing` events under the target `loco::sc` (trace level).

#![forbid(unsafe_code)]

mod error;
pub mod lincheck;
mod object;
pub mod port;
pub mod protocol;
mod sc;

pub use error::{Error, LayoutError, Result};
pub use port::{
    BoundedQueue, Decoder, Encoder, FixedHashMap, MapOp, MapRet, Ported, QueueOp, QueueRet,
    Sequential, Words,
};
pub use port::{PortedHashMap, PortedQueue};
pub use sc::{Sc, ScLoc};
