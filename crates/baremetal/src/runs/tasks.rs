//! The boot scenario's tasks: what their slices do while CPUs come and
//! go, and the counters that say whether a slice saw an invariant broken.
//! The scheduler that runs them is the platform's over the shared core's
//! (`hotkern_kernel::baremetal`); each task carries its body, made here.
//!
//! A task is slices of real work (a hash over its own state and a page
//! touched through its CPU's page cache), run until the controller
//! [stops](stop) the tasks: each then finishes at its next slice, so
//! tasks run through every hotplug operation and none is still waiting
//! for CPU time when the books are closed.
//!
//! Every eighth task is also a reader of the hotplug lock (Linux's
//! `cpus_read_lock`) while [`set_readers`] says so: it takes it on an
//! application processor, holds it until its next slice (across a whole
//! round of its CPU's queue), checks then that the online mask is the one
//! it saw, and gives it back. Never on CPU 0: the controller runs CPU 0's
//! queue only between operations, so a hold there would wait for the very
//! writer that waits for it.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::tasks::TaskStatus;

use crate::arch::ranges::PAGE_SIZE;
use crate::arch::smp::BOOT_CPU;
use crate::platform::Kernel;

/// Rounds of the hash per slice: a few microseconds under TCG.
const SLICE_ROUNDS: u32 = 512;
/// Slices a reader task holds the hotplug lock for.
const READ_HOLD_SLICES: u32 = 1;
/// How long a slice stays inside the atomic hotplug read side while long
/// readers are on ([`set_long_readers`]), in nanoseconds: longer than it
/// takes to hide a dying CPU and run its dying steps, so that a take-down
/// that did not wait for it clears the CPU from the online mask under it.
const READ_SIDE_HOLD_NS: u64 = 300_000;

/// Whether slices stay inside the atomic read side for
/// [`READ_SIDE_HOLD_NS`] now.
static LONG_READERS: AtomicBool = AtomicBool::new(false);
/// Whether reader tasks take the hotplug lock now.
static READERS: AtomicBool = AtomicBool::new(false);
/// Set once: every task finishes at its next slice.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Read holds of the hotplug lock given back.
static READ_HOLDS: AtomicU64 = AtomicU64::new(0);
/// Slices that found the online mask changed under a read hold: each one
/// is the lock broken.
static CHANGED_UNDER_HOLD: AtomicU64 = AtomicU64::new(0);
/// Slices that saw a CPU online inside the atomic hotplug read side and
/// found it gone before they left: each one is a dying CPU's steps run
/// under a reader (a drain skipped, or the steps on a CPU that did not
/// wait).
static LEFT_UNDER_READER: AtomicU64 = AtomicU64::new(0);
/// Slices that ran on a CPU outside the online mask: each one is an
/// invariant broken.
static RAN_OFFLINE: AtomicU64 = AtomicU64::new(0);
/// Slices whose page did not hold what they wrote (or got no page).
static PAGE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// One task's state between slices.
struct Worker {
    id: u64,
    /// What its slices hash.
    state: u64,
    /// A reader's hold of the hotplug lock: the online mask it saw, and
    /// the slices left.
    hold: Option<(CpuSet, u32)>,
}

/// Starts `count` tasks, spread over the active CPUs (after the
/// scheduler's boot).
pub fn spawn(count: u32) {
    for _ in 0..count {
        Kernel::spawn(|id| {
            let mut worker = Worker {
                id,
                state: id | 1,
                hold: None,
            };
            Box::new(move |cpu| worker.slice(cpu))
        });
    }
}

