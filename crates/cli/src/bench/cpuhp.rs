//! `hotkern bench cpuhp`: CPU offline and online latency on the user-mode
//! machine, Linux's `classic` hotplug against `bolt` and `bolt-nostop`
//! (bolt taking CPUs down without a stop-machine), with the very same
//! step table and callbacks (the machine's 16 subsystem steps).
//!
//! Latency is the critical path: from the call until the operation returns.
//! Bolt's deferred callbacks are then completed (and timed, as
//! `deferred_us`) outside the measured region, so every repetition starts
//! from a settled machine. Per-step times come from the engine's reports.

mod accounting;
pub(crate) mod linux;
mod qemu;
mod samples;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hotkern_machine::{CpuId, CpuSet, Engine, Hz, Item, Machine, Mechanism};
use serde_json::{Map, Value};

use samples::{Load, Samples};

use super::measure::host_cpus;
use super::{BenchOptions, Case, Platform, Report};
use crate::progress::Progress;
use crate::statistics::median;

/// Classic (Linux's path, stop-machine and all), bolt, and bolt without
/// the stop-machine: each an `impl` of every case.
const ENGINES: [(Engine, &str); 3] = [
    (Engine::Classic, "classic"),
    (Engine::Bolt, "bolt"),
    (Engine::BoltNoStop, "bolt-nostop"),
];
const BULK: [usize; 5] = [1, 2, 4, 8, 15];

/// Items handed to the machine that have not completed exactly once.
fn lost(machine: &Machine) -> u64 {
    [Item::Task, Item::Work, Item::Timer, Item::RcuCallback]
        .iter()
        .map(|item| {
            let tally = machine.tally(*item);
            tally.outstanding + tally.completed_twice
        })
        .sum()
}

/// Offline then online `cpus` of every machine (one per engine), `reps`
/// times. The engines take turns within each repetition, so noise from the
/// host drifting over time falls on both alike. With `load`, that many
/// load tasks run on the machine being measured (only on it) during its
/// turn. Returns (offline, online) samples per machine.
fn round_trips(
    machines: &[Machine],
    cpus: CpuSet,
    reps: usize,
    load: Option<usize>,
    progress: &Progress,
) -> Result<Vec<(Samples, Samples)>, String> {
    let mut samples: Vec<(Samples, Samples)> = machines
        .iter()
        .map(|_| (Samples::new(), Samples::new()))
        .collect();
    for _ in 0..reps {
        for (machine, (down, up)) in machines.iter().zip(samples.iter_mut()) {
            let running = load.map(|tasks| Load::start(machine, tasks));
            settle(machine)?;
            let start = Instant::now();
            let report = machine
                .offline_many(cpus)
                .map_err(|e| format!("offline {cpus}: {e}"))?;
            let latency = start.elapsed();
            machine.wait_deferred();
            down.record(latency, &report, machine);

            settle(machine)?;
            let start = Instant::now();
            let report = machine
                .online_many(cpus)
                .map_err(|e| format!("online {cpus}: {e}"))?;
            let latency = start.elapsed();
            machine.wait_deferred();
            up.record(latency, &report, machine);
            if let Some(running) = running {
                running.stop(machine);
            }
            progress.advance();
        }
    }
    Ok(samples)
}

/// Lets threads woken by the previous operation (of either machine) go
/// back to sleep, so each timed operation starts on a quiet host. Outside
/// the timed region.
fn quiet_host() {
    std::thread::sleep(Duration::from_micros(300));
}

/// Starts each timed operation as a lone one: the previous operation's
/// hotplug-lock grace period has ended (readers are back on their fast
/// path), so the operation's own lock waits for a whole grace period, as a
/// lone `echo 0|1 > online` does in Linux; then [`quiet_host`].
fn settle(machine: &Machine) -> Result<(), String> {
    if !machine.wait_hotplug_lock_quiet(Duration::from_secs(10)) {
        return Err("the hotplug lock's grace period did not end within 10 s".into());
    }
    quiet_host();
    Ok(())
}

