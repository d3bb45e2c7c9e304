//! A machine goes through offline and online operations with each engine,
//! and every invariant holds afterwards.

mod common;

use std::time::Duration;

use hotkern_machine::{
    CpuId, CpuSet, Engine, FrameCounts, Item, Machine, MachineError, PageCount, Pfn, Resource,
    Role, TaskStatus, Trace,
};

fn busy_tasks(machine: &Machine, count: usize, slices: u32) {
    for n in 0..count {
        let mut left = slices;
        machine.submit(move |ctx| {
            let page = ctx.alloc_page().expect("memory");
            let mut sum = 0u64;
            for i in 0..200u64 {
                sum = sum.wrapping_add(i * page.0);
            }
            std::hint::black_box(sum);
            ctx.free_page(page);
            if n % 7 == 0 && left == slices {
                ctx.queue_work(|_| {});
                ctx.arm_timer(Duration::from_micros(200), |_| {});
                ctx.call_rcu(|_| {});
            }
            left -= 1;
            if left == 0 {
                TaskStatus::Done
            } else {
                TaskStatus::Again
            }
        });
    }
}

fn round_trip(engine: Engine) {
    let machine = Machine::builder().cpus(4).engine(engine).build().unwrap();
    assert_eq!(machine.online_cpus(), CpuSet::range(0, 4));
    assert_eq!(machine.kernel_threads(), 12);
    busy_tasks(&machine, 300, 3);
    let report = machine.offline(CpuId(3)).unwrap();
    assert!(!machine.online_cpus().contains(CpuId(3)));
    // Only bolt-nostop takes a CPU down without stopping the others.
    let nostop = ["reader-drain", "dying"].map(|stage| report.stage(stage).is_some());
    assert_eq!(
        report.stage("stop-machine").is_some(),
        engine.stops_machine(),
        "{engine:?}: {report}"
    );
    assert_eq!(nostop, [!engine.stops_machine(); 2], "{engine:?}: {report}");
    machine.offline_many(CpuSet::range(1, 3)).unwrap();
    assert_eq!(machine.online_cpus(), CpuSet::single(CpuId(0)));
    assert!(
        machine.check_invariants().is_empty(),
        "{:?}",
        machine.check_invariants()
    );
    machine.online_many(CpuSet::range(1, 4)).unwrap();
    common::drain(&machine);
    let violations = machine.check_invariants();
    assert!(violations.is_empty(), "{violations:?}");
    // Every slice was traced in its CPU's ring buffer, or counted as overwritten.
    let Trace {
        events,
        lost: overwritten,
    } = machine.trace();
    let slices = events
        .iter()
        .filter(|e| e.kind == hotkern_machine::EventKind::TaskSlice)
        .count() as u64;
    assert!(slices + overwritten >= 900, "{slices} + {overwritten}");
    assert!(events.iter().all(|e| e.cpu.index() < 4));
    let tally = machine.tally(Item::Task);
    assert_eq!((tally.issued, tally.completed_once), (300, 300));
    // Each slice took and returned one page; counters of CPUs that went
    // offline were folded in, not lost.
    let counters = machine.counters();
    assert_eq!(counters.slices, 900);
    assert_eq!(counters.pages_allocated, counters.pages_freed);
    assert!(counters.pages_allocated >= 900);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
    for (resource, counts) in &report.counts {
        assert_eq!(counts.created, counts.destroyed, "{resource}");
    }
}

#[test]
fn classic_round_trip_keeps_every_invariant() {
    round_trip(Engine::Classic);
}

#[test]
fn bolt_round_trip_keeps_every_invariant() {
    round_trip(Engine::Bolt);
}

#[test]
fn bolt_nostop_round_trip_keeps_every_invariant() {
    round_trip(Engine::BoltNoStop);
}

