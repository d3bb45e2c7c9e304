//! A virtio-mem driver (virtio 1.2, section 5.15) that follows the
//! device's `requested_size`, feeding physmem as a hypervisor gives and
//! takes memory: NetBSD's `uvm_physseg_plug`/`unplug` driven by the
//! device Linux drives from `drivers/virtio/virtio_mem.c`.
//!
//! - **Grow**: PLUG runs of free blocks (at most 128 MiB a request, as
//!   Linux plugs a memory block at a time), map them in the kernel's page
//!   tables ([`memory::map_range`]: 1 GiB pages where a whole GiB is
//!   plugged), `physmem.plug` them, hand their frames
//!   to the allocator its caller made ([`probe`]: a bitmap per block).
//! - **Shrink**: take blocks back from the allocator, migrating their used
//!   movable frames elsewhere through their owners' slots (the shared
//!   core's `migrate`); if too few can be emptied, take back those and
//!   name the rest and why. Then a grace period (no reader left on a moved
//!   frame), `physmem.unplug` (within one segment at a time), unmap, flush
//!   the other CPUs' TLBs, UNPLUG.
//!
//! Configuration changes come as interrupts: the transport routes the
//! device's configuration-change interrupt (MSI-X, or on QEMU 7.2, which
//! gives virtio-mem-pci no MSI-X, the legacy pin as the arch routes it)
//! to the boot CPU ([`device_target`](crate::arch::interrupts::device_target)),
//! whose handler counts it. Following the host's sizes, and what runs beside the resizes, is
//! the experiment's (`crate::runs::vmem`).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};
use core::ptr::NonNull;

use hotkern_kernel::blockframes::RegionError;
use hotkern_kernel::migrate::{self, NoHooks, ShrinkError};
use hotkern_kernel::movable::MovableFrames;
use hotkern_kernel::runs::Runs;
use hotkern_physmem::{PageCount, Pfn, PhysmemError};

use crate::arch::boot::IDENTITY_MAP_END;
use crate::arch::clock;
use crate::arch::memory::{self, KernelPage, MapError, PHYSMEM};
use crate::arch::ranges::PAGE_SIZE;
use crate::drivers::pci;
use crate::drivers::virtio::pci::{self as virtio_pci, Transport, TransportError};
use crate::platform::pages::HotMemory;

mod runs;

/// Red Hat's vendor id; virtio device 24 (memory) as a modern PCI device.
const VENDOR: u16 = 0x1af4;
const DEVICE_MEM: u16 = 0x1040 + 24;
/// VIRTIO_MEM_F_UNPLUGGED_INACCESSIBLE: the driver never touches
/// unplugged memory (this one maps only plugged blocks), so it can accept.
const F_UNPLUGGED_INACCESSIBLE: u64 = 1 << 1;

// `struct virtio_mem_config`.
const BLOCK_SIZE: u64 = 0;
const ADDR: u64 = 16;
const REGION_SIZE: u64 = 24;
/// `usable_region_size`: where blocks may be plugged.
pub const USABLE_REGION_SIZE: u64 = 32;
/// `plugged_size`: what the device counts as plugged.
pub const PLUGGED_SIZE: u64 = 40;
/// `requested_size`: what the host asks for.
pub const REQUESTED_SIZE: u64 = 48;

const REQ_PLUG: u16 = 0;
const REQ_UNPLUG: u16 = 1;
/// VIRTIO_MEM_REQ_UNPLUG_ALL.
pub const REQ_UNPLUG_ALL: u16 = 2;
/// VIRTIO_MEM_REQ_STATE: 0 plugged, 1 unplugged, 2 mixed.
pub const REQ_STATE: u16 = 3;
const RESP_ACK: u16 = 0;

