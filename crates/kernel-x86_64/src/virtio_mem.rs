//! A virtio-mem driver (virtio 1.2, section 5.15) that follows the
//! device's `requested_size`, feeding physmem as a hypervisor gives and
//! takes memory: NetBSD's `uvm_physseg_plug`/`unplug` driven by the
//! device Linux drives from `drivers/virtio/virtio_mem.c`.
//!
//! - **Grow**: PLUG runs of free blocks (at most 128 MiB a request, as
//!   Linux plugs a memory block at a time), map them in the kernel's page
//!   tables ([`memory::map_large`]), `physmem.plug` them, hand their frames
//!   to the allocator ([`pages::hot`]: a bitmap per block).
//! - **Shrink**: take back from the allocator only blocks whose every frame
//!   is free, from the top of the region down; if too few are, take back
//!   those and say why the rest stayed. Then `physmem.unplug` (within one
//!   segment at a time), unmap, flush the other CPUs' TLBs, UNPLUG.
//!
//! Configuration changes come as interrupts: the transport routes the
//! device's configuration-change interrupt (MSI-X, or on QEMU 7.2, which
//! gives virtio-mem-pci no MSI-X, the legacy pin through the I/O APIC) to
//! the boot CPU's [`apic::VIRTIO_CONFIG_VECTOR`], whose handler counts
//! it, and [`run`] halts until the count moves ([`changes`]), then reads
//! `requested_size`. Without either it says so once and halts between
//! polls of the configuration generation instead (the tick ends each
//! halt). The kernel waits for each size the host announced on
//! the command line (`vmem=128,256,64`, MiB), and the host's QMP client
//! waits for its ready line ([`READY`]).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use hotkern_kernel::blockframes::{BlockFrames, RegionError};
use hotkern_physmem::{PageCount, Pfn, PhysmemError};

use crate::checks::Checks;
use crate::memory::{self, MapError, PHYSMEM};
use crate::pages;
use crate::ranges::PAGE_SIZE;
use crate::virtio_pci::{self, IrqTarget, Transport, TransportError};
use crate::{apic, pci, println, smp, tsc};

mod audit;
mod changes;
mod json;
mod readers;
mod room;

pub use json::Json;

/// The console line the host waits for before its first resize.
pub const READY: &str = "hotkern: virtio-mem ready";

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
const USABLE_REGION_SIZE: u64 = 32;
const PLUGGED_SIZE: u64 = 40;
const REQUESTED_SIZE: u64 = 48;

const REQ_PLUG: u16 = 0;
const REQ_UNPLUG: u16 = 1;
const REQ_UNPLUG_ALL: u16 = 2;
const REQ_STATE: u16 = 3;
const RESP_ACK: u16 = 0;

const LARGE: u64 = 2 << 20;
const MIB: u64 = 1 << 20;
/// The most a single PLUG asks for.
const RUN_BYTES: u64 = 128 << 20;
/// Scans for wholly free blocks before a shrink stops short: the waits
/// between them double from 100 µs, about 50 ms in all. A reader holds a
/// frame for a moment, but under TCG the host may preempt its vCPU in
/// that moment for a time slice of its own (milliseconds).
const SHRINK_ATTEMPTS: u32 = 10;
/// How long the kernel waits for the host's next resize.
const WAIT_NS: u64 = 60_000_000_000;

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
}

/// What the driver did, for the summary.
#[derive(Debug, Default)]
pub struct Report {
    /// Why the driver stopped, if it did.
    pub error: Option<MemError>,
    /// The device's block size in bytes.
    pub block: u64,
    /// The region's guest-physical start.
    pub addr: u64,
    /// The region's size.
    pub region: u64,
    /// Every resize, in order.
    pub resizes: Vec<Resize>,
    /// Plugged frames physmem or the allocator did not have, or whose
    /// memory did not keep a written word.
    pub pages_lost: u64,
    /// Unplugged frames physmem still looked up.
    pub stale: u64,
    /// Whether the host's sizes all came and were followed.
    pub followed: bool,
    /// The heap room touched for the region's descriptors before the
    /// first resize.
    pub room: room::Room,
    /// Plugged blocks, counted after each grow, whose descriptors physmem
    /// kept outside that room.
    pub outside_room: u64,
    /// What the readers on the other CPUs saw, if any ran.
    pub seen: Option<readers::Seen>,
    /// How the host's configuration changes reached the driver.
    pub config: changes::Counted,
}

/// The device, its region and which blocks are plugged.
struct Device {
    transport: Transport,
    block: u64,
    addr: u64,
    plugged: Vec<bool>,
    /// The allocator the plugged blocks' frames are handed to.
    hot: &'static BlockFrames,
}

