//! What each CPU is running — its idle loop, a kernel thread, a task
//! slice, a cross-CPU call — as its platform records it as it switches,
//! for a stalled grace period's report ([`crate::rcu::Stall`]). Below both
//! the platform trait that reports it ([`crate::platform::Cpus::activity`])
//! and RCU, which prints it.

use core::fmt;
// Core's atomics, even under loom: a word written by its CPU and read by
// another only to print it, part of no protocol a model checks.
use core::sync::atomic::{AtomicU8, Ordering};

use hotkern_cpuhp::CpuId;

use crate::cpuset::MAX_CPUS;
use crate::kthread::Role;

/// What a CPU is running, as its platform records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activity {
    /// The platform records nothing (or nothing yet).
    #[default]
    Unknown,
    /// Its idle loop: between turns, or halted.
    IdleLoop,
    /// One of its kernel threads with a role (`kworker/N`, `ksoftirqd/N`,
    /// `rcuc/N`).
    Thread(Role),
    /// Its hotplug thread (`cpuhp/N`).
    HotplugThread,
    /// A function another CPU asked it to run (a cross-CPU call).
    CrossCpuCall,
    /// A slice of a task.
    TaskSlice,
}

impl Activity {
    /// The activity of a kernel thread called `name` (without the CPU
    /// number): a role's thread, the hotplug thread, or unknown.
    pub fn of_thread(name: &str) -> Activity {
        if name == "cpuhp" {
            return Activity::HotplugThread;
        }
        Role::ALL
            .into_iter()
            .find(|role| role.name() == name)
            .map_or(Activity::Unknown, Activity::Thread)
    }

    /// One byte per activity, for [`Activities`].
    const fn code(self) -> u8 {
        match self {
            Activity::Unknown => 0,
            Activity::IdleLoop => 1,
            Activity::HotplugThread => 2,
            Activity::CrossCpuCall => 3,
            Activity::TaskSlice => 4,
            Activity::Thread(role) => 5 + role.index() as u8,
        }
    }

    fn from_code(code: u8) -> Activity {
        match code {
            1 => Activity::IdleLoop,
            2 => Activity::HotplugThread,
            3 => Activity::CrossCpuCall,
            4 => Activity::TaskSlice,
            code => Role::ALL
                .get(usize::from(code.wrapping_sub(5)))
                .map_or(Activity::Unknown, |&role| Activity::Thread(role)),
        }
    }

    /// Says what CPU `cpu` was running, naming threads as Linux's `ps`
    /// does (`kworker/2`).
    pub fn on(self, cpu: CpuId) -> impl fmt::Display {
        OnCpu(self, cpu)
    }
}

struct OnCpu(Activity, CpuId);

impl fmt::Display for OnCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let OnCpu(activity, CpuId(cpu)) = *self;
        match activity {
            Activity::Unknown => write!(f, "something unrecorded"),
            Activity::IdleLoop => write!(f, "its idle loop"),
            Activity::Thread(role) => write!(f, "{}/{cpu}", role.name()),
            Activity::HotplugThread => write!(f, "cpuhp/{cpu}"),
            Activity::CrossCpuCall => write!(f, "a cross-CPU call"),
            Activity::TaskSlice => write!(f, "a task slice"),
        }
    }
}

/// What each CPU is running: one byte per CPU, written by that CPU as it
/// switches (a relaxed swap), read by whoever reports a stall.
pub struct Activities([AtomicU8; MAX_CPUS]);

impl Activities {
    /// Every CPU's activity unknown; a `static` on bare metal.
    pub const fn new() -> Self {
        Activities([const { AtomicU8::new(0) }; MAX_CPUS])
    }

    /// `cpu` now runs `activity`; returns what it ran before, to put back
    /// when `activity` ends. Out-of-range CPUs record nothing.
    pub fn enter(&self, cpu: usize, activity: Activity) -> Activity {
        self.0.get(cpu).map_or(Activity::Unknown, |word| {
            Activity::from_code(word.swap(activity.code(), Ordering::Relaxed))
        })
    }

    /// What `cpu` runs now.
    pub fn get(&self, cpu: usize) -> Activity {
        self.0.get(cpu).map_or(Activity::Unknown, |word| {
            Activity::from_code(word.load(Ordering::Relaxed))
        })
    }
}

impl Default for Activities {
    fn default() -> Self {
        Self::new()
    }
}
