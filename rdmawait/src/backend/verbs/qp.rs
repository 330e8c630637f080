//! Reliable-connected queue pairs: creation, the RESET → INIT → RTR → RTS walk, what two ends
//! exchange to connect, and how a queue pair is stopped and destroyed ([`Qp`]).

use std::mem::{ManuallyDrop, MaybeUninit};
use std::net::Ipv6Addr;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use rdma_mummy_sys as sys;

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
};
use sideway::ibverbs::AccessFlags;

use super::device::Device;
use super::{verbs_error, verbs_source, LocalNode};
use crate::Result;

pub(crate) use crate::backend::rendezvous::wire::Endpoint;

/// How a queue pair's transport behaves when the peer stops answering.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transport {
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout per try.
    pub(crate) timeout: u8,
    /// Retries before the request fails with `IBV_WC_RETRY_EXC_ERR`.
    pub(crate) retry_count: u8,
}

/// Access a queue pair grants to incoming requests: everything the operations need.
pub(crate) fn remote_access() -> AccessFlags {
    AccessFlags::LocalWrite
        | AccessFlags::RemoteRead
        | AccessFlags::RemoteWrite
        | AccessFlags::RemoteAtomic
}

/// A queue pair in the protection domain of a node of this process: it can write that node's
/// registered memory (incoming WRITEs and atomics as a responder, READ and atomic results as a
/// requester). So it holds the node, and with it the memory region, until it is destroyed: the
/// region is never deregistered while the queue pair exists, whatever the drop order.
///
/// Dropping it first moves it to the error state (it stops touching memory even if what follows
/// fails), then destroys it. Neither step may panic: sideway's own `Drop` asserts that
/// `ibv_destroy_qp` succeeded, so it runs under `catch_unwind`; should the queue pair not stop
/// or not go, it is leaked together with its completion queue and node (memory included), and
/// the failure is logged (docs/verbs-notes.md, pitfall 8).
pub(crate) struct Qp {
    // Fields are dropped by hand in `Drop`, queue pair first.
    qp: ManuallyDrop<BasicQueuePair>,
    /// The completion queue the queue pair reports to: it may not be destroyed before the
    /// queue pair (sideway's `Drop` of a completion queue asserts too).
    cq: ManuallyDrop<Cq>,
    node: ManuallyDrop<Arc<LocalNode>>,
}

/// A completion queue handle whose drop cannot panic: sideway's `Drop` of the last handle
/// asserts that `ibv_destroy_cq` succeeded; here a failure leaks the queue and is logged
/// (docs/verbs-notes.md, pitfall 8). Every handle the backend keeps is one of these.
pub(crate) struct Cq(ManuallyDrop<Arc<BasicCompletionQueue>>);

impl Cq {
    pub(crate) fn new(cq: Arc<BasicCompletionQueue>) -> Cq {
        Cq(ManuallyDrop::new(cq))
    }
}

impl Clone for Cq {
    fn clone(&self) -> Cq {
        Cq::new(Arc::clone(&self.0))
    }
}

impl Deref for Cq {
    type Target = Arc<BasicCompletionQueue>;
    fn deref(&self) -> &Arc<BasicCompletionQueue> {
        &self.0
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the handle is dropped exactly once, here, and never used again; if the drop
        // unwinds, what is left of it is leaked.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe {
            ManuallyDrop::drop(&mut self.0)
        }));
        if dropped.is_err() {
            tracing::error!(target: "loco::rdmawait",
                "ibv_destroy_cq failed: the completion queue is leaked");
        }
    }
}

impl Deref for Qp {
    type Target = BasicQueuePair;

    fn deref(&self) -> &BasicQueuePair {
        &self.qp
    }
}