impl Worker {
    /// One slice on `cpu`, interrupts off.
    fn slice(&mut self, cpu: CpuId) -> TaskStatus {
        if !Kernel::online_mask().contains(cpu) {
            RAN_OFFLINE.fetch_add(1, Ordering::Relaxed);
        }
        // Each slice reads the online mask inside the atomic hotplug read
        // side, as a placement does, and checks it at the end: a CPU it
        // saw online must still be (bolt-nostop drains it before the dying
        // steps; a stop-machine cannot start while it runs, interrupts off).
        let reader = Kernel::mechanisms().hotplug_read.enter(Some(cpu));
        let seen = reader.online(Kernel::online_mask());
        for _ in 0..SLICE_ROUNDS {
            // xorshift64: work the optimiser cannot remove (the state is kept).
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
        }
        // Each slice also takes a page through its CPU's page cache,
        // writes it, reads it back and frees it, as the machine's tasks do.
        if !touch(cpu, self.state) {
            PAGE_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        let gone = || !seen.difference(&Kernel::online_mask()).is_empty();
        let mut left = gone();
        if cpu != BOOT_CPU && LONG_READERS.load(Ordering::Relaxed) {
            // Every slice on an application processor stays in long enough
            // to span a take-down.
            let until = crate::arch::clock::nanos().saturating_add(READ_SIDE_HOLD_NS);
            while !left && crate::arch::clock::nanos() < until {
                core::hint::spin_loop();
                left = gone();
            }
        }
        if left {
            LEFT_UNDER_READER.fetch_add(1, Ordering::Relaxed);
        }
        drop(reader);
        let stopping = STOPPING.load(Ordering::Relaxed);
        if self.id % 8 == 0 {
            self.read_the_online_mask(cpu, stopping);
        }
        if stopping {
            TaskStatus::Done
        } else {
            TaskStatus::Again
        }
    }

    /// A reader task's part of a slice: take the hotplug lock (on an
    /// application processor), check the mask under it, or give it back.
    fn read_the_online_mask(&mut self, cpu: CpuId, stopping: bool) {
        match self.hold.take() {
            None if cpu != BOOT_CPU
                && !stopping
                && READERS.load(Ordering::Relaxed)
                && Kernel::cpus_read_trylock() =>
            {
                self.hold = Some((Kernel::online_mask(), READ_HOLD_SLICES));
            }
            None => {}
            Some((seen, left)) => {
                if Kernel::online_mask() != seen {
                    CHANGED_UNDER_HOLD.fetch_add(1, Ordering::Relaxed);
                }
                if left == 0 || stopping {
                    Kernel::cpus_read_unlock();
                    READ_HOLDS.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.hold = Some((seen, left - 1));
                }
            }
        }
    }
}

/// Takes a frame through `cpu`'s cache, writes `pattern` into it, reads it
/// back and frees it; false if the pattern did not come back (or there was
/// no frame).
fn touch(cpu: CpuId, pattern: u64) -> bool {
    let Some(pages) = Kernel::pages() else {
        return false;
    };
    let Some(frame) = pages.alloc(cpu.index()) else {
        return false;
    };
    let word = (frame.0 * PAGE_SIZE) as *mut u64;
    // SAFETY: the frame is below 4 GiB (identity-mapped, writable RAM),
    // out of the kernel's physmem since `pages::init`, and this task holds
    // it until `free_frame` below: nothing else reads or writes it.
    let back = unsafe {
        word.write_volatile(pattern);
        word.read_volatile()
    };
    pages.free_frame(cpu.index(), frame);
    back == pattern
}

/// Lets reader tasks take the hotplug lock (or stops them; holds end at
/// the holder's next slice).
pub fn set_readers(on: bool) {
    READERS.store(on, Ordering::Relaxed);
}

/// Makes every task's slice on an application processor stay inside the
/// atomic hotplug read side across most of a take-down (or stops it): the
/// operations are slower, and a dying CPU's steps that do not wait for
/// readers are seen.
pub fn set_long_readers(on: bool) {
    LONG_READERS.store(on, Ordering::Relaxed);
}

/// Asks every task to finish at its next slice.
pub fn stop() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// What happened to every task: the scheduler's books and the slices'
/// checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedTally {
    /// Tasks started.
    pub issued: u64,
    /// Tasks finished exactly once.
    pub completed: u64,
    /// Tasks finished more than once.
    pub twice: u64,
    /// Tasks not finished.
    pub outstanding: u64,
    /// Slices run.
    pub slices: u64,
    /// Slices that ran on a CPU outside the online mask.
    pub ran_offline: u64,
    /// Tasks moved off a dying CPU.
    pub migrated: u64,
    /// Slices whose page did not hold what they wrote, or got no page.
    pub page_errors: u64,
    /// Read holds of the hotplug lock given back.
    pub read_holds: u64,
    /// Slices that found the online mask changed under a read hold.
    pub changed_under_hold: u64,
    /// Slices that saw a CPU online inside the atomic read side and found
    /// it offline before they left.
    pub left_under_reader: u64,
}

/// The books now.
pub fn tally() -> SchedTally {
    let books = Kernel::tally();
    SchedTally {
        issued: books.issued,
        completed: books.completed,
        twice: books.twice,
        outstanding: books.outstanding,
        slices: books.slices,
        ran_offline: RAN_OFFLINE.load(Ordering::Relaxed),
        migrated: books.migrated,
        page_errors: PAGE_ERRORS.load(Ordering::Relaxed),
        read_holds: READ_HOLDS.load(Ordering::Relaxed),
        changed_under_hold: CHANGED_UNDER_HOLD.load(Ordering::Relaxed),
        left_under_reader: LEFT_UNDER_READER.load(Ordering::Relaxed),
    }
}
