//! [`Physmem`]: the segment set, its writer side and its lifecycle.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

use lock_api::{Mutex, RawMutex};

use crate::deferred::{self, Deferred};
use crate::epoch::{Domain, Retired};
use crate::error::PhysmemError;
use crate::fallible::try_vec;
use crate::index::{Index, Leaf, Section};
use crate::page::Page;
use crate::range::{BootRange, PfnRange};
use crate::read::ReadGuard;
use crate::slab::Slabs;
use crate::slots::SlotChunk;
use crate::sync::{AtomicPtr, Ordering};
use crate::table::{Record, Table};
use crate::types::{FreeList, PageCount, Pfn, SegmentHandle, SegmentInfo, PFN_LIMIT};
use crate::write::{self, Change};

mod change;

/// The writer-side lock used when none is named: a spin lock, which works in
/// a kernel and in user space alike.
pub type DefaultRawMutex = spin::Mutex<()>;

/// Boot storage slots when none are named (NetBSD's `VM_PHYSSEG_MAX` is 16–32).
pub const DEFAULT_BOOT_SEGMENTS: usize = 32;

/// Hotpluggable physical memory: segments of frames with their page
/// descriptors, looked up without locks.
///
/// - `P`: the kernel's page descriptor type.
/// - `R`: the raw mutex serialising writers (plug, unplug, ...).
/// - `BOOT`: segments [`physload`](Self::physload) can hold before
///   [`init_pages`](Self::init_pages), in fixed storage that needs no heap.
///
/// See the crate documentation for the life cycle and an example.
pub struct Physmem<
    P: Page,
    R: RawMutex = DefaultRawMutex,
    const BOOT: usize = DEFAULT_BOOT_SEGMENTS,
> {
    pub(crate) domain: Domain,
    pub(crate) published: AtomicPtr<Index<P>>,
    pub(crate) writer: Mutex<R, Writer<P, BOOT>>,
}

pub(crate) struct Writer<P: Page, const BOOT: usize> {
    pub(crate) table: Table<BOOT>,
    pub(crate) slabs: Slabs<P>,
    pub(crate) retired: Retired<Garbage<P>>,
    pub(crate) initialized: bool,
}

/// What a write takes away from readers, freed once none can see it.
pub(crate) enum Garbage<P> {
    Index(Box<Index<P>>),
    Section(Box<Section<P>>),
    SlotChunk(Box<SlotChunk>),
    Leaf(Box<Leaf<P>>),
    Pages {
        slab: u32,
        first: u64,
        count: u64,
        /// The segment's chunk states, if it had any (`Deferred`).
        deferred: *const Deferred,
    },
}

// SAFETY: a `Physmem` owns everything its raw pointers reach (the published
// index, the descriptor slabs); moving it moves that ownership, and its
// descriptors may move with it (`P: Send`, from `Page`).
unsafe impl<P: Page, R: RawMutex + Send, const BOOT: usize> Send for Physmem<P, R, BOOT> {}
// SAFETY: through `&Physmem` readers get only `&P` (`P: Sync`, from `Page`)
// and the published index, which is swapped atomically and freed only once
// the epoch shows no reader can see it; writer state is reached only under
// the `R` mutex.
unsafe impl<P: Page, R: RawMutex + Sync, const BOOT: usize> Sync for Physmem<P, R, BOOT> {}

macro_rules! physmem_new {
    ($domain:expr, $published:expr) => {
        Physmem {
            domain: $domain,
            published: $published,
            writer: Mutex::const_new(
                R::INIT,
                Writer {
                    table: Table::new(),
                    slabs: Slabs::new(),
                    retired: Retired::new(),
                    initialized: false,
                },
            ),
        }
    };
}

