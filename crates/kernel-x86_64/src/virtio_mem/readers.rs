//! A reader on another CPU while the boot CPU resizes: it looks pages of
//! the virtio-mem region up in physmem (`PHYS_TO_VM_PAGE`) without a
//! break, timing the lookups apart while a resize is under way and while
//! the boot CPU waits for the host, and checks that no read section ever
//! sees a block half there (its first frame found and its last not, or
//! the other way round). Between lookups it also takes a hot-plugged
//! frame from the allocator, writes and reads it back, and frees it.
//!
//! One reader, on CPU 1: with the boot CPU resizing, two busy vCPUs are
//! what two host cores carry under TCG without distorting each other (see
//! KERNEL-NOTES: spinning vCPUs stall each other). The reader runs as a
//! cross-CPU call, interrupts off, so a TLB shootdown cannot reach it as a
//! call: it polls [`request_flush`]'s generation instead and acknowledges
//! with a CR3 reload.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hotkern_physmem::Pfn;

use crate::memory::{self, PHYSMEM};
use crate::pages::HOT;
use crate::ranges::PAGE_SIZE;
use crate::{smp, tsc};

/// The CPU the reader runs on.
pub const READER_CPU: u32 = 1;
/// Lookups timed together.
const BATCH: u64 = 64;
/// How long the boot CPU waits for the reader's flush acknowledgement.
const ACK_TIMEOUT_NS: u64 = 1_000_000_000;

static STOP: AtomicBool = AtomicBool::new(false);
static RUNNING: AtomicBool = AtomicBool::new(false);
static RESIZING: AtomicBool = AtomicBool::new(false);
static FLUSH: AtomicU64 = AtomicU64::new(0);
static FLUSHED: AtomicU64 = AtomicU64::new(0);
static FIRST: AtomicU64 = AtomicU64::new(0);
static FRAMES: AtomicU64 = AtomicU64::new(0);
static BLOCK: AtomicU64 = AtomicU64::new(1);
/// Lookups and nanoseconds while idle, then while resizing; half-seen
/// blocks; blocks checked; frames taken and freed; frames that failed.
static COUNTS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

/// What the reader saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    /// Lookups while the boot CPU waited for the host, and their ns.
    pub idle: (u64, u64),
    /// Lookups while a resize was under way, and their ns.
    pub resizing: (u64, u64),
    /// Read sections that saw a block's first and last frames disagree.
    pub half_plugged: u64,
    /// Blocks checked that way.
    pub blocks_checked: u64,
    /// Hot-plugged frames taken, written, read back and freed.
    pub frames_used: u64,
    /// Of those, frames whose word did not come back or that the
    /// allocator would not take back.
    pub frames_bad: u64,
}

impl Seen {
    /// Mean ns per lookup while idle and while resizing.
    pub fn per_lookup(&self) -> (Option<u64>, Option<u64>) {
        let mean = |(n, ns): (u64, u64)| (n > 0).then(|| ns / n);
        (mean(self.idle), mean(self.resizing))
    }
}

fn reader(cpu: u64) -> u64 {
    let (first, frames, block) = (
        FIRST.load(Ordering::Relaxed),
        FRAMES.load(Ordering::Relaxed),
        BLOCK.load(Ordering::Relaxed),
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ cpu;
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
            FLUSHED.store(flush, Ordering::Release);
        }
        let busy = RESIZING.load(Ordering::Acquire);
        let started = tsc::nanos();
        let mut found = 0u64;
        for _ in 0..BATCH {
            let guard = PHYSMEM.read_on(cpu as usize);
            found += u64::from(guard.page(Pfn(first + next() % frames)).is_some());
        }
        let took = tsc::nanos() - started;
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
        // A page of hot-plugged memory taken, written, read back and
        // freed: a block with it is not taken back meanwhile.
        // Every 16th round only: the allocator's lock is the boot CPU's
        // too, and a vCPU the host preempts while holding it stalls the
        // other (TCG on two host cores).
        batches += 1;
        let frame = if batches % 16 == 0 { HOT.alloc() } else { None };
        if let Some(frame) = frame {
            let word = (frame.0 * PAGE_SIZE) as *mut u64;
            // SAFETY: the frame is plugged and mapped (the allocator has
            // only such frames), and this reader holds it until `free`.
            let back = unsafe {
                word.write_volatile(frame.0 ^ cpu);
                word.read_volatile()
            };
            COUNTS[6].fetch_add(1, Ordering::Relaxed);
            if back != frame.0 ^ cpu || !HOT.free(frame) {
                COUNTS[7].fetch_add(1, Ordering::Relaxed);
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

/// Starts the reader over `frames` frames from `first` in blocks of
/// `block` frames; `None` if there is no CPU for it.
pub fn start(first: u64, frames: u64, block: u64) -> Option<smp::Posted> {
    if !smp::is_running(READER_CPU) || frames == 0 || block == 0 {
        return None;
    }
    FIRST.store(first, Ordering::Relaxed);
    FRAMES.store(frames, Ordering::Relaxed);
    BLOCK.store(block, Ordering::Relaxed);
    STOP.store(false, Ordering::Release);
    let posted = smp::post(READER_CPU, reader, u64::from(READER_CPU)).ok()?;
    RUNNING.store(true, Ordering::Release);
    Some(posted)
}

/// Marks a resize as under way or over.
pub fn resizing(on: bool) {
    RESIZING.store(on, Ordering::Release);
}

/// Whether the reader runs on `cpu` (a TLB shootdown must use
/// [`request_flush`] there, not a call).
pub fn runs_on(cpu: u32) -> bool {
    cpu == READER_CPU && RUNNING.load(Ordering::Acquire)
}

/// Has the reader reload CR3 and waits for it; false on a timeout.
pub fn request_flush() -> bool {
    let wanted = FLUSH.fetch_add(1, Ordering::AcqRel) + 1;
    let limit = tsc::nanos() + ACK_TIMEOUT_NS;
    while FLUSHED.load(Ordering::Acquire) != wanted {
        if tsc::nanos() > limit {
            return false;
        }
        core::hint::spin_loop();
    }
    true
}

/// Stops the reader and returns what it saw.
pub fn stop(posted: smp::Posted, tsc_hz: u64) -> Seen {
    STOP.store(true, Ordering::Release);
    let _ = smp::finish(posted, tsc_hz);
    RUNNING.store(false, Ordering::Release);
    let count = |index: usize| COUNTS[index].load(Ordering::Relaxed);
    Seen {
        idle: (count(0), count(1)),
        resizing: (count(2), count(3)),
        half_plugged: count(4),
        blocks_checked: count(5),
        frames_used: count(6),
        frames_bad: count(7),
    }
}
