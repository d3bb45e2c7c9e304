//! A stalled grace period's report: a stall planted on CPUs in known
//! states, and the text Linux's RCU stall warning would print for them.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use common::{Bells, Cpu};
use hotkern_cpuhp::CpuId;
use hotkern_kernel::kthread::Role;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::{Activities, Activity, GracePeriods, Kind, StalledCpu};

/// CPU 0, which drives; its clock jumps to each deadline it waits for.
/// As the armed wait begins, CPU 1 takes three ticks and CPU 3 one tick
/// and a turn; CPU 2 does nothing. What each runs is in `activities`.
struct Planted<'a> {
    cpu: Cpu,
    rcu: &'a GracePeriods,
    activities: Activities,
    armed: AtomicBool,
}

impl Cpus for Planted<'_> {
    fn current(&self) -> Option<CpuId> {
        self.cpu.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.cpu.wake(cpu);
    }
    fn wake_threads(&self) {
        self.cpu.wake_threads();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.cpu.wait_until(condition);
    }
    fn now_ns(&self) -> u64 {
        self.cpu.now_ns()
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        if self.armed.swap(false, SeqCst) {
            for _ in 0..3 {
                self.rcu.tick(self, CpuId(1));
            }
            self.rcu.tick(self, CpuId(3));
            self.rcu.quiescent(self, CpuId(3));
        }
        self.cpu.wait_until_deadline(condition, deadline_ns)
    }
    fn activity(&self, cpu: CpuId) -> Activity {
        self.activities.get(cpu.index())
    }
}

#[test]
fn a_planted_stall_reads_like_linux_s_stall_warning() {
    let rcu = GracePeriods::new();
    let platform = Planted {
        cpu: Cpu {
            me: Some(CpuId(0)),
            bells: Bells::new(4),
        },
        rcu: &rcu,
        activities: Activities::new(),
        armed: AtomicBool::new(false),
    };
    for cpu in 0..4 {
        rcu.set_online(&platform, CpuId(cpu), true);
    }
    // A first grace period on an idle machine ends at its first forcing.
    for cpu in 1..4 {
        rcu.enter_idle(&platform, CpuId(cpu));
    }
    assert_eq!(rcu.synchronize(&platform, Kind::Normal, None), Ok(()));
    for cpu in 1..4 {
        rcu.exit_idle(CpuId(cpu));
    }
    assert_eq!(
        platform.activities.enter(1, Activity::IdleLoop),
        Activity::Unknown
    );
    assert_eq!(
        platform.activities.enter(1, Activity::Thread(Role::Worker)),
        Activity::IdleLoop
    );
    platform.activities.enter(2, Activity::CrossCpuCall);
    platform.activities.enter(3, Activity::TaskSlice);
    platform.armed.store(true, SeqCst);
    let began = platform.now_ns();
    let stall = rcu
        .synchronize(&platform, Kind::Normal, Some(began + 20_000_000))
        .unwrap_err();
    assert_eq!(stall.grace_period, 2);
    assert_eq!(stall.elapsed_ns, 20_000_000);
    assert_eq!(
        stall.cpus[0],
        StalledCpu {
            cpu: CpuId(1),
            behind: 0,
            ticks: 3,
            quiescent_passed: false,
            idle_entries: 0,
            idle: false,
            activity: Activity::Thread(Role::Worker),
        }
    );
    assert_eq!(
        stall.to_string(),
        "rcu: INFO: rcu_sched detected stalls on CPUs/tasks: \
         1: (3 ticks this GP) idle entries 0, awake, running kworker/1; \
         2: (2 GPs behind) idle entries 0, awake, running a cross-CPU call; \
         3: (1 ticks this GP, quiescent state passed, not reported) idle entries 0, awake, running a task slice \
         (detected by 0, t=20 jiffies, 20 ms, g=2, fqs=6)"
    );
    // The grace period was dropped; the next one, with every CPU idle,
    // ends and is the second counted.
    for cpu in 1..4 {
        rcu.enter_idle(&platform, CpuId(cpu));
    }
    assert_eq!(rcu.synchronize(&platform, Kind::Normal, None), Ok(()));
    assert_eq!(rcu.completed(), 2);
}

#[test]
fn an_expedited_stall_says_so_and_names_threads_by_cpu() {
    let rcu = GracePeriods::new();
    let platform = Planted {
        cpu: Cpu {
            me: None,
            bells: Bells::new(3),
        },
        rcu: &rcu,
        activities: Activities::new(),
        armed: AtomicBool::new(false),
    };
    for cpu in 0..3 {
        rcu.set_online(&platform, CpuId(cpu), true);
    }
    platform.activities.enter(0, Activity::of_thread("cpuhp"));
    platform
        .activities
        .enter(2, Activity::of_thread("ksoftirqd"));
    let stall = rcu
        .synchronize(&platform, Kind::Expedited, Some(21_000_000))
        .unwrap_err();
    assert_eq!(
        stall.to_string(),
        "rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: \
         0: (1 GPs behind) idle entries 0, awake, running cpuhp/0; \
         1: (1 GPs behind) idle entries 0, awake, running something unrecorded; \
         2: (1 GPs behind) idle entries 0, awake, running ksoftirqd/2 \
         (detected by a thread, t=21 jiffies, 21 ms, g=1, fqs=0)"
    );
    assert_eq!(
        Activity::of_thread("rcuc"),
        Activity::Thread(Role::RcuCallbacks)
    );
    assert_eq!(Activity::of_thread("kswapd"), Activity::Unknown);
}
