//! What a stalled grace period says, after Linux's RCU CPU stall warning
//! (kernel/rcu/tree_stall.h, `print_cpu_stall_info`): which CPUs it still
//! waits for, whether each noticed it and how many ticks it took since,
//! whether it went idle since it began, what it was running, and how long
//! the grace period has lasted. Linux prints
//!
//! ```text
//! rcu: INFO: rcu_sched detected stalls on CPUs/tasks:
//! rcu:     2-...0: (0 ticks this GP) idle=f1c/1/0x4000000000000000 softirq=1234/1234 fqs=5250
//!         (detected by 0, t=21002 jiffies, g=1129, q=83 ncpus=4)
//! ```
//!
//! and a [`Stall`] prints, on one line,
//!
//! ```text
//! rcu: INFO: rcu_sched detected stalls on CPUs/tasks: 2: (0 ticks this GP) idle entries 0, awake, running kworker/2 (detected by 0, t=5000 jiffies, 5000 ms, g=565, fqs=1666)
//! ```
//!
//! What a CPU was running is the platform's to say ([`Cpus::activity`]);
//! [`Activities`](crate::activity::Activities) is a word per CPU a platform
//! can keep it in, written as the CPU switches between its idle loop,
//! kernel threads, task slices and cross-CPU calls.
//!
//! [`Cpus::activity`]: crate::platform::Cpus::activity

use alloc::vec::Vec;
use core::fmt;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::activity::Activity;
use crate::tick::Hz;

use super::Kind;

/// One CPU a stalled grace period still waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledCpu {
    /// The CPU.
    pub cpu: CpuId,
    /// Grace periods begun that it has not noticed at a tick, this one
    /// included; 0 once it noticed this one (Linux's "GPs behind").
    pub behind: u64,
    /// Ticks it took since it noticed this grace period (Linux's
    /// `ticks_this_gp`); meaningful when `behind` is 0.
    pub ticks: u64,
    /// It passed a quiescent state since it noticed, not reported yet.
    pub quiescent_passed: bool,
    /// Times it entered its extended quiescent state (idle) since the
    /// grace period began (Linux prints the dynticks counter itself).
    pub idle_entries: u64,
    /// It is idle now.
    pub idle: bool,
    /// What it was running, as its platform recorded it.
    pub activity: Activity,
}

/// A grace period that did not end by its deadline, described as Linux's
/// RCU CPU stall warning describes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// Its kind.
    pub kind: Kind,
    /// Its number: the grace periods completed before it, plus one
    /// (Linux's `g=` prints its `rcu_gp_seq`, this number shifted left
    /// by two bits).
    pub grace_period: u64,
    /// The CPU whose driver gave up on it; `None` for a thread that is no
    /// CPU.
    pub detected_by: Option<CpuId>,
    /// Nanoseconds of the platform's clock since it began.
    pub elapsed_ns: u64,
    /// The tick rate, for `t=` in jiffies.
    pub hz: Hz,
    /// Forced quiescent-state scans while it ran (Linux's `fqs=`).
    pub fqs_scans: u64,
    /// The CPUs it still waited for, in order.
    pub cpus: Vec<StalledCpu>,
}

impl Stall {
    /// The CPUs it still waited for.
    pub fn holding_up(&self) -> CpuSet {
        self.cpus.iter().map(|stalled| stalled.cpu).collect()
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Normal => "",
            Kind::Expedited => "expedited ",
        };
        write!(
            f,
            "rcu: INFO: rcu_sched detected {kind}stalls on CPUs/tasks:"
        )?;
        for (index, stalled) in self.cpus.iter().enumerate() {
            let separator = if index == 0 { " " } else { "; " };
            write!(f, "{separator}{stalled}")?;
        }
        if self.cpus.is_empty() {
            write!(f, " none")?;
        }
        match self.detected_by {
            Some(CpuId(cpu)) => write!(f, " (detected by {cpu}")?,
            None => write!(f, " (detected by a thread")?,
        }
        write!(
            f,
            ", t={} jiffies, {} ms, g={}, fqs={})",
            self.hz.jiffies(self.elapsed_ns),
            self.elapsed_ns / 1_000_000,
            self.grace_period,
            self.fqs_scans
        )
    }
}

impl fmt::Display for StalledCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.cpu.0)?;
        if self.behind == 0 {
            write!(f, "({} ticks this GP", self.ticks)?;
            if self.quiescent_passed {
                write!(f, ", quiescent state passed, not reported")?;
            }
            write!(f, ")")?;
        } else {
            write!(f, "({} GPs behind)", self.behind)?;
        }
        write!(
            f,
            " idle entries {}, {}, running {}",
            self.idle_entries,
            if self.idle { "idle" } else { "awake" },
            self.activity.on(self.cpu)
        )
    }
}

impl core::error::Error for Stall {}
