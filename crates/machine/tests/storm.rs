//! The storm: thousands of random offline, online and bulk operations while
//! thousands of tasks run, spawn tasks, queue work, arm timers and call RCU.
//! Afterwards every item completed exactly once and every invariant holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{CpuId, CpuSet, Engine, Item, Machine, TaskStatus};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A task of `slices` slices that touches memory and the per-CPU services.
fn task(
    slices: u32,
    kind: u32,
    ran: Arc<AtomicU64>,
) -> impl FnMut(&mut hotkern_machine::Context<'_>) -> TaskStatus + Send + 'static {
    let mut left = slices;
    move |ctx| {
        ran.fetch_add(1, Ordering::Relaxed);
        let page = ctx.alloc_page().expect("memory");
        let mut sum = page.0;
        for i in 0..64u64 {
            sum = sum.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(sum);
        ctx.free_page(page);
        if left == slices {
            match kind % 8 {
                0 => {
                    ctx.queue_work(|ctx| {
                        let page = ctx.alloc_page().expect("memory");
                        ctx.free_page(page);
                    });
                }
                1 => {
                    ctx.arm_timer(Duration::from_micros(50 + u64::from(kind) % 500), |_| {});
                }
                2 => {
                    ctx.call_rcu(|_| {});
                }
                3 => {
                    let child = ran.clone();
                    ctx.spawn(task(2, kind / 8, child));
                }
                _ => {}
            }
        }
        left -= 1;
        if left == 0 {
            TaskStatus::Done
        } else {
            TaskStatus::Again
        }
    }
}

struct Storm {
    cpus: usize,
    operations: usize,
    tasks: usize,
    seed: u64,
}

fn storm(engine: Engine, plan: &Storm) {
    let machine = Machine::builder()
        .cpus(plan.cpus)
        .engine(engine)
        .build()
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let ran = Arc::new(AtomicU64::new(0));
    let per_op = plan.tasks.div_ceil(plan.operations);
    let (mut succeeded, mut refused) = (0, 0);
    for op in 0..plan.operations {
        for _ in 0..per_op {
            let slices = rng.random_range(1..=4);
            let kind = rng.random_range(0..64);
            machine.submit(task(slices, kind, ran.clone()));
        }
        let online = machine.online_cpus();
        let offline = CpuSet::range(0, plan.cpus as u32).difference(&online);
        let pick = |rng: &mut SmallRng, from: CpuSet| -> Option<CpuId> {
            let n = from.len();
            if n == 0 {
                return None;
            }
            from.iter().nth(rng.random_range(0..n))
        };
        let random_subset = |rng: &mut SmallRng, from: CpuSet| -> CpuSet {
            from.iter().filter(|_| rng.random_bool(0.5)).collect()
        };
        let result = match rng.random_range(0..4) {
            0 => match pick(&mut rng, online) {
                Some(cpu) => machine.offline(cpu),
                None => continue,
            },
            1 => match pick(&mut rng, offline) {
                Some(cpu) => machine.online(cpu),
                None => continue,
            },
            2 => {
                let set = random_subset(&mut rng, online);
                if set.is_empty() {
                    continue;
                }
                machine.offline_many(set)
            }
            _ => {
                let set = random_subset(&mut rng, offline);
                if set.is_empty() {
                    continue;
                }
                machine.online_many(set)
            }
        };
        match result {
            Ok(_) => succeeded += 1,
            // Refused: the last online CPU would have gone. Nothing changed.
            Err(_) => refused += 1,
        }
        if op % 250 == 0 {
            let violations = machine.check_invariants();
            assert!(
                violations.is_empty(),
                "after {op} operations: {violations:?}"
            );
        }
    }
    assert!(
        succeeded > plan.operations / 2,
        "{succeeded} ok, {refused} refused"
    );
    assert!(
        machine.wait_idle(Duration::from_secs(60)),
        "items still pending: {:?}",
        [Item::Task, Item::Work, Item::Timer, Item::RcuCallback].map(|i| machine.tally(i))
    );
    let violations = machine.check_invariants();
    assert!(violations.is_empty(), "{violations:?}");
    for item in [Item::Task, Item::Work, Item::Timer, Item::RcuCallback] {
        let tally = machine.tally(item);
        assert_eq!(tally.completed_once, tally.issued, "{item:?}: {tally:?}");
        assert_eq!(tally.completed_twice, 0, "{item:?}");
    }
    assert!(machine.tally(Item::Task).issued >= plan.tasks as u64);
    assert!(ran.load(Ordering::Relaxed) >= plan.tasks as u64);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
    for (resource, counts) in &report.counts {
        assert_eq!(counts.created, counts.destroyed, "{resource}: {counts:?}");
        assert!(counts.created > 0);
    }
}

const QUICK: Storm = Storm {
    cpus: 8,
    operations: 1500,
    tasks: 4000,
    seed: 0x5eed,
};

#[test]
fn storm_classic() {
    storm(Engine::Classic, &QUICK);
}

#[test]
fn storm_bolt() {
    storm(Engine::Bolt, &QUICK);
}

/// The heavier storm: 64 oversubscribed vCPUs. `cargo test --release -- --ignored`.
#[test]
#[ignore]
fn storm_heavy_both_engines() {
    let heavy = Storm {
        cpus: 64,
        operations: 10_000,
        tasks: 50_000,
        seed: 0xbadc0de,
    };
    storm(Engine::Classic, &heavy);
    storm(Engine::Bolt, &heavy);
}