impl<P: Page, R: RawMutex, const BOOT: usize> Physmem<P, R, BOOT> {
    /// An empty set in boot mode; allocates nothing, so it can be a `static`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        physmem_new!(Domain::new(), AtomicPtr::new(ptr::null_mut()))
    }

    /// An empty set in boot mode.
    #[cfg(loom)]
    pub fn new() -> Self {
        physmem_new!(Domain::new(), AtomicPtr::new(ptr::null_mut()))
    }

    /// An empty set with page init already done: for users that only plug
    /// at run time (tests, the user-mode machine). If even the empty index
    /// cannot be allocated the set stays in boot mode (see
    /// [`is_initialized`](Self::is_initialized)); [`try_initialized`](Self::try_initialized)
    /// reports that instead.
    pub fn initialized() -> Self {
        let physmem = Self::new();
        // With no boot segments page init allocates no descriptors; it fails
        // only when the empty index cannot be allocated.
        let _ = physmem.init_pages();
        physmem
    }

    /// As [`initialized`](Self::initialized), or
    /// [`PhysmemError::OutOfMemory`] when the empty index cannot be allocated.
    pub fn try_initialized() -> Result<Self, PhysmemError> {
        let physmem = Self::new();
        physmem.init_pages()?;
        Ok(physmem)
    }

    /// Registers memory at boot (NetBSD's `uvm_page_physload`): the frames
    /// of `range`, of which its avail range may be handed out, for
    /// `free_list`. Before [`init_pages`](Self::init_pages) the segment goes
    /// to fixed storage without touching the heap; after it, this is a plug
    /// with the given avail range and free list.
    ///
    /// ```
    /// use hotkern_physmem::{BasicPage, BootRange, FreeList, PhysAddr, Physmem, PfnRange};
    ///
    /// let mem: Physmem<BasicPage> = Physmem::new();
    /// // An e820 entry: 16 MiB of RAM from 1 MiB.
    /// let frames = PfnRange::inside_bytes(PhysAddr(0x10_0000), 0x100_0000).unwrap();
    /// let segment = mem.physload(BootRange::available(frames), FreeList::DEFAULT)?;
    /// assert_eq!(mem.segment_info(segment)?.pages().0, 4096);
    /// # Ok::<(), hotkern_physmem::PhysmemError>(())
    /// ```
    pub fn physload(
        &self,
        range: BootRange,
        free_list: FreeList,
    ) -> Result<SegmentHandle, PhysmemError> {
        let BootRange {
            start,
            end,
            avail_start,
            avail_end,
        } = range;
        let invalid = PhysmemError::InvalidRange { start, end };
        if start >= end || end.0 > PFN_LIMIT {
            return Err(invalid);
        }
        if !(start <= avail_start && avail_start <= avail_end && avail_end <= end) {
            return Err(invalid);
        }
        let mut writer = self.writer.lock();
        self.insert(
            &mut writer,
            Record {
                start: start.0,
                end: end.0,
                avail_start: avail_start.0,
                avail_end: avail_end.0,
                free_list,
                start_hint: 0,
                slab: 0,
                first: 0,
                deferred: ptr::null(),
            },
            None,
        )
    }

    /// The page-init step (NetBSD's "init dance" in `uvm_page_init`): creates
    /// the descriptors of every boot segment from one slab, then moves the
    /// segment records to the heap and publishes them to readers. From here
    /// on segments and descriptors come from the heap.
    pub fn init_pages(&self) -> Result<(), PhysmemError> {
        let mut guard = self.writer.lock();
        let writer = &mut *guard;
        if writer.initialized {
            return Err(PhysmemError::AlreadyInitialized);
        }
        let mut records: Vec<(u32, Record)> = try_vec(BOOT)?;
        records.extend(writer.table.boot_records());
        records.sort_by_key(|(_, r)| r.start);
        let total: u64 = records.iter().map(|(_, r)| r.len()).sum();
        if total > 0 {
            let (slab, mut next) = writer.slabs.alloc(total)?;
            for (_, record) in records.iter_mut() {
                record.slab = slab;
                record.first = next;
                // SAFETY: `[next, next + len)` was just allocated from the
                // slab, so it is in bounds and not initialised yet.
                unsafe {
                    writer
                        .slabs
                        .get(slab)
                        .init(next, record.len(), Pfn(record.start))
                };
                next += record.len();
            }
        }
        // Everything page init needs is allocated before anything changes.
        let prepared = writer.table.heap_parts(&records).and_then(|parts| {
            let mut entries = try_vec(records.len())?;
            entries.extend(
                records
                    .iter()
                    .map(|&(slot, record)| Self::entry(writer, slot, record)),
            );
            let index = Index::build(&entries, BOOT)?;
            Ok((parts, self.finish(writer, index, 0)?))
        });
        let (parts, index) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                for (_, record) in &records {
                    // SAFETY: initialised above, never published.
                    unsafe {
                        writer
                            .slabs
                            .release(record.slab, record.first, record.len())
                    };
                }
                return Err(error);
            }
        };
        writer.table.adopt(parts);
        writer.initialized = true;
        self.publish(writer, index, None);
        Ok(())
    }

    /// Whether [`init_pages`](Self::init_pages) has run.
    pub fn is_initialized(&self) -> bool {
        self.writer.lock().initialized
    }

    /// Adds `npages` frames from `pfn` as a new segment (NetBSD's
    /// `uvm_physseg_plug`) on [`FreeList::DEFAULT`], all available. The
    /// descriptors reuse space freed by earlier unplugs before a new slab is
    /// allocated. Refused if any frame is already present.
    pub fn plug(&self, pfn: Pfn, npages: PageCount) -> Result<SegmentHandle, PhysmemError> {
        let end = checked_end(pfn, npages)?;
        let frames = PfnRange { start: pfn, end };
        self.physload(BootRange::available(frames), FreeList::DEFAULT)
    }

    /// Removes `npages` frames from `pfn`, which must lie inside one segment:
    /// the whole segment (refused for the last one), its front, its back, or
    /// its middle, which splits it in two that share its descriptor slab (the
    /// handle keeps naming the lower part). Descriptor space goes back to the
    /// slab's extent once no reader can see it; an emptied slab is freed.
    pub fn unplug(&self, pfn: Pfn, npages: PageCount) -> Result<(), PhysmemError> {
        let mut writer = self.writer.lock();
        self.remove_range(&mut writer, pfn, npages)
    }

    /// Takes one available page from the front or else the back of the
    /// segment's avail range, if the avail range reaches that end of the
    /// segment (NetBSD's `uvm_page_physunload`). A segment left empty is
    /// removed, unless it is the last one.
    pub fn physunload(
        &self,
        handle: SegmentHandle,
        free_list: FreeList,
    ) -> Result<Pfn, PhysmemError> {
        let mut writer = self.writer.lock();
        let record = writer.table.get(handle)?;
        if record.free_list != free_list {
            return Err(PhysmemError::FreeListMismatch);
        }
        let pfn = if record.avail_start == record.start && record.avail_start < record.avail_end {
            record.avail_start
        } else if record.avail_end == record.end && record.avail_start < record.avail_end {
            record.avail_end - 1
        } else {
            return Err(PhysmemError::NoPageAtEnds);
        };
        self.remove_range(&mut writer, Pfn(pfn), PageCount(1))?;
        Ok(Pfn(pfn))
    }

    /// Takes the first available page wherever it is (NetBSD's
    /// `uvm_page_physunload_force`), splitting the segment if needed.
    pub fn physunload_force(&self, handle: SegmentHandle) -> Result<Pfn, PhysmemError> {
        let mut writer = self.writer.lock();
        let record = writer.table.get(handle)?;
        if record.avail_start >= record.avail_end {
            return Err(PhysmemError::NoAvailablePages);
        }
        self.remove_range(&mut writer, Pfn(record.avail_start), PageCount(1))?;
        Ok(Pfn(record.avail_start))
    }

    /// A segment's bounds and attributes, before or after page init.
    pub fn segment_info(&self, handle: SegmentHandle) -> Result<SegmentInfo, PhysmemError> {
        Ok(self.writer.lock().table.get(handle)?.info())
    }

    /// Sets where the page allocator starts looking in the segment.
    pub fn set_start_hint(&self, handle: SegmentHandle, hint: u64) -> Result<(), PhysmemError> {
        let mut writer = self.writer.lock();
        writer.table.get(handle)?;
        writer.table.set_start_hint(handle.slot, hint);
        // Readers see it at once in the current index; later indexes copy
        // it from the record.
        let current = self.published.load(Ordering::Acquire);
        // SAFETY: the writer lock keeps the published index alive.
        if let Some(index) = unsafe { current.as_ref() } {
            index.set_start_hint(handle, hint);
        }
        Ok(())
    }

    /// Number of segments (boot or running).
    pub fn len(&self) -> usize {
        self.writer.lock().table.count()
    }

    /// Whether there are no segments.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Enters a lock-free read section (counted on stripe 0). Readers see
    /// segments once [`init_pages`](Self::init_pages) has run.
    pub fn read(&self) -> ReadGuard<'_, P> {
        self.read_on(0)
    }

    /// As [`read`](Self::read), counted on stripe `cpu` (modulo
    /// [`epoch::STRIPES`](crate::epoch::STRIPES)): readers on different CPUs
    /// then do not share a cache line.
    pub fn read_on(&self, cpu: usize) -> ReadGuard<'_, P> {
        let pin = self.domain.pin(cpu);
        let current = self.published.load(Ordering::Acquire);
        // SAFETY: loaded inside the pin, so the index stays allocated until
        // the pin (owned by the guard, which bounds the reference) is dropped.
        let index = unsafe { current.as_ref() };
        ReadGuard::new(index, pin)
    }

    /// Frees retired descriptors, slabs and indexes no reader can see any
    /// more. Writes do this themselves; call it to reclaim sooner.
    pub fn reclaim(&self) {
        let mut guard = self.writer.lock();
        let writer = &mut *guard;
        collect(&self.domain, writer);
    }

    /// Retired items not freed yet (readers were inside).
    pub fn pending_reclaim(&self) -> usize {
        self.writer.lock().retired.pending()
    }

    /// Live descriptor slabs.
    pub fn slab_count(&self) -> usize {
        self.writer.lock().slabs.live()
    }
}

