//! Why the machine refused an operation.

use core::fmt;

use hotkern_cpuhp::CpuId;

/// Why the machine refused something. Nothing changed when it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineError {
    /// The builder was given an impossible configuration.
    Config(&'static str),
    /// No vCPU has this number.
    NoSuchCpu(CpuId),
    /// No step has this name.
    NoSuchStep(String),
    /// The hotplug engine refused or an operation failed (and was rolled back).
    Hotplug(hotkern_cpuhp::Error),
    /// The host refused to create a thread.
    Spawn(String),
    /// physmem refused the memory range.
    Memory(hotkern_physmem::PhysmemError),
}

impl fmt::Display for MachineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineError::Config(why) => write!(f, "bad machine configuration: {why}"),
            MachineError::NoSuchCpu(cpu) => write!(f, "no vCPU {}", cpu.0),
            MachineError::NoSuchStep(name) => write!(f, "no hotplug step named {name:?}"),
            MachineError::Hotplug(error) => write!(f, "hotplug: {error}"),
            MachineError::Spawn(why) => write!(f, "cannot create a thread: {why}"),
            MachineError::Memory(error) => write!(f, "memory: {error}"),
        }
    }
}

impl core::error::Error for MachineError {}

impl From<hotkern_cpuhp::Error> for MachineError {
    fn from(error: hotkern_cpuhp::Error) -> Self {
        MachineError::Hotplug(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_was_refused() {
        assert_eq!(MachineError::NoSuchCpu(CpuId(5)).to_string(), "no vCPU 5");
        assert_eq!(
            MachineError::NoSuchStep("nope".into()).to_string(),
            "no hotplug step named \"nope\""
        );
        let error: &dyn core::error::Error = &MachineError::Config("cpus must be between 1 and 64");
        assert_eq!(
            error.to_string(),
            "bad machine configuration: cpus must be between 1 and 64"
        );
    }
}