impl DerefMut for Qp {
    fn deref_mut(&mut self) -> &mut BasicQueuePair {
        &mut self.qp
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let node = self.node.id;
        if !stop(&self.qp) {
            tracing::error!(target: "loco::rdmawait", %node, qpn = self.qp.qp_number(),
                "a queue pair could not be moved to the error state: it is leaked, and with it \
                 the node's registered memory, which it might still write");
            return;
        }
        // SAFETY: `qp` is dropped exactly once, here, and never used again (this is `drop`;
        // if the drop unwinds, the leak below never touches it).
        let destroyed = catch_unwind(AssertUnwindSafe(|| unsafe {
            ManuallyDrop::drop(&mut self.qp)
        }))
        .is_ok();
        if !destroyed {
            tracing::error!(target: "loco::rdmawait", %node,
                "ibv_destroy_qp failed: the queue pair (in the error state) is leaked, with its \
                 completion queue and the node's registered memory");
            return;
        }
        tracing::trace!(target: "loco::rdmawait", %node, "queue pair destroyed");
        // SAFETY: dropped exactly once, here, after the queue pair that used them is gone.
        unsafe {
            ManuallyDrop::drop(&mut self.cq);
            ManuallyDrop::drop(&mut self.node);
        }
    }
}

/// Moves `qp` to the error state with raw verbs calls (no conversion that could panic:
/// docs/verbs-notes.md, pitfall 5). True if it is there, or in a state in which it never
/// touches memory (RESET, INIT).
fn stop(qp: &BasicQueuePair) -> bool {
    // SAFETY: the queue pair is alive (borrowed); `attr` is a zeroed `ibv_qp_attr` (plain
    // integers and structs of integers) with only the state set, as the mask says.
    let ret = unsafe {
        let mut attr = MaybeUninit::<sys::ibv_qp_attr>::zeroed().assume_init();
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
        sys::ibv_modify_qp(
            qp.qp().as_ptr(),
            &mut attr,
            sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
        )
    };
    ret == 0
        || matches!(
            raw_state(qp),
            Some(
                sys::ibv_qp_state::IBV_QPS_ERR
                    | sys::ibv_qp_state::IBV_QPS_RESET
                    | sys::ibv_qp_state::IBV_QPS_INIT
            )
        )
}

/// The queue pair's state as the device reports it (`ibv_query_qp`), as the raw `ibv_qp_state`.
fn raw_state(qp: &BasicQueuePair) -> Option<u32> {
    // SAFETY: the queue pair is alive (borrowed); both attribute structs hold only integers,
    // arrays and raw pointers, for which all-zero is valid, and the call fills them in.
    unsafe {
        let mut attr = MaybeUninit::<sys::ibv_qp_attr>::zeroed().assume_init();
        let mut init = MaybeUninit::<sys::ibv_qp_init_attr>::zeroed().assume_init();
        let ret = sys::ibv_query_qp(
            qp.qp().as_ptr(),
            &mut attr,
            sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
            &mut init,
        );
        (ret == 0).then_some(attr.qp_state)
    }
}

/// Bytes of inline data asked for per send-queue entry: a put of up to this many bytes is
/// copied into the request at post time (`IBV_SEND_INLINE`), sparing the NIC the DMA read of
/// its source; 64 bytes is a cache line, 8 words. A device that refuses inline data gets a
/// queue pair without it.
pub(crate) const INLINE_WANTED: u32 = 64;

/// What [`create`] made.
pub(crate) struct Created {
    pub(crate) qp: Qp,
    /// Send-queue entries the device actually granted (rxe rounds up: docs/verbs-notes.md,
    /// pitfall 6).
    pub(crate) capacity: usize,
    /// Inline bytes the device granted per request (0: none).
    pub(crate) max_inline: u32,
}

