//! The virtio-mem experiment: the driver ([`crate::drivers::virtio::mem`])
//! follows the host's `requested_size` through the sizes `vmem=` lists
//! (MiB, `vmem=128,256,64`), halting until each change's interrupt
//! ([`changes`]), while every other CPU runs a reader over the region
//! ([`readers`]; `vmem_readers=off` leaves them idle, as a benchmark
//! beside a guest whose other CPUs idle must); with `vmem_fill=PERCENT`, owners hold movable frames
//! for each shrink to migrate ([`fill`]); then the audit ([`audit`]) and
//! the checks. The host's QMP
//! client waits for the ready line ([`READY`]) before its first resize.

use alloc::string::String;
use alloc::vec::Vec;

use crate::arch::clock;
use crate::arch::console::println;
use crate::arch::memory;
use crate::arch::ranges::PAGE_SIZE;
use crate::arch::smp;
use crate::drivers::virtio::mem::{
    self, MemError, Resize, MIB, PLUGGED_SIZE, REQUESTED_SIZE, REQ_UNPLUG_ALL, USABLE_REGION_SIZE,
};
use crate::platform::pages;
use crate::platform::trace::trace_marker;
use crate::runs::checks::Checks;

mod audit;
mod changes;
mod descriptors;
mod fill;
mod json;
mod readers;
mod report;

pub use json::VmemJson;
pub use report::VmemReport;

/// The console line the host waits for before its first resize.
pub const READY: &str = "hotkern: virtio-mem ready";

/// The console line that says the owners are ready for the next size.
pub const NEXT: &str = "hotkern: virtio-mem: ready for the next size";

/// How long the kernel waits for the host's next resize: the host waits
/// up to 30 s plus 10 s per GiB for a size it asked for before it sends
/// the next, so after a many-GiB grow that stopped short the next size
/// may take minutes.
const WAIT_NS: u64 = 240_000_000_000;

/// Drops the unmapped blocks from every other running CPU's TLB: the
/// readers reload CR3 all at once through their polled generation, the
/// other running CPUs get a call each.
fn flush_others() {
    if !readers::request_flush() {
        println!("hotkern: virtio-mem: a reader did not acknowledge a TLB flush");
    }
    for cpu in smp::application_processors() {
        if !readers::runs_on(cpu) && smp::is_running(cpu) {
            let _ = smp::call(cpu, memory::flush_tlb, 0);
        }
    }
}

/// The grace period before a shrink's blocks are unmapped: every reader
/// acknowledges a flush between its batches, where it holds no frame, so
/// none still reads a frame that moved out of them.
fn grace_period() {
    if !readers::request_flush() {
        println!("hotkern: virtio-mem: a reader did not reach a quiescent state");
    }
}

/// Parses `vmem=`'s sizes in MiB.
fn targets(option: &str) -> Option<Vec<u64>> {
    option.split(',').map(|s| s.parse().ok()).collect()
}