const LARGE: u64 = 2 << 20;
/// A mebibyte.
pub const MIB: u64 = 1 << 20;
/// The most a single PLUG asks for.
pub const RUN_BYTES: u64 = 128 << 20;
/// Heap a grow leaves free: physmem's unplugs rebuild the index sections
/// they touch, and the shared core's shrink lists the region's blocks, so
/// the shrink back needs room even after the largest grow. Measured: 1.6
/// MiB at most for 64 GiB back to 256 MiB.
const HEAP_RESERVE: usize = 2 << 20;
/// Why the driver stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// No virtio-mem-pci function on bus 0.
    NotFound,
    /// The transport failed.
    Transport(TransportError),
    /// The device's configuration is unusable.
    BadConfig(&'static str),
    /// The device answered a request with something other than ACK.
    Refused {
        /// The request type.
        request: u16,
        /// The response type (1 NACK, 2 BUSY, 3 ERROR).
        response: u16,
    },
    /// Mapping a block failed.
    Map(MapError),
    /// physmem refused a plug or unplug.
    Physmem(PhysmemError),
    /// The allocator could not take a block's frames.
    Allocator,
    /// The allocator's bitmaps for the region could not be made.
    Region(RegionError),
    /// The shrink asked for could not start (nothing changed).
    Shrink(ShrinkError),
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::NotFound => f.write_str(
                "no virtio-mem-pci device on PCI bus 0 (hotkern boot --hotplug SIZE adds one)",
            ),
            MemError::Transport(error) => write!(f, "transport: {error}"),
            MemError::BadConfig(what) => write!(f, "unusable device configuration: {what}"),
            MemError::Refused { request, response } => {
                let name = ["PLUG", "UNPLUG", "UNPLUG_ALL", "STATE"];
                let answer = ["ACK", "NACK", "BUSY", "ERROR"];
                let name = name.get(usize::from(*request)).unwrap_or(&"?");
                match answer.get(usize::from(*response)) {
                    Some(answer) => write!(f, "the device answered {name} with {answer}"),
                    None => write!(f, "the device answered {name} with type {response}"),
                }
            }
            MemError::Map(error) => write!(f, "page tables: {error}"),
            MemError::Physmem(error) => write!(f, "physmem: {error}"),
            MemError::Allocator => f.write_str("the frame allocator could not take a block"),
            MemError::Region(error) => write!(f, "frame allocator: {error}"),
            MemError::Shrink(error) => write!(f, "shrink: {error}"),
        }
    }
}

impl core::error::Error for MemError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            MemError::Transport(error) => Some(error),
            MemError::Map(error) => Some(error),
            _ => None,
        }
    }
}

/// One resize: what the host asked for, what the kernel did, and where its
/// time went.
#[derive(Debug, Clone, Default)]
pub struct Resize {
    /// The device's `requested_size`.
    pub requested: u64,
    /// Bytes plugged afterwards.
    pub plugged: u64,
    /// Blocks plugged (positive) or unplugged (negative).
    pub blocks: i64,
    /// Nanoseconds in device round trips, physmem, page tables (with TLB
    /// flushes) and the frame allocator.
    pub ns: [u64; 4],
    /// Why the size was not reached, if it was not.
    pub refused: Option<String>,
    /// Used frames a shrink copied out of the blocks it took back.
    pub migrated: u64,
    /// Back-offs on frames whose owner was writing them.
    pub retries: u64,
    /// Nanoseconds in the shared core's shrink (pick, isolate, migrate,
    /// take), part of the allocator's share.
    pub migrate_ns: u64,
    /// The most heap in use during the resize, above what was in use
    /// before it.
    pub heap_peak_rise: u64,
}

/// The device, its region and which blocks are plugged.
pub struct Device {
    /// The modern transport with its one queue.
    pub transport: Transport,
    /// The block size in bytes.
    pub block: u64,
    /// The region's guest-physical start.
    pub addr: u64,
    /// Which blocks of the region are plugged.
    pub plugged: Vec<bool>,
    /// The allocator the plugged blocks' frames are handed to, with
    /// their owners.
    pub hot: &'static MovableFrames,
    /// Whether each run of blocks is plugged with its descriptors on its
    /// own first frames (a region whose descriptors would take more than
    /// a quarter of the free heap) or, cheaper per plug (no first touch of
    /// the block), with descriptors on the heap.
    pub descriptors_on_block: bool,
    /// Which block holds each plugged block's descriptors and bitmaps
    /// (the shared core's runs layout), when they are on the blocks.
    pub runs: Runs,
}