/// Creates an RC queue pair in `node`'s protection domain with `send_depth` send-queue entries
/// (one receive entry: the backend never receives) on `cq`, moved to INIT, with up to
/// [`INLINE_WANTED`] bytes of inline data if the device allows it.
pub(crate) fn create(
    device: &Device,
    node: &Arc<LocalNode>,
    cq: &Arc<BasicCompletionQueue>,
    send_depth: u32,
) -> Result<Created> {
    let build = |inline: u32| {
        node.pd
            .create_qp_builder()
            .setup_max_send_wr(send_depth)
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(inline)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .build()
    };
    let qp = match build(INLINE_WANTED) {
        Ok(qp) => qp,
        Err(e) => {
            tracing::debug!(target: "loco::rdmawait", error = %e, "no inline data: a queue pair without it");
            build(0).map_err(|e| verbs_source("ibv_create_qp failed", e))?
        }
    };
    // Wrapped at once: from here on, an error destroys the queue pair before the node can go.
    let mut qp = Qp {
        qp: ManuallyDrop::new(qp),
        cq: ManuallyDrop::new(Cq::new(cq.clone())),
        node: ManuallyDrop::new(node.clone()),
    };
    let (_, init) = qp
        .query(QueuePairAttributeMask::Capabilities)
        .map_err(|e| verbs_source("ibv_query_qp (capabilities) failed", e))?;
    let capacity = init.max_send_wr() as usize;
    if capacity == 0 {
        return Err(verbs_error("the device granted a send queue of 0 entries"));
    }
    let max_inline = init.max_inline_data();
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(device.port)
        .setup_access_flags(remote_access());
    qp.modify(&attr)
        .map_err(|e| verbs_source("moving a queue pair to INIT failed", e))?;
    Ok(Created {
        qp,
        capacity,
        max_inline,
    })
}

/// This end of `qp`, starting its send queue at `psn`.
pub(crate) fn endpoint(device: &Device, qp: &BasicQueuePair, psn: u32) -> Endpoint {
    Endpoint {
        qpn: qp.qp_number(),
        psn,
        lid: device.lid,
        gid: device.gid,
        mtu: device.mtu,
    }
}

/// Connects `qp` (in INIT, local end `local`) to `remote` and makes it ready to send.
pub(crate) fn connect(
    device: &Device,
    qp: &mut BasicQueuePair,
    local: &Endpoint,
    remote: &Endpoint,
    transport: Transport,
) -> Result<()> {
    let mut ah = AddressHandleAttribute::new();
    ah.setup_port(device.port).setup_dest_lid(remote.lid);
    if let Some(index) = device.gid_index {
        ah.setup_grh_dest_gid(&Gid::from(Ipv6Addr::from(remote.gid)))
            .setup_grh_src_gid_index(index)
            .setup_grh_hop_limit(64);
    }
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(mtu(local.mtu.min(remote.mtu)))
        .setup_dest_qp_num(remote.qpn)
        .setup_rq_psn(remote.psn)
        .setup_max_dest_read_atomic(device.max_dest_rd_atomic)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&ah);
    qp.modify(&rtr)
        .map_err(|e| verbs_source("moving a queue pair to RTR failed", e))?;
    let mut rts = QueuePairAttribute::new();
    rts.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(local.psn)
        .setup_timeout(transport.timeout)
        .setup_retry_cnt(transport.retry_count)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(device.max_rd_atomic);
    qp.modify(&rts)
        .map_err(|e| verbs_source("moving a queue pair to RTS failed", e))?;
    Ok(())
}

/// Moves `qp` to the error state: its outstanding requests complete with `IBV_WC_WR_FLUSH_ERR`.
pub(crate) fn fail(qp: &mut BasicQueuePair) -> Result<()> {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Error);
    qp.modify(&attr)
        .map_err(|e| verbs_source("moving a queue pair to ERR failed", e))
}

/// Whether the device says `qp` is in an error state. Queries the device: the state sideway
/// caches stays RTS after a remote access error (docs/verbs-notes.md, pitfall 3); raw, since
/// sideway's conversion of the state panics on values it does not know (pitfall 5).
pub(crate) fn in_error(qp: &BasicQueuePair) -> bool {
    matches!(
        raw_state(qp),
        Some(sys::ibv_qp_state::IBV_QPS_ERR | sys::ibv_qp_state::IBV_QPS_SQE)
    )
}

/// A random initial packet sequence number (24 bits).
pub(crate) fn random_psn() -> u32 {
    rand::random::<u32>() & 0x00ff_ffff
}

fn mtu(code: u8) -> Mtu {
    match code {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}