/// Finds the device and, if `vmem=` lists sizes, follows the host's
/// resizes to each of them in turn, with `vmem_fill=`'s share of each
/// shrink's size used by owned frames, and (with `readers`) lookups on
/// every other CPU all along; `None` without a device or `vmem=`.
pub fn run(
    option: Option<&str>,
    fill_option: Option<&str>,
    readers: bool,
    checks: &mut Checks,
) -> Option<VmemReport> {
    let wanted = option.map(|o| (o, targets(o)));
    let mut device = match mem::probe(&pages::set_hot) {
        Ok(device) => device,
        Err(MemError::NotFound) if wanted.is_none() => return None,
        Err(error) => {
            println!("hotkern: virtio-mem: {error}");
            checks.check("virtio-mem: the device came up", false);
            return Some(VmemReport {
                error: Some(error),
                ..VmemReport::default()
            });
        }
    };
    let mut report = VmemReport {
        block: device.block,
        addr: device.addr,
        region: device.plugged.len() as u64 * device.block,
        ..VmemReport::default()
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
    // it: the page directories over the region and the fill's owner list.
    // The page descriptors need no heap: each run holds its own.
    if let Err(error) = memory::prepare_map(report.addr, report.addr + report.region) {
        println!("hotkern: virtio-mem: page directories: {error}");
    }
    let percent = match fill_option.map(str::parse::<u64>) {
        None => 0,
        Some(Ok(percent)) if percent <= 100 => percent,
        Some(_) => {
            println!("hotkern: virtio-mem: vmem_fill= expects a percentage, 0 to 100");
            checks.check("virtio-mem: vmem_fill= is a percentage", false);
            0
        }
    };
    let mut fill = fill::Fill::new(percent, device.plugged.len() as u64 * device.frames());
    if percent > 0 && fill.is_none() {
        checks.check("virtio-mem: the heap holds the fill's owner list", false);
    }
    report.descriptor_frames = device.run_descriptor_frames();
    report.run_blocks = device.run_blocks();
    if !device.descriptors_on_block {
        let bytes = descriptors::touch_heap_room(device.plugged.len() as u64 * device.frames());
        println!(
            "hotkern: virtio-mem: descriptors on the heap, {} KiB of it touched",
            bytes >> 10
        );
    }
    report.heap = descriptors::start(device.hot);
    // Watching starts before the host may send its first size (it waits
    // for the ready line), so every change's interrupt is counted and no
    // change falls between the first read and the first wait.
    let mut changes = changes::Changes::new(&device.transport);
    println!("{READY}: following {option} MiB");
    let reader = readers
        .then(|| {
            readers::start(
                device.addr / PAGE_SIZE,
                device.plugged.len() as u64 * device.frames(),
                device.frames(),
            )
        })
        .flatten();
    let directories = memory::directories_made();
    let mut handled = 0u64;
    let mut since = clock::nanos();
    let mut filled_for = None;
    while report.resizes.len() < sizes.len() {
        // The owners fill before the host's next size comes if it is a
        // shrink (the sizes are known from vmem=), so that the resize's
        // figures hold the shrink alone.
        let next = report.resizes.len();
        if let Some(fill) = fill.as_mut().filter(|_| filled_for != Some(next)) {
            filled_for = Some(next);
            let target = sizes[next] * MIB / device.block * device.block;
            if target < device.plugged_bytes() {
                fill.fill(device.hot, target / PAGE_SIZE, next as u32 + 1);
            }
            // `hotkern boot --fill` sends the next size only after this.
            println!("{NEXT}");
        }
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
        let heap_start = report.heap.resize_start();
        let outcome = if target >= device.plugged_bytes() {
            device.grow(target, &mut resize)
        } else {
            device.shrink(target, &mut resize, &grace_period, &flush_others)
        };
        readers::resizing(false);
        resize.heap_peak_rise = report.heap.resize_peak(heap_start);
        if let Some(fill) = fill.as_mut() {
            let bad = fill.verify(device.hot);
            if bad > 0 {
                println!("hotkern: virtio-mem: {bad} filled frames not intact after the resize");
            }
        }
        if let Err(error) = outcome {
            resize.refused = Some(alloc::format!("{error}"));
        }
        resize.plugged = device.plugged_bytes();
        if resize.blocks > 0 && device.descriptors_on_block {
            let frames = device.frames();
            let blocks = (0..device.plugged.len()).filter(|&i| device.plugged[i]);
            report.descriptors_off_block += descriptors::off_block(blocks.map(|i| {
                let first = device.block_address(i) / PAGE_SIZE;
                let home = device.runs.holder(i).map_or(0..0, |holder| {
                    let start = device.block_address(holder) / PAGE_SIZE;
                    start..start + device.runs.held_descriptors(holder)
                });
                (first..first + frames, home)
            }));
        }
        print_resize(&resize);
        trace_marker!(
            "virtio-mem resize to {} MiB: {:+} blocks, ns device {} physmem {} tables {} allocator {}",
            resize.requested / MIB,
            resize.blocks,
            resize.ns[0],
            resize.ns[1],
            resize.ns[2],
            resize.ns[3]
        );
        report.resizes.push(resize);
        since = clock::nanos();
    }
    report.heap.finish();
    println!(
        "hotkern: virtio-mem: heap {} KiB before the resizes ({} KiB bitmaps, {} KiB owner table), at most {} KiB more during them, {} KiB more after; descriptors on each run's first {} frames",
        report.heap.before >> 10,
        report.heap.bitmaps >> 10,
        report.heap.owner_table >> 10,
        report.heap.peak_rise >> 10,
        report.heap.after_rise >> 10,
        report.descriptor_frames
    );
    checks.check(
        "virtio-mem: every plugged block's descriptors are on its run's first frames",
        report.descriptors_off_block == 0,
    );
    report.config = changes.finish(&device.transport, report.resizes.len() as u64, checks);
    let others = smp::application_processors()
        .filter(|&cpu| smp::is_running(cpu))
        .count();
    report.seen = reader.map(readers::stop);
    if let Some(mut fill) = fill {
        fill.release(device.hot);
        let filled = &fill.report;
        println!(
            "hotkern: virtio-mem: fill {}%: up to {} frames owned, {} short; {} re-read after {} resizes, {} not intact; {} ms filling, {} ms re-reading",
            filled.percent,
            filled.most,
            filled.short,
            filled.frames_read,
            filled.rounds,
            filled.bad,
            filled.fill_ns / 1_000_000,
            filled.verify_ns / 1_000_000
        );
        checks.check(
            "virtio-mem: every owner re-read all its frames intact after every resize",
            filled.bad == 0 && filled.rounds == report.resizes.len() as u64,
        );
        checks.check(
            "virtio-mem: the fill owned the share of memory asked for",
            filled.short == 0,
        );
        report.fill = Some(fill.report);
    }
    if let Some(seen) = &report.seen {
        readers::check(seen, others, checks);
    }
    checks.check(
        "virtio-mem: the resizes made no page directory (all made before the first)",
        memory::directories_made() == directories,
    );
    audit::audit(&mut device, &mut report);
    let huge = memory::huge_pages();
    checks.check(
        "virtio-mem: each wholly plugged GiB is one 1 GiB page, no other is",
        huge == audit::whole_gibs(&device),
    );
    // A block with a frame in use is not taken back, and a frame freed
    // twice is refused: what a shrink relies on to lose nothing.
    let hot = device.hot.blocks();
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
        "hotkern: virtio-mem: {} resizes, {} MiB plugged ({huge} GiB in 1 GiB pages), {} pages lost, {} stale lookups",
        report.resizes.len(),
        device_plugged / MIB,
        report.pages_lost,
        report.stale
    );
    Some(report)
}

/// Prints one resize's outcome and where its time went.
fn print_resize(resize: &Resize) {
    let [device, physmem, tables, allocator] = resize.ns.map(|ns| ns / 1000);
    println!(
        "hotkern: virtio-mem resize to {} MiB: plugged {} MiB ({:+} blocks): device {device} us, physmem {physmem} us, page tables {tables} us, allocator {allocator} us (of it migrating {} frames, {} retries: {} us), heap peak +{} KiB{}",
        resize.requested / MIB,
        resize.plugged / MIB,
        resize.blocks,
        resize.migrated,
        resize.retries,
        resize.migrate_ns / 1000,
        resize.heap_peak_rise >> 10,
        match &resize.refused {
            Some(reason) => alloc::format!("; not reached: {reason}"),
            None => String::new(),
        }
    );
}
