//! Stop-machine on real CPUs. The rendezvous (arrive, the targets run the
//! work, finish, leave together; after Linux's `multi_cpu_stop`) is the
//! shared kernel's [`Rendezvous`]; what stays here is how this kernel
//! gathers its CPUs and how they wait ([`KernelCpus`]).
//!
//! Gathering: the controlling CPU posts a cross-CPU call to every other
//! running CPU and joins in itself with interrupts off; call handlers
//! already run with interrupts off, so once all have arrived nothing else
//! runs anywhere. One stop-machine at a time: only the hotplug engine,
//! under its operation lock, starts one.
//!
//! Waiting: unlike Linux, a member waiting for the others halts instead of
//! spinning. It opens interrupts only inside `sti; hlt`, where nothing but
//! the wake-up IPI can reach a member in its call handler (the call being
//! handled masks the tick and other calls by priority), and whoever
//! completes a stage wakes the CPUs waiting for it. Four virtual CPUs
//! spinning on a two-core host would otherwise keep the very CPUs they wait
//! for off the host's cores.

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::stop_machine::Rendezvous;

use crate::arch::cpu;
use crate::arch::instructions;
use crate::arch::smp;
use crate::platform::cpus::KernelCpus;

/// The kernel's one rendezvous.
static RENDEZVOUS: Rendezvous = Rendezvous::new();

/// Why a stop-machine could not gather the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopError {
    /// A running CPU did not take the call.
    Call(CpuId, smp::SmpError),
}

impl core::fmt::Display for StopError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StopError::Call(_, error) => write!(f, "a member did not take the call: {error}"),
        }
    }
}

impl core::error::Error for StopError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            StopError::Call(_, error) => Some(error),
        }
    }
}

/// What each other member runs, from its call handler.
fn member(_: u64) -> u64 {
    RENDEZVOUS.join(&KernelCpus);
    0
}

/// Stops every running CPU, runs `work(cpu)` on each CPU of `cpus` (which
/// must be running) while the others wait with interrupts off, then lets
/// all go. Called on the controlling CPU.
pub fn stop_machine(cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), StopError> {
    let running: CpuSet = smp::cpus().filter(|&cpu| smp::is_running(cpu)).collect();
    let mut posted = [const { None }; cpu::MAX_CPUS];
    let post_each = |others: CpuSet| {
        for cpu in others.iter() {
            let call = smp::post(cpu, member, 0).map_err(|error| StopError::Call(cpu, error))?;
            posted[cpu.index()] = Some(call);
        }
        Ok(())
    };
    // A failed call abandons the rendezvous: the members already posted
    // wait for one that never comes, a hung run the caller reports.
    instructions::without_interrupts(|| {
        RENDEZVOUS.run(&KernelCpus, running, cpus, work, post_each)
    })?;
    for call in posted.into_iter().flatten() {
        let cpu = call.cpu();
        smp::finish(call).map_err(|error| StopError::Call(cpu, error))?;
    }
    Ok(())
}
