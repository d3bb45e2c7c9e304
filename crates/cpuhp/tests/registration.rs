//! The step table, setup/remove (with and without calls) and instances.

mod common;

use common::*;
use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Direction, Engine, Error, InstanceId, Section, StepId,
    StepSpec, StepStatus,
};

#[test]
fn new_validates_the_table_and_masks() {
    let one = CpuSet::single(CpuId(0));
    let dup = [
        StepSpec::new("a", Section::Prepare, Class::Critical),
        StepSpec::new("a", Section::Online, Class::Critical),
    ];
    assert_eq!(
        Hp::new(Mock::new(one, false), &dup, one, one, Engine::Bolt).err(),
        Some(Error::DuplicateName("a"))
    );
    let order = [
        StepSpec::new("a", Section::Online, Class::Critical),
        StepSpec::new("b", Section::Prepare, Class::Critical),
    ];
    assert_eq!(
        Hp::new(Mock::new(one, false), &order, one, one, Engine::Bolt).err(),
        Some(Error::SectionOrder("b"))
    );
    assert_eq!(
        Hp::new(
            Mock::new(one, false),
            TABLE,
            one,
            CpuSet::range(0, 2),
            Engine::Bolt
        )
        .err(),
        Some(Error::NoSuchCpu(CpuId(1)))
    );
    assert_eq!(
        Hp::new(
            Mock::new(one, false),
            TABLE,
            one,
            CpuSet::EMPTY,
            Engine::Bolt
        )
        .err(),
        Some(Error::NoOnlineCpu)
    );
    let hp = Hp::new(
        Mock::new(one, false),
        TABLE,
        CpuSet::range(0, 3),
        one,
        Engine::Classic,
    )
    .unwrap();
    assert_eq!(hp.step_status(CpuId(0), StepId(0)), Some(StepStatus::Up));
    assert_eq!(hp.step_status(CpuId(2), StepId(8)), Some(StepStatus::Down));
    // Past the possible CPUs or the table: nothing, whichever is in range.
    assert_eq!(hp.step_status(CpuId(3), StepId(0)), None);
    assert_eq!(hp.step_status(CpuId(0), StepId(TABLE.len() as u16)), None);
    assert_eq!(hp.step_spec(StepId(5)), Some(TABLE[5]));
    assert_eq!(hp.step_count(), TABLE.len());
}

#[test]
fn setup_runs_startup_on_online_cpus_only_and_nocalls_runs_nothing() {
    let hp = Hp::new(
        Mock::new(CpuSet::range(0, 2), false),
        TABLE,
        CpuSet::range(0, 4),
        CpuSet::range(0, 2),
        Engine::Classic,
    )
    .unwrap();
    let world = std::sync::Arc::new(World::default());
    let sysfs = step(&hp, "ap:sysfs");
    hp.setup(sysfs, world.callbacks(Section::Online)).unwrap();
    let calls = world.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls
            .iter()
            .all(|c| c.direction == Direction::Up
                && c.place == Place::Target(c.cpus.first().unwrap()))
    );
    assert!(world.is_up("ap:sysfs", CpuId(1), None) && !world.is_up("ap:sysfs", CpuId(2), None));
    assert_eq!(
        hp.setup(sysfs, world.callbacks(Section::Online)).err(),
        Some(Error::AlreadySetUp(sysfs))
    );

    let pages = step(&hp, "bp:pages");
    hp.setup_nocalls(pages, world.callbacks(Section::Prepare))
        .unwrap();
    assert!(world.take_calls().is_empty());

    // The step now runs in operations.
    hp.online(CpuId(2)).unwrap();
    assert!(world.is_up("ap:sysfs", CpuId(2), None));
    assert!(world.is_up("bp:pages", CpuId(2), None));

    hp.remove(sysfs).unwrap();
    assert!(!world.is_up("ap:sysfs", CpuId(0), None) && !world.is_up("ap:sysfs", CpuId(2), None));
    assert_eq!(hp.remove(sysfs).err(), Some(Error::NotSetUp(sysfs)));
    // A step without callbacks is up exactly on the online CPUs (0 to 2).
    for cpu in 0..4 {
        let want = if cpu < 3 {
            StepStatus::Up
        } else {
            StepStatus::Down
        };
        assert_eq!(hp.step_status(CpuId(cpu), sysfs), Some(want), "cpu{cpu}");
    }
    hp.remove_nocalls(pages).unwrap();
    assert!(
        world.is_up("bp:pages", CpuId(2), None),
        "nocalls must not tear down"
    );
    assert_eq!(hp.remove_nocalls(pages).err(), Some(Error::NotSetUp(pages)));
    // Removed: an operation no longer calls it.
    world.take_calls();
    hp.offline(CpuId(2)).unwrap();
    assert!(world.take_calls().is_empty());
    assert_eq!(
        hp.setup(StepId(99), Callbacks::new()).err(),
        Some(Error::NoSuchStep(StepId(99)))
    );
}

