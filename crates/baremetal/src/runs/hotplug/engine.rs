//! The engine as this kernel instantiates it and what the run does
//! around every operation — the consistency check and the settling
//! between two — shared by the run's cases and its failure injection.

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use hotkern_cpuhp::{Engine, Hotplug};
use hotkern_kernel::steps::invariants;

use crate::arch::console::println;
use crate::arch::smp::{self, BOOT_CPU};
use crate::platform::Kernel;
use crate::platform::KernelPlatform;

/// The engine as this kernel instantiates it.
pub type KernelHotplug = Hotplug<hotkern_kernel::sync::RawSpinlock, KernelPlatform>;

/// Whether the bolt engine ever ran: from then on an offline CPU may keep
/// what classic frees.
pub static KEPT: AtomicBool = AtomicBool::new(false);

/// Checks the kernel against the engine once deferred callbacks ran, with
/// the shared kernel's check, the one the user-mode machine runs
/// ([`invariants::check`]: the masks, power, run queues, grace periods,
/// kernel threads and every per-CPU structure agree with the engine, and
/// the audit's books with the threads that exist); prints each
/// disagreement on the console after `what`, and returns how many.
pub fn consistent(engine: &KernelHotplug, what: fmt::Arguments<'_>) -> u32 {
    let frees_everything = engine.engine() == Engine::Classic && !KEPT.load(Ordering::Relaxed);
    let cpus = smp::cpu_count() as usize;
    let found = invariants::check(
        &Kernel::HANDLE,
        engine.online_cpus(),
        cpus,
        frees_everything,
    );
    for violation in &found {
        println!("hotkern: hotplug {what}: {violation}");
    }
    found.len() as u32
}

/// What the controller does between two operations; false if the hotplug
/// lock did not settle.
pub fn settle_between() -> bool {
    // The controller is a CPU too: it runs a few of its own slices and
    // hands the rest of its queue to the application processors.
    Kernel::run_slices(BOOT_CPU);
    Kernel::balance();
    // And it is CPU 0's `rcuc`: its callbacks whose grace period ended.
    Kernel::run_rcu_callbacks(BOOT_CPU);
    // Each timed operation is a lone one: the lock's grace period from
    // this one ends before the next begins (see `hotplug_lock`).
    Kernel::settle_hotplug_lock()
        .inspect_err(|unsettled| crate::arch::console::println!("hotkern: {unsettled}"))
        .is_ok()
}
