//! Starting and parking CPUs: the shared core's [`Lifecycle`] handshake
//! (`smp::LIVES`) with this kernel as its [`Power`] — the kick is INIT and
//! SIPI into the trampoline (the second SIPI is the kick again), the
//! wake-up the wake-up IPI — and where a started CPU arrives
//! ([`ap_entry`]) before it enters its loop.
//!
//! The starting or stopping CPU halts while it waits, woken by the CPU
//! that arrives or leaves.
//!
//! [`Lifecycle`]: hotkern_kernel::power::Lifecycle

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::arch::smp::{self, SmpError};
use crate::arch::tsc;
use crate::platform::Kernel;

/// Starts CPU `cpu` (not the boot CPU) and waits until it is online.
// Not `#[hotkern_trace::function]`, nor `start_many`: the boot starts
// the CPUs with them before there is a heap, and an instrumented
// function's first call registers it (which allocates).
pub fn start(cpu: CpuId) -> Result<(), SmpError> {
    start_many(one(cpu)).map_err(|(_, error)| error)
}

/// Starts every CPU of `cpus` at once — each gets its INIT and SIPI
/// before any is waited for, as Linux's parallel bring-up kicks every AP
/// first — and halts until all are online, woken by each as it arrives.
/// A second SIPI goes to those not up after 200 µs (at the next tick, as
/// the tick wakes the halt). On failure, the first CPU that failed and
/// why (the others were still waited for).
pub fn start_many(cpus: CpuSet) -> Result<(), (CpuId, SmpError)> {
    let set = checked(cpus)?;
    let deadline = tsc::nanos().saturating_add(smp::TIMEOUT_US * 1000);
    smp::LIVES
        .start_many(&Kernel::HANDLE, set, deadline)
        .map_err(SmpError::from_power)
}

/// `cpus`, each checked to be an application processor.
fn checked(cpus: CpuSet) -> Result<CpuSet, (CpuId, SmpError)> {
    for cpu in cpus.iter() {
        smp::check_cpu(cpu).map_err(|error| (cpu, error))?;
    }
    Ok(cpus)
}

/// The set of `cpu` alone.
fn one(cpu: CpuId) -> CpuSet {
    let mut set = CpuSet::EMPTY;
    set.insert(cpu);
    set
}

/// Takes CPU `cpu` offline: it stops its tick and parks with interrupts
/// off. Returns once it has parked.
#[hotkern_trace::function]
pub fn offline(cpu: CpuId) -> Result<(), SmpError> {
    offline_many(one(cpu)).map_err(|(_, error)| error)
}

/// Asks every CPU of `cpus` to park, then halts until all have, woken by
/// each as it parks: they leave their idle loops in parallel. On failure,
/// the first CPU that failed and why; a CPU that was not online is
/// refused before any is asked.
#[hotkern_trace::function]
pub fn offline_many(cpus: CpuSet) -> Result<(), (CpuId, SmpError)> {
    let set = checked(cpus)?;
    let deadline = tsc::nanos().saturating_add(smp::TIMEOUT_US * 1000);
    smp::LIVES
        .stop_many(&Kernel::HANDLE, set, deadline)
        .map_err(SmpError::from_power)
}
