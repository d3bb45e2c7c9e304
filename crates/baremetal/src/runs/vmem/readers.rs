//! Readers on every CPU but the boot CPU while the boot CPU resizes: each
//! looks pages of the virtio-mem region up in physmem (`PHYS_TO_VM_PAGE`)
//! without a break, timing the lookups apart while a resize is under way
//! and while the boot CPU waits for the host, and checks that no read
//! section ever sees a block half there (its first frame found and its
//! last not, or the other way round). Between lookups each also takes a
//! hot-plugged frame from the allocator through an owner slot, writes and
//! reads it back, and frees it; and reads a filled frame through its
//! owner's slot ([`fill::read_one`]) while the shrinks move frames.
//! Between batches a reader holds no frame: acknowledging a flush there
//! is the quiescent state the driver's grace period waits for.
//!
//! The readers run as cross-CPU calls, interrupts off, so a TLB shootdown
//! cannot reach them as a call: they poll [`request_flush`]'s generation
//! instead and each acknowledges with a CR3 reload. Under TCG on two host
//! cores the busy vCPUs are preempted by the host in the middle of a
//! batch now and then, so besides the mean the readers keep a histogram
//! of each batch's ns per lookup and report its median.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use alloc::vec::Vec;
use hotkern_cpuhp::CpuId;
use hotkern_physmem::Pfn;

use crate::arch::clock;
use crate::arch::console::println;
use crate::arch::memory::{self, PHYSMEM};
use crate::arch::smp;
use crate::platform::pages::{self, HotMemory};
use crate::runs::checks::Checks;

use super::fill;

/// The most CPUs that run a reader (CPU 0 resizes).
pub const MAX_READERS: usize = 63;
/// Lookups timed together.
const BATCH: u64 = 64;
/// How long the boot CPU waits for the readers' flush acknowledgements.
const ACK_TIMEOUT_NS: u64 = 1_000_000_000;
/// Histogram buckets of a batch's ns per lookup, [`BUCKET_NS`] wide; the
/// last holds everything slower. One nanosecond each: a lookup takes
/// 50-100 ns under TCG, and 8 ns buckets made a ratio of medians move in
/// steps of 15%.
const BUCKETS: usize = 1024;
const BUCKET_NS: u64 = 1;

static STOP: AtomicBool = AtomicBool::new(false);
/// A bit per CPU that runs a reader.
static RUNNING: AtomicU64 = AtomicU64::new(0);
static RESIZING: AtomicBool = AtomicBool::new(false);
static FLUSH: AtomicU64 = AtomicU64::new(0);
/// The last flush generation each CPU acknowledged.
static FLUSHED: [AtomicU64; MAX_READERS + 1] = [const { AtomicU64::new(0) }; MAX_READERS + 1];
static FIRST: AtomicU64 = AtomicU64::new(0);
static FRAMES: AtomicU64 = AtomicU64::new(0);
static BLOCK: AtomicU64 = AtomicU64::new(1);
/// Lookups and nanoseconds while idle, then while resizing; half-seen
/// blocks; blocks checked; frames taken and freed; frames that failed;
/// owners' frames read; of those, not the owner's pattern.
static COUNTS: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];
/// Lookups per CPU.
static PER_CPU: [AtomicU64; MAX_READERS + 1] = [const { AtomicU64::new(0) }; MAX_READERS + 1];
/// Batches by ns per lookup, idle then resizing.
static HISTOGRAM: [[AtomicU64; BUCKETS]; 2] = [const { [const { AtomicU64::new(0) }; BUCKETS] }; 2];

/// What the readers saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Lookups while the boot CPU waited for the host, and their ns.
    pub idle: (u64, u64),
    /// Lookups while a resize was under way, and their ns.
    pub resizing: (u64, u64),
    /// Median batch's ns per lookup, idle and resizing.
    pub median: (Option<u64>, Option<u64>),
    /// Read sections that saw a block's first and last frames disagree.
    pub half_plugged: u64,
    /// Blocks checked that way.
    pub blocks_checked: u64,
    /// Hot-plugged frames taken, written, read back and freed.
    pub frames_used: u64,
    /// Of those, frames whose word did not come back or that the
    /// allocator would not take back.
    pub frames_bad: u64,
    /// Filled frames read through their owners' slots.
    pub owned_read: u64,
    /// Of those, frames whose words were not the owner's pattern.
    pub owned_bad: u64,
    /// (CPU, lookups) for each CPU that ran a reader.
    pub cpus: Vec<(u32, u64)>,
}