fn probe() -> Result<Device, MemError> {
    let function = pci::find(VENDOR, DEVICE_MEM).ok_or(MemError::NotFound)?;
    // Configuration changes to this CPU, the one that follows them.
    let target = IrqTarget {
        vector: apic::VIRTIO_CONFIG_VECTOR,
        apic_id: apic::id(),
    };
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
    if addr < crate::boot::IDENTITY_MAP_END || addr.saturating_add(region) > 512 << 30 {
        return Err(MemError::BadConfig("region outside 4 GiB to 512 GiB"));
    }
    let blocks = (region / block) as usize;
    let hot = pages::set_hot(Pfn(addr / PAGE_SIZE), blocks, block / PAGE_SIZE)
        .map_err(MemError::Region)?;
    Ok(Device {
        transport,
        block,
        addr,
        plugged: alloc::vec![false; blocks],
        hot,
    })
}

impl Device {
    fn send(&mut self, request: u16, addr: u64, blocks: u16) -> Result<u16, MemError> {
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

    fn block_address(&self, index: usize) -> u64 {
        self.addr + index as u64 * self.block
    }

    fn frames(&self) -> u64 {
        self.block / PAGE_SIZE
    }

    fn plugged_bytes(&self) -> u64 {
        self.plugged.iter().filter(|&&p| p).count() as u64 * self.block
    }

    /// Plugs up to `count` blocks from `first`, all unplugged: device,
    /// page tables, physmem, allocator, each timed into `ns`.
    fn plug_run(&mut self, first: usize, count: usize, ns: &mut [u64; 4]) -> Result<(), MemError> {
        let start = self.block_address(first);
        let bytes = count as u64 * self.block;
        let t0 = tsc::nanos();
        self.send(REQ_PLUG, start, count as u16)?;
        let t1 = tsc::nanos();
        ns[0] += t1 - t0;
        let mapped = (start..start + bytes)
            .step_by(LARGE as usize)
            .try_for_each(memory::map_large);
        let t2 = tsc::nanos();
        ns[2] += t2 - t1;
        let pfn = Pfn(start / PAGE_SIZE);
        let result = mapped.map_err(MemError::Map).and_then(|()| {
            PHYSMEM
                .plug(pfn, PageCount(bytes / PAGE_SIZE))
                .map_err(MemError::Physmem)
        });
        let t3 = tsc::nanos();
        ns[1] += t3 - t2;
        if let Err(error) = result {
            // Give the memory back as it came: unmapped, then unplugged.
            for address in (start..start + bytes).step_by(LARGE as usize) {
                let _ = memory::unmap_large(address);
            }
            let _ = self.send(REQ_UNPLUG, start, count as u16);
            return Err(error);
        }
        let added = self.hot.add_blocks(first, count);
        ns[3] += tsc::nanos() - t3;
        if !added {
            return Err(MemError::Allocator);
        }
        self.plugged[first..first + count].fill(true);
        Ok(())
    }

    fn grow(&mut self, target: u64, resize: &mut Resize) -> Result<(), MemError> {
        let usable = self.transport.config64(USABLE_REGION_SIZE) / self.block;
        let per_run = (RUN_BYTES / self.block).clamp(1, u64::from(u16::MAX)) as usize;
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
            self.plug_run(first, count, &mut resize.ns)?;
            resize.blocks += count as i64;
        }
        Ok(())
    }

