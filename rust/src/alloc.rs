//! The process allocator: jemalloc, with one guard: huge reservations get address space, not
//! memory.
//!
//! jemalloc rather than glibc's malloc because the data plane allocates and frees buffers of
//! megabytes all the time (request frames, write-ahead objects, segments). glibc maps each of
//! those afresh and unmaps it on free, so every one costs a page fault and a zeroed page per
//! 4 KiB: a quarter of the broker's CPU under a produce load. jemalloc keeps freed pages for
//! reuse (returning them to the OS after a few seconds idle). It is built without initial-exec
//! TLS so that the extension module can be loaded into a running interpreter.
//!
//! The protocol codec (kafka-protocol 0.15) sizes a decoded array with `Vec::with_capacity(n)`
//! from the count the client declared. A 20-byte request claiming 2^31 elements asks for
//! ~150 GB; the allocator refuses, and a refused allocation aborts the whole process. Any reservation of
//! `HUGE` bytes or more is therefore mapped with `MAP_NORESERVE`: it costs nothing until
//! touched, the decoder fails on the missing bytes, and the mapping is returned unused.
//! Legitimate allocations never come near this size (frames are capped at 2 GiB).

use std::alloc::{GlobalAlloc, Layout};
use std::mem::MaybeUninit;

use tikv_jemallocator::Jemalloc;

const HUGE: usize = 1 << 30;

pub struct GuardedAllocator;

unsafe fn map_lazily(size: usize) -> *mut u8 {
    let addr = libc::mmap(
        std::ptr::null_mut(),
        size,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
        0,
    );
    if addr == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        addr.cast()
    }
}

// SAFETY: small layouts go to jemalloc unchanged; huge ones are page-aligned
// anonymous mappings (alignment above a page is not requested for such sizes by this program,
// and is refused with null if it ever is) released with munmap of the same size.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < HUGE {
            return Jemalloc.alloc(layout);
        }
        if layout.align() > 4096 {
            return std::ptr::null_mut();
        }
        map_lazily(layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < HUGE {
            return Jemalloc.alloc_zeroed(layout);
        }
        // Fresh anonymous mappings are zero-filled.
        self.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < HUGE {
            Jemalloc.dealloc(ptr, layout);
        } else {
            libc::munmap(ptr.cast(), layout.size());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() < HUGE && new_size < HUGE {
            return Jemalloc.realloc(ptr, layout, new_size);
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let new_ptr = self.alloc(new_layout);
        if !new_ptr.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new_ptr
    }
}

/// Maps in the pages under `spare` (memory about to be written) in one call, instead of one
/// page fault per page as the bytes land. A fault costs about as much again as zeroing its
/// page; measured on this kernel, mapping a GiB in this way takes half the CPU of faulting
/// it in. It matters where buffers are fresh memory: the memory store keeps every request
/// it stores, and the allocator gives back pages idle for a few seconds. Pages mapped
/// already cost a look at their page table entry. Best effort: a kernel without
/// `MADV_POPULATE_WRITE` (before 5.14) leaves the pages to fault in as before.
pub(crate) fn prefault(spare: &mut [MaybeUninit<u8>]) {
    #[cfg(target_os = "linux")]
    if !spare.is_empty() {
        // SAFETY: sysconf only reads a value.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let start = spare.as_mut_ptr() as usize;
        // The first and last pages may hold other bytes too; populating a mapped page leaves
        // its contents as they are (an unmapped one reads as zeros either way).
        let aligned = start & !(page - 1);
        let len = start + spare.len() - aligned;
        // SAFETY: every page of the range holds bytes of `spare`, so it is mapped, writable
        // memory of this process; the call changes no contents.
        unsafe {
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn a_lying_array_count_fails_to_decode_instead_of_aborting() {
        // Metadata v1: topics array count 0x7fffffff, then nothing.
        let mut body = bytes::Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(MetadataRequest::decode(&mut body, 1).is_err());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn prefaulting_maps_every_page_of_the_range_and_changes_nothing() {
        const PAGES: usize = 16;
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = PAGES * page;
        let resident = |addr: *mut libc::c_void| {
            let mut pages = [0u8; PAGES];
            assert_eq!(unsafe { libc::mincore(addr, len, pages.as_mut_ptr()) }, 0);
            pages.iter().filter(|p| *p & 1 == 1).count()
        };
        // SAFETY: a fresh private anonymous mapping, unmapped at the end.
        unsafe {
            let addr = super::map_lazily(len).cast::<libc::c_void>();
            assert!(!addr.is_null());
            let bytes = std::slice::from_raw_parts_mut(addr.cast::<u8>(), len);
            bytes[100] = 7;
            assert_eq!(resident(addr), 1);
            let spare = std::slice::from_raw_parts_mut(addr.cast::<MaybeUninit<u8>>(), len);
            super::prefault(&mut spare[101..len - 5]);
            assert_eq!(resident(addr), PAGES);
            assert_eq!(bytes[100], 7);
            assert!(bytes[101..].iter().all(|b| *b == 0));
            libc::munmap(addr, len);
        }
    }

    #[test]
    fn huge_vectors_are_usable_and_freed() {
        let mut v: Vec<u8> = Vec::with_capacity(super::HUGE + 1);
        v.extend_from_slice(&[1, 2, 3]);
        v.resize(8192, 7);
        assert_eq!(v[1], 2);
        assert_eq!(v[8191], 7);
    }
}