/// Makes the allocator for a region of `blocks` blocks of `frames`
/// frames from `first`: the caller's, which owns the kernel's page pools.
/// The last argument says whether each block's bitmaps are to come
/// with it (`BlockFrames::with_maps_on_blocks`): for a region whose
/// descriptors go on its runs.
pub type HotFrames<'a> =
    &'a dyn Fn(Pfn, usize, u64, bool) -> Result<&'static MovableFrames, RegionError>;

/// Finds the device on PCI bus 0, routes its configuration changes to the
/// calling CPU, checks its region and has `hot` make the allocator for it.
pub fn probe(hot: HotFrames<'_>) -> Result<Device, MemError> {
    let function = pci::find(VENDOR, DEVICE_MEM).ok_or(MemError::NotFound)?;
    // Configuration changes to this CPU, the one that follows them.
    let target = crate::arch::interrupts::device_target();
    let (transport, _) = virtio_pci::probe(function, F_UNPLUGGED_INACCESSIBLE, Some(target))
        .map_err(MemError::Transport)?;
    let block = transport.config64(BLOCK_SIZE);
    let addr = transport.config64(ADDR);
    let region = transport.config64(REGION_SIZE);
    if !block.is_power_of_two() || block % LARGE != 0 {
        return Err(MemError::BadConfig(
            "block size not a power of two of 2 MiB or more",
        ));
    }
    if addr % block != 0 || region % block != 0 || region == 0 {
        return Err(MemError::BadConfig("region not aligned to the block size"));
    }
    if addr < IDENTITY_MAP_END || addr.saturating_add(region) > 512 << 30 {
        return Err(MemError::BadConfig("region outside 4 GiB to 512 GiB"));
    }
    let blocks = (region / block) as usize;
    let (size, used, _) = crate::arch::heap::usage();
    let descriptors = region / PAGE_SIZE * core::mem::size_of::<KernelPage>() as u64;
    let descriptors_on_block = descriptors > (size.saturating_sub(used) / 4) as u64;
    let run_blocks = (RUN_BYTES / block).clamp(1, u64::from(u16::MAX)) as usize;
    let runs = Runs::new(
        blocks,
        block / PAGE_SIZE,
        run_blocks,
        hotkern_physmem::Physmem::<KernelPage>::descriptor_frames,
    )
    .map_err(|_| {
        MemError::BadConfig("a run's descriptors and bitmaps would fill its first block")
    })?;
    let hot = hot(
        Pfn(addr / PAGE_SIZE),
        blocks,
        block / PAGE_SIZE,
        descriptors_on_block,
    )
    .map_err(MemError::Region)?;
    Ok(Device {
        transport,
        block,
        addr,
        plugged: alloc::vec![false; blocks],
        hot,
        descriptors_on_block,
        runs,
    })
}

impl Device {
    /// Sends one request; the device's answer past the type (STATE's
    /// state), or why it refused.
    #[hotkern_trace::function]
    pub fn send(&mut self, request: u16, addr: u64, blocks: u16) -> Result<u16, MemError> {
        // `struct virtio_mem_req`: type, padding, then the address and the
        // block count of PLUG/UNPLUG/STATE.
        let mut message = [0u8; 24];
        message[0..2].copy_from_slice(&request.to_le_bytes());
        message[8..16].copy_from_slice(&addr.to_le_bytes());
        message[16..18].copy_from_slice(&blocks.to_le_bytes());
        let mut response = [0u8; 16];
        self.transport
            .request(&message, &mut response)
            .map_err(MemError::Transport)?;
        let kind = u16::from_le_bytes([response[0], response[1]]);
        if kind != RESP_ACK {
            return Err(MemError::Refused {
                request,
                response: kind,
            });
        }
        Ok(u16::from_le_bytes([response[8], response[9]]))
    }

