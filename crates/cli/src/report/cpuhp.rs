//! cpuhp's figures: Bolt (ATC 2015)'s stacked bars of where
//! offline and online time goes, classic beside bolt; the latency
//! distributions; the bulk interface's cost against the CPUs it takes;
//! and the mechanisms hotplug waits on.

use serde_json::Value;

use super::chart::{Axis, Bars, Chart, Line, Marks};
use super::figure::{target, Figure};
use super::inputs::{Bench, Inputs, Problem, Source};

/// Linux's design, then ours and its two variants: taking a CPU down
/// without stop-machine (the machine) and starting it from its idle park
/// (the booted kernel). A platform shows the ones it ran.
const ENGINES: [&str; 4] = ["classic", "bolt", "bolt-nostop", "bolt-parked"];

/// The stacked bars' stages: Bolt's phases of the critical path, each
/// gathering the engine's own stages (wall time on the controlling CPU),
/// in stacking order. A step is timed inside one of them (a case's
/// `"nested_stages"`), so it is never stacked twice.
const STAGES: [(&str, &[&str]); 9] = [
    ("hotplug lock", &["hotplug-lock", "hotplug-unlock"]),
    ("prepare steps", &["prepare", "finish-deferred"]),
    ("grace period", &["grace-period"]),
    ("stop-machine", &["stop-machine"]),
    ("reader drain, dying CPU alone", &["reader-drain", "dying"]),
    ("power", &["power"]),
    ("starting steps", &["starting"]),
    ("online steps, hand-offs", &["run-on"]),
    (
        "engine bookkeeping",
        &["checks", "snapshot", "outcomes", "commit", "kick-deferred"],
    ),
];
/// What the stages leave of the median latency.
const OTHER: &str = "in no stage";

/// Linux's normal grace period at HZ=1000 on an idle machine, the
/// published mean `bench cpuhp` states beside the machine's (µs).
const LINUX_GRACE_PERIOD_US: f64 = 4_000.0;

/// cpuhp's figures, from `bench all`, the QEMU run and Linux's.
pub fn figures(inputs: &Inputs) -> Vec<Figure> {
    let bench = inputs.bench(Source::BenchAll, "cpuhp");
    let linux = inputs.bench(Source::CpuhpLinux, "cpuhp").ok();
    // `--platform qemu --linux` runs the kernel's engines too: without a
    // kernel document of its own, the kernel's bars come from Linux's.
    let kernel = inputs
        .bench(Source::CpuhpQemu, "cpuhp")
        .ok()
        .or_else(|| linux.filter(|l| l.implementations("").iter().any(|i| i == "classic")));
    // The machine's bars, the kernel's, or both; with neither, why.
    let platforms: Result<Vec<(&str, Bench<'_>)>, Problem> = match (&bench, kernel) {
        (Err(problem), None) => Err(problem.clone()),
        (machine, kernel) => Ok(machine
            .as_ref()
            .ok()
            .map(|b| ("machine", *b))
            .into_iter()
            .chain(kernel.map(|k| ("kernel", k)))
            .collect()),
    };
    // Each other platform's own target, or why it is not in the figure.
    let beside = |source: Source, what: &str| match inputs.bench(source, "cpuhp") {
        Ok(other) => format!(" On the {what}: {}.", other.target("offline")),
        Err(problem) => format!(" No {what}: {problem}."),
    };
    vec![
        Figure::new(
            "cpuhp-stages",
            "cpuhp: where offline and online time goes",
            Source::BenchAll,
            format!(
                "Bolt (ATC 2015)'s breakdown redrawn: the critical path of offlining and \
                 onlining one CPU, stacked by phase (the median µs of each of the engine's \
                 own stages, the steps counted inside them, topped by what they leave of \
                 the median latency), classic beside bolt — and bolt-nostop (no \
                 stop-machine) on both platforms, bolt-parked (started from an idle \
                 park) on the booted kernel; bolt's deferred callbacks run after \
                 the operation returns and are not on it. The cases are offline/1 and \
                 online/1 (an idle machine), or, beside the kernel or Linux, which run \
                 only with tasks on every CPU, offline/1-load and online/1-load.{}{}{}{}",
                target(&bench, "offline"),
                target(&bench, "online"),
                beside(Source::CpuhpQemu, "booted kernel"),
                beside(Source::CpuhpLinux, "Linux anchor's run"),
            ),
            platforms.and_then(|platforms| stages(&platforms, linux.as_ref())),
        ),
        Figure::new(
            "cpuhp-cdf",
            "cpuhp: latency distributions",
            Source::BenchAll,
            "The fraction of operations that finished within a given time (log x), one \
             curve per engine and direction, from every repetition of offlining and \
             onlining one CPU of an idle 4-vCPU machine."
                .to_owned(),
            bench.clone().and_then(|b| distributions(&b)),
        ),
        Figure::new(
            "cpuhp-bulk",
            "cpuhp: bulk operations",
            Source::BenchAll,
            format!(
                "Median µs to offline and online n of a 16-vCPU machine's CPUs in one \
                 operation (log y): classic takes them one after another, bolt together.{}",
                target(&bench, "bulk")
            ),
            bench.clone().and_then(|b| bulk(&b)),
        ),
        Figure::new(
            "cpuhp-mechanisms",
            "cpuhp: the mechanisms hotplug waits on",
            Source::BenchAll,
            format!(
                "Median µs of each mechanism on the idle user-mode machine at HZ=1000 (log \
                 y), beside Linux's published normal grace period (mean 4.0 ms at HZ=1000, \
                 idle).{}{}",
                target(&bench, "grace-period-normal"),
                target(&bench, "grace-period-expedited")
            ),
            bench.and_then(|b| mechanisms(&b, kernel.as_ref())),
        ),
    ]
}