#[test]
fn failing_setup_undoes_the_cpus_done_and_installs_nothing() {
    let all = CpuSet::range(0, 4);
    let hp = Hp::new(Mock::new(all, false), TABLE, all, all, Engine::Bolt).unwrap();
    let world = std::sync::Arc::new(World::default());
    world.refuse(Refusal {
        name: "bp:perf",
        direction: Direction::Up,
        cpu: Some(CpuId(2)),
        instance: None,
    });
    let perf = step(&hp, "bp:perf");
    let error = hp
        .setup(perf, world.callbacks(Section::Prepare))
        .unwrap_err();
    assert!(
        matches!(error, Error::StepFailed { step, cpu: CpuId(2), direction: Direction::Up, .. } if step == perf)
    );
    for cpu in all {
        assert!(!world.is_up("bp:perf", cpu, None));
    }
    // The CPUs done are torn down last first, marked as a rollback.
    let calls: Vec<(Direction, CpuId, bool)> = world
        .take_calls()
        .iter()
        .map(|c| (c.direction, c.cpus.first().unwrap(), c.rollback))
        .collect();
    let (up, down) = (Direction::Up, Direction::Down);
    assert_eq!(
        calls,
        [
            (up, CpuId(0), false),
            (up, CpuId(1), false),
            (up, CpuId(2), false),
            (down, CpuId(1), true),
            (down, CpuId(0), true),
        ]
    );
    world.assert_no_violations();
    // Nothing was installed: a second setup works and runs everywhere.
    hp.setup(perf, world.callbacks(Section::Prepare)).unwrap();
    assert!(all.iter().all(|cpu| world.is_up("bp:perf", cpu, None)));
}

#[test]
fn instances_are_called_one_by_one_and_validated() {
    let (hp, world) = machine(Engine::Classic, 2, false);
    let queues = step(&hp, "bp:queues");
    let perf = step(&hp, "bp:perf");
    assert_eq!(
        hp.add_instance(perf, A).err(),
        Some(Error::NotMultiInstance(perf))
    );
    assert_eq!(
        hp.add_instance(queues, A).err(),
        Some(Error::DuplicateInstance(queues, A))
    );
    assert_eq!(
        hp.remove_instance(queues, InstanceId(9)).err(),
        Some(Error::NoSuchInstance(queues, InstanceId(9)))
    );
    assert_eq!(hp.remove(queues).err(), Some(Error::HasInstances(queues)));

    let c = InstanceId(3);
    hp.add_instance(queues, c).unwrap();
    let calls = world.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|call| call.instance == Some(c)));

    hp.offline(CpuId(1)).unwrap();
    let calls = world.take_calls();
    let per_instance: Vec<_> = calls
        .iter()
        .filter(|c| c.name == "bp:queues")
        .map(|c| c.instance)
        .collect();
    assert_eq!(per_instance, vec![Some(A), Some(B), Some(c)]);

    // A failing instance: the ones before it are undone, the operation rolls back.
    world.refuse(Refusal {
        name: "bp:queues",
        direction: Direction::Up,
        cpu: None,
        instance: Some(B),
    });
    let error = hp.online(CpuId(1)).unwrap_err();
    assert!(matches!(
        error,
        Error::StepFailed {
            instance: Some(B),
            ..
        }
    ));
    assert!(!hp.is_online(CpuId(1)));
    for instance in [A, B, c] {
        assert!(!world.is_up("bp:queues", CpuId(1), Some(instance)));
    }
    world.assert_no_violations();

    hp.remove_instance_nocalls(queues, c).unwrap();
    hp.add_instance_nocalls(queues, c).unwrap();
    hp.remove_instance(queues, c).unwrap();
    assert!(!world.is_up("bp:queues", CpuId(0), Some(c)));
}

