//! The storm: thousands of random offline, online and bulk operations while
//! thousands of tasks run, spawn tasks, queue work, arm timers and call RCU.
//! Afterwards every item completed exactly once and every invariant holds.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{
    CpuId, CpuSet, Engine, HotplugError, Hz, Item, Machine, MachineError, Report, TaskStatus,
    MAX_VCPUS,
};
use rand::rngs::StdRng;
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

/// One hotplug request of the storm.
#[derive(Debug, Clone, Copy)]
enum Request {
    Offline(CpuId),
    Online(CpuId),
    OfflineMany(CpuSet),
    OnlineMany(CpuSet),
}

impl Request {
    fn send(self, machine: &Machine) -> Result<Report, MachineError> {
        match self {
            Request::Offline(cpu) => machine.offline(cpu),
            Request::Online(cpu) => machine.online(cpu),
            Request::OfflineMany(set) => machine.offline_many(set),
            Request::OnlineMany(set) => machine.online_many(set),
        }
    }

    /// The CPUs it names and whether it brings them up.
    fn cpus_and_direction(self) -> (Vec<u32>, bool) {
        let of = |set: CpuSet| set.iter().map(|cpu| cpu.0).collect();
        match self {
            Request::Offline(cpu) => (vec![cpu.0], false),
            Request::Online(cpu) => (vec![cpu.0], true),
            Request::OfflineMany(set) => (of(set), false),
            Request::OnlineMany(set) => (of(set), true),
        }
    }
}

/// The refusal `request` must get from a machine of `cpus` vCPUs of which
/// `online` are online, or `None` when it must succeed: the cases listed by
/// `MachineError` and hotkern-cpuhp's `Error`, checked in the order the
/// machine documents (its own range check, then the engine's), each naming
/// the lowest offending CPU. Written over plain CPU numbers so that it
/// shares nothing with the engine's set arithmetic.
fn expected_refusal(request: Request, cpus: usize, online: &[u32]) -> Option<MachineError> {
    let (named, up) = request.cpus_and_direction();
    let lowest = |wrong: &dyn Fn(u32) -> bool| named.iter().copied().filter(|&c| wrong(c)).min();
    if let Some(cpu) = lowest(&|c| c as usize >= cpus) {
        return Some(MachineError::NoSuchCpu(CpuId(cpu)));
    }
    if named.is_empty() {
        return Some(MachineError::Hotplug(HotplugError::EmptySet));
    }
    if up {
        if let Some(cpu) = lowest(&|c| online.contains(&c)) {
            return Some(MachineError::Hotplug(HotplugError::AlreadyOnline(CpuId(
                cpu,
            ))));
        }
    } else {
        if let Some(cpu) = lowest(&|c| !online.contains(&c)) {
            return Some(MachineError::Hotplug(HotplugError::AlreadyOffline(CpuId(
                cpu,
            ))));
        }
        if online.iter().all(|c| named.contains(c)) {
            return Some(MachineError::Hotplug(HotplugError::LastCpu));
        }
    }
    None
}

/// The online CPUs after `request` succeeded.
fn apply(request: Request, online: &mut Vec<u32>) {
    let (named, up) = request.cpus_and_direction();
    if up {
        online.extend(named);
        online.sort_unstable();
    } else {
        online.retain(|c| !named.contains(c));
    }
}

/// A short name for each refusal, to count them.
fn refusal_kind(error: &MachineError) -> &'static str {
    match error {
        MachineError::NoSuchCpu(_) => "no such cpu",
        MachineError::Hotplug(HotplugError::EmptySet) => "empty set",
        MachineError::Hotplug(HotplugError::AlreadyOnline(_)) => "already online",
        MachineError::Hotplug(HotplugError::AlreadyOffline(_)) => "already offline",
        MachineError::Hotplug(HotplugError::LastCpu) => "last cpu",
        _ => "other",
    }
}

