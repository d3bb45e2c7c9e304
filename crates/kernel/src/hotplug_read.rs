//! The hotplug lock's atomic read side: what code that picks a CPU from the
//! online mask and then touches that CPU's state (queue a work item, arm a
//! timer, queue an RCU callback) takes instead of relying on stop-machine,
//! so that a CPU can be taken down while the others keep running
//! (`bolt-nostop`, see docs/ARCHITECTURE.md, "Taking a CPU down without a
//! rendezvous").
//!
//! The shape is Srivatsa Bhat's 2013 "stop_machine()-free CPU hotplug"
//! series (per-CPU reader counts that readers touch with preemption off,
//! and never sleep on) with the two phases of Linux's SRCU
//! (kernel/rcu/srcutree.c), so that the writer waits only for readers that
//! entered before it hid the CPU, never for a stream of new ones:
//!
//! * **Layout.** One word per slot (a CPU, or the one slot for threads
//!   that are no CPU), on a cache line of its own: the slot's phase bit
//!   and a reader count for each phase.
//! * **Readers** ([`HotplugReadSide::enter`]) add themselves to the count
//!   of their slot's current phase with one compare-and-swap on their own
//!   word, so reading the phase and being counted in it are one step.
//!   Inside, they see the online mask through [`HotplugReadGuard::online`],
//!   which leaves out the CPUs the writer hid. They never wait.
//! * **The writer** hides the dying CPUs ([`HotplugReadSide::hide`]),
//!   flips every slot's phase ([`HotplugReadSide::flip`]) and waits until
//!   every count of the old phase is zero ([`HotplugReadSide::drained`]).
//!   Every meeting of a reader and the writer is on one word, so its
//!   modification order decides it: a reader counted before the flip of
//!   its slot is waited for; one counted after read the flipped word, so
//!   it sees the hide that came before the flip (the flip releases, the
//!   reader's swap acquires). No store-buffering pair, hence no full fence
//!   on the reader's path, and loom's model checks exactly this
//!   (`tests/hotplug_read_loom.rs`).
//! * **The cost.** A reader: one compare-and-swap and one
//!   read-modify-write on its own cache line, and a load of the hidden
//!   set, which changes only during a take-down. A writer: one pass to
//!   flip and one or more to sum, instead of waking and stopping every CPU.
//!
//! ```
//! use hotkern_cpuhp::{CpuId, CpuSet};
//! use hotkern_kernel::hotplug_read::HotplugReadSide;
//!
//! let side = HotplugReadSide::new(4);
//! let online = CpuSet::range(0, 4);
//! let reader = side.enter(Some(CpuId(1)));
//! assert!(reader.online(online).contains(CpuId(3)));
//!
//! side.hide(CpuSet::single(CpuId(3)));
//! let phase = side.flip();
//! assert!(!side.drained(phase), "the reader that saw cpu3 is still inside");
//! assert!(!side.enter(None).online(online).contains(CpuId(3)), "a new reader never sees it");
//! drop(reader);
//! assert!(side.drained(phase));
//! ```

use alloc::boxed::Box;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::sync::{AtomicU64, Ordering};

/// A slot's phase bit; below it, phase 0's count (bits 0..31) and phase
/// 1's (bits 31..62).
const PHASE: u64 = 1 << 63;
const COUNT_BITS: u32 = 31;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// One slot's word, on a cache line of its own so that CPUs do not
/// contend on each other's.
#[repr(align(64))]
#[derive(Default)]
struct Slot(AtomicU64);

/// The atomic read side: per-slot reader counts in two phases and the set
/// of CPUs hidden from readers.
pub struct HotplugReadSide {
    slots: Box<[Slot]>,
    /// CPUs readers must not pick, as mask bits.
    hidden: AtomicU64,
}

/// A phase the writer flipped away from, to wait for with
/// [`HotplugReadSide::drained`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase(u32);

/// A reader inside the read side; leaves it when dropped.
#[must_use = "the read side is left when the guard drops"]
pub struct HotplugReadGuard<'a> {
    side: &'a HotplugReadSide,
    slot: usize,
    one: u64,
}

