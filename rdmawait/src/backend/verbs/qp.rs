//! Reliable-connected queue pairs: creation, the RESET → INIT → RTR → RTS walk, and what two ends
//! exchange to connect.

use std::net::Ipv6Addr;
use std::sync::Arc;

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
};
use sideway::ibverbs::AccessFlags;

use super::device::Device;
use super::{verbs_error, verbs_source};
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

/// Creates an RC queue pair with `send_depth` send-queue entries (one receive entry: the backend
/// never receives) on `cq`, moved to INIT. Returns it with the send-queue capacity the device
/// actually granted (rxe rounds up: docs/verbs-notes.md, pitfall 6).
pub(crate) fn create(
    device: &Device,
    pd: &Arc<ProtectionDomain>,
    cq: &Arc<BasicCompletionQueue>,
    send_depth: u32,
) -> Result<(BasicQueuePair, usize)> {
    let mut qp = pd
        .create_qp_builder()
        .setup_max_send_wr(send_depth)
        .setup_max_recv_wr(1)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .build()
        .map_err(|e| verbs_source("ibv_create_qp failed", e))?;
    let (_, init) = qp
        .query(QueuePairAttributeMask::Capabilities)
        .map_err(|e| verbs_source("ibv_query_qp (capabilities) failed", e))?;
    let capacity = init.max_send_wr() as usize;
    if capacity == 0 {
        return Err(verbs_error("the device granted a send queue of 0 entries"));
    }
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(device.port)
        .setup_access_flags(remote_access());
    qp.modify(&attr)
        .map_err(|e| verbs_source("moving a queue pair to INIT failed", e))?;
    Ok((qp, capacity))
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
/// caches stays RTS after a remote access error (docs/verbs-notes.md, pitfall 3).
pub(crate) fn in_error(qp: &BasicQueuePair) -> bool {
    match qp.query(QueuePairAttributeMask::State) {
        Ok((attr, _)) => matches!(
            attr.state(),
            QueuePairState::Error | QueuePairState::SendQueueError
        ),
        Err(_) => false,
    }
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
