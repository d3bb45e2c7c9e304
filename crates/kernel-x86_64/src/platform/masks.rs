//! Linux's `cpu_online_mask` and `cpu_active_mask` on this kernel: what
//! the scheduler, the step table and the places that queue work on another
//! CPU all read, so it sits below all of them. Made with the scheduler
//! ([`crate::platform::sched::boot`]); empty until then.

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::AtomicCpuSet;

struct Masks {
    /// Where anything may run.
    online: AtomicCpuSet,
    /// Where new and migrating tasks may go.
    active: AtomicCpuSet,
}

static MASKS: spin::Once<Masks> = spin::Once::new();

/// Makes both masks, empty (once; the scheduler's boot).
pub fn make() {
    MASKS.call_once(|| Masks {
        online: AtomicCpuSet::default(),
        active: AtomicCpuSet::default(),
    });
}

/// The online mask.
pub fn online_mask() -> CpuSet {
    MASKS.get().map_or(CpuSet::EMPTY, |m| m.online.load())
}

/// The active mask.
pub fn active_mask() -> CpuSet {
    MASKS.get().map_or(CpuSet::EMPTY, |m| m.active.load())
}

/// Puts `cpu` in or out of the online mask (the `sched:online-mask` step).
pub fn set_online(cpu: CpuId, online: bool) {
    if let Some(m) = MASKS.get() {
        m.online.set(cpu, online);
    }
}

/// Puts `cpu` in or out of the active mask (the `sched:active` step).
pub fn set_active(cpu: CpuId, active: bool) {
    if let Some(m) = MASKS.get() {
        m.active.set(cpu, active);
    }
}