    /// Block `index`'s guest-physical address.
    pub fn block_address(&self, index: usize) -> u64 {
        self.addr + index as u64 * self.block
    }

    /// Frames per block.
    pub fn frames(&self) -> u64 {
        self.block / PAGE_SIZE
    }

    /// Bytes plugged now.
    pub fn plugged_bytes(&self) -> u64 {
        self.plugged.iter().filter(|&&p| p).count() as u64 * self.block
    }

    /// Frames at the front of a whole run ([`RUN_BYTES`]) that hold the
    /// run's page descriptors (physmem's `plug_on_memory`, Linux's
    /// `memmap_on_memory`): the allocator never hands them out. 0 when
    /// descriptors are on the heap.
    pub fn run_descriptor_frames(&self) -> u64 {
        if !self.descriptors_on_block {
            return 0;
        }
        self.runs.descriptor_frames(self.runs.run_blocks())
    }

    /// Blocks per whole run.
    pub fn run_blocks(&self) -> u64 {
        self.runs.run_blocks() as u64
    }

    /// The block at `address` as the memory its descriptors are written
    /// to: `map_range` maps plugged blocks at their physical address.
    fn descriptor_memory(address: u64) -> NonNull<u8> {
        NonNull::new(address as *mut u8).unwrap_or(NonNull::dangling())
    }

    /// Waits until physmem let go of the descriptors on the blocks at
    /// `addresses` (unplugged already): no reader may still find them
    /// when their frames are unmapped or reused. Readers hold physmem for
    /// a lookup, so this is short; one held for over 2^20 tries (a vCPU
    /// the host descheduled, or a reader that never leaves) is reported
    /// once, as Linux reports an RCU stall, and waited for still. Giving
    /// up instead would leave a block's frames neither in physmem nor in
    /// the allocator, or hand its descriptor frames out while a reader
    /// can still read them; the machine's driver waits the same way.
    fn release_descriptors(&self, addresses: impl Iterator<Item = u64> + Clone) {
        let held = || {
            PHYSMEM.reclaim();
            addresses
                .clone()
                .find(|&address| PHYSMEM.holds_memory(Self::descriptor_memory(address)))
        };
        let mut tries = 0u32;
        while let Some(address) = held() {
            tries = tries.saturating_add(1);
            if tries == 1 << 20 {
                crate::println!(
                    "hotkern: virtio-mem: still waiting for a physmem reader to let go of the descriptors at {address:#x}"
                );
            }
            core::hint::spin_loop();
        }
    }

    /// Plugs up to `count` blocks from `first`, all unplugged: device,
    /// page tables, physmem (one segment with its descriptors on the
    /// run's own first frames, so a grow takes no heap for them and
    /// physmem's heap is one segment's, not one per block; a shrink can
    /// take any other block back first), allocator, each timed into `ns`.
    fn plug_run(&mut self, first: usize, count: usize, ns: &mut [u64; 4]) -> Result<(), MemError> {
        let start = self.block_address(first);
        let bytes = count as u64 * self.block;
        let t0 = clock::nanos();
        self.send(REQ_PLUG, start, count as u16)?;
        let t1 = clock::nanos();
        ns[0] += t1 - t0;
        let mapped = memory::map_range(start, start + bytes);
        let t2 = clock::nanos();
        ns[2] += t2 - t1;
        let frames = bytes / PAGE_SIZE;
        let held = if self.descriptors_on_block {
            self.runs.descriptor_frames(count)
        } else {
            0
        };
        let pfn = Pfn(start / PAGE_SIZE);
        let result = match mapped {
            Err(error) => Err(MemError::Map(error)),
            Ok(()) if held == 0 => PHYSMEM
                .plug(pfn, PageCount(frames))
                .map(|_| ())
                .map_err(MemError::Physmem),
            // SAFETY: the run was just plugged and mapped at its physical
            // address, write-back; nothing else uses its first frames (the
            // allocator is told to keep them), and the shrink unmaps them
            // only after `release_descriptors`.
            Ok(()) => unsafe {
                PHYSMEM.plug_on_memory(pfn, PageCount(frames), Self::descriptor_memory(start))
            }
            .map(|_| ())
            .map_err(MemError::Physmem),
        };
        let t3 = clock::nanos();
        ns[1] += t3 - t2;
        if let Err(error) = result {
            // Give the memory back as it came: unmapped, then unplugged
            // (physmem took nothing: its plug is one write).
            let _ = memory::unmap_range(start, start + bytes);
            let _ = self.send(REQ_UNPLUG, start, count as u16);
            return Err(error);
        }
        let added = self.add_run(first, count);
        ns[3] += clock::nanos() - t3;
        if !added {
            return Err(MemError::Allocator);
        }
        self.plugged[first..first + count].fill(true);
        Ok(())
    }