#[test]
fn refused_registration_leaves_deferred_work_pending() {
    let (hp, world) = machine(Engine::Bolt, 3, false);
    hp.offline(CpuId(2)).unwrap();
    let pending = hp.pending_deferred();
    assert!(pending > 0);
    let before = statuses(&hp);
    let perf = step(&hp, "bp:perf");
    let queues = step(&hp, "bp:queues");
    assert_eq!(
        hp.setup(perf, world.callbacks(Section::Prepare)).err(),
        Some(Error::AlreadySetUp(perf))
    );
    assert_eq!(hp.remove(queues).err(), Some(Error::HasInstances(queues)));
    assert_eq!(
        hp.add_instance(queues, A).err(),
        Some(Error::DuplicateInstance(queues, A))
    );
    assert_eq!(
        hp.remove_instance(perf, A).err(),
        Some(Error::NotMultiInstance(perf))
    );
    assert_eq!(hp.pending_deferred(), pending);
    assert_eq!(statuses(&hp), before);
    // An accepted registration finishes the deferred work first.
    hp.add_instance(queues, InstanceId(7)).unwrap();
    assert_eq!(hp.pending_deferred(), 0);
    assert!(!world.is_up("bp:queues", CpuId(2), Some(InstanceId(7))));
    assert!(world.is_up("bp:queues", CpuId(1), Some(InstanceId(7))));
}

/// A machine with four online CPUs and nothing set up.
fn bare(engine: Engine) -> (Hp, std::sync::Arc<World>) {
    let all = CpuSet::range(0, 4);
    let hp = Hp::new(Mock::new(all, false), TABLE, all, all, engine).unwrap();
    (hp, std::sync::Arc::new(World::default()))
}

/// Refusals that registration cannot act on are counted and passed over:
/// a `Starting` startup (it must not fail), a teardown while removing a
/// step (going away cannot be refused), and the undo of a failed setup.
#[test]
fn registration_counts_the_refusals_it_cannot_act_on() {
    let (hp, world) = bare(Engine::Classic);
    let starting = step(&hp, "ap:sched-starting");
    world.refuse(refusal("ap:sched-starting", Direction::Up, 1));
    hp.setup(starting, world.callbacks(Section::Starting))
        .unwrap();
    assert_eq!(hp.warnings().atomic_failures, 1);
    assert!([0, 2, 3]
        .iter()
        .all(|cpu| world.is_up("ap:sched-starting", CpuId(*cpu), None)));

    let sysfs = step(&hp, "ap:sysfs");
    hp.setup(sysfs, world.callbacks(Section::Online)).unwrap();
    world.refuse(refusal("ap:sysfs", Direction::Down, 1));
    hp.remove(sysfs).unwrap();
    assert_eq!(hp.warnings().rollback_failures, 1);
    assert!(world.is_up("ap:sysfs", CpuId(1), None), "refused");
    assert!([0, 2, 3]
        .iter()
        .all(|cpu| !world.is_up("ap:sysfs", CpuId(*cpu), None)));

    let perf = step(&hp, "bp:perf");
    world.refuse(refusal("bp:perf", Direction::Up, 2));
    world.refuse(refusal("bp:perf", Direction::Down, 1));
    assert!(hp.setup(perf, world.callbacks(Section::Prepare)).is_err());
    assert_eq!(hp.warnings().rollback_failures, 2);
    assert!(world.is_up("bp:perf", CpuId(1), None), "undo refused");
    assert!(!world.is_up("bp:perf", CpuId(0), None), "undone after it");
    assert_eq!(hp.warnings().atomic_failures, 1);
}

/// A step left up on an offline CPU (its deferred teardown failed) is torn
/// down by `remove` from the calling thread: the CPU runs nothing, so the
/// platform must not be asked to run work on it.
#[test]
fn remove_calls_a_step_left_on_an_offline_cpu_from_the_caller() {
    let (hp, world) = machine(Engine::Bolt, 3, false);
    world.refuse(refusal("ap:kthread", Direction::Down, 1));
    hp.offline(CpuId(1)).unwrap();
    hp.flush_deferred();
    assert_eq!(hp.take_deferred_failures().len(), 1);
    let kthread = step(&hp, "ap:kthread");
    assert_eq!(hp.step_status(CpuId(1), kthread), Some(StepStatus::Up));
    world.take_calls();
    hp.platform().take_events();
    hp.remove(kthread).unwrap();
    let places: Vec<(CpuId, Place)> = world
        .take_calls()
        .iter()
        .map(|c| (c.cpus.first().unwrap(), c.place))
        .collect();
    assert_eq!(
        places,
        [
            (CpuId(0), Place::Target(CpuId(0))),
            (CpuId(1), Place::Controller),
            (CpuId(2), Place::Target(CpuId(2))),
        ]
    );
    let events = hp.platform().take_events();
    assert!(!events.contains(&Event::RunOn(CpuId(1))), "{events:?}");
    assert!(!world.is_up("ap:kthread", CpuId(1), None));
}