impl HotplugReadSide {
    /// A read side for CPUs `0..cpus` (and one slot for threads that are
    /// no CPU).
    pub fn new(cpus: usize) -> Self {
        HotplugReadSide {
            slots: (0..=cpus).map(|_| Slot::default()).collect(),
            hidden: AtomicU64::new(0),
        }
    }

    /// Enters the read side from `here` (the calling CPU; `None` for a
    /// thread that is no CPU). Never waits for the writer; may be nested.
    pub fn enter(&self, here: Option<CpuId>) -> HotplugReadGuard<'_> {
        let last = self.slots.len() - 1;
        let slot = here.map_or(last, |cpu| cpu.index().min(last));
        let word = &self.slots[slot].0;
        let mut seen = word.load(Ordering::Relaxed);
        loop {
            let one = count_unit(phase_of(seen));
            // Acquire: a reader counted after a flip sees the hide before it.
            match word.compare_exchange_weak(seen, seen + one, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => {
                    return HotplugReadGuard {
                        side: self,
                        slot,
                        one,
                    }
                }
                Err(now) => seen = now,
            }
        }
    }

    /// Hides `cpus` from readers counted after the next flip (and from any
    /// that reads the hidden set later): the writer's first step.
    pub fn hide(&self, cpus: CpuSet) {
        self.hidden.fetch_or(bits(cpus), Ordering::SeqCst);
    }

    /// Shows `cpus` to readers again: after their dying steps cleared them
    /// from the online mask, or when the take-down failed before any ran.
    pub fn show(&self, cpus: CpuSet) {
        self.hidden.fetch_and(!bits(cpus), Ordering::SeqCst);
    }

    /// The CPUs hidden now.
    pub fn hidden(&self) -> CpuSet {
        from_bits(self.hidden.load(Ordering::SeqCst))
    }

    /// Sends every slot's new readers to the other phase; returns the old
    /// one, whose readers the writer waits for. One writer at a time (the
    /// hotplug lock's write side serialises them), so every slot is in the
    /// same phase between writers.
    pub fn flip(&self) -> Phase {
        let mut old = 0;
        for slot in self.slots.iter() {
            // Release: a reader counted after this sees the hide.
            old = phase_of(slot.0.fetch_xor(PHASE, Ordering::SeqCst));
        }
        Phase(old)
    }

    /// Whether every reader of `phase` has left. Acquire: what they did
    /// inside happens before what the writer does next.
    pub fn drained(&self, phase: Phase) -> bool {
        let shift = phase.0 * COUNT_BITS;
        self.slots
            .iter()
            .all(|slot| (slot.0.load(Ordering::SeqCst) >> shift) & COUNT_MASK == 0)
    }

    /// Readers inside now, in both phases (for tests and reports).
    pub fn readers(&self) -> usize {
        self.slots
            .iter()
            .map(|slot| {
                let word = slot.0.load(Ordering::SeqCst);
                (word & COUNT_MASK) + ((word >> COUNT_BITS) & COUNT_MASK)
            })
            .sum::<u64>() as usize
    }
}

impl HotplugReadGuard<'_> {
    /// `online` (the online mask the reader read) without the CPUs the
    /// writer hid: where the reader may place something.
    pub fn online(&self, online: CpuSet) -> CpuSet {
        let hidden = from_bits(self.side.hidden.load(Ordering::SeqCst));
        online.difference(&hidden)
    }
}

impl Drop for HotplugReadGuard<'_> {
    fn drop(&mut self) {
        // Release: pairs with the writer's load in `drained`.
        self.side.slots[self.slot]
            .0
            .fetch_sub(self.one, Ordering::SeqCst);
    }
}

fn phase_of(word: u64) -> u32 {
    u32::from(word & PHASE != 0)
}

fn count_unit(phase: u32) -> u64 {
    1 << (phase * COUNT_BITS)
}

fn bits(cpus: CpuSet) -> u64 {
    cpus.iter()
        .filter(|cpu| cpu.index() < 64)
        .fold(0, |bits, cpu| bits | 1 << cpu.index())
}

fn from_bits(bits: u64) -> CpuSet {
    (0..64)
        .filter(|index| bits & 1 << index != 0)
        .map(|index| CpuId(index as u32))
        .collect()
}
