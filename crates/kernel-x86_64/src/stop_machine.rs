//! Stop-machine on real CPUs, after Linux's `multi_cpu_stop`
//! (kernel/stop_machine.c): every running CPU is gathered with interrupts
//! off, the chosen CPUs run the work while the others wait, and all leave
//! together.
//!
//! The controlling CPU posts a cross-CPU call to every other running CPU
//! and joins in itself with interrupts off; call handlers already run with
//! interrupts off, so once all have arrived nothing else runs anywhere.
//! Unlike Linux, a member waiting for the others halts instead of
//! spinning: it opens interrupts only inside `sti; hlt`, where nothing but
//! the wake-up IPI can reach it (the call being handled masks the tick and
//! other calls by priority), and the last to arrive wakes the rest. Four
//! virtual CPUs spinning on a two-core host would otherwise keep the very
//! CPUs they wait for off the host's cores.
//! Who writes what: the controller fills [`RENDEZVOUS`] before posting the
//! calls (their release/acquire hand-over publishes it); every member only
//! increments `arrived` and `finished`. One stop-machine at a time: only
//! the hotplug engine, under its operation lock, starts one.

use core::arch::asm;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::{apic, arch, cpu, smp};

/// The work every member may run, behind the controller's reference.
type Work<'a> = &'a (dyn Fn(CpuId) + Sync);

struct Rendezvous {
    /// Address of the controller's `Work` (valid until everyone finished).
    work: AtomicUsize,
    /// Bits of the CPUs that run the work.
    targets: AtomicU64,
    /// Bits of every member, to wake them.
    member_bits: AtomicU64,
    members: AtomicU32,
    arrived: AtomicU32,
    finished: AtomicU32,
}

static RENDEZVOUS: Rendezvous = Rendezvous {
    work: AtomicUsize::new(0),
    targets: AtomicU64::new(0),
    member_bits: AtomicU64::new(0),
    members: AtomicU32::new(0),
    arrived: AtomicU32::new(0),
    finished: AtomicU32::new(0),
};

/// Why a stop-machine could not gather the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopError {
    /// A running CPU did not take the call.
    Call(u32, smp::SmpError),
}

/// Counts this member in `counter` and waits, halted, until all `all`
/// members are counted; the last one wakes the others. Called with
/// interrupts off.
fn meet(counter: &AtomicU32, all: u32, me: u32) {
    // AcqRel: each member's count is seen by the last one, whose wake-ups
    // and the waiters' acquire loads below pair with it.
    if counter.fetch_add(1, Ordering::AcqRel) + 1 == all {
        let others = RENDEZVOUS.member_bits.load(Ordering::Relaxed) & !(1 << me);
        for cpu in (0..cpu::MAX_CPUS as u32).filter(|cpu| others & (1 << cpu) != 0) {
            apic::send_fixed(smp::apic_id(cpu), apic::WAKE_VECTOR);
        }
        return;
    }
    while counter.load(Ordering::Acquire) < all {
        // SAFETY: `sti; hlt` opens interrupts only for the halt (the `sti`
        // shadow): a wake-up sent after the check above is taken by the
        // halt, not before it; `cli` closes them again. Handlers that can
        // run here take no lock (the wake-up only acknowledges).
        unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
    }
}

/// What each member runs, from its call handler or on the controller.
fn member(_: u64) -> u64 {
    let me = cpu::current_id().unwrap_or(0);
    let all = RENDEZVOUS.members.load(Ordering::Acquire);
    meet(&RENDEZVOUS.arrived, all, me);
    if RENDEZVOUS.targets.load(Ordering::Relaxed) & (1 << me) != 0 {
        let address = RENDEZVOUS.work.load(Ordering::Relaxed);
        // SAFETY: the controller stored the address of its `Work` before
        // posting the calls, and keeps it alive until `finished` reaches
        // `all`, which needs this member's count below.
        let work = unsafe { *(address as *const Work<'_>) };
        work(CpuId(me));
    }
    // The work's effects are seen by whoever sees everyone done.
    meet(&RENDEZVOUS.finished, all, me);
    0
}

/// Stops every running CPU, runs `work(cpu)` on each CPU of `cpus` (which
/// must be running) while the others wait with interrupts off, then lets
/// all go. Called on the controlling CPU.
pub fn stop_machine(cpus: CpuSet, work: Work<'_>, tsc_hz: u64) -> Result<(), StopError> {
    let me = cpu::current_id().unwrap_or(0);
    let others: CpuSet = (0..smp::cpu_count())
        .filter(|&cpu| cpu != me && smp::is_running(cpu))
        .map(CpuId)
        .collect();
    let targets = cpus.iter().fold(0u64, |bits, cpu| bits | 1 << cpu.0);
    let work_ref: Work<'_> = work;
    RENDEZVOUS
        .work
        .store(&work_ref as *const Work<'_> as usize, Ordering::Relaxed);
    RENDEZVOUS.targets.store(targets, Ordering::Relaxed);
    let members = others
        .iter()
        .fold(1u64 << me, |bits, cpu| bits | 1 << cpu.0);
    RENDEZVOUS.member_bits.store(members, Ordering::Relaxed);
    RENDEZVOUS.arrived.store(0, Ordering::Relaxed);
    RENDEZVOUS.finished.store(0, Ordering::Relaxed);
    // Release: with the calls' own release, every member sees the fields.
    RENDEZVOUS
        .members
        .store(others.len() as u32 + 1, Ordering::Release);
    let mut posted = [const { None }; cpu::MAX_CPUS];
    for cpu in others.iter() {
        match smp::post(cpu.0, member, 0) {
            Ok(call) => posted[cpu.index()] = Some(call),
            // Members already posted wait for one that never comes: a hung
            // run, which the host's timeout reports.
            Err(error) => return Err(StopError::Call(cpu.0, error)),
        }
    }
    arch::without_interrupts(|| member(0));
    for call in posted.into_iter().flatten() {
        let cpu = call.cpu();
        smp::finish(call, tsc_hz).map_err(|error| StopError::Call(cpu, error))?;
    }
    Ok(())
}