    fn shrink(&mut self, target: u64, resize: &mut Resize) -> Result<(), MemError> {
        let wanted = ((self.plugged_bytes() - target) / self.block) as usize;
        let t0 = tsc::nanos();
        let mut taken = Vec::new();
        // Blocks plugged and not taken back yet, the ones still to try.
        let mut left = self.plugged.clone();
        let mut busy = 0usize;
        // A frame held for a moment (the reader's) makes its block busy:
        // look again a few times before stopping short.
        for attempt in 0..SHRINK_ATTEMPTS {
            busy = 0;
            for index in (0..left.len()).rev() {
                if taken.len() == wanted {
                    break;
                }
                if !left[index] {
                    continue;
                }
                if self.hot.take_block(index) {
                    taken.push(index);
                    left[index] = false;
                } else {
                    busy += 1;
                }
            }
            if taken.len() == wanted || attempt + 1 == SHRINK_ATTEMPTS {
                break;
            }
            let until = tsc::nanos() + (100_000 << attempt);
            while tsc::nanos() < until {
                core::hint::spin_loop();
            }
        }
        resize.ns[3] += tsc::nanos() - t0;
        if taken.len() < wanted {
            let mut reason = String::new();
            let _ = write!(
                reason,
                "{} of {wanted} blocks to take back are not wholly free ({busy} plugged blocks hold allocated frames; pages are not migrated)",
                wanted - taken.len()
            );
            resize.refused = Some(reason);
        }
        taken.sort_unstable();
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
                    .and_then(|(handle, _)| guard.segment(handle).ok())
                    .map_or(end, |segment| segment.end().0);
                let stop = segment_end.min(end).max(at + 1);
                pieces.push((at, stop - at));
                at = stop;
            }
        }
        let t1 = tsc::nanos();
        for (done, &(pfn, frames)) in pieces.iter().enumerate() {
            if let Err(error) = PHYSMEM.unplug(Pfn(pfn), PageCount(frames)) {
                // Put back what this shrink took, so that nothing is lost:
                // the pieces unplugged so far, and every block's frames.
                for &(pfn, frames) in &pieces[..done] {
                    let _ = PHYSMEM.plug(Pfn(pfn), PageCount(frames));
                }
                for &index in &taken {
                    self.hot.add_blocks(index, 1);
                }
                resize.ns[1] += tsc::nanos() - t1;
                return Err(MemError::Physmem(error));
            }
        }
        PHYSMEM.reclaim();
        let t2 = tsc::nanos();
        resize.ns[1] += t2 - t1;
        for &index in &taken {
            let start = self.block_address(index);
            for address in (start..start + self.block).step_by(LARGE as usize) {
                memory::unmap_large(address).map_err(MemError::Map)?;
            }
        }
        // The readers reload CR3 all at once through their polled
        // generation; other running CPUs get a call each.
        if !readers::request_flush() {
            println!("hotkern: virtio-mem: a reader did not acknowledge a TLB flush");
        }
        for cpu in 1..smp::cpu_count() {
            if !readers::runs_on(cpu) && smp::is_running(cpu) {
                let _ = smp::call(cpu, memory::flush_tlb, 0);
            }
        }
        let t3 = tsc::nanos();
        resize.ns[2] += t3 - t2;
        for &(first, count) in &runs {
            self.send(REQ_UNPLUG, self.block_address(first), count as u16)?;
            for index in first..first + count {
                self.plugged[index] = false;
            }
            resize.blocks -= count as i64;
        }
        resize.ns[0] += tsc::nanos() - t3;
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

/// Parses `vmem=`'s sizes in MiB.
fn targets(option: &str) -> Option<Vec<u64>> {
    option.split(',').map(|s| s.parse().ok()).collect()
}

