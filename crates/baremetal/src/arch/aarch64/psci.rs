//! PSCI, Arm's Power State Coordination Interface (DEN0022): starting a
//! CPU (`CPU_ON`), stopping the caller (`CPU_OFF`), asking whether one is
//! off (`AFFINITY_INFO`) and powering the machine off (`SYSTEM_OFF`).
//!
//! Calls go through the conduit the device tree's `/psci` names (`HVC` on
//! `-M virt` without EL2, where QEMU itself is the firmware); Linux's
//! `drivers/firmware/psci/psci.c` does the same.

use core::arch::asm;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::arch::devicetree::Conduit;

const CPU_OFF: u64 = 0x8400_0002;
const CPU_ON: u64 = 0xc400_0003;
const AFFINITY_INFO: u64 = 0xc400_0004;
const SYSTEM_OFF: u64 = 0x8400_0008;

/// Whether calls use `SMC` (else `HVC`).
static SECURE_MONITOR: AtomicBool = AtomicBool::new(false);

/// Uses `conduit` from now on.
pub fn set_conduit(conduit: Conduit) {
    SECURE_MONITOR.store(conduit == Conduit::SecureMonitor, Ordering::Relaxed);
}

/// A PSCI error return (DEN0022 table 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsciError(pub i64);

impl fmt::Display for PsciError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            -1 => "NOT_SUPPORTED",
            -2 => "INVALID_PARAMETERS",
            -3 => "DENIED",
            -4 => "ALREADY_ON",
            -5 => "ON_PENDING",
            -6 => "INTERNAL_FAILURE",
            -9 => "INVALID_ADDRESS",
            _ => "unknown",
        };
        write!(f, "PSCI {name} ({})", self.0)
    }
}

impl core::error::Error for PsciError {}

fn call(function: u64, first: u64, second: u64, third: u64) -> i64 {
    let result: u64;
    // SAFETY: a PSCI call: the firmware reads x0..x3 and returns in x0,
    // and may clobber x0..x17 (SMCCC); none of them holds our state.
    unsafe {
        if SECURE_MONITOR.load(Ordering::Relaxed) {
            asm!("smc #0", inout("x0") function => result, inout("x1") first => _,
                inout("x2") second => _, inout("x3") third => _, out("x4") _, out("x5") _,
                out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
                out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _,
                out("x17") _, options(nostack));
        } else {
            asm!("hvc #0", inout("x0") function => result, inout("x1") first => _,
                inout("x2") second => _, inout("x3") third => _, out("x4") _, out("x5") _,
                out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
                out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _,
                out("x17") _, options(nostack));
        }
    }
    result as i64
}

/// Starts the CPU with affinity `target` at physical address `entry`, in
/// EL1 with its MMU off, `x0` = `context`.
pub fn cpu_on(target: u64, entry: u64, context: u64) -> Result<(), PsciError> {
    match call(CPU_ON, target, entry, context) {
        0 => Ok(()),
        error => Err(PsciError(error)),
    }
}

/// Powers the calling CPU off; returns only if the firmware refused.
pub fn cpu_off() -> PsciError {
    PsciError(call(CPU_OFF, 0, 0, 0))
}

/// The state of the CPU with affinity `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AffinityState {
    /// Running.
    On,
    /// Powered off.
    Off,
    /// Being started.
    OnPending,
}

/// Asks the firmware whether CPU `target` is on, off or starting.
pub fn affinity_info(target: u64) -> Result<AffinityState, PsciError> {
    match call(AFFINITY_INFO, target, 0, 0) {
        0 => Ok(AffinityState::On),
        1 => Ok(AffinityState::Off),
        2 => Ok(AffinityState::OnPending),
        error => Err(PsciError(error)),
    }
}

/// Powers the machine off; returns only if the firmware refused.
pub fn system_off() {
    call(SYSTEM_OFF, 0, 0, 0);
}
