//! This kernel's CPUs as the shared core's [`Cpus`]: every caller is a
//! CPU, a wake-up is the wake-up IPI, a wait halts (`sti; hlt`) and the
//! clock is the TSC. The stop-machine, grace periods, the hotplug lock and
//! the CPU handshake all wait and wake through it.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::Activity;

use crate::arch::cpu;
use crate::arch::smp;
use crate::arch::tsc;

/// This kernel's CPUs as the shared kernel's mechanisms see them: every
/// caller is a CPU, a wake-up is the wake-up IPI, and a wait halts.
pub struct KernelCpus;

impl Cpus for KernelCpus {
    fn current(&self) -> Option<CpuId> {
        // The bootstrap CPU before its per-CPU area is set up is CPU 0.
        Some(cpu::current_id().unwrap_or(CpuId(0)))
    }

    fn wake(&self, cpu: CpuId) {
        smp::ring(cpu);
    }

    fn wake_threads(&self) {}

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.wait_until_deadline(condition, u64::MAX);
    }

    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }

    /// The tick wakes the halt to look at the clock: a deadline passes
    /// within a tick, unless the caller masked the tick (a call handler).
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        smp::halt_until(condition, deadline_ns)
    }

    fn activity(&self, cpu: CpuId) -> Activity {
        cpu::activity(cpu)
    }
}
