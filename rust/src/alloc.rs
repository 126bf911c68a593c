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
//!
//! Buffers of `SHARED_ARENA_FROM` bytes or more all come from one arena. jemalloc gives each
//! thread an arena of its own (four per core), and a freed buffer returns to the arena that
//! allocated it. A request frame is received on one runtime thread and usually freed on
//! another, when the cache evicts the batches it holds: its pages then sat in the first
//! thread's arena, of no use to the thread allocating next, until they decayed ten seconds
//! later. Measured on a 1 GiB S3 produce (8 arenas), 32–47 MiB sat idle that way at the
//! peak; with every large buffer in one arena, 5 MiB. Small allocations keep their per-thread
//! arenas (and thread caches), where the allocator's speed comes from.
//!
//! Freed pages of the shared arena go back to the system after about a second, purged on time
//! by jemalloc's background threads. By default jemalloc keeps them ten seconds and purges
//! only as the arena allocates. When the load changes (a produce ends and compaction starts
//! reading runs back), buffers of new sizes cannot reuse the freed ones: measured over 3 GiB
//! S3 produces, 60–111 MiB of them waited at the peak, against 8.5 MiB this way.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_uint};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use tikv_jemalloc_ctl as ctl;
use tikv_jemalloc_sys as jemalloc;
use tikv_jemallocator::Jemalloc;

const HUGE: usize = 1 << 30;

/// Allocations from this size on come from the shared arena: data-plane buffers (request
/// frames, objects, segments). The same threshold puts a frame in a buffer of its own
/// (`protocol::frame::OWN_BUFFER_FROM`).
const SHARED_ARENA_FROM: usize = 64 * 1024;

/// How long the shared arena's freed pages wait for reuse before they go back to the system
/// (jemalloc decays them over this time).
const SHARED_ARENA_DECAY_MS: isize = 1000;

/// The arena every large buffer comes from, created on first use; `None` if jemalloc refused
/// one, and then they come from the calling thread's arena like the rest.
fn shared_arena() -> Option<c_uint> {
    static ARENA: OnceLock<Option<c_uint>> = OnceLock::new();
    *ARENA.get_or_init(|| {
        // SAFETY: reading "arenas.create" creates an arena and yields its index, an unsigned int.
        let index = unsafe { ctl::raw::read::<c_uint>(b"arenas.create\0") }.ok()?;
        // Best effort: without either, freed pages are kept as jemalloc does by default.
        let _ = set_arena_decay(index, SHARED_ARENA_DECAY_MS);
        let _ = ctl::background_thread::write(true);
        Some(index)
    })
}

/// Sets "arena.<index>.dirty_decay_ms", through its numeric name: building the text name
/// would allocate, inside the allocator.
fn set_arena_decay(index: c_uint, decay_ms: isize) -> ctl::Result<()> {
    let mut mib = [0usize; 3];
    ctl::raw::name_to_mib(b"arena.0.dirty_decay_ms\0", &mut mib)?;
    mib[1] = index as usize;
    // SAFETY: "arena.<i>.dirty_decay_ms" takes an ssize_t.
    unsafe { ctl::raw::write_mib(&mib, decay_ms) }
}

/// The `mallocx` flags that put an allocation of `size` bytes aligned to `align` in the
/// shared arena, if it belongs there.
fn shared_arena_flags(size: usize, align: usize) -> Option<c_int> {
    if !(SHARED_ARENA_FROM..HUGE).contains(&size) {
        return None;
    }
    let arena = shared_arena()?;
    // (jemalloc aligns to 16 bytes unasked; the flag is for more.)
    let align = if align > 16 {
        jemalloc::MALLOCX_ALIGN(align)
    } else {
        0
    };
    Some(jemalloc::MALLOCX_ARENA(arena as usize) | jemalloc::MALLOCX_TCACHE_NONE | align)
}

pub(crate) struct GuardedAllocator;

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