impl Seen {
    /// Mean ns per lookup while idle and while resizing.
    pub fn per_lookup(&self) -> (Option<u64>, Option<u64>) {
        let mean = |(n, ns): (u64, u64)| (n > 0).then(|| ns / n);
        (mean(self.idle), mean(self.resizing))
    }
}

/// The bucket a batch of `ns` for [`BATCH`] lookups falls in.
fn bucket(ns: u64) -> usize {
    ((ns / BATCH / BUCKET_NS) as usize).min(BUCKETS - 1)
}

/// The middle batch's ns per lookup (its bucket's middle), if any.
fn median(counts: &[u64]) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    let mut below = 0;
    for (index, &count) in counts.iter().enumerate() {
        below += count;
        if count > 0 && 2 * below >= total {
            return Some(index as u64 * BUCKET_NS + BUCKET_NS / 2);
        }
    }
    None
}

fn reader(cpu: u64) -> u64 {
    let (first, frames, block) = (
        FIRST.load(Ordering::Relaxed),
        FRAMES.load(Ordering::Relaxed),
        BLOCK.load(Ordering::Relaxed),
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ cpu.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut next = move || {
        // xorshift64: spreads the lookups over the region.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut seen_flush = FLUSH.load(Ordering::Acquire);
    let mut batches = 0u64;
    while !STOP.load(Ordering::Acquire) {
        let flush = FLUSH.load(Ordering::Acquire);
        if flush != seen_flush {
            memory::flush_tlb(0);
            seen_flush = flush;
            FLUSHED[cpu as usize].store(flush, Ordering::Release);
        }
        let busy = RESIZING.load(Ordering::Acquire);
        let started = clock::nanos();
        let mut found = 0u64;
        for _ in 0..BATCH {
            let guard = PHYSMEM.read_on(cpu as usize);
            found += u64::from(guard.page(Pfn(first + next() % frames)).is_some());
        }
        let took = clock::nanos() - started;
        core::hint::black_box(found);
        // Still resizing at the end: the whole batch ran during it.
        let slot = if busy && RESIZING.load(Ordering::Acquire) {
            2
        } else if !busy && !RESIZING.load(Ordering::Acquire) {
            0
        } else {
            continue;
        };
        COUNTS[slot].fetch_add(BATCH, Ordering::Relaxed);
        COUNTS[slot + 1].fetch_add(took, Ordering::Relaxed);
        HISTOGRAM[slot / 2][bucket(took)].fetch_add(1, Ordering::Relaxed);
        PER_CPU[cpu as usize].fetch_add(BATCH, Ordering::Relaxed);
        // A page of hot-plugged memory taken, written, read back and
        // freed: a block with it is not taken back meanwhile.
        // Every 16th round only: the allocator's lock is the boot CPU's
        // too, and a vCPU the host preempts while holding it stalls the
        // others (TCG on two host cores).
        batches += 1;
        let hot = pages::hot().filter(|_| batches % 16 == 0);
        if let Some((hot, slot)) = hot.and_then(|hot| Some((hot, hot.alloc()?))) {
            let mut back = [0];
            let written = hot.write(slot, &HotMemory, &[cpu ^ batches])
                && hot.read(slot, &HotMemory, &mut back);
            COUNTS[6].fetch_add(1, Ordering::Relaxed);
            if !written || back[0] != cpu ^ batches || !hot.free(slot) {
                COUNTS[7].fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(intact) = pages::hot().and_then(|hot| fill::read_one(hot, next())) {
            COUNTS[8].fetch_add(1, Ordering::Relaxed);
            if !intact {
                COUNTS[9].fetch_add(1, Ordering::Relaxed);
            }
        }
        let start = first + next() % (frames / block) * block;
        let guard = PHYSMEM.read_on(cpu as usize);
        let (head, tail) = (guard.page(Pfn(start)), guard.page(Pfn(start + block - 1)));
        if head.is_some() != tail.is_some() {
            COUNTS[4].fetch_add(1, Ordering::Relaxed);
        }
        COUNTS[5].fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// Readers started on CPUs, to stop with [`stop`].
pub struct Readers(Vec<(CpuId, smp::Posted)>);

/// Starts a reader on every running CPU but the boot CPU, over `frames`
/// frames from `first` in blocks of `block` frames; `None` if there is no
/// such CPU.
pub fn start(first: u64, frames: u64, block: u64) -> Option<Readers> {
    if frames == 0 || block == 0 {
        return None;
    }
    FIRST.store(first, Ordering::Relaxed);
    FRAMES.store(frames, Ordering::Relaxed);
    BLOCK.store(block, Ordering::Relaxed);
    STOP.store(false, Ordering::Release);
    let flush = FLUSH.load(Ordering::Acquire);
    let mut posted = Vec::new();
    for cpu in smp::application_processors().take(MAX_READERS) {
        if !smp::is_running(cpu) || posted.try_reserve(1).is_err() {
            continue;
        }
        FLUSHED[cpu.index()].store(flush, Ordering::Release);
        if let Ok(call) = smp::post(cpu, reader, u64::from(cpu.0)) {
            RUNNING.fetch_or(1 << cpu.0, Ordering::AcqRel);
            posted.push((cpu, call));
        }
    }
    (!posted.is_empty()).then_some(Readers(posted))
}

/// Marks a resize as under way or over.
pub fn resizing(on: bool) {
    RESIZING.store(on, Ordering::Release);
}

/// Whether a reader runs on `cpu` (a TLB shootdown must use
/// [`request_flush`] there, not a call).
pub fn runs_on(cpu: CpuId) -> bool {
    cpu.index() <= MAX_READERS && RUNNING.load(Ordering::Acquire) & (1 << cpu.0) != 0
}

/// Has every reader reload CR3 and waits for them all; false on a
/// timeout.
pub fn request_flush() -> bool {
    let wanted = FLUSH.fetch_add(1, Ordering::AcqRel) + 1;
    let limit = clock::nanos() + ACK_TIMEOUT_NS;
    let running = RUNNING.load(Ordering::Acquire);
    for (cpu, flushed) in FLUSHED.iter().enumerate() {
        if running & (1 << cpu) == 0 {
            continue;
        }
        while flushed.load(Ordering::Acquire) != wanted {
            if clock::nanos() > limit {
                return false;
            }
            core::hint::spin_loop();
        }
    }
    true
}

/// Stops the readers and returns what they saw.
pub fn stop(readers: Readers) -> Seen {
    STOP.store(true, Ordering::Release);
    let mut cpus = Vec::new();
    for (cpu, posted) in readers.0 {
        let _ = smp::finish(posted);
        RUNNING.fetch_and(!(1 << cpu.0), Ordering::AcqRel);
        if cpus.try_reserve(1).is_ok() {
            cpus.push((cpu.0, PER_CPU[cpu.index()].load(Ordering::Relaxed)));
        }
    }
    let count = |index: usize| COUNTS[index].load(Ordering::Relaxed);
    let histogram = |slot: usize| {
        HISTOGRAM[slot]
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed))
    };
    Seen {
        idle: (count(0), count(1)),
        resizing: (count(2), count(3)),
        median: (median(&histogram(0)), median(&histogram(1))),
        half_plugged: count(4),
        blocks_checked: count(5),
        frames_used: count(6),
        frames_bad: count(7),
        owned_read: count(8),
        owned_bad: count(9),
        cpus,
    }
}

/// Says on the console what the readers saw and checks it: every one of
/// the `others` running CPUs looked pages up, none saw a block half
/// plugged, every hot frame kept its word.
pub fn check(seen: &Seen, others: usize, checks: &mut Checks) {
    let (idle, resizing) = seen.per_lookup();
    println!(
        "hotkern: virtio-mem: {} CPUs looked pages up throughout: {} ns each while idle ({} lookups, median batch {} ns), {} ns while resizing ({}, median {} ns); {} of {} blocks seen half plugged; {} hot frames used, {} bad",
        seen.cpus.len(),
        idle.unwrap_or(0),
        seen.idle.0,
        seen.median.0.unwrap_or(0),
        resizing.unwrap_or(0),
        seen.resizing.0,
        seen.median.1.unwrap_or(0),
        seen.half_plugged,
        seen.blocks_checked,
        seen.frames_used,
        seen.frames_bad
    );
    println!(
        "hotkern: virtio-mem: the readers read {} filled frames through their owners' slots, {} not intact",
        seen.owned_read, seen.owned_bad
    );
    checks.check(
        "virtio-mem: every CPU but the boot CPU looked pages up during the resizes",
        seen.cpus.len() == others && seen.cpus.iter().all(|&(_, lookups)| lookups > 0),
    );
    checks.check(
        "virtio-mem: no lookup on another CPU saw a half-plugged block",
        seen.half_plugged == 0 && seen.blocks_checked > 0,
    );
    checks.check(
        "virtio-mem: every hot frame another CPU used kept its word and was freed once",
        seen.frames_bad == 0,
    );
    checks.check(
        "virtio-mem: every filled frame another CPU read through its slot was intact",
        seen.owned_bad == 0,
    );
}
