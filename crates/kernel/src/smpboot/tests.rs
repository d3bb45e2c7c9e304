//! The bodies over the step table's fake kernel, whose threads' work is
//! logged instead of run: what each turn runs, how much, when.

use alloc::vec::Vec;
use core::sync::atomic::Ordering::SeqCst;

use super::*;
use crate::kthread::tests::probe;
use crate::steps::tests::Fake;
use crate::timer::Timer;
use crate::workqueue::Work;

/// Nanoseconds in a millisecond: a jiffy at [`Hz::DEFAULT`].
const MS: u64 = 1_000_000;

impl KthreadKernel for Fake {
    const TASKS_IN_WORKER: bool = true;

    fn now_ns(&self) -> u64 {
        self.clock_ns.load(SeqCst)
    }

    fn hz(&self) -> Hz {
        Hz::DEFAULT
    }

    fn run_job(&self, _cpu: CpuId, item: Item, id: u64, _job: u32) {
        self.log(item.name(), id);
    }

    /// One slice: the first task queued.
    fn run_task_slices(&self, cpu: CpuId) {
        let task = self.queues[cpu.index()].lock().pop();
        if let Some(task) = task {
            self.log("task", u64::from(task));
        }
    }
}

impl Fake {
    pub(crate) fn log(&self, what: &'static str, id: u64) {
        let off = self.interrupts_off.load(SeqCst);
        self.ran.lock().push((what, id, off));
    }

    /// What ran since the last call, without the interrupt state.
    pub(crate) fn take_ran(&self) -> Vec<(&'static str, u64)> {
        let ran = core::mem::take(&mut *self.ran.lock());
        ran.into_iter().map(|(what, id, _)| (what, id)).collect()
    }
}

/// A fake whose CPU 1 has a bound pool, an enabled timer base, an open
/// run queue and an RCU callback list, and the clock at `now_ns`.
fn cpu_1_up(now_ns: u64) -> Fake {
    let fake = Fake::new();
    let s = &fake.shared;
    assert!(s.workqueue.create(1) && s.workqueue.bind(1));
    assert!(s.timers.create(1) && s.timers.set_enabled(1, true));
    assert!(fake.shared.rcu_callbacks.create(1));
    fake.queues[1].lock().open();
    fake.clock_ns.store(now_ns, SeqCst);
    fake
}

#[test]
fn a_worker_turn_runs_at_most_a_batch_of_work_items() {
    let fake = cpu_1_up(0);
    for id in 0..20 {
        assert!(fake.shared.workqueue.queue(1, Work { id, job: 0 }).is_ok());
    }
    run(&fake, CpuId(1), Role::Worker);
    let first: Vec<u64> = fake.take_ran().iter().map(|&(_, id)| id).collect();
    assert_eq!(first, (0..16).collect::<Vec<_>>(), "16, in queue order");
    assert!(should_run(&fake, CpuId(1), Role::Worker, 0), "4 left");
    run(&fake, CpuId(1), Role::Worker);
    assert_eq!(fake.take_ran().len(), 4);
    assert!(!should_run(&fake, CpuId(1), Role::Worker, 0));
}

#[test]
fn a_timer_is_due_at_the_first_tick_at_or_after_its_deadline() {
    // 2.5 ms: the last tick was at 2 ms.
    let fake = cpu_1_up(2 * MS + MS / 2);
    for (id, deadline) in [(1, 2 * MS + MS / 5), (2, 2 * MS), (3, MS + MS / 2)] {
        let timer = Timer {
            deadline,
            id,
            job: 0,
        };
        assert!(fake.shared.timers.arm(1, timer).is_ok());
    }
    assert!(should_run(&fake, CpuId(1), Role::Softirq, fake.now_ns()));
    run(&fake, CpuId(1), Role::Softirq);
    assert_eq!(
        fake.take_ran(),
        [("timer", 3), ("timer", 2)],
        "the one at 2.2 ms waits for the tick at 3 ms, though the clock passed it"
    );
    assert!(!should_run(&fake, CpuId(1), Role::Softirq, fake.now_ns()));
    assert!(should_run(&fake, CpuId(1), Role::Softirq, 3 * MS));
    fake.clock_ns.store(3 * MS, SeqCst);
    run(&fake, CpuId(1), Role::Softirq);
    assert_eq!(fake.take_ran(), [("timer", 1)]);
}

#[test]
fn rcu_callbacks_run_only_once_their_grace_period_ended() {
    let fake = cpu_1_up(0);
    let lists = &fake.shared.rcu_callbacks;
    assert!(lists.call(1, 1, Callback::Job { id: 10, job: 0 }).is_ok());
    assert!(lists.call(1, 2, Callback::Job { id: 20, job: 0 }).is_ok());
    assert!(!should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
    run(&fake, CpuId(1), Role::RcuCallbacks);
    assert!(fake.take_ran().is_empty(), "no grace period ended");
    fake.rcu.end();
    assert!(should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
    assert_eq!(run_rcu_callbacks(&fake, CpuId(1)), 1);
    assert_eq!(fake.take_ran(), [("rcu callback", 10)]);
    fake.rcu.end();
    run(&fake, CpuId(1), Role::RcuCallbacks);
    assert_eq!(fake.take_ran(), [("rcu callback", 20)]);
    assert!(!should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
}

#[test]
fn a_worker_that_runs_tasks_has_work_while_one_is_queued_and_runs_it_first() {
    let fake = cpu_1_up(0);
    assert!(fake.queues[1].lock().push(7).is_ok());
    assert!(should_run(&fake, CpuId(1), Role::Worker, 0), "a task waits");
    assert!(fake
        .shared
        .workqueue
        .queue(1, Work { id: 3, job: 0 })
        .is_ok());
    run(&fake, CpuId(1), Role::Worker);
    assert_eq!(fake.take_ran(), [("task", 7), ("work item", 3)]);
}

#[test]
fn jobs_run_outside_the_section_that_takes_them_with_interrupts_off() {
    let fake = cpu_1_up(MS);
    assert!(fake
        .shared
        .workqueue
        .queue(1, Work { id: 1, job: 0 })
        .is_ok());
    let timer = Timer {
        deadline: 0,
        id: 2,
        job: 0,
    };
    assert!(fake.shared.timers.arm(1, timer).is_ok());
    let callback = Callback::Job { id: 3, job: 0 };
    assert!(fake.shared.rcu_callbacks.call(1, 0, callback).is_ok());
    for role in Role::ALL {
        run(&fake, CpuId(1), role);
    }
    let ran = core::mem::take(&mut *fake.ran.lock());
    assert_eq!(ran.len(), 3);
    assert!(
        ran.iter().all(|&(_, _, off)| !off),
        "nothing runs inside the section that takes it: {ran:?}"
    );
}

#[test]
fn the_loop_switches_only_to_threads_that_should_run() {
    let fake = cpu_1_up(0);
    let dropped = alloc::sync::Arc::new(core::sync::atomic::AtomicU32::new(0));
    for role in Role::ALL {
        assert!(fake.shared.kthreads.install(1, role, probe(&dropped)));
        fake.shared.kthreads.unpark(1, role);
    }
    assert!(!run_ready(&fake, CpuId(1), 0), "nothing to do");
    assert!(fake
        .shared
        .workqueue
        .queue(1, Work { id: 1, job: 0 })
        .is_ok());
    assert!(run_ready(&fake, CpuId(1), 0));
    let turns = Role::ALL.map(|role| fake.shared.kthreads.get(1, role).unwrap().turns());
    assert_eq!(turns, [0, 1, 0], "only the worker (Role::ALL order)");
}
