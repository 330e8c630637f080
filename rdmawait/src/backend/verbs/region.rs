//! A node's registered memory: its block of words and the memory region over it.
//!
//! Registered and deregistered with raw `ibv_reg_mr` / `ibv_dereg_mr` rather than sideway's
//! `MemoryRegion`, whose `Drop` ignores what `ibv_dereg_mr` returns: here a failed
//! deregistration is logged and the block leaked, never freed, since the NIC may still write it
//! ([`Registered`] makes that decision, and tests it without a device). Every queue pair that can
//! write the block holds the node (see [`qp::Qp`]), so it is destroyed before the
//! region is deregistered, whatever the order in which the backend's parts are dropped.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys as sys;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::{qp, NodeInfo};
use crate::mem::{Deregister, Registered, Words};
use crate::{Error, NodeId, Result};

/// A node's memory, registered with the device for local write, remote read, remote write and
/// remote atomics. Dropping it deregisters the region, then frees the block (or leaks it if the
/// deregistration failed).
pub(crate) struct RegisteredMemory(Registered<Region>);

/// A registered memory region; holds its protection domain, which must outlive it.
struct Region {
    mr: NonNull<sys::ibv_mr>,
    lkey: u32,
    rkey: u32,
    /// Kept until the region is deregistered (and leaked with it if that fails: a protection
    /// domain with a region in it cannot be deallocated).
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: `mr` is only passed to `ibv_dereg_mr`, once, from `deregister` (which takes `&mut
// self`); libibverbs objects may be used and released from any thread. The keys are copies.
unsafe impl Send for Region {}
// SAFETY: shared access reads only the copied keys, never the pointer.
unsafe impl Sync for Region {}

impl Deregister for Region {
    fn deregister(&mut self) -> io::Result<()> {
        // SAFETY: `mr` came from a successful `ibv_reg_mr` and is deregistered only here: the
        // `Registered` owning this region calls `deregister` at most once, and never uses the
        // region again whatever the result. Its protection domain (`_pd`) is still alive.
        let ret = unsafe { sys::ibv_dereg_mr(self.mr.as_ptr()) };
        match ret {
            0 => Ok(()),
            // libibverbs returns an errno value (positive; some providers return it negated).
            e => Err(io::Error::from_raw_os_error(e.saturating_abs())),
        }
    }
}

impl RegisteredMemory {
    /// Allocates `words` zeroed words for `node` and registers them in `pd`.
    pub(crate) fn register(
        pd: &Arc<ProtectionDomain>,
        node: NodeId,
        words: usize,
    ) -> Result<RegisteredMemory> {
        let block = Words::zeroed(words)?;
        let len = block.len_bytes();
        // SAFETY: `pd` is a live protection domain (borrowed, and kept alive by the `Region`
        // for as long as the region exists). `block` is a live allocation of `len` bytes that
        // stays allocated at the same address until the region is deregistered: both go into
        // the `Registered` below, which frees the block only after a successful
        // deregistration. Rust touches the block only through atomics, so the NIC writing it at
        // any time is sound.
        let mr = unsafe {
            sys::ibv_reg_mr(
                pd.pd().as_ptr(),
                block.addr() as *mut std::ffi::c_void,
                len,
                qp::remote_access().bits(),
            )
        };
        let Some(mr) = NonNull::new(mr) else {
            // Nothing was registered: `block` is freed on return.
            let os = io::Error::last_os_error();
            let mut message = format!("ibv_reg_mr of {len} bytes failed");
            if os.raw_os_error() == Some(libc::ENOMEM) {
                message.push_str(" (the locked-memory limit? see `ulimit -l`)");
            }
            return Err(Error::Backend {
                backend: "verbs",
                message,
                source: Some(os),
            });
        };
        // SAFETY: `mr` points to the `ibv_mr` libibverbs just returned, valid until
        // deregistration; the keys are plain integers read once.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        let region = Region {
            mr,
            lkey,
            rkey,
            _pd: pd.clone(),
        };
        let what = format!("{node}'s {len} bytes at {:#x}", block.addr());
        Ok(RegisteredMemory(Registered::new(region, block, what)))
    }

    /// The words, as Rust sees them (atomics only).
    pub(crate) fn words(&self) -> &Words {
        self.0.block()
    }

    /// The local key, for requests whose local buffer is in this memory.
    pub(crate) fn lkey(&self) -> u32 {
        self.0.reg().lkey
    }

    /// How remote requests address this memory.
    pub(crate) fn info(&self) -> NodeInfo {
        NodeInfo {
            addr: self.words().addr() as u64,
            rkey: self.0.reg().rkey,
            words: self.words().len() as u64,
        }
    }
}

impl std::fmt::Debug for RegisteredMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredMemory")
            .field("addr", &format_args!("{:#x}", self.words().addr()))
            .field("words", &self.words().len())
            .finish()
    }
}