// SAFETY: small layouts go to jemalloc unchanged; large ones to jemalloc with the layout's
// alignment, in the shared arena (and are freed like any other: jemalloc finds an
// allocation's arena itself); huge ones are page-aligned anonymous mappings (alignment above
// a page is not requested for such sizes by this program, and is refused with null if it
// ever is) released with munmap of the same size.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(flags) = shared_arena_flags(layout.size(), layout.align()) {
            return jemalloc::mallocx(layout.size(), flags).cast();
        }
        if layout.size() < HUGE {
            return Jemalloc.alloc(layout);
        }
        if layout.align() > 4096 {
            return std::ptr::null_mut();
        }
        map_lazily(layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(flags) = shared_arena_flags(layout.size(), layout.align()) {
            return jemalloc::mallocx(layout.size(), flags | jemalloc::MALLOCX_ZERO).cast();
        }
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
        if layout.size() < HUGE {
            if let Some(flags) = shared_arena_flags(new_size, layout.align()) {
                return jemalloc::rallocx(ptr.cast(), new_size, flags).cast();
            }
        }
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
    use std::ffi::{c_uint, c_void};
    use std::mem::MaybeUninit;

    use super::{jemalloc, shared_arena, SHARED_ARENA_DECAY_MS, SHARED_ARENA_FROM};

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

    /// The index of the arena `ptr` was allocated from. ("arenas.lookup" takes a pointer and
    /// yields an unsigned int: two types, where `ctl::raw::update` has one for both.)
    fn arena_of(ptr: *const u8) -> c_uint {
        let mut index: c_uint = 0;
        let mut len = size_of::<c_uint>();
        let mut ptr = ptr.cast::<c_void>();
        // SAFETY: "arenas.lookup" reads a pointer and writes an unsigned int.
        let failed = unsafe {
            jemalloc::mallctl(
                c"arenas.lookup".as_ptr(),
                (&raw mut index).cast(),
                &mut len,
                (&raw mut ptr).cast(),
                size_of::<*const c_void>(),
            )
        };
        assert_eq!(failed, 0);
        index
    }

    #[test]
    fn large_buffers_of_every_thread_come_from_the_shared_arena() {
        let shared = shared_arena().expect("jemalloc creates an arena");
        let here = Vec::<u8>::with_capacity(SHARED_ARENA_FROM);
        assert_eq!(arena_of(here.as_ptr()), shared);
        let there = std::thread::spawn(|| {
            let zeroed = vec![0u8; 1 << 20];
            assert!(zeroed.iter().all(|b| *b == 0));
            arena_of(zeroed.as_ptr())
        });
        assert_eq!(there.join().unwrap(), shared);
        let mut grown = vec![1u8; 100];
        grown.reserve_exact(4 * SHARED_ARENA_FROM);
        assert_eq!(arena_of(grown.as_ptr()), shared);
        assert_eq!(grown, [1u8; 100]);
        let aligned = std::alloc::Layout::from_size_align(SHARED_ARENA_FROM, 4096).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let ptr = std::alloc::alloc(aligned);
            assert_eq!(ptr as usize % 4096, 0);
            assert_eq!(arena_of(ptr), shared);
            std::alloc::dealloc(ptr, aligned);
        }
    }

    /// A mallctl value of type `T`, read by its nul-terminated name.
    fn read<T: Copy>(name: &[u8]) -> T {
        // SAFETY: the caller names a value of type `T`.
        unsafe { super::ctl::raw::read(name) }.unwrap()
    }

    #[test]
    fn the_shared_arena_returns_freed_pages_after_a_second_in_the_background() {
        let shared = shared_arena().expect("jemalloc creates an arena");
        let name = format!("arena.{shared}.dirty_decay_ms\0");
        assert_eq!(read::<isize>(name.as_bytes()), SHARED_ARENA_DECAY_MS);
        assert!(super::ctl::background_thread::read().unwrap());
        // Other arenas keep jemalloc's default.
        assert_eq!(read::<isize>(b"arena.0.dirty_decay_ms\0"), 10_000);
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
