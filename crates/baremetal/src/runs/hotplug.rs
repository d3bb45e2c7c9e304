//! CPU hotplug on real CPUs: hotkern-cpuhp's engines (classic, bolt and
//! bolt-nostop, which stops no other CPU to take one down) over this kernel, with the shared core's step table (`hotkern_kernel::baremetal`:
//! the same sixteen steps the user-mode machine runs), while tasks run on
//! every CPU; the books, masks and per-CPU structures are checked after
//! every operation.
//!
//! The platform is [`crate::platform::KernelPlatform`]; Bolt's deferred callbacks run on the
//! controlling CPU after each operation's latency is taken, off the
//! critical path as Bolt's master thread runs them. Operations that fail
//! (made to, in [`failure`], or not) are listed by name in the summary.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::Ordering;

use hotkern_cpuhp::{CpuSet, Engine, Error, Report};
use hotkern_kernel::audit::{Counts, Resource};
use hotkern_kernel::kthread::Role;
use hotkern_kernel::steps::{self as step_table};

use crate::arch::clock;
use crate::arch::kthread;
use crate::arch::smp::{self, Park, BOOT_CPU};
use crate::platform::pages;
use crate::platform::Kernel;
use crate::runs::checks::Checks;
use crate::runs::json::JsonStr;
use crate::runs::tasks;

pub mod differential;
mod engine;
mod failure;

use engine::{consistent, settle_between, KernelHotplug, KEPT};

use crate::arch::console::println;
use crate::platform::trace::trace_marker;
use crate::platform::KernelPlatform;

/// Tasks started before the operations; they run until all are done.
const TASKS: u32 = 48;
/// How long the tasks may take to finish once told to (each needs one
/// more slice).
const DRAIN_SECONDS: u64 = 5;
/// Rounds of every case, per engine.
const ROUNDS: usize = 5;

/// One case's latencies over its rounds, in nanoseconds.
#[derive(Default)]
pub struct Case {
    /// The user-mode benchmark's name for it: `offline/1-load`,
    /// `online/1-load`, `offline/bulk-3-load`, `online/bulk-3-load`.
    pub name: String,
    /// The implementation: `classic`, `bolt`, `bolt-nostop` or `bolt-parked`.
    pub engine: &'static str,
    /// Every operation's wall time (the engine's critical path).
    pub samples: Vec<u64>,
    /// Each stage's times (steps, grace period, stop-machine, power), one
    /// per operation that ran it.
    pub stages: Vec<(&'static str, Vec<u64>)>,
    /// The stages timed inside another (a step inside the stop-machine,
    /// the bring-up or the run on its CPU).
    pub nested: Vec<&'static str>,
    /// Every operation's time in stages that are not nested: what its
    /// stages account for of its sample.
    pub paths: Vec<u64>,
}

impl Case {
    fn new(name: String, engine: &'static str) -> Self {
        Case {
            name,
            engine,
            samples: Vec::new(),
            stages: Vec::new(),
            nested: Vec::new(),
            paths: Vec::new(),
        }
    }

    /// The median sample.
    pub fn median(&self) -> u64 {
        median(&self.samples)
    }

    fn record(&mut self, report: &Report) {
        self.samples.push(report.nanos);
        self.paths.push(report.path_nanos());
        for stage in &report.stages {
            if stage.nested && !self.nested.contains(&stage.name) {
                self.nested.push(stage.name);
            }
            match self.stages.iter_mut().find(|(name, _)| *name == stage.name) {
                Some((_, times)) => times.push(stage.nanos),
                None => self.stages.push((stage.name, alloc::vec![stage.nanos])),
            }
        }
    }
}

fn median(samples: &[u64]) -> u64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

/// Every failure by name, the engine's errors and those outside its
/// operations, as the items of a JSON array of strings.
struct HotplugFailures<'a>(&'a [String]);

impl fmt::Display for HotplugFailures<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outside = crate::platform::hardware::FAILURES.all();
        for (index, failure) in self.0.iter().chain(outside.iter()).enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", JsonStr(failure))?;
        }
        Ok(())
    }
}

/// Nanoseconds as microseconds with one decimal, for JSON.
struct Micros(u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, self.0 % 1000 / 100)
    }
}

