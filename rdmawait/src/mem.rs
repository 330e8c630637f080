//! Raw memory for NIC registration: zeroed, page-aligned runs of 8-byte words.
//!
//! A NIC writes registered memory behind the compiler's back (RDMA WRITE, READ responses, atomic
//! results), so Rust must never hold a `&mut` or a plain `&u64` to it: it is seen only as
//! `&[AtomicU64]`, whose accesses are all atomic and so stay sound whatever the NIC does between
//! them. [`Words`] owns such a block; the verbs backend registers [`Words::addr`] ..
//! `addr + len_bytes` as a memory region, and [`Registered`] owns the block together with its
//! registration: dropping it deregisters first and frees the block only if that succeeded. A
//! failed deregistration leaks the block (and the registration): a NIC that may still write
//! into memory must never see it handed back to the allocator.

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::io;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::{Error, Result, WORD};

/// Alignment of every block: a page, so that a registered region never shares a page with
/// unrelated heap data (NICs pin and map whole pages).
pub(crate) const PAGE: usize = 4096;

/// An owned, zeroed, page-aligned block of words, seen by Rust only as `&[AtomicU64]`.
#[derive(Debug)]
pub(crate) struct Words {
    /// The first word: the first page boundary in the allocation.
    ptr: NonNull<AtomicU64>,
    len: usize,
    /// The allocation: one page more than the block, at the allocator's smallest alignment.
    base: NonNull<u8>,
    layout: Layout,
    /// The block's size, whole pages.
    bytes: usize,
}

// SAFETY: `Words` owns its block exclusively (like `Box<[AtomicU64]>`), and every access through
// it goes through `AtomicU64`, which is `Sync`; sending or sharing the owner is as safe as for
// the box.
unsafe impl Send for Words {}
// SAFETY: see `Send`: shared access is only ever via `&[AtomicU64]`.
unsafe impl Sync for Words {}

