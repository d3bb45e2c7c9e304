//! Configuring a machine before it starts: its CPUs, engine, tick,
//! memory and memory device, each checked before any thread exists.

use hotkern_cpuhp::Engine;
use hotkern_kernel::tick::Hz;
use hotkern_physmem::PageCount;

use crate::memdev::system::MemoryDeviceConfig;

/// Configures a [`Machine`](crate::Machine).
#[derive(Debug, Clone)]
pub struct MachineBuilder {
    pub(super) cpus: usize,
    pub(super) online: Option<usize>,
    pub(super) engine: Engine,
    pub(super) frames: PageCount,
    pub(super) hz: Hz,
    pub(super) record_step_calls: bool,
    pub(super) memory_device: Option<MemoryDeviceConfig>,
}

impl MachineBuilder {
    /// Number of vCPUs (1 to 64; default 4).
    pub fn cpus(mut self, cpus: usize) -> Self {
        self.cpus = cpus;
        self
    }

    /// How many vCPUs (the first ones) are online at start; default all.
    pub fn online(mut self, online: usize) -> Self {
        self.online = Some(online);
        self
    }

    /// The hotplug engine (default [`Engine::Classic`]).
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// The scheduler tick's rate (default 1000, as Linux's `CONFIG_HZ`):
    /// it times normal grace periods and timers.
    pub fn hz(mut self, hz: Hz) -> Self {
        self.hz = hz;
        self
    }

    /// Page frames of memory plugged at start (default 16384, 64 MiB).
    pub fn memory_frames(mut self, frames: PageCount) -> Self {
        self.frames = frames;
        self
    }

    /// Gives the machine a memory device (see [`MemoryDevice`](crate::MemoryDevice)): its
    /// region lies above the boot memory, its driver follows the size the
    /// host requests.
    pub fn memory_device(mut self, config: MemoryDeviceConfig) -> Self {
        self.memory_device = Some(config);
        self
    }

    /// Keeps a log of every step callback the engine makes, for
    /// [`Machine::take_step_calls`] (tests of rollback order).
    #[doc(hidden)]
    pub fn record_step_calls(mut self) -> Self {
        self.record_step_calls = true;
        self
    }
}