/// What the hotplug run did.
pub struct Run {
    /// Every case, per engine.
    pub cases: Vec<Case>,
    /// The task books at the end.
    pub tally: tasks::SchedTally,
    /// Invariant violations seen after operations (masks, queues, books).
    pub violations: u32,
    /// Operations that returned an error, each as `engine case: error`.
    pub errors: Vec<String>,
    /// Grace periods the run waited for.
    pub grace_periods: u64,
    /// Tasks still running when the last operation ended.
    pub running_at_end: u64,
    /// Worker threads created and destroyed by the `threads:create` step
    /// (and at boot).
    pub workers: Counts,
    /// Switches from idle loops into kernel threads.
    pub switches: u64,
    /// The frame pool at the end: (free in the pool, in caches, held by
    /// tasks, given back twice or unknown).
    pub frames: (u64, u64, i64, u64),
    /// Operations made to fail, and whether each rolled back.
    pub failures: failure::FailureTally,
}

impl Run {
    /// Nothing lost, run twice, run offline, or out of step.
    pub fn invariants_hold(&self) -> bool {
        let (free, cached, held, bad) = self.frames;
        self.violations == 0
            && held == 0
            && bad == 0
            && free + cached == pages::POOL_FRAMES
            && self.tally.page_errors == 0
            && self.errors.is_empty()
            && self.tally.twice == 0
            && self.tally.ran_offline == 0
            && self.tally.changed_under_hold == 0
            && self.tally.left_under_reader == 0
            && self.tally.outstanding == 0
            && self.failures.holds()
            && crate::platform::hardware::FAILURES.is_empty()
    }
}

/// Runs one operation, timed, and checks the machine after it.
fn operate(
    engine: &KernelHotplug,
    run: &mut Run,
    case: &mut Case,
    op: impl Fn(&KernelHotplug) -> Result<Report, Error>,
) {
    match op(engine) {
        Ok(report) => {
            trace_marker!(
                "hotplug {} {} (first cpu {}) took {} us",
                case.engine,
                case.name,
                report.cpus.first().map_or(0, |cpu| cpu.0),
                report.nanos / 1000
            );
            case.record(&report);
            // A CPU that did not report dead: the operation went on.
            for failure in &report.failures {
                crate::platform::hardware::FAILURES
                    .record(format_args!("{} {}: {failure}", case.engine, case.name));
            }
        }
        Err(error) => {
            println!("hotkern: hotplug {} {}: {error}", case.engine, case.name);
            run.errors
                .push(format!("{} {}: {error}", case.engine, case.name));
        }
    }
    engine.flush_deferred();
    run.violations += consistent(engine, format_args!("{} {}", case.engine, case.name));
    if !settle_between() {
        println!(
            "hotkern: hotplug {} {}: the hotplug lock did not settle",
            case.engine, case.name
        );
        run.violations += 1;
    }
}

/// The engines a run uses, from the command line's `engine=`: `classic`,
/// `bolt`, `bolt-nostop`, `both` (classic and bolt) or `all` (the three,
/// also when absent). Anything else is refused with the accepted names.
pub fn engines(option: Option<&str>) -> Result<&'static [(Engine, &'static str)], &str> {
    const ALL: [(Engine, &str); 3] = [
        (Engine::Classic, "classic"),
        (Engine::Bolt, "bolt"),
        (Engine::BoltNoStop, "bolt-nostop"),
    ];
    match option {
        None | Some("all") => Ok(&ALL),
        Some("both") => Ok(&ALL[..2]),
        Some("classic") => Ok(&ALL[..1]),
        Some("bolt") => Ok(&ALL[1..2]),
        Some("bolt-nostop") => Ok(&ALL[2..]),
        Some(other) => Err(other),
    }
}