    /// Plugs free blocks until `target` bytes are plugged, or no
    /// unplugged block is left in the usable region.
    #[hotkern_trace::function]
    pub fn grow(&mut self, target: u64, resize: &mut Resize) -> Result<(), MemError> {
        let usable = self.transport.config64(USABLE_REGION_SIZE) / self.block;
        let per_run = self.runs.run_blocks();
        while self.plugged_bytes() < target {
            let wanted = ((target - self.plugged_bytes()) / self.block) as usize;
            let Some(first) = (0..usable as usize).find(|&i| !self.plugged[i]) else {
                resize.refused = Some("no unplugged block left in the usable region".into());
                return Ok(());
            };
            let count = (first..usable as usize)
                .take_while(|&i| !self.plugged[i])
                .take(wanted.min(per_run))
                .count();
            // Each run is a physmem segment, whose record and index
            // entries (about 1 KiB) are on the heap: stop while the
            // shrink back still has room, rather than fail it.
            let (size, used, _) = crate::arch::heap::usage();
            if size.saturating_sub(used) < HEAP_RESERVE {
                resize.refused = Some(alloc::format!(
                    "the heap keeps {} KiB for the shrink back ({} KiB free)",
                    HEAP_RESERVE >> 10,
                    size.saturating_sub(used) >> 10
                ));
                return Ok(());
            }
            // As in the shrink: the last plug's retired index goes first.
            self.settle();
            self.plug_run(first, count, &mut resize.ns)?;
            resize.blocks += count as i64;
        }
        Ok(())
    }

