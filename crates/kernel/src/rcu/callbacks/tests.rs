//! The shared plumbing over the step table's fake kernel, whose grace
//! periods begin and end when a test says so and whose callbacks log what
//! they ran: where a callback goes, when it becomes ready, and that it
//! runs once.

use alloc::vec::Vec;
use core::sync::atomic::Ordering::SeqCst;

use hotkern_cpuhp::CpuId;

use super::*;
use crate::kthread::Role;
use crate::smpboot::{run_rcu_callbacks, should_run};
use crate::steps::tests::{Fake, CPUS};
use crate::steps::StepKernel;

/// A fake whose CPUs are all online, with callback lists on `lists`.
fn online_with_lists(lists: &[usize]) -> Fake {
    let fake = Fake::new();
    for cpu in 0..CPUS {
        fake.set_online(crate::cpuset::cpu_id(cpu), true);
    }
    for &cpu in lists {
        assert!(fake.rcu_create_data(cpu));
    }
    fake
}

/// A ledger-counted callback numbered `id`.
fn job(id: u64) -> Callback<u32> {
    Callback::Job { id, job: 0 }
}

/// Runs every CPU's ready callbacks, as their `rcuc` threads would;
/// returns the ids that ran.
fn run_everywhere(fake: &Fake) -> Vec<u64> {
    for cpu in 0..CPUS {
        run_rcu_callbacks(fake, CpuId(cpu as u32));
    }
    fake.take_ran().into_iter().map(|(_, id)| id).collect()
}

#[test]
fn a_callback_no_list_takes_waits_in_the_limbo_and_runs_once_after_a_grace_period() {
    // Every CPU is online but none has a list (their data is torn down).
    let fake = online_with_lists(&[]);
    fake.call_rcu(2, job(7));
    assert_eq!(
        fake.shared.limbo.callbacks(),
        1,
        "the one fallback: the limbo"
    );
    assert!((0..CPUS).all(|cpu| fake.rcu_queued(cpu).is_none()));
    // Grace periods end while it waits: it runs nowhere meanwhile.
    fake.rcu.end();
    fake.rcu.end();
    assert_eq!(run_everywhere(&fake), [], "ran from the limbo");
    // CPU 1 comes back and becomes active: the callback goes there.
    assert!(fake.rcu_create_data(1));
    fake.set_active(CpuId(1), true);
    fake.cpus_activated();
    assert!(fake.shared.limbo.is_empty());
    assert_eq!(fake.rcu_queued(1), Some(1));
    // Queued now, it needs a grace period that begins now: those that
    // ended while it waited do not count.
    assert_eq!(run_everywhere(&fake), [], "ran before its grace period");
    fake.rcu.end();
    assert_eq!(run_everywhere(&fake), [7]);
    fake.rcu.end();
    assert_eq!(run_everywhere(&fake), [], "ran twice");
    assert_eq!(fake.rcu_queued(1), Some(0));
}

#[test]
fn a_callback_whose_cpu_has_no_list_goes_to_the_next_online_cpu() {
    let fake = online_with_lists(&[0, 3]);
    *fake.rcu.this_cpu.lock() = Some(2);
    fake.call_rcu(2, job(4));
    assert_eq!((fake.rcu_queued(2), fake.rcu_queued(3)), (None, Some(1)));
    assert_eq!(*fake.woken.lock(), [3], "CPU 3 told it holds a callback");
    // On the caller's own list, nobody is woken.
    *fake.rcu.this_cpu.lock() = Some(3);
    fake.call_rcu(3, job(5));
    assert_eq!(*fake.woken.lock(), [3]);
    fake.rcu.end();
    assert_eq!(run_everywhere(&fake), [4, 5]);
}

#[test]
fn migrating_keeps_each_callbacks_grace_period() {
    let fake = online_with_lists(&[0, 1, 2, 3]);
    // Queued before grace period 1 begins: needs it.
    fake.call_rcu(2, job(1));
    fake.rcu.begin();
    // Queued while it runs: need the next one, 2, on either CPU.
    fake.call_rcu(2, job(2));
    fake.call_rcu(0, job(3));
    fake.woken.lock().clear();
    // CPU 2 died: its callbacks go to CPU 0 (the heir), which is woken.
    fake.rcu_migrate(2, 0);
    assert_eq!((fake.rcu_queued(2), fake.rcu_queued(0)), (Some(0), Some(3)));
    assert_eq!(*fake.woken.lock(), [0]);
    assert!(fake.rcu_free_data(2));
    fake.rcu.end();
    assert_eq!(
        run_everywhere(&fake),
        [1],
        "grace period 1 covers only what was queued before it began"
    );
    fake.rcu.end();
    let mut second = run_everywhere(&fake);
    second.sort_unstable();
    assert_eq!(second, [2, 3]);
}

#[test]
fn a_callback_never_runs_before_its_grace_period() {
    let fake = online_with_lists(&[1]);
    // A grace period is in progress: it may have begun before the
    // callback's updater unpublished anything, so it does not count.
    fake.rcu.begin();
    fake.call_rcu(1, job(9));
    assert!(!should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
    fake.rcu.end();
    assert!(!should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
    assert_eq!(run_everywhere(&fake), [], "ran after the one in progress");
    fake.rcu.end();
    assert!(should_run(&fake, CpuId(1), Role::RcuCallbacks, 0));
    assert_eq!(run_everywhere(&fake), [9]);
}

#[test]
fn a_deferred_free_goes_on_the_calling_cpus_list_and_is_called_after_a_grace_period() {
    let fake = online_with_lists(&[0, 1, 2]);
    let freed = alloc::sync::Arc::new(core::sync::atomic::AtomicU32::new(0));
    *fake.rcu.this_cpu.lock() = Some(1);
    let theirs = alloc::sync::Arc::clone(&freed);
    fake.defer_free(alloc::boxed::Box::new(move || {
        theirs.fetch_add(1, SeqCst);
    }));
    assert_eq!(fake.rcu_queued(1), Some(1), "Linux's call_rcu: this CPU's");
    assert_eq!(run_rcu_callbacks(&fake, CpuId(1)), 0);
    fake.synchronize_rcu();
    assert_eq!(run_rcu_callbacks(&fake, CpuId(1)), 1);
    assert_eq!(freed.load(SeqCst), 1);
    // From a thread that is no CPU: CPU 0's.
    *fake.rcu.this_cpu.lock() = None;
    fake.defer_free(alloc::boxed::Box::new(|| {}));
    assert_eq!(fake.rcu_queued(0), Some(1));
    // CPU 0 went offline and bolt kept its (empty) list: it takes nothing,
    // as no callback would run there until the CPU came back.
    fake.rcu_migrate(0, 1);
    fake.set_online(CpuId(0), false);
    fake.defer_free(alloc::boxed::Box::new(|| {}));
    assert_eq!((fake.rcu_queued(0), fake.rcu_queued(1)), (Some(0), Some(2)));
}