/// The phase of the engine's stage `name`; `None` for a step's.
fn stage_of(name: &str) -> Option<&'static str> {
    STAGES
        .iter()
        .find(|(_, names)| names.contains(&name))
        .map(|(stage, _)| *stage)
}

/// µs per phase of a case: its `"stages"` not nested in another, and
/// what they leave of its `latency_us`. Without `"nested_stages"` (an
/// older document), a step is known by the colon in its name.
fn by_stage(case: &Value) -> Vec<(&'static str, f64)> {
    let nested: Vec<&str> = case["nested_stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let is_nested = |name: &str| {
        if case["nested_stages"].is_array() {
            nested.contains(&name)
        } else {
            name.contains(':')
        }
    };
    let mut sums: Vec<(&'static str, f64)> =
        STAGES.iter().map(|(stage, _)| (*stage, 0.0)).collect();
    let mut path = 0.0;
    for (name, us) in case["stages"].as_object().into_iter().flatten() {
        let (Some(us), false) = (us.as_f64(), is_nested(name)) else {
            continue;
        };
        path += us;
        let stage = stage_of(name).unwrap_or("engine bookkeeping");
        if let Some(sum) = sums.iter_mut().find(|(s, _)| *s == stage) {
            sum.1 += us;
        }
    }
    if let Some(latency) = case["latency_us"].as_f64() {
        sums.push((OTHER, (latency - path).max(0.0)));
    }
    sums
}

fn stages(platforms: &[(&str, Bench<'_>)], linux: Option<&Bench<'_>>) -> Result<Chart, Problem> {
    // The booted kernel and Linux run their single-CPU case only with
    // tasks on every CPU (`-load`): then every platform shows that one, so
    // that the bars compare like with like.
    let suffix = if platforms.iter().any(|(p, _)| *p == "kernel") || linux.is_some() {
        "1-load"
    } else {
        "1"
    };
    let mut bars: Vec<(String, Vec<(&'static str, f64)>)> = Vec::new();
    for (platform, source) in platforms {
        for direction in ["offline", "online"] {
            let name = format!("{direction}/{suffix}");
            for engine in ENGINES {
                if let Some(case) = source.case(&name, engine) {
                    if case["stages"].is_object() {
                        let label = format!("{platform}\n{direction}\n{engine}");
                        bars.push((label, by_stage(case)));
                    }
                }
            }
        }
    }
    if let (true, Some((_, first))) = (bars.is_empty(), platforms.first()) {
        return Err(first.lacks(&format!(
            "offline/{suffix} or online/{suffix} case with \"stages\""
        )));
    }
    let linux_totals: Vec<(String, f64)> = linux
        .into_iter()
        .flat_map(|l| {
            ["offline", "online"].map(|direction| {
                let us = l.figure(&format!("{direction}/{suffix}"), "linux", "latency_us");
                (format!("Linux\n{direction}\n(whole)"), us)
            })
        })
        .filter_map(|(label, us)| Some((label, us?)))
        .collect();
    let mut categories: Vec<String> = bars.iter().map(|(label, _)| label.clone()).collect();
    categories.extend(linux_totals.iter().map(|(label, _)| label.clone()));
    let mut series: Vec<Bars> = STAGES
        .iter()
        .map(|(stage, _)| *stage)
        .chain([OTHER])
        .map(|stage| Bars {
            name: stage.to_owned(),
            values: bars
                .iter()
                .map(|(_, sums)| sums.iter().find(|(s, _)| *s == stage).map(|(_, us)| *us))
                .chain(linux_totals.iter().map(|_| None))
                .collect(),
        })
        // A stage no bar spends time in has no colour to show.
        .filter(|bars| bars.values.iter().flatten().any(|us| *us > 0.0))
        .collect();
    if !linux_totals.is_empty() {
        series.push(Bars {
            name: "Linux, whole operation".to_owned(),
            values: bars
                .iter()
                .map(|_| None)
                .chain(linux_totals.iter().map(|(_, us)| Some(*us)))
                .collect(),
        });
    }
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::linear("µs on the critical path"),
        marks: Marks::Stacked { categories, series },
        note: None,
    })
}

fn distributions(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let mut lines = Vec::new();
    for direction in ["offline", "online"] {
        for engine in ENGINES {
            let Some(case) = bench.case(&format!("{direction}/1"), engine) else {
                continue;
            };
            let mut samples: Vec<f64> = case["latency_samples_us"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect();
            if samples.is_empty() {
                continue;
            }
            samples.sort_by(f64::total_cmp);
            let n = samples.len() as f64;
            let points = samples
                .iter()
                .enumerate()
                .map(|(i, us)| (*us, (i + 1) as f64 / n))
                .collect();
            lines.push(Line {
                name: format!("{direction} {engine}"),
                points,
                steps: true,
            });
        }
    }
    if lines.is_empty() {
        return Err(bench.lacks(
            "\"latency_samples_us\" in offline/1 or online/1 (a hotkern older than the report)",
        ));
    }
    Ok(Chart {
        x: Axis::log("latency, µs"),
        y: Axis::linear("fraction of operations"),
        marks: Marks::Lines(lines),
        note: None,
    })
}

fn bulk(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let mut lines = Vec::new();
    for direction in ["offline", "online"] {
        for engine in ENGINES {
            let points: Vec<(f64, f64)> = bench
                .names(&format!("{direction}/bulk-"))
                .iter()
                .filter_map(|name| {
                    let n = name.rsplit('-').next()?.parse::<f64>().ok()?;
                    Some((n, bench.figure(name, engine, "latency_us")?))
                })
                .collect();
            if !points.is_empty() {
                lines.push(Line {
                    name: format!("{direction} {engine}"),
                    points,
                    steps: false,
                });
            }
        }
    }
    if lines.is_empty() {
        return Err(bench.lacks("offline/bulk-* or online/bulk-* cases"));
    }
    Ok(Chart {
        x: Axis::linear("CPUs in one operation"),
        y: Axis::log("latency, µs"),
        marks: Marks::Lines(lines),
        note: None,
    })
}

fn mechanisms(bench: &Bench<'_>, kernel: Option<&Bench<'_>>) -> Result<Chart, Problem> {
    let names = bench.names("mechanism/");
    if names.is_empty() {
        return Err(bench.lacks("mechanism/* cases"));
    }
    let mut series = vec![Bars {
        name: "user-mode machine".to_owned(),
        values: names
            .iter()
            .map(|name| bench.figure(name, "machine", "latency_us"))
            .collect(),
    }];
    if let Some(kernel) = kernel {
        let values: Vec<Option<f64>> = names
            .iter()
            .map(|name| {
                let implementation = kernel.implementations(name).into_iter().next()?;
                kernel.figure(name, &implementation, "latency_us")
            })
            .collect();
        if values.iter().any(Option::is_some) {
            series.push(Bars {
                name: "booted kernel".to_owned(),
                values,
            });
        }
    }
    series.push(Bars {
        name: "Linux, published".to_owned(),
        values: names
            .iter()
            .map(|name| (name == "mechanism/grace-period-normal").then_some(LINUX_GRACE_PERIOD_US))
            .collect(),
    });
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::log("µs"),
        marks: Marks::Grouped {
            categories: names
                .iter()
                .map(|n| {
                    let name = n.trim_start_matches("mechanism/");
                    // "grace-period-normal" → "grace-period" over "normal".
                    match name.rsplit_once('-') {
                        Some((head, tail)) => format!("{head}\n{tail}"),
                        None => name.to_owned(),
                    }
                })
                .collect(),
            series,
        },
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bars_stack_the_critical_path_once_and_its_remainder() {
        assert_eq!(stage_of("grace-period"), Some("grace period"));
        assert_eq!(stage_of("run-on"), Some("online steps, hand-offs"));
        assert_eq!(stage_of("sched:active"), None);
        let case = serde_json::json!({
            "latency_us": 100.0,
            "stages": {"stop-machine": 40.0, "mm:vmstat": 15.0, "run-on": 30.0,
                       "sched:active": 20.0, "commit": 5.0},
            "nested_stages": ["mm:vmstat", "sched:active"],
        });
        let sums = by_stage(&case);
        assert!(sums.contains(&("stop-machine", 40.0)));
        assert!(sums.contains(&("online steps, hand-offs", 30.0)));
        assert!(sums.contains(&("engine bookkeeping", 5.0)));
        // The nested steps are inside those: the stack is the latency.
        assert!(sums.contains(&(OTHER, 25.0)));
        let total: f64 = sums.iter().map(|(_, us)| us).sum();
        assert_eq!(total, 100.0);
        // An older document: steps are the names with a colon.
        let older = serde_json::json!({"latency_us": 60.0,
                                       "stages": {"power": 50.0, "sched:active": 5.0}});
        assert!(by_stage(&older).contains(&(OTHER, 10.0)));
    }
}
