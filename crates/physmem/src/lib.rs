//! Hotpluggable physical memory segments: NetBSD's `uvm_hotplug(9)`, done
//! better.
//!
//! A [`Physmem`] holds segments of page frames and one page descriptor per
//! frame (the kernel's own type, see [`Page`]). Its life cycle follows
//! NetBSD's boot:
//!
//! 1. **Boot**: [`Physmem::new`] allocates nothing (it can be a `static`);
//!    [`Physmem::physload`] records memory in fixed storage of `BOOT` slots,
//!    and [`Physmem::physunload`] / [`Physmem::physunload_force`] steal pages
//!    from it, all without a heap.
//! 2. **Page init** ([`Physmem::init_pages`], the "init dance"): one slab of
//!    descriptors for every boot segment; records move to the heap; readers
//!    start seeing segments.
//! 3. **Running**: [`Physmem::plug`] and [`Physmem::unplug`] (whole, front,
//!    back or middle) at any time; [`Physmem::plug_on_memory`] puts a
//!    block's descriptors in its own first frames (Linux's
//!    `memmap_on_memory`), so a plug takes no heap for them. Lookups
//!    ([`ReadGuard::find`], [`ReadGuard::page`], iteration) take no lock and
//!    run concurrently with writes; unplugged descriptors are reclaimed once no reader can see them
//!    ([`epoch`]). Descriptor arrays are carved from slabs by an [`extent`]
//!    allocator; freed space is reused before a new slab is allocated, and an
//!    emptied slab is freed.
//!
//! Every operation validates before it changes anything and returns a
//! [`PhysmemError`], leaving the state as it was; that includes running out
//! of memory, which a write finds out while it builds the new index, before
//! it commits ([`PhysmemError::OutOfMemory`]). [`SegmentHandle`]s stay
//! valid across other segments' changes and become detectably stale when
//! their segment is gone.
//!
//! ```
//! use hotkern_physmem::{
//!     BasicPage, BootRange, FreeList, Lookup, PageCount, Pfn, PfnRange, Physmem, PhysmemError,
//! };
//!
//! let mem: Physmem<BasicPage> = Physmem::new();
//! // Boot: two segments, the second loaded first (out of order).
//! let high_frames = PfnRange { start: Pfn(0x200), end: Pfn(0x300) };
//! let high = mem.physload(BootRange::available(high_frames), FreeList(0))?;
//! let low_frames = BootRange {
//!     start: Pfn(0x100),
//!     end: Pfn(0x180),
//!     avail_start: Pfn(0x110), // the first 16 frames hold the kernel
//!     avail_end: Pfn(0x180),
//! };
//! let low = mem.physload(low_frames, FreeList(1))?;
//! mem.init_pages()?;
//!
//! // Hotplug more, then take a hole out of the middle of it.
//! let plugged = mem.plug(Pfn(0x1000), PageCount(64))?;
//! mem.unplug(Pfn(0x1010), PageCount(16))?;
//! assert_eq!(mem.plug(Pfn(0x1020), PageCount(1)), Err(PhysmemError::Overlap {
//!     existing_start: Pfn(0x1020), existing_end: Pfn(0x1040) }));
//!
//! let guard = mem.read(); // lock-free from here
//! let Lookup { segment, offset } = guard.find(Pfn(0x250)).unwrap();
//! assert_eq!((segment, offset), (high, PageCount(0x50)));
//! assert_eq!(guard.page(Pfn(0x250)).unwrap().phys_addr, Pfn(0x250).phys_addr());
//! let starts: Vec<u64> = guard.segments().map(|s| s.start().0).collect();
//! assert_eq!(starts, [0x100, 0x200, 0x1000, 0x1020]);
//! assert_eq!(guard.segment(plugged)?.end(), Pfn(0x1010)); // names the lower half
//! assert_eq!(guard.segment(low)?.avail_start(), Pfn(0x110));
//! assert_eq!(guard.highest_frame(), Some(Pfn(0x103f)));
//! # Ok::<(), PhysmemError>(())
//! ```
//!
//! Walking every frame of every segment, e.g. to fill page caches:
//!
//! ```
//! use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem};
//!
//! let mem: Physmem<BasicPage> = Physmem::initialized();
//! mem.plug(Pfn(16), PageCount(4)).unwrap();
//! mem.plug(Pfn(64), PageCount(2)).unwrap();
//! let guard = mem.read();
//! let mut frames = Vec::new();
//! for segment in guard.segments() {
//!     for (pfn, page) in segment.frames().zip(segment.pages()) {
//!         assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
//!         frames.push(pfn);
//!     }
//! }
//! assert_eq!(frames, [16, 17, 18, 19, 64, 65]);
//! ```
//!
//! # Design
//!
//! - **Lookup** ([`ReadGuard::find`], [`ReadGuard::page`]): readers search a
//!   published, immutable index. The frame number indexes a two-level
//!   table of 2 MiB sections; each section has a block table sized so that
//!   a lookup examines at most two runs. Cost: five dependent loads and a
//!   short scan,
//!   the same at 32 segments as at 8,192 (NetBSD's rbtree pays O(log n)
//!   cache misses, the static array O(log n) probes).
//! - **Writes** ([`Physmem::plug`], [`Physmem::unplug`], ...) serialise on the
//!   `R` mutex, rebuild only the sections the change touches (all sections
//!   one segment covers entirely share a single section object), copy the
//!   section table's directory and the leaves of 512 sections they change
//!   and one chunk of the slot → segment map, so a write's heap does not
//!   grow with the span or the number of segments; publish the new index
//!   with one atomic swap and retire what readers might still hold: the
//!   old index, replaced sections, leaves and chunks, unplugged
//!   descriptors. Finding what to retire looks only at the
//!   sections the write made, not the whole table.
//! - **Deferred descriptor init**: a plug of more than 64 frames writes no
//!   descriptor. Each chunk of 64 frames is made by the first lookup that
//!   reaches it (a compare-and-swap on the chunk's state picks one maker;
//!   the others wait for it), as Linux's `deferred_init_memmap` makes boot
//!   memory's struct pages after boot. Segments an unplug cuts from a plug
//!   share its chunk states and its descriptor space, which goes back
//!   whole with the last piece, so a cut makes nothing either and a writer
//!   never waits for a reader. A plug of 128 MiB is then a few allocations
//!   and an index update, not 32,768 descriptor writes under the writer
//!   lock; a lookup of a made chunk pays one bit test. Descriptor types
//!   with drop glue are made at plug time, as before (see [`Page`]).
//! - **Reclamation** ([`epoch`]): a reader is counted in one of two striped
//!   counters picked by the epoch's parity; the writer frees retired memory
//!   once the counters of the parity it flipped away from drain. Writers never
//!   wait for readers; a long read section only delays reclamation.
//!   [`Physmem::read_on`] spreads readers over counter stripes per CPU.
//!
//! The NetBSD designs are kept as baselines behind one trait,
//! `PhysSegments`, for tests and benchmarks; they and the trait are built
//! only with the `baselines` feature (off by default), so a kernel never
//! compiles them.
#![no_std]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-physmem/0.1")]
extern crate alloc;

mod attributes;
#[cfg(feature = "baselines")]
pub mod baseline;
mod deferred;
pub mod epoch;
mod error;
pub mod extent;
mod fallible;
mod index;
mod memmap;
mod page;
mod physmem;
mod range;
mod read;
mod section;
#[cfg(feature = "baselines")]
mod segments;
mod slab;
mod slots;
mod sync;
mod table;
mod types;
mod write;

pub use error::PhysmemError;
pub use page::{BasicPage, Page};
pub use physmem::{DefaultRawMutex, Physmem, DEFAULT_BOOT_SEGMENTS};
pub use range::{BootRange, Lookup, PfnRange};
pub use read::{ReadGuard, Segment, Segments};
#[cfg(feature = "baselines")]
pub use segments::PhysSegments;
pub use types::{
    FreeList, PageCount, Pfn, PhysAddr, SegmentHandle, SegmentInfo, PAGE_SHIFT, PAGE_SIZE,
    PFN_LIMIT,
};