pub(crate) fn collect<P: Page, const BOOT: usize>(domain: &Domain, writer: &mut Writer<P, BOOT>) {
    let Writer { retired, slabs, .. } = writer;
    retired.collect(domain, |garbage| free(slabs, garbage));
}

fn free<P: Page>(slabs: &mut Slabs<P>, garbage: Garbage<P>) {
    match garbage {
        Garbage::Index(index) => drop(index),
        Garbage::Section(section) => drop(section),
        Garbage::SlotChunk(chunk) => drop(chunk),
        Garbage::Leaf(leaf) => drop(leaf),
        // SAFETY: retired after being unpublished, and the epoch says no
        // reader is left that could reach these descriptors.
        Garbage::Pages {
            slab,
            first,
            count,
            deferred,
        } => {
            // SAFETY: as above; deferred descriptors have no drop glue, so
            // releasing never reads one that was not made.
            unsafe { slabs.release(slab, first, count) };
            if !deferred.is_null() {
                // SAFETY: from `Box::into_raw` at the plug; retired once,
                // with the segment's last descriptors.
                drop(unsafe { Box::from_raw(deferred.cast_mut()) });
            }
        }
    }
}

pub(crate) fn checked_end(pfn: Pfn, npages: PageCount) -> Result<Pfn, PhysmemError> {
    if npages.0 == 0 {
        return Err(PhysmemError::ZeroPages);
    }
    match pfn.checked_add(npages) {
        Some(end) if end.0 <= PFN_LIMIT => Ok(end),
        _ => Err(PhysmemError::InvalidRange {
            start: pfn,
            end: Pfn(pfn.0.saturating_add(npages.0)),
        }),
    }
}

