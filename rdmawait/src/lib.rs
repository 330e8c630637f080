//! RDMA put/get over reliable-connected queue pairs, with work-id waits and remote fences: the
//! paper's **rdmawait** library (docs/model.md §2), and the raw **rdmatso** layer beneath it.
//!
//! A [`Cluster`] is a set of nodes, each with registered memory; a thread binds to a node with
//! [`Cluster::context`] and gets a [`Ctx`] with one queue pair towards every node. Everything runs
//! over a NIC [`backend`]: the in-process soft NIC (default), which executes the operational model
//! of docs/model.md §4, or real ibverbs devices (feature `verbs`).
//!
//! ```
//! use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
//!
//! let cluster = Cluster::builder().nodes(2).soft(Schedule::Threaded).build()?;
//! let src = cluster.alloc_word(NodeId(0))?;
//! let dst = cluster.alloc_word(NodeId(1))?;
//! let back = cluster.alloc_word(NodeId(0))?;
//! let ctx = cluster.context(NodeId(0))?;
//! let d = WorkId::new(1);
//!
//! ctx.store(&src, 7)?;
//! ctx.put(&dst, &src, d)?;   // RDMA WRITE n0 -> n1
//! ctx.get(&back, &dst, d)?;  // RDMA READ n1 -> n0, same queue pair: sees the put
//! ctx.wait(d)?;
//! assert_eq!(ctx.load(&back)?, 7);
//! # Ok::<(), loco_rdmawait::Error>(())
//! ```
//!
//! Section and rule numbers cited here (`docs/model.md §5.2`, `rule 6`) are those of the
//! project's [model page][loco-model]; the [docs index][loco-docs] lists the other reference
//! pages.
//!
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//! [loco-docs]: https://github.com/loco-rs/loco-rs/blob/main/docs/README.md
//!
//! # Guarantees
//! See [`Ctx`] (docs/model.md §3): per-queue-pair ordering with the two exceptions of §3.3, puts reading
//! their source late (Fig. 2), `wait` not covering remote writes (Fig. 5), x86-TSO for the CPU.
//!
//! # Errors
//! Every operation returns [`Result`]; bad locations (misaligned, out of range, foreign, not
//! local), unknown nodes, timeouts, failed completions, dead peers and shut-down clusters are
//! [`Error`]s. No value a caller passes makes the library panic, abort or hang: raw
//! [`WorkRequest`]s given to [`Ctx::post`] are range-checked, sizes and offsets near `u64::MAX`
//! are checked arithmetic, memory that cannot be allocated is an error of
//! [`ClusterBuilder::build`], and a [`Duration::MAX`](std::time::Duration::MAX) timeout means
//! "as long as needed".
//!
//! # Failures
//! A node can die ([`Cluster::kill`] injects it on the soft NIC; the verbs backend detects dead
//! peers). From then on every call that depends on it fails with [`Error::PeerDead`] naming it,
//! a blocked `wait` or `poll` included, while calls between live nodes keep working; a dead
//! incarnation is never recovered. [`Cluster::kill`] and the [soft NIC's docs](backend::soft) say
//! exactly what fails and when. [`Cluster::shutdown`] frees every blocked call with
//! [`Error::Shutdown`].
//!
//! A node can come back as a **new incarnation** ([`Cluster::restart`] on the soft NIC; on the
//! verbs backend, its process started again under the same node id rejoins by itself, once the
//! others have declared the old one dead and fenced it out). [`Cluster::incarnation`] tells
//! incarnations apart. What survives: the node's memory starts zeroed (values that lived on it
//! are lost; objects are re-created in the same order so that layouts agree); nothing the dead
//! incarnation posted, or that was posted to it, lands in the new one; contexts opened before the
//! restart never reach the new incarnation (their calls towards it fail with [`Error::PeerDead`]
//! saying it restarted; on the restarted node, all their calls do): open a new context.
//!
//! # Observability
//! Posts, completions, waits and errors are `tracing` events under the target
//! `loco::rdmawait` (trace and debug levels); they cost nothing without a subscriber.
//!
//! # Features
//! - `verbs`: the ibverbs backend for real RDMA devices.
//! - `tokio`: module `aio`, futures for every operation (work-id waits, and the blocking calls of
//!   the layers above: lock acquires, global fences, SC operations) for tokio services; with
//!   `verbs`, completions wake tasks through the completion channel.
//!
//! # Choosing the backend at run time
//! [`ClusterBuilder::backend_from_env`] switches a builder to the backend `LOCO_BACKEND` names
//! (`soft`, the default, or `verbs`; see [`BackendKind`]): the same program, or test, then runs on
//! the soft NIC or on a real device without being rebuilt. [`testing`] has the few helpers
//! backend-generic tests share (run counts per backend, which outcomes to expect).

#![deny(unsafe_code)]

#[cfg(feature = "tokio")]
pub mod aio;
pub mod backend;
pub mod clock;
mod cluster;
mod ctx;
mod error;
// The soft NIC's memory too: fallible, zeroed allocation (some helpers serve only verbs).
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
mod mem;
pub mod model;
pub mod peer_list;
pub mod protocol;
pub mod sim;
pub mod testing;
mod types;

pub use backend::soft::{Schedule, SoftBackend, MAX_SOFT_MEMORY};
pub use backend::WorkRequest;
pub use cluster::{BackendKind, Cluster, ClusterBuilder, MadeOn, DEFAULT_MEMORY, DEFAULT_TIMEOUT};
#[allow(deprecated)]
pub use ctx::{Ctx, Raw, RdmaTso, Settled, DROP_SETTLE};
pub use error::{Error, RdmaCause, Result, TimeoutKind};
pub use model::FailedCas;
pub use types::{FenceRead, Loc, NodeId, WorkId, FENCE_CAS_EXPECTED, WORD};

#[cfg(feature = "verbs")]
pub use backend::verbs::{Bootstrap, VerbsBackend, VerbsConfig};
