//! The shared invariant check over the fake kernel: a kernel the real
//! engine brought up and down agrees with it, and each disagreement
//! provoked behind the engine's back is named, and only it.

use alloc::string::String;
use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet, Engine};

use super::{boot, live_on, Fake, CPUS};
use crate::audit::{Resource, Violation};
use crate::cpuset::cpu_id;
use crate::kthread::Role;
use crate::rcu::callbacks::Callback;
use crate::steps::invariants::check;
use crate::steps::StepKernel;
use crate::timer::Timer;

/// What [`check`] finds on a fake booted under `engine`, with `down`
/// taken offline by the engine, then `poke`d, as (what, cpu) pairs.
fn found_after(engine: Engine, down: &[u32], poke: impl FnOnce(&Fake)) -> Vec<(String, u32)> {
    let (fake, hotplug) = boot(engine);
    for &cpu in down {
        hotplug.offline(CpuId(cpu)).unwrap();
    }
    hotplug.flush_deferred();
    poke(&fake);
    let frees_everything = engine == Engine::Classic;
    check(&*fake, hotplug.online_cpus(), CPUS, frees_everything)
        .into_iter()
        .map(|violation| match violation {
            Violation::MaskMismatch { mask, cpu } => (mask.into(), cpu.0),
            other => (alloc::format!("{other}"), u32::MAX),
        })
        .collect()
}

/// Something done behind the engine's back.
type Poke = fn(&Fake);

fn named(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs
        .iter()
        .map(|&(what, cpu)| (what.into(), cpu))
        .collect()
}

#[test]
fn a_kernel_the_engine_brought_up_and_down_agrees_with_it() {
    for engine in [Engine::Classic, Engine::Bolt] {
        assert_eq!(found_after(engine, &[], |_| {}), [], "{engine:?} booted");
        assert_eq!(found_after(engine, &[1, 3], |_| {}), [], "{engine:?} down");
        let (fake, hotplug) = boot(engine);
        hotplug.offline_many(CpuSet::range(1, 3)).unwrap();
        hotplug.online(CpuId(2)).unwrap();
        hotplug.flush_deferred();
        let online = hotplug.online_cpus();
        assert_eq!(check(&*fake, online, CPUS, false), [], "{engine:?} back");
    }
}

#[test]
fn a_flipped_mask_is_named() {
    let found = found_after(Engine::Classic, &[], |fake| {
        fake.set_online(CpuId(3), false)
    });
    assert_eq!(found, named(&[("online", 3)]));
    // The domains were built over the active mask as it was.
    let found = found_after(Engine::Bolt, &[], |fake| fake.set_active(CpuId(2), false));
    assert_eq!(found, named(&[("active", 2), ("domains", 0)]));
    let found = found_after(Engine::Bolt, &[1], |fake| fake.set_online(CpuId(1), true));
    assert_eq!(found, named(&[("online", 1)]));
}

#[test]
fn a_cpu_in_another_state_than_its_masks_is_named() {
    let cases: [(&str, Poke); 5] = [
        ("power", |fake| fake.powered.set(cpu_id(2), false)),
        ("rcu", |fake| fake.rcu_set_online(2, false)),
        ("timers", |fake| {
            fake.shared.timers.set_enabled(2, false);
        }),
        ("workqueue", |fake| {
            fake.shared.workqueue.unbind(2);
        }),
        ("runqueue", |fake| {
            fake.close_queue(CpuId(2));
        }),
    ];
    for (what, poke) in cases {
        assert_eq!(found_after(Engine::Classic, &[], poke), named(&[(what, 2)]));
    }
}

#[test]
fn a_thread_left_unparked_on_an_offline_cpu_is_named() {
    let found = found_after(Engine::Bolt, &[1], |fake| {
        fake.shared.kthreads.unpark(1, Role::Worker);
    });
    assert_eq!(found, named(&[("kthread", 1)]));
    // One parked on an online CPU is as wrong.
    let found = found_after(Engine::Bolt, &[], |fake| {
        fake.shared.kthreads.park(3, Role::Softirq);
    });
    assert_eq!(found, named(&[("kthread", 3)]));
}

#[test]
fn a_thread_the_audit_does_not_know_of_is_named() {
    // Bolt keeps CPU 1's threads, parked; one goes without the books.
    let found = found_after(Engine::Bolt, &[1], |fake| {
        fake.shared.kthreads.remove(1, Role::RcuCallbacks);
    });
    assert_eq!(found, named(&[("kthread books", 1)]));
}

#[test]
fn a_timer_or_callback_left_on_a_dead_cpu_is_named() {
    // Bolt kept CPU 1's timer base, disabled; a timer lands in it anyway.
    let found = found_after(Engine::Bolt, &[1], |fake| {
        fake.shared.timers.set_enabled(1, true);
        let timer = Timer {
            deadline: 1,
            id: 1,
            job: 1,
        };
        assert!(fake.shared.timers.arm(1, timer).is_ok());
        fake.shared.timers.set_enabled(1, false);
    });
    assert_eq!(found, named(&[("work left on an offline cpu", 1)]));
    let found = found_after(Engine::Bolt, &[3], |fake| {
        // Bolt kept CPU 3's (empty) callback list; a callback lands in it.
        let callback = Callback::Job { id: 5, job: 5 };
        assert!(fake.shared.rcu_callbacks.call(3, 1, callback).is_ok());
    });
    assert_eq!(found, named(&[("work left on an offline cpu", 3)]));
}

#[test]
fn classic_must_free_what_bolt_may_keep() {
    let leak = |fake: &Fake| fake.shared.audit.created(Resource::EventLog, 2);
    assert_eq!(
        found_after(Engine::Classic, &[2], leak),
        named(&[("resources freed", 2)])
    );
    // Bolt keeps them for the CPU's return: nothing to say.
    let kept = |fake: &Fake| assert_eq!(live_on(fake, 2).len(), 10);
    assert_eq!(found_after(Engine::Bolt, &[2], kept), []);
}

#[test]
fn an_online_cpu_missing_a_resource_is_named() {
    let found = found_after(Engine::Classic, &[], |fake| {
        fake.shared.audit.destroyed(Resource::SysfsNodes, 0);
    });
    assert_eq!(found, named(&[("resources", 0)]));
    let found = found_after(Engine::Classic, &[], |fake| {
        assert!(fake.shared.rcu_callbacks.take_all(1).is_some());
    });
    assert_eq!(found, named(&[("rcu data", 1)]));
}

#[test]
fn the_audits_own_violations_come_first() {
    let found = found_after(Engine::Classic, &[], |fake| {
        fake.shared.audit.created(Resource::PageCache, 1);
    });
    assert_eq!(found.len(), 1);
    assert!(found[0].0.contains("created twice"), "{found:?}");
}
