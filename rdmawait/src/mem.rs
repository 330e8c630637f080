//! Raw memory for NIC registration: zeroed, page-aligned runs of 8-byte words.
//!
//! A NIC writes registered memory behind the compiler's back (RDMA WRITE, READ responses, atomic
//! results), so Rust must never hold a `&mut` or a plain `&u64` to it: it is seen only as
//! `&[AtomicU64]`, whose accesses are all atomic and so stay sound whatever the NIC does between
//! them. [`Words`] owns such a block; the verbs backend registers [`Words::addr`] ..
//! `addr + len_bytes` as a memory region and keeps the region in a field declared *before* the
//! `Words` (fields drop in order: deregister first, then free).

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::{Error, Result, WORD};

/// Alignment of every block: a page, so that a registered region never shares a page with
/// unrelated heap data (NICs pin and map whole pages).
pub(crate) const PAGE: usize = 4096;

/// An owned, zeroed, page-aligned block of words, seen by Rust only as `&[AtomicU64]`.
#[derive(Debug)]
pub(crate) struct Words {
    ptr: NonNull<AtomicU64>,
    len: usize,
    layout: Layout,
}

// SAFETY: `Words` owns its block exclusively (like `Box<[AtomicU64]>`), and every access through
// it goes through `AtomicU64`, which is `Sync`; sending or sharing the owner is as safe as for
// the box.
unsafe impl Send for Words {}
// SAFETY: see `Send`: shared access is only ever via `&[AtomicU64]`.
unsafe impl Sync for Words {}

impl Words {
    /// Allocates `len` zeroed words (at least one page, rounded up to whole pages).
    pub(crate) fn zeroed(len: usize) -> Result<Words> {
        let bytes = len
            .checked_mul(WORD as usize)
            .and_then(|b| b.max(1).checked_next_multiple_of(PAGE))
            .ok_or_else(|| too_big(len))?;
        let layout = Layout::from_size_align(bytes, PAGE).map_err(|_| too_big(len))?;
        // SAFETY: `layout` has a non-zero size (at least one page) and a power-of-two alignment.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<AtomicU64>()).ok_or_else(|| Error::Backend {
            backend: "verbs",
            message: format!("cannot allocate {bytes} bytes of registered memory"),
            source: None,
        })?;
        Ok(Words { ptr, len, layout })
    }

    /// The words.
    pub(crate) fn as_slice(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` points to `layout.size() >= len * 8` bytes, allocated zeroed (a valid
        // `AtomicU64` bit pattern), aligned to a page (more than `AtomicU64` needs), owned by
        // `self` and freed only in `drop`; the slice borrows `self`. Concurrent writes by a NIC
        // are like writes by another thread through atomics: no `&mut` to the block ever exists.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Address of the first word (for memory registration and remote addresses).
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Size of the block in bytes, as registered: the words, rounded up to whole pages.
    pub(crate) fn len_bytes(&self) -> usize {
        self.layout.size()
    }

    /// Number of words.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed(self.layout)` and is freed only here. The
        // owner deregisters any memory region over the block before dropping it (field order),
        // so no NIC accesses it afterwards.
        unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
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
}