impl Words {
    /// Allocates `len` zeroed words (at least one page, rounded up to whole pages).
    ///
    /// Allocated as one page more than asked at a small alignment and aligned by hand, because
    /// a page-aligned `alloc_zeroed` is an allocation followed by a `memset` of every page,
    /// where a small-aligned one is `calloc`, whose large blocks are fresh pages the OS zeroes
    /// on first touch: a soft-NIC cluster with gigabytes of node memory costs only what it
    /// uses (it used to write every byte before the first operation).
    pub(crate) fn zeroed(len: usize) -> Result<Words> {
        let bytes = len
            .checked_mul(WORD as usize)
            .and_then(|b| b.max(1).checked_next_multiple_of(PAGE))
            .ok_or_else(|| too_big(len))?;
        let layout = bytes
            .checked_add(PAGE)
            .and_then(|size| Layout::from_size_align(size, 16).ok())
            .ok_or_else(|| too_big(len))?;
        // SAFETY: `layout` has a non-zero size (at least two pages) and a power-of-two alignment.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or_else(|| Error::Backend {
            backend: "verbs",
            message: format!("cannot allocate {bytes} bytes of registered memory"),
            source: None,
        })?;
        let skip = raw.align_offset(PAGE);
        // `align_offset` may give up (`usize::MAX`) in const contexts only; never at run time
        // for a `u8` pointer, but a block that would not fit is refused rather than trusted.
        if skip >= PAGE {
            // SAFETY: `raw` was just returned by `alloc_zeroed(layout)`.
            unsafe { alloc::dealloc(raw, layout) };
            return Err(too_big(len));
        }
        // SAFETY: `skip < PAGE`, so `raw + skip .. raw + skip + bytes` lies within the
        // allocation of `bytes + PAGE` bytes; the result is non-null (inside a live allocation).
        let ptr = unsafe { NonNull::new_unchecked(raw.add(skip).cast::<AtomicU64>()) };
        Ok(Words {
            ptr,
            len,
            base,
            layout,
            bytes,
        })
    }

    /// The words.
    pub(crate) fn as_slice(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` points to `bytes >= len * 8` bytes inside the allocation, allocated
        // zeroed (a valid `AtomicU64` bit pattern), aligned to a page (more than `AtomicU64`
        // needs), owned by `self` and freed only in `drop`; the slice borrows `self`. Concurrent writes by a NIC
        // are like writes by another thread through atomics: no `&mut` to the block ever exists.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Address of the first word (for memory registration and remote addresses).
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Size of the block in bytes, as registered: the words, rounded up to whole pages.
    pub(crate) fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// Number of words.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: `base` was returned by `alloc_zeroed(self.layout)` and is freed only here. A
        // registered block is owned by a `Registered`, which drops it only once its memory
        // region is deregistered (and leaks it otherwise), so no NIC accesses it afterwards.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A registration of memory with a NIC (a verbs memory region), as [`Registered`] ends it.
pub(crate) trait Deregister {
    /// Ends the registration: once this returns `Ok`, the NIC no longer accesses the memory.
    /// Called at most once; on `Err` the registration is leaked, never dropped.
    fn deregister(&mut self) -> io::Result<()>;
}

/// A block of memory and its registration with a NIC. Dropping it deregisters, then frees the
/// block only if deregistration succeeded; on failure it logs and leaks both (the NIC may still
/// write the block, so it must never be reused). Never panics in `drop`.
///
/// The block is generic only so that the leak-on-failure decision can be tested without a
/// device; the verbs backend uses [`Words`].
pub(crate) struct Registered<R: Deregister, B = Words> {
    // Both dropped only by `Drop::drop`, and only after a successful deregistration.
    reg: ManuallyDrop<R>,
    block: ManuallyDrop<B>,
    /// What the block is, for the log line of a failed deregistration.
    what: String,
}

impl<R: Deregister, B> Registered<R, B> {
    /// Takes ownership of `block` and of `reg`, a registration covering it (made by the caller,
    /// which also guarantees that `block` stays at its address while `reg` exists: moving a
    /// `Words` does not move its memory).
    pub(crate) fn new(reg: R, block: B, what: String) -> Self {
        Registered {
            reg: ManuallyDrop::new(reg),
            block: ManuallyDrop::new(block),
            what,
        }
    }

    /// The registration.
    pub(crate) fn reg(&self) -> &R {
        &self.reg
    }

    /// The block.
    pub(crate) fn block(&self) -> &B {
        &self.block
    }
}

impl<R: Deregister, B> Drop for Registered<R, B> {
    fn drop(&mut self) {
        match self.reg.deregister() {
            Ok(()) => {
                // SAFETY: `reg` and `block` are dropped exactly once, here, and never used again
                // (this is `drop`). The block goes only after the deregistration succeeded, so
                // no NIC accesses it any more.
                unsafe {
                    ManuallyDrop::drop(&mut self.reg);
                    ManuallyDrop::drop(&mut self.block);
                }
                tracing::debug!(target: "loco::rdmawait", what = %self.what,
                    "registered memory deregistered and freed");
            }
            Err(e) => {
                // Leaked on purpose: `reg` and `block` are `ManuallyDrop`, so returning without
                // dropping them keeps the memory allocated (and the protection domain the
                // registration holds alive) for the rest of the process.
                tracing::error!(target: "loco::rdmawait", what = %self.what, error = %e,
                    "deregistering memory failed: the memory is leaked, not freed, since the NIC may still write it");
            }
        }
    }
}

fn too_big(len: usize) -> Error {
    Error::Backend {
        backend: "verbs",
        message: format!("{len} words of registered memory is more than this machine can address"),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn zeroed_page_aligned_words() {
        let w = Words::zeroed(3).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w.addr() % PAGE, 0);
        assert_eq!(w.len_bytes(), PAGE);
        assert!(w.as_slice().iter().all(|x| x.load(SeqCst) == 0));
        w.as_slice()[2].store(7, SeqCst);
        assert_eq!(w.as_slice()[2].load(SeqCst), 7);
        let big = Words::zeroed(PAGE).unwrap();
        assert_eq!(big.len_bytes(), PAGE * 8);
        assert_eq!(Words::zeroed(0).unwrap().len_bytes(), PAGE);
    }

    #[test]
    fn absurd_sizes_fail() {
        assert!(Words::zeroed(usize::MAX).is_err());
    }

    use std::sync::{Arc, Mutex};

    type Log = Arc<Mutex<Vec<&'static str>>>;

    /// A registration whose deregistration succeeds or fails as told, logging what happens.
    struct FakeReg {
        fail: bool,
        log: Log,
    }

    impl Deregister for FakeReg {
        fn deregister(&mut self) -> io::Result<()> {
            self.log.lock().unwrap().push("deregister");
            if self.fail {
                Err(io::Error::from_raw_os_error(16)) // EBUSY
            } else {
                Ok(())
            }
        }
    }

    impl Drop for FakeReg {
        fn drop(&mut self) {
            self.log.lock().unwrap().push("registration dropped");
        }
    }

    /// A block that logs when it is freed.
    struct FakeBlock(Log);

    impl Drop for FakeBlock {
        fn drop(&mut self) {
            self.0.lock().unwrap().push("block freed");
        }
    }

    fn registered(fail: bool) -> (Registered<FakeReg, FakeBlock>, Log) {
        let log = Log::default();
        let reg = FakeReg {
            fail,
            log: log.clone(),
        };
        let r = Registered::new(reg, FakeBlock(log.clone()), "test block".into());
        (r, log)
    }

    #[test]
    fn block_is_freed_only_after_deregistration() {
        let (r, log) = registered(false);
        drop(r);
        assert_eq!(
            *log.lock().unwrap(),
            ["deregister", "registration dropped", "block freed"]
        );
    }

    #[test]
    fn failed_deregistration_leaks_the_block() {
        let (r, log) = registered(true);
        drop(r); // must not panic
        assert_eq!(*log.lock().unwrap(), ["deregister"]);
    }

    #[test]
    fn failed_deregistration_does_not_panic_while_unwinding() {
        let (r, log) = registered(true);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _r = r;
            panic!("a panic that drops registered memory");
        }));
        assert!(caught.is_err());
        assert_eq!(*log.lock().unwrap(), ["deregister"]);
    }
}