/// What every hotplug run starts from: the page pool, the scheduler, the
/// hotplug lock, each CPU's hotplug thread, and the engine over the
/// shared step table with every row registered (each startup run on the
/// CPUs running now). `None`, said in `checks`, with one CPU or no pool.
fn start(checks: &mut Checks) -> Option<(KernelHotplug, u32)> {
    let count = smp::cpu_count();
    if count < 2 {
        checks.skip("cpu hotplug with every engine", "one CPU");
        return None;
    }
    let possible = CpuSet::range(0, count);
    let online: CpuSet = smp::cpus().filter(|&cpu| smp::is_running(cpu)).collect();
    if let Err(error) = pages::init() {
        println!("hotkern: no page pool for the tasks: {error}");
        checks.check("a page pool for the tasks, taken from physmem", false);
        return None;
    }
    Kernel::boot_scheduler(online);
    Kernel::init_control(count as usize);
    // Linux registers its hotplug threads for every possible CPU; every
    // step's startup then runs for the CPUs running now (`register`),
    // which makes their kernel threads, caches, pools and the rest.
    Kernel::install_hotplug_threads(possible);
    let engine = match step_table::engine::<_, _, Kernel>(
        KernelPlatform::new(Kernel::HANDLE),
        possible,
        online,
        Engine::Classic,
    ) {
        Ok(engine) => engine,
        Err(error) => panic!("hotplug engine: {error}"),
    };
    if let Err(error) = step_table::register(&engine, &Arc::new(Kernel::HANDLE)) {
        panic!("hotplug steps: {error}");
    }
    Some((engine, count))
}

/// Tells the tasks to stop and waits (at most [`DRAIN_SECONDS`] each)
/// for them to finish and for every RCU callback to run; returns the
/// callbacks still pending, those no list took (in the limbo) included.
fn drain(tsc_hz: u64) -> usize {
    tasks::stop();
    for cpu in smp::application_processors() {
        smp::wake(cpu);
    }
    let started = clock::now();
    while tasks::tally().outstanding > 0 && clock::now() - started < DRAIN_SECONDS * tsc_hz {
        Kernel::run_slices(BOOT_CPU);
        Kernel::balance();
        core::hint::spin_loop();
    }
    // The domains retired by the last operations wait for one more grace
    // period; then every CPU's `rcuc` (CPU 0's here) runs what is ready.
    let _ = Kernel::rcu().synchronize(hotkern_kernel::rcu::Kind::Normal);
    let rcu_pending = || smp::cpus().map(Kernel::rcu_pending).sum::<usize>();
    let started = clock::now();
    while rcu_pending() > 0 && clock::now() - started < DRAIN_SECONDS * tsc_hz {
        Kernel::run_rcu_callbacks(BOOT_CPU);
        for cpu in smp::application_processors() {
            smp::wake(cpu);
        }
        core::hint::spin_loop();
    }
    rcu_pending() + Kernel::rcu_waiting()
}

/// The name of bolt's cases timed with offline CPUs parked idle.
pub const PARKED: &str = "bolt-parked";

/// Times every case ([`ROUNDS`] rounds) with the engine as it is set,
/// under the implementation name `name`.
fn time_cases(engine: &KernelHotplug, run: &mut Run, aps: CpuSet, name: &'static str) -> [Case; 4] {
    let bulk = aps.len();
    // Named as `hotkern bench cpuhp` names its cases; `-load`: tasks
    // run on every CPU throughout.
    let mut offline = Case::new("offline/1-load".into(), name);
    let mut online = Case::new("online/1-load".into(), name);
    let mut offline_bulk = Case::new(format!("offline/bulk-{bulk}-load"), name);
    let mut online_bulk = Case::new(format!("online/bulk-{bulk}-load"), name);
    for round in 0..ROUNDS {
        // The first round runs with reader tasks holding the hotplug
        // lock across slices (its property is checked); the others
        // time lone operations, with no reader in for the writer to
        // wait for, as the medians of `bench cpuhp` want.
        tasks::set_readers(round == 0);
        for cpu in aps.iter() {
            operate(engine, run, &mut offline, |e| e.offline(cpu));
            operate(engine, run, &mut online, |e| e.online(cpu));
        }
        operate(engine, run, &mut offline_bulk, |e| e.offline_many(aps));
        operate(engine, run, &mut online_bulk, |e| e.online_many(aps));
        trace_marker!("hotplug {name} round {round} done");
    }
    [offline, online, offline_bulk, online_bulk]
}