    /// Takes blocks back until `target` bytes are plugged, migrating the
    /// used movable frames out of them (the shared core's
    /// [`migrate::shrink`]: wholly free blocks first, then the fewest used
    /// frames). Then, as Linux offlines a memory block before virtio_mem
    /// unplugs it: `grace_period` waits until no CPU can still be reading
    /// a frame that moved out of them, the blocks leave physmem and the
    /// page tables, `flush_others` drops them from every other running
    /// CPU's TLB, and only then the device takes them (UNPLUG). A block
    /// that could not be emptied is named in `resize.refused`, and the
    /// device is told the size reached.
    #[hotkern_trace::function]
    pub fn shrink(
        &mut self,
        target: u64,
        resize: &mut Resize,
        grace_period: &dyn Fn(),
        flush_others: &dyn Fn(),
    ) -> Result<(), MemError> {
        let wanted = ((self.plugged_bytes() - target) / self.block) as usize;
        let t0 = clock::nanos();
        let shrunk = migrate::shrink(
            self.hot,
            &HotMemory,
            wanted as u64 * self.frames(),
            &NoHooks,
        );
        let elapsed = clock::nanos() - t0;
        resize.ns[3] += elapsed;
        resize.migrate_ns += elapsed;
        let shrunk = shrunk.map_err(MemError::Shrink)?;
        resize.migrated += shrunk.migrated;
        resize.retries += shrunk.retries;
        if !shrunk.complete() {
            let mut reason = String::new();
            let _ = write!(
                reason,
                "{} of {wanted} blocks could not be emptied",
                wanted - shrunk.taken.len()
            );
            for (block, error) in &shrunk.rolled_back {
                let _ = write!(reason, "; block {block}: {error}");
            }
            if shrunk.rolled_back_unnamed > 0 {
                let _ = write!(reason, "; {} more", shrunk.rolled_back_unnamed);
            }
            resize.refused = Some(reason);
        }
        let mut taken = shrunk.taken;
        // Readers that loaded a moved frame's number before its slot was
        // switched may still be reading the old frame: they must be done
        // before its mapping goes.
        if !taken.is_empty() {
            let t = clock::nanos();
            grace_period();
            resize.ns[3] += clock::nanos() - t;
        }
        taken.sort_unstable();
        // A block holding the descriptors of blocks that stay plugged
        // stays too: physmem takes those frames only with their run's last.
        let kept = self.keep_holders(&mut taken);
        if kept > 0 && resize.refused.is_none() {
            resize.refused = Some(alloc::format!(
                "{kept} blocks hold the descriptors of blocks that stay"
            ));
        }
        // Runs of consecutive blocks, each cut to one physmem segment.
        let runs = runs_of(&taken);
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        for &(first, count) in &runs {
            let mut at = self.block_address(first) / PAGE_SIZE;
            let end = at + count as u64 * self.frames();
            while at < end {
                let guard = PHYSMEM.read();
                let segment_end = guard
                    .find(Pfn(at))
                    .and_then(|found| guard.segment(found.segment).ok())
                    .map_or(end, |segment| segment.end().0);
                let stop = segment_end.min(end).max(at + 1);
                pieces.push((at, stop - at));
                at = stop;
            }
        }
        // The pieces holding descriptors last (a stable sort keeps the
        // rest in order): by then the other pieces of their runs are gone.
        pieces.sort_by_key(|&(pfn, _)| self.holds_descriptors(pfn));
        let t1 = clock::nanos();
        for (done, &(pfn, frames)) in pieces.iter().enumerate() {
            // Each unplug publishes a new index and retires the old one's
            // tables: free them before the next is made.
            self.settle();
            if let Err(error) = PHYSMEM.unplug(Pfn(pfn), PageCount(frames)) {
                // Put back what this shrink took, so that nothing is lost:
                // the pieces unplugged so far, and every block's frames.
                self.replug(&pieces[..done]);
                for &index in &taken {
                    self.hand_over(index);
                }
                resize.ns[1] += clock::nanos() - t1;
                return Err(MemError::Physmem(error));
            }
        }
        let holders = pieces
            .iter()
            .filter(|&&(pfn, _)| self.holds_descriptors(pfn))
            .map(|&(pfn, _)| pfn * PAGE_SIZE);
        self.release_descriptors(holders);
        let t2 = clock::nanos();
        resize.ns[1] += t2 - t1;
        for &index in &taken {
            let start = self.block_address(index);
            for address in (start..start + self.block).step_by(LARGE as usize) {
                memory::unmap_large(address).map_err(MemError::Map)?;
            }
        }
        flush_others();
        let t3 = clock::nanos();
        resize.ns[2] += t3 - t2;
        for &(first, count) in &runs {
            self.send(REQ_UNPLUG, self.block_address(first), count as u16)?;
            for index in first..first + count {
                self.plugged[index] = false;
                self.runs.unplugged(index);
            }
            resize.blocks -= count as i64;
        }
        resize.ns[0] += clock::nanos() - t3;
        Ok(())
    }
}

/// Consecutive indexes as `(first, count)` runs.
fn runs_of(sorted: &[usize]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &index in sorted {
        match runs.last_mut() {
            Some((first, count)) if *first + *count == index && *count < usize::from(u16::MAX) => {
                *count += 1
            }
            _ => runs.push((index, 1)),
        }
    }
    runs
}