#[test]
fn classic_destroys_threads_and_bolt_parks_them() {
    let classic = Machine::builder()
        .cpus(3)
        .engine(Engine::Classic)
        .build()
        .unwrap();
    classic.offline(CpuId(2)).unwrap();
    assert_eq!(classic.kernel_threads(), 6);
    let created = classic.resource_counts()[&Resource::Kthread(Role::Worker)].created;
    classic.online(CpuId(2)).unwrap();
    assert_eq!(classic.kernel_threads(), 9);
    assert_eq!(
        classic.resource_counts()[&Resource::Kthread(Role::Worker)].created,
        created + 1
    );
    assert!(classic.shutdown().is_clean());

    let bolt = Machine::builder()
        .cpus(3)
        .engine(Engine::Bolt)
        .build()
        .unwrap();
    bolt.offline(CpuId(2)).unwrap();
    bolt.wait_deferred();
    assert_eq!(bolt.kernel_threads(), 9, "parked, not destroyed");
    let created = bolt.resource_counts()[&Resource::Kthread(Role::Worker)].created;
    bolt.online(CpuId(2)).unwrap();
    bolt.wait_deferred();
    assert_eq!(
        bolt.resource_counts()[&Resource::Kthread(Role::Worker)].created,
        created,
        "reused"
    );
    assert!(bolt.check_invariants().is_empty());
    assert!(bolt.shutdown().is_clean());
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let machine = Machine::builder().cpus(2).build().unwrap();
    assert_eq!(
        machine.offline(CpuId(5)).unwrap_err(),
        MachineError::NoSuchCpu(CpuId(5))
    );
    assert!(matches!(
        machine.online_many(CpuSet::single(CpuId(2))),
        Err(MachineError::NoSuchCpu(CpuId(2)))
    ));
    assert!(matches!(
        machine.online(CpuId(1)),
        Err(MachineError::Hotplug(_))
    ));
    machine.offline(CpuId(1)).unwrap();
    assert!(
        matches!(machine.offline(CpuId(0)), Err(MachineError::Hotplug(_))),
        "last CPU"
    );
    assert!(matches!(
        machine.inject_failure("nope", hotkern_machine::Direction::Up, None),
        Err(MachineError::NoSuchStep(_))
    ));
    assert_eq!(machine.online_cpus(), CpuSet::single(CpuId(0)));
    assert!(machine.check_invariants().is_empty());
    assert!(Machine::builder().cpus(0).build().is_err());
    assert!(Machine::builder().cpus(65).build().is_err());
    assert!(Machine::builder().cpus(2).online(3).build().is_err());
    // Memory hot-add: a new physmem segment whose frames join the pool;
    // an overlapping range is refused and changes nothing.
    let before = machine.frames();
    assert!(matches!(
        machine.plug_memory(Pfn(256), PageCount(8)),
        Err(MachineError::Memory(_))
    ));
    assert_eq!(machine.frames(), before);
    machine.plug_memory(Pfn(1 << 30), PageCount(512)).unwrap();
    assert_eq!(
        machine.frames(),
        FrameCounts {
            free: PageCount(before.free.0 + 512),
            total: PageCount(before.total.0 + 512),
        }
    );
    assert_eq!(machine.memory_segments(), 2);
    assert!(machine.shutdown().is_clean());
}

#[test]
fn a_panicking_task_is_reported_and_its_vcpu_carries_on() {
    let machine = Machine::builder().cpus(2).build().unwrap();
    let id = machine.submit(|_| panic!("task bug"));
    machine.submit(|_| TaskStatus::Done);
    common::drain(&machine);
    assert_eq!(
        machine.check_invariants(),
        [hotkern_machine::Violation::Panicked { what: "task", id }]
    );
    machine.offline(CpuId(1)).unwrap();
    assert_eq!(machine.check_invariants().len(), 1);
    assert!(!machine.shutdown().is_clean());
}

#[test]
fn bolt_reuses_what_a_cpu_left_when_it_returns_before_the_deferred_teardown() {
    let machine = Machine::builder()
        .cpus(4)
        .engine(Engine::Bolt)
        .build()
        .unwrap();
    let before = machine.resource_counts();
    let down = machine.offline(CpuId(2)).unwrap();
    assert!(
        down.deferred > 0,
        "deferrable teardowns were handed to the worker"
    );
    // Back at once: whatever deferred teardown has not run is cancelled
    // and its structures are used as they are.
    let up = machine.online(CpuId(2)).unwrap();
    machine.wait_deferred();
    // Cancelled or already run, nothing was destroyed or rebuilt: every
    // per-CPU resource of cpu 2 was kept and reused.
    assert!(up.cancelled <= down.deferred);
    assert_eq!(machine.resource_counts(), before);
    assert!(machine.kernel_threads() == 12);
    assert!(machine.check_invariants().is_empty());
    assert!(machine.shutdown().is_clean());
}

#[test]
fn sixty_four_oversubscribed_vcpus_go_down_and_up_in_bulk() {
    for engine in Engine::ALL {
        let machine = Machine::builder().cpus(64).engine(engine).build().unwrap();
        busy_tasks(&machine, 200, 2);
        let all_but_first = CpuSet::range(1, 64);
        machine.offline_many(all_but_first).unwrap();
        assert_eq!(machine.online_cpus(), CpuSet::single(CpuId(0)));
        machine.online_many(all_but_first).unwrap();
        assert_eq!(machine.online_cpus(), CpuSet::range(0, 64));
        common::drain(&machine);
        let violations = machine.check_invariants();
        assert!(violations.is_empty(), "{engine:?}: {violations:?}");
        assert!(machine.shutdown().is_clean());
    }
}

#[test]
fn rcu_barrier_waits_for_every_callback_queued_before_it() {
    for engine in Engine::ALL {
        let machine = Machine::builder().cpus(4).engine(engine).build().unwrap();
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        const CALLBACKS: u64 = 40;
        for _ in 0..CALLBACKS {
            let ran = std::sync::Arc::clone(&ran);
            machine.submit(move |ctx| {
                let ran = std::sync::Arc::clone(&ran);
                ctx.call_rcu(move |_| {
                    ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
                TaskStatus::Done
            });
        }
        // Every task has queued its callback once the tasks are done;
        // their grace periods (milliseconds, normal) have not all ended.
        while machine.tally(Item::Task).completed_once < CALLBACKS {
            std::thread::yield_now();
        }
        // Moved about by hotplug meanwhile, as callbacks of a dying CPU are.
        machine.offline(CpuId(3)).unwrap();
        machine.rcu_barrier();
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            CALLBACKS,
            "{engine:?}: rcu_barrier returned before every earlier callback ran"
        );
        machine.online(CpuId(3)).unwrap();
        assert!(machine.shutdown().is_clean());
    }
}