/// A request: mostly one that fits the machine's state (random CPUs of the
/// right kind), and one in eight made of any numbers, out of range or
/// empty included, or of every online CPU, so that every refusal is met.
fn random_request(rng: &mut StdRng, cpus: usize, online: &[u32]) -> Option<Request> {
    let offline: Vec<u32> = (0..cpus as u32).filter(|c| !online.contains(c)).collect();
    let pick = |rng: &mut StdRng, from: &[u32]| -> Option<CpuId> {
        (!from.is_empty()).then(|| CpuId(from[rng.random_range(0..from.len())]))
    };
    let subset = |rng: &mut StdRng, from: &[u32]| -> CpuSet {
        from.iter()
            .filter(|_| rng.random_bool(0.5))
            .map(|&c| CpuId(c))
            .collect()
    };
    if rng.random_ratio(1, 8) {
        // Two numbers past the last vCPU, within what a CPU set can hold.
        // One wild set in four is empty, which a random subset almost never is.
        let any: Vec<u32> = if rng.random_ratio(1, 4) {
            Vec::new()
        } else {
            (0..(cpus + 2).min(MAX_VCPUS) as u32).collect()
        };
        let cpu = CpuId(rng.random_range(0..cpus as u32 + 2));
        return Some(match rng.random_range(0..5) {
            0 => Request::Offline(cpu),
            1 => Request::Online(cpu),
            2 => Request::OfflineMany(subset(rng, &any)),
            3 => Request::OnlineMany(subset(rng, &any)),
            // Every online CPU: the last one may not go, however many there are.
            _ => Request::OfflineMany(online.iter().map(|&c| CpuId(c)).collect()),
        });
    }
    match rng.random_range(0..4) {
        0 => pick(rng, online).map(Request::Offline),
        1 => pick(rng, &offline).map(Request::Online),
        2 => Some(Request::OfflineMany(subset(rng, online))).filter(|r| !is_empty(r)),
        _ => Some(Request::OnlineMany(subset(rng, &offline))).filter(|r| !is_empty(r)),
    }
}

fn is_empty(request: &Request) -> bool {
    request.cpus_and_direction().0.is_empty()
}

fn storm(engine: Engine, plan: &Storm, hz: Hz) {
    let machine = Machine::builder()
        .cpus(plan.cpus)
        .engine(engine)
        .hz(hz)
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let ran = Arc::new(AtomicU64::new(0));
    let per_op = plan.tasks.div_ceil(plan.operations);
    let mut online: Vec<u32> = (0..plan.cpus as u32).collect();
    let mut succeeded = 0;
    let mut refused: BTreeMap<&'static str, usize> = BTreeMap::new();
    for op in 0..plan.operations {
        for _ in 0..per_op {
            let slices = rng.random_range(1..=4);
            let kind = rng.random_range(0..64);
            machine.submit(task(slices, kind, ran.clone()));
        }
        let Some(request) = random_request(&mut rng, plan.cpus, &online) else {
            continue;
        };
        let expected = expected_refusal(request, plan.cpus, &online);
        match (request.send(&machine), expected) {
            (Ok(_), None) => {
                succeeded += 1;
                apply(request, &mut online);
            }
            (Err(got), Some(want)) if got == want => {
                *refused.entry(refusal_kind(&got)).or_default() += 1;
            }
            (got, want) => panic!(
                "operation {op}: {request:?} with {online:?} online: got {got:?}, expected {}",
                want.map_or("success".to_owned(), |w| format!("{w:?}"))
            ),
        }
        // A refusal changed nothing; a success did exactly what it said.
        let now: Vec<u32> = machine.online_cpus().iter().map(|cpu| cpu.0).collect();
        assert_eq!(now, online, "online CPUs after operation {op}: {request:?}");
        if op % 250 == 0 {
            let violations = machine.check_invariants();
            assert!(
                violations.is_empty(),
                "after {op} operations: {violations:?}"
            );
        }
    }
    println!("{engine:?}: {succeeded} succeeded, refused {refused:?}");
    assert!(
        succeeded > plan.operations / 2,
        "{succeeded} ok, refused {refused:?}"
    );
    // Every legitimate refusal was met, so each comparison above ran.
    for kind in [
        "no such cpu",
        "empty set",
        "already online",
        "already offline",
        "last cpu",
    ] {
        assert!(
            refused.contains_key(kind),
            "never refused {kind}: {refused:?}"
        );
    }
    common::drain(&machine);
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
    storm(Engine::Classic, &QUICK, Hz::DEFAULT);
}

#[test]
fn storm_bolt() {
    storm(Engine::Bolt, &QUICK, Hz::DEFAULT);
}

/// Bolt without the stop-machine: the dying CPU runs its steps alone
/// while the seven others keep running tasks that queue work, timers and
/// RCU callbacks through the atomic read side.
#[test]
fn storm_bolt_nostop() {
    storm(Engine::BoltNoStop, &QUICK, Hz::DEFAULT);
}

/// At Linux's slower tick rates a normal grace period lasts 10 ms or more,
/// so fewer operations: what changes is the timing of every wait, and the
/// invariants must hold whatever it is.
#[test]
fn storm_both_engines_at_hz_100_and_250() {
    let shorter = Storm {
        operations: 250,
        tasks: 1000,
        ..QUICK
    };
    for hz in [100, 250] {
        let hz = Hz::new(hz).unwrap();
        storm(Engine::Classic, &shorter, hz);
        storm(Engine::Bolt, &shorter, hz);
        storm(Engine::BoltNoStop, &shorter, hz);
    }
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
    storm(Engine::Classic, &heavy, Hz::DEFAULT);
    storm(Engine::Bolt, &heavy, Hz::DEFAULT);
    storm(Engine::BoltNoStop, &heavy, Hz::DEFAULT);
}