/// Finds the device and, if `vmem=` lists sizes, follows the host's
/// resizes to each of them in turn; `None` without a device or `vmem=`.
pub fn run(option: Option<&str>, checks: &mut Checks) -> Option<Report> {
    let wanted = option.map(|o| (o, targets(o)));
    let mut device = match probe() {
        Ok(device) => device,
        Err(MemError::NotFound) if wanted.is_none() => return None,
        Err(error) => {
            println!("hotkern: virtio-mem: {error}");
            checks.check("virtio-mem: the device came up", false);
            return Some(Report {
                error: Some(error),
                ..Report::default()
            });
        }
    };
    let mut report = Report {
        block: device.block,
        addr: device.addr,
        region: device.plugged.len() as u64 * device.block,
        ..Report::default()
    };
    println!(
        "hotkern: virtio-mem: region [{:#x}, {:#x}), block {} KiB, usable {} MiB, plugged {} MiB, requested {} MiB",
        report.addr,
        report.addr + report.region,
        report.block >> 10,
        device.transport.config64(USABLE_REGION_SIZE) / MIB,
        device.transport.config64(PLUGGED_SIZE) / MIB,
        device.transport.config64(REQUESTED_SIZE) / MIB
    );
    if device.transport.config64(PLUGGED_SIZE) != 0 {
        // Plugged by an earlier kernel: nothing here knows that memory.
        if let Err(error) = device.send(REQ_UNPLUG_ALL, 0, 0) {
            println!("hotkern: virtio-mem: UNPLUG_ALL: {error}");
        }
    }
    let Some((option, Some(sizes))) = wanted else {
        if let Some((option, None)) = wanted {
            println!("hotkern: virtio-mem: vmem={option}: expected sizes in MiB, like 128,256,64");
            checks.check("virtio-mem: vmem= lists sizes in MiB", false);
        }
        return Some(report);
    };
    // Allocated before the first resize, so that none of them waits for
    // it: the page directories over the region, then the heap room for
    // its page descriptors.
    if let Err(error) = memory::prepare_map(report.addr, report.addr + report.region) {
        println!("hotkern: virtio-mem: page directories: {error}");
    }
    report.room = room::touch(device.plugged.len() as u64 * device.frames());
    println!(
        "hotkern: virtio-mem: {} KiB of heap for the region's page descriptors touched in {} us",
        (report.room.range.end - report.room.range.start) >> 10,
        report.room.ns / 1000
    );
    // Watching starts before the host may send its first size (it waits
    // for the ready line), so every change's interrupt is counted and no
    // change falls between the first read and the first wait.
    let mut changes = changes::Changes::new(&device.transport);
    println!("{READY}: following {option} MiB");
    let reader = readers::start(
        device.addr / PAGE_SIZE,
        device.plugged.len() as u64 * device.frames(),
        device.frames(),
    );
    let directories = memory::directories_made();
    let mut handled = 0u64;
    let mut since = tsc::nanos();
    while report.resizes.len() < sizes.len() {
        let requested = device.transport.config64(REQUESTED_SIZE);
        if requested == handled {
            if !changes.wait(&device.transport, since.saturating_add(WAIT_NS)) {
                println!(
                    "hotkern: virtio-mem: no new requested size in {} s; {} of {} resizes came",
                    WAIT_NS / 1_000_000_000,
                    report.resizes.len(),
                    sizes.len()
                );
                break;
            }
            continue;
        }
        handled = requested;
        let mut resize = Resize {
            requested,
            ..Resize::default()
        };
        let target = requested / device.block * device.block;
        readers::resizing(true);
        let outcome = if target >= device.plugged_bytes() {
            device.grow(target, &mut resize)
        } else {
            device.shrink(target, &mut resize)
        };
        readers::resizing(false);
        if let Err(error) = outcome {
            resize.refused = Some(alloc::format!("{error}"));
        }
        resize.plugged = device.plugged_bytes();
        if resize.blocks > 0 {
            let frames = device.frames();
            let blocks = (0..device.plugged.len()).filter(|&i| device.plugged[i]);
            report.outside_room += room::outside(
                &report.room.range,
                blocks.map(|i| {
                    let first = device.block_address(i) / PAGE_SIZE;
                    first..first + frames
                }),
            );
        }
        print_resize(&resize);
        crate::trace_marker!(
            "virtio-mem resize to {} MiB: {:+} blocks, ns device {} physmem {} tables {} allocator {}",
            resize.requested / MIB,
            resize.blocks,
            resize.ns[0],
            resize.ns[1],
            resize.ns[2],
            resize.ns[3]
        );
        report.resizes.push(resize);
        since = tsc::nanos();
    }
    report.config = changes.finish(&device.transport, report.resizes.len() as u64, checks);
    let others = (1..smp::cpu_count())
        .filter(|&cpu| smp::is_running(cpu))
        .count();
    report.seen = reader.map(readers::stop);
    if let Some(seen) = &report.seen {
        readers::check(seen, others, checks);
    }
    checks.check(
        "virtio-mem: the resizes made no page directory (all made before the first)",
        memory::directories_made() == directories,
    );
    audit::audit(&mut device, &mut report);
    // A block with a frame in use is not taken back, and a frame freed
    // twice is refused: what a shrink relies on to lose nothing.
    let hot = device.hot;
    if let Some(frame) = hot.alloc() {
        let block = ((frame.0 * PAGE_SIZE - device.addr) / device.block) as usize;
        let kept = !hot.take_block(block);
        let freed = hot.free(frame) && !hot.free(frame);
        checks.check(
            "virtio-mem: a block with a frame in use is not taken back, a double free is refused",
            kept && freed,
        );
    }
    report.pages_lost += audit::exercise(hot);
    let device_plugged = device.transport.config64(PLUGGED_SIZE);
    let asked: Vec<u64> = report.resizes.iter().map(|r| r.requested / MIB).collect();
    report.followed = asked == sizes && report.resizes.iter().all(|r| r.refused.is_none());
    checks.check(
        "virtio-mem: every size the host asked for was reached",
        report.followed,
    );
    checks.check(
        "virtio-mem: every plugged page is in physmem and the allocator, none lost",
        report.pages_lost == 0,
    );
    checks.check(
        "virtio-mem: no unplugged page is still looked up",
        report.stale == 0,
    );
    checks.check(
        "virtio-mem: the device's plugged size is the blocks plugged",
        device_plugged == device.plugged_bytes(),
    );
    println!(
        "hotkern: virtio-mem: {} resizes, {} MiB plugged, {} pages lost, {} stale lookups",
        report.resizes.len(),
        device_plugged / MIB,
        report.pages_lost,
        report.stale
    );
    Some(report)
}

fn print_resize(resize: &Resize) {
    let [device, physmem, tables, allocator] = resize.ns.map(|ns| ns / 1000);
    println!(
        "hotkern: virtio-mem resize to {} MiB: plugged {} MiB ({:+} blocks): device {device} us, physmem {physmem} us, page tables {tables} us, allocator {allocator} us{}",
        resize.requested / MIB,
        resize.plugged / MIB,
        resize.blocks,
        match &resize.refused {
            Some(reason) => alloc::format!("; not reached: {reason}"),
            None => String::new(),
        }
    );
}