/// A machine of `cpus` vCPUs per engine, in [`ENGINES`] order.
fn machines(cpus: usize, hz: Hz) -> Result<Vec<Machine>, String> {
    ENGINES
        .iter()
        .map(|(engine, _)| {
            Machine::builder()
                .cpus(cpus)
                .engine(*engine)
                .hz(hz)
                .build()
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Checks invariants and shuts every machine down cleanly.
fn finish(machines: Vec<Machine>) -> Result<(), String> {
    for (machine, (_, name)) in machines.into_iter().zip(ENGINES) {
        let problems = machine.check_invariants();
        if !problems.is_empty() {
            return Err(format!("{name}: invariants broken: {problems:?}"));
        }
        let shut = machine.shutdown();
        if !shut.is_clean() {
            return Err(format!("{name}: unclean shutdown: {:?}", shut.violations));
        }
    }
    Ok(())
}

/// Adds the offline and online cases of every engine.
fn push_cases(report: &mut Report, suffix: &str, samples: &[(Samples, Samples)], lost: &[u64]) {
    for (direction, pick) in [("offline", 0), ("online", 1)] {
        for (((_, name), pair), lost) in ENGINES.iter().zip(samples).zip(lost) {
            let chosen = if pick == 0 { &pair.0 } else { &pair.1 };
            report
                .cases
                .push(case(&format!("{direction}/{suffix}"), name, chosen, *lost));
        }
    }
}

fn stages_json(stages: &BTreeMap<&'static str, f64>) -> Value {
    let object: Map<String, Value> = stages
        .iter()
        .map(|(name, us)| {
            (
                (*name).to_owned(),
                Value::from((us * 100.0).round() / 100.0),
            )
        })
        .collect();
    Value::Object(object)
}

fn case(name: &str, engine: &str, samples: &Samples, lost: u64) -> Case {
    // The per-step times and every repetition's latency (for the report's
    // distributions) are too wide for the table, which shows only
    // `table_figures`; the per-step breakdown is printed as notes.
    let samples_us: Vec<f64> = samples
        .latency_ns
        .iter()
        .map(|ns| (*ns as f64 / 10.0).round() / 100.0)
        .collect();
    let mut case = Case::new(name, engine, samples.latency_ns.len() as u64)
        .with("latency_us", median(&samples.latency_ns) / 1e3)
        .with("deferred_us", median(&samples.deferred_ns) / 1e3)
        .with("unaccounted_us", median(&samples.unaccounted_ns) / 1e3)
        .with("tasks_lost", lost)
        .with("stages", stages_json(&samples.stages_us()))
        .with("latency_samples_us", samples_us)
        .with("nested_stages", samples.nested.clone());
    if !samples.deferred_stages.is_empty() {
        case = case.with(
            "deferred_stages",
            stages_json(&samples.deferred_stages_us()),
        );
    }
    case
}

fn breakdown(title: &str, classic: &Samples, bolt: &Samples) -> Vec<String> {
    let (c, b) = (classic.stages_us(), bolt.stages_us());
    let later = bolt.deferred_stages_us();
    let mut names: Vec<&str> = c.keys().chain(b.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    // Largest classic cost first: where the time goes.
    names.sort_by(|x, y| {
        let cx = c.get(x).copied().unwrap_or(0.0);
        let cy = c.get(y).copied().unwrap_or(0.0);
        cy.total_cmp(&cx)
    });
    let mut lines = vec![
        format!(
            "{title}, per step (median µs on the critical path; (µs) = deferred, run by the worker after return):"
        ),
        format!("    {:<20} {:>9} {:>9}", "step", "classic", "bolt"),
    ];
    let cell = |v: Option<&f64>| v.map_or("-".to_owned(), |us| format!("{us:.1}"));
    for name in names {
        let bolt_cell = match (b.get(name), later.get(name)) {
            (Some(us), _) => format!("{us:.1}"),
            (None, Some(us)) => format!("({us:.1})"),
            (None, None) => "-".to_owned(),
        };
        lines.push(format!(
            "    {name:<20} {:>9} {:>9}",
            cell(c.get(name)),
            bolt_cell
        ));
    }
    lines
}

pub fn run(options: &BenchOptions) -> Result<Report, String> {
    if options.linux {
        return linux::run(options.platform == Platform::Qemu, options.hz, options.arch);
    }
    if options.platform == Platform::Qemu {
        return qemu::run(options.hz, options.arch);
    }
    let hz = Hz::new(options.hz).map_err(|error| error.to_string())?;
    let reps_single = if options.full { 400 } else { 100 };
    let reps_bulk = if options.full { 100 } else { 20 };
    let reps_mechanism = if options.full { 200 } else { 30 };
    let steps = (ENGINES.len() * (2 * reps_single + BULK.len() * reps_bulk)
        + Mechanism::ALL.len() * reps_mechanism) as u64;
    let progress = Progress::steps("cpuhp", steps);
    let mut report = Report::new("cpuhp");
    // Per-step times are in the JSON and in the breakdown under the table.
    report.table_figures = vec!["latency_us", "deferred_us", "tasks_lost"];

    // One vCPU of a 4-vCPU machine, idle, then under load.
    progress.start("offline/1, online/1");
    let small = machines(4, hz)?;
    let last = CpuSet::single(CpuId(3));
    let idle = round_trips(&small, last, reps_single, None, &progress)?;
    let lost_idle: Vec<u64> = small.iter().map(lost).collect();
    push_cases(&mut report, "1", &idle, &lost_idle);

    progress.start("offline/1-load, online/1-load");
    let loaded = round_trips(&small, last, reps_single, Some(16), &progress)?;
    let lost_load: Vec<u64> = small.iter().map(lost).collect();
    push_cases(&mut report, "1-load", &loaded, &lost_load);
    finish(small)?;

    // k of the 15 non-boot vCPUs of a 16-vCPU machine at once.
    let big = machines(16, hz)?;
    for k in BULK {
        progress.start(&format!("bulk-{k}"));
        let cpus = CpuSet::range(1, k as u32 + 1);
        let bulk = round_trips(&big, cpus, reps_bulk, None, &progress)?;
        let lost_bulk: Vec<u64> = big.iter().map(lost).collect();
        push_cases(&mut report, &format!("bulk-{k}"), &bulk, &lost_bulk);
    }
    finish(big)?;

    progress.start("mechanisms");
    let mechanisms = mechanisms(hz, reps_mechanism, &progress)?;
    for (mechanism, samples) in Mechanism::ALL.iter().zip(&mechanisms) {
        report.cases.push(
            Case::new(
                format!("mechanism/{}", mechanism.name()),
                "machine",
                samples.len() as u64,
            )
            .with("latency_us", median(samples) / 1e3),
        );
    }
    // Every case says at which tick rate it ran.
    for case in &mut report.cases {
        case.extra
            .push(("hz".to_owned(), u64::from(hz.get()).into()));
    }
    drop(progress);

    let mut ratio =
        |key: &str, case: &str| report.ratio(key, case, "latency_us", "classic", "bolt");
    let offline = ratio("offline-1/classic_over_bolt", "offline/1");
    let online = ratio("online-1/classic_over_bolt", "online/1");
    ratio("offline-1-load/classic_over_bolt", "offline/1-load");
    ratio("online-1-load/classic_over_bolt", "online/1-load");
    ratio("offline-bulk-15/classic_over_bolt", "offline/bulk-15");
    ratio("online-bulk-15/classic_over_bolt", "online/bulk-15");
    // What dropping the stop-machine buys bolt.
    let mut nostop = |key: &str, case: &str| {
        report.ratio(key, case, "latency_us", "bolt", "bolt-nostop");
    };
    nostop("offline-1/bolt_over_bolt-nostop", "offline/1");
    nostop("offline-1-load/bolt_over_bolt-nostop", "offline/1-load");
    nostop("offline-bulk-15/bolt_over_bolt-nostop", "offline/bulk-15");
    let mut bulk_growth = None;
    for (_, name) in ENGINES {
        for direction in ["offline", "online"] {
            let one = report
                .case(&format!("{direction}/bulk-1"), name)
                .and_then(|c| c.figure("latency_us"));
            let fifteen = report
                .case(&format!("{direction}/bulk-15"), name)
                .and_then(|c| c.figure("latency_us"));
            if let (Some(one), Some(fifteen)) = (one, fifteen) {
                if one > 0.0 {
                    let growth = fifteen / one;
                    report
                        .ratios
                        .insert(format!("{name}/{direction}-bulk-15_over_bulk-1"), growth);
                    if name == "bolt" && direction == "offline" {
                        bulk_growth = Some(growth);
                    }
                }
            }
        }
    }

    let target = |label: &str, value: Option<f64>, goal: f64, above: bool| match value {
        Some(v) => format!(
            "target {label}: {v:.1}x (goal {} {goal}x) {}",
            if above { ">=" } else { "<=" },
            verdict(if above { v >= goal } else { v <= goal })
        ),
        None => format!("target {label}: not measured"),
    };
    report.notes.push(target(
        "bolt offline faster than classic",
        offline,
        20.0,
        true,
    ));
    report.notes.push(target(
        "bolt online faster than classic",
        online,
        10.0,
        true,
    ));
    report.notes.push(target(
        "bolt bulk offline of 15 vs 1 vCPU",
        bulk_growth,
        2.0,
        false,
    ));
    report.notes.extend(accounting::notes(&report));
    let lost_total: f64 = report
        .cases
        .iter()
        .filter_map(|c| c.figure("tasks_lost"))
        .sum();
    report.notes.push(format!(
        "target tasks_lost 0 everywhere: {} {}",
        lost_total,
        verdict(lost_total == 0.0)
    ));
    report.notes.push(format!(
        "vCPUs are OS threads: the 16-vCPU bulk cases oversubscribe the host's {} cores, \
         as do the machine's kernel threads; times are noisy when the host is busy",
        host_cpus()
    ));
    report.notes.push(
        "latency_us = median critical path (call to return); deferred_us = median time of \
         bolt's deferred callbacks, run by its worker after the operation returned (classic \
         defers nothing); both engines run the same \
         16 callbacks and take turns within each repetition; -load runs 16 busy tasks on the \
         machine being measured"
            .to_owned(),
    );
    report.notes.extend(mechanism_notes(&report, hz));
    if let [(classic_down, classic_up), (bolt_down, bolt_up), ..] = &idle[..] {
        report
            .notes
            .extend(breakdown("offline/1", classic_down, bolt_down));
        report
            .notes
            .extend(breakdown("online/1", classic_up, bolt_up));
    }
    if let [(classic_down, _), (bolt_down, _), ..] = &loaded[..] {
        report
            .notes
            .extend(breakdown("offline/1-load", classic_down, bolt_down));
    }
    if let [_, (bolt_down, _), (nostop_down, _)] = &loaded[..] {
        report.notes.push(nostop_note(bolt_down, nostop_down));
    }
    Ok(report)
}

/// Bolt's stop-machine against what bolt-nostop does instead, under load.
fn nostop_note(bolt: &Samples, nostop: &Samples) -> String {
    let (b, n) = (bolt.stages_us(), nostop.stages_us());
    let us = |stages: &BTreeMap<&str, f64>, name: &str| stages.get(name).copied().unwrap_or(0.0);
    format!(
        "offline/1-load without a stop-machine: bolt's stop-machine {:.1} µs; bolt-nostop's \
         reader-drain {:.1} µs + dying {:.1} µs (median latency {:.1} vs {:.1} µs)",
        us(&b, "stop-machine"),
        us(&n, "reader-drain"),
        us(&n, "dying"),
        median(&bolt.latency_ns) / 1e3,
        median(&nostop.latency_ns) / 1e3,
    )
}

/// Times each of [`Mechanism::ALL`] `reps` times on an idle 4-vCPU machine
/// (nanoseconds per repetition, in that order).
fn mechanisms(hz: Hz, reps: usize, progress: &Progress) -> Result<Vec<Vec<u64>>, String> {
    let machine = Machine::builder()
        .cpus(4)
        .hz(hz)
        .build()
        .map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    for mechanism in Mechanism::ALL {
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps {
            quiet_host();
            let took = machine
                .time_mechanism(mechanism)
                .map_err(|e| format!("mechanism/{}: {e}", mechanism.name()))?;
            samples.push(took.as_nanos() as u64);
            progress.advance();
        }
        all.push(samples);
    }
    finish(vec![machine])?;
    Ok(all)
}

/// What Linux's own mechanisms are published to cost, beside the
/// machine's, and the grace-period targets.
fn mechanism_notes(report: &Report, hz: Hz) -> Vec<String> {
    let us = |name: &str| {
        report
            .case(&format!("mechanism/{name}"), "machine")
            .and_then(|case| case.figure("latency_us"))
    };
    let mut notes = vec![format!(
        "mechanisms at HZ={} (median µs; Linux's published figures beside them): \
         grace-period-normal {} (Linux at HZ=1000, idle: mean 4.0 ms, 1.2-10.1 ms; forcing \
         quiescent states every {} jiffies); grace-period-expedited {} (Linux IPIs every CPU); \
         stop-machine {}; kthread-create {}; kthread-unpark {}",
        hz.get(),
        fmt_us(us("grace-period-normal")),
        hz.jiffies_till_fqs(),
        fmt_us(us("grace-period-expedited")),
        fmt_us(us("stop-machine")),
        fmt_us(us("kthread-create")),
        fmt_us(us("kthread-unpark")),
    )];
    if hz == Hz::DEFAULT {
        let normal = us("grace-period-normal");
        notes.push(format!(
            "target grace-period-normal between 1 and 10 ms at HZ=1000: {} {}",
            fmt_us(normal),
            verdict(normal.is_some_and(|us| (1_000.0..=10_000.0).contains(&us)))
        ));
        let expedited = us("grace-period-expedited");
        notes.push(format!(
            "target grace-period-expedited <= 200 µs: {} {}",
            fmt_us(expedited),
            verdict(expedited.is_some_and(|us| us <= 200.0))
        ));
    }
    notes
}

/// How a target came out.
fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

fn fmt_us(us: Option<f64>) -> String {
    us.map_or("-".to_owned(), |us| format!("{us:.1} µs"))
}