/// Runs every case with each engine of `engines` while tasks run, then
/// waits for the tasks to finish.
pub fn run(tsc_hz: u64, engines: &[(Engine, &'static str)], checks: &mut Checks) -> Option<Run> {
    let (engine, count) = start(checks)?;
    let mut run = Run {
        cases: Vec::new(),
        tally: tasks::SchedTally::default(),
        violations: 0,
        errors: Vec::new(),
        grace_periods: 0,
        running_at_end: 0,
        workers: Counts::default(),
        switches: 0,
        frames: (0, 0, 0, 0),
        failures: failure::FailureTally::default(),
    };
    tasks::spawn(TASKS);
    let aps = CpuSet::range(1, count);
    for &(kind, name) in engines {
        KEPT.fetch_or(kind.is_bolt(), Ordering::Relaxed);
        engine.set_engine(kind);
        let cases = time_cases(&engine, &mut run, aps, name);
        // Then operations made to fail, untimed, tasks still running,
        // with reader tasks inside the atomic read side for long spells.
        tasks::set_long_readers(true);
        failure::run(&engine, name, aps, &mut run.failures);
        tasks::set_long_readers(false);
        trace_marker!("hotplug {name} failure injection done");
        run.cases.extend(cases);
    }
    // Bolt once more with its offline CPUs parked idle, so that a start is
    // a wake-up IPI rather than INIT-SIPI-SIPI: timed under a name of its
    // own, so that the engine's gain (bolt over classic, both cold) and
    // the power mechanism's (parked over cold, both bolt) stay apart.
    // Classic keeps Linux's cold start.
    if engines.iter().any(|(kind, _)| *kind == Engine::Bolt) {
        engine.set_engine(Engine::Bolt);
        smp::set_park(Park::Idle);
        let (cold, parked) = smp::starts();
        let cases = time_cases(&engine, &mut run, aps, PARKED);
        let (cold_after, parked_after) = smp::starts();
        smp::set_park(Park::PowerOff);
        run.cases.extend(cases);
        // All CPUs were online as the pass began, so each it started had
        // parked idle in it: a cold start here is a wake-up gone wrong.
        checks.check(
            "bolt-parked started every CPU from its idle park, none cold",
            cold_after == cold && parked_after > parked,
        );
    }
    // Tasks ran through every operation; now each finishes at its next
    // slice, wherever it is.
    run.running_at_end = tasks::tally().outstanding;
    let rcu_pending = drain(tsc_hz);
    run.tally = tasks::tally();
    checks.check(
        "every RCU callback (retired scheduling domains) ran after its grace period",
        rcu_pending == 0,
    );
    run.grace_periods = Kernel::rcu().completed();
    run.switches = kthread::switches();
    run.workers = Kernel::mechanisms()
        .audit
        .counts()
        .get(&Resource::Kthread(Role::Worker))
        .copied()
        .unwrap_or_default();
    checks.check(
        "every task ran to the end exactly once, never on an offline CPU",
        run.tally.issued == u64::from(TASKS)
            && run.tally.completed == run.tally.issued
            && run.tally.ran_offline == 0,
    );
    checks.check(
        "after every hotplug operation the masks, queues, kernel threads and per-CPU structures agree with the engine",
        run.violations == 0 && run.errors.is_empty() && crate::platform::hardware::FAILURES.is_empty(),
    );
    checks.check("tasks were migrated off dying CPUs", run.tally.migrated > 0);
    checks.check(
        "an injected failure at a step of each section, both ways, single and bulk, failed there, rolled back, and the next operation succeeded",
        run.failures.holds(),
    );
    checks.check(
        "reader tasks held the hotplug lock, and no CPU came or went under a hold",
        run.tally.read_holds > 0 && run.tally.changed_under_hold == 0,
    );
    checks.check(
        "no CPU a task slice saw online inside the atomic hotplug read side went down before the slice left it",
        run.tally.slices > 0 && run.tally.left_under_reader == 0,
    );
    // Every frame a task took came back, none twice, and the pool with the
    // caches holds every frame it began with.
    let (free, cached, held) = Kernel::pages().map_or((0, 0, -1), |pages| pages.accounting());
    let bad = Kernel::pages().map_or(1, |pages| pages.pool().bad_returns());
    run.frames = (free, cached, held, bad);
    checks.check(
        "every frame went back to the page caches or the pool, none twice, none lost",
        held == 0 && bad == 0 && free + cached == pages::POOL_FRAMES && run.tally.page_errors == 0,
    );
    // Classic destroys a dead CPU's worker and creates a new one; bolt
    // parks it: with classic run, workers were destroyed and made anew.
    let classic = engines.iter().any(|(kind, _)| *kind == Engine::Classic);
    checks.check(
        "worker threads were made and destroyed by the hotplug step, and ran the tasks",
        (!classic || run.workers.destroyed > 0)
            && run.workers.created >= run.workers.destroyed
            && run.switches > 0,
    );
    Some(run)
}

/// The run as JSON, for the summary: `{"cases":[...],"tasks":{...},...}`.
pub struct HotplugJson<'a>(pub Option<&'a Run>);

impl fmt::Display for HotplugJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(run) = self.0 else {
            return f.write_str("null");
        };
        f.write_str("{\"steps\":[")?;
        for (index, def) in step_table::table::<Kernel>().iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            let (spec, reason) = (def.spec, def.reason);
            write!(
                f,
                "{{\"name\":\"{}\",\"section\":\"{:?}\",\"class\":\"{:?}\",\"reason\":\"{}\"}}",
                spec.name, spec.section, spec.class, reason
            )?;
        }
        f.write_str("],\"cases\":[")?;
        for (index, case) in run.cases.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            // The benchmark shape of `hotkern bench cpuhp`, with every
            // sample beside the median.
            write!(
                f,
                "{{\"name\":\"{}\",\"impl\":\"{}\",\"ops\":{},\"latency_us\":{},\"tasks_lost\":{},\"stages\":{{",
                case.name,
                case.engine,
                case.samples.len(),
                Micros(case.median()),
                run.tally.outstanding,
            )?;
            for (index, (name, times)) in case.stages.iter().enumerate() {
                if index > 0 {
                    f.write_str(",")?;
                }
                write!(f, "\"{name}\":{}", Micros(median(times)))?;
            }
            // What the stages leave unaccounted, per operation: the
            // median of the differences, not of the two medians.
            let unaccounted: Vec<u64> = case
                .samples
                .iter()
                .zip(&case.paths)
                .map(|(sample, path)| sample.saturating_sub(*path))
                .collect();
            write!(
                f,
                "}},\"path_us\":{},\"unaccounted_us\":{},\"nested_stages\":[",
                Micros(median(&case.paths)),
                Micros(median(&unaccounted)),
            )?;
            for (index, name) in case.nested.iter().enumerate() {
                if index > 0 {
                    f.write_str(",")?;
                }
                write!(f, "\"{name}\"")?;
            }
            f.write_str("],\"samples_ns\":[")?;
            for (index, sample) in case.samples.iter().enumerate() {
                if index > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{sample}")?;
            }
            f.write_str("]}")?;
        }
        let tally = run.tally;
        let outside = crate::platform::hardware::FAILURES.len();
        write!(
            f,
            "],\"tasks\":{{\"issued\":{},\"completed\":{},\"twice\":{},\"lost\":{},\"slices\":{},\
             \"ran_offline\":{},\"migrated\":{},\"read_holds\":{},\"changed_under_hold\":{},\"left_under_reader\":{}}},\
             \"violations\":{},\"errors\":{},\
             \"platform_failures\":{},\"failures\":[{}],\"grace_periods\":{},\"running_at_end\":{},\
             \"threads\":{{\"switches\":{},\"workers_created\":{},\"workers_destroyed\":{}}},\
             \"frames\":{{\"pool\":{},\"free\":{},\"cached\":{},\"held\":{},\"bad_returns\":{},\
             \"page_errors\":{}}},\"failure_injection\":{},\
             \"starts\":{{\"cold\":{},\"from_park\":{}}},\"invariants_hold\":{}}}",
            tally.issued,
            tally.completed,
            tally.twice,
            tally.outstanding,
            tally.slices,
            tally.ran_offline,
            tally.migrated,
            tally.read_holds,
            tally.changed_under_hold,
            tally.left_under_reader,
            run.violations,
            run.errors.len(),
            outside,
            HotplugFailures(&run.errors),
            run.grace_periods,
            run.running_at_end,
            run.switches,
            run.workers.created,
            run.workers.destroyed,
            pages::POOL_FRAMES,
            run.frames.0,
            run.frames.1,
            run.frames.2,
            run.frames.3,
            run.tally.page_errors,
            run.failures,
            smp::starts().0,
            smp::starts().1,
            run.invariants_hold()
        )
    }
}
