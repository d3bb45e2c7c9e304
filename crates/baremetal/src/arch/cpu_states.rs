//! The states and errors of other CPUs, one definition for every
//! architecture's `smp`: how an offline CPU parks, and why an operation
//! on another CPU failed.

use hotkern_cpuhp::CpuId;

/// How an offline CPU waits to be started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Park {
    /// Powered off (x86-64: `cli; hlt`, only INIT-SIPI-SIPI brings it
    /// back; aarch64: PSCI CPU_OFF, only CPU_ON does): a cold start.
    PowerOff,
    /// Waiting for interrupts with its tick stopped (`sti; hlt`, `wfi`):
    /// the wake-up brings it back.
    Idle,
}

/// Why an operation on another CPU failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// No such CPU.
    NoCpu(CpuId),
    /// The CPU is not in the state the operation needs.
    WrongState(CpuId),
    /// The CPU did not answer within the timeout.
    Timeout(CpuId),
}

impl core::fmt::Display for SmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "cpu {} {}", self.cpu().0, self.cause())
    }
}

impl core::error::Error for SmpError {}

impl SmpError {
    /// The CPU it names.
    pub fn cpu(&self) -> CpuId {
        match *self {
            SmpError::NoCpu(cpu) | SmpError::WrongState(cpu) | SmpError::Timeout(cpu) => cpu,
        }
    }

    /// Why, in a few words, for the hotplug engine's errors.
    pub fn cause(&self) -> &'static str {
        match self {
            SmpError::NoCpu(_) => "no such CPU",
            SmpError::WrongState(_) => "in the wrong state",
            SmpError::Timeout(_) => "did not answer in time",
        }
    }
}