impl<P: Page, R: RawMutex, const BOOT: usize> Default for Physmem<P, R, BOOT> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Page, R: RawMutex, const BOOT: usize> Drop for Physmem<P, R, BOOT> {
    fn drop(&mut self) {
        let writer = self.writer.get_mut();
        let Writer {
            retired,
            slabs,
            table,
            initialized,
            ..
        } = writer;
        retired.drain_all(|garbage| free(slabs, garbage));
        let current = self.published.swap(ptr::null_mut(), Ordering::AcqRel);
        if !current.is_null() {
            // SAFETY: from `Box::into_raw`; `&mut self` means no readers, and
            // the last index owns all its sections and chunks.
            unsafe { Box::from_raw(current) }.discard(None);
        }
        if *initialized {
            for (_, record) in table.each_live() {
                // SAFETY: a live record's states, alive while it is.
                match unsafe { record.deferred.as_ref() } {
                    // SAFETY: live descriptors, and no readers are left.
                    None => unsafe { slabs.release(record.slab, record.first, record.len()) },
                    // The plug's space and states go with its last piece.
                    Some(deferred) => {
                        deferred.set_pieces(deferred.pieces() - 1);
                        if deferred.pieces() == 0 {
                            let (slab, first) = (deferred.slab, deferred.first);
                            let count = deferred.end - deferred.start;
                            // SAFETY: the plug's whole space, no piece and
                            // no reader left; from `Box::into_raw`, once.
                            unsafe {
                                slabs.release(slab, first, count);
                                drop(Box::from_raw(record.deferred.cast_mut()));
                            }
                        }
                    }
                }
            }
        }
    }
}
