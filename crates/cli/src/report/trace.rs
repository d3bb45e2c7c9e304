//! trace's figures: what an event, a function_graph pair and a disabled
//! call site cost in hotkern and in every peer recorded in the same run;
//! and the trace.dat reader's events per second beside `trace-cmd report`.

use super::chart::{Axis, Chart, Marks};
use super::figure::{bars_by_impl, target, Figure};
use super::inputs::{Bench, Inputs, Problem, Source};

/// The cases every peer is compared on, in the order of the figure (as
/// `bench trace` orders its table): besides the peers' cases, a cold
/// disabled event, a whole workload with every site off and one call
/// under the `function` tracer, each with hotkern's own baselines.
const CASES: [&str; 7] = [
    "event/disabled",
    "event/disabled-cold",
    "overhead/all-sites-off",
    "event/enabled",
    "function_graph/pair",
    "function/enabled",
    "printk",
];

/// trace's and tracedat's figures, from `bench all`.
pub fn figures(inputs: &Inputs) -> Vec<Figure> {
    let bench = inputs.bench(Source::BenchAll, "trace");
    let tracedat = inputs.bench(Source::BenchAll, "tracedat");
    let tracedat_target = target(&tracedat, "trace-cmd");
    vec![
        Figure::new(
            "trace-costs",
            "trace: cost per event against the peers",
            Source::BenchAll,
            format!(
                "Nanoseconds of the recording thread's CPU time per event, per \
                 function_graph entry + exit pair, per disabled call site (cold: after \
                 the caches were flushed), per lookup of a workload whose every function \
                 has a site, all off (none: built without sites), and per call under the \
                 function tracer (hotkern-list: through the walk shared sites take) (log y), \
                 for hotkern and each peer or baseline that has the case; the note gives \
                 one clock read, the unit of the clock-read targets.{}{}{}{}",
                target(&bench, "disabled"),
                target(&bench, "all-sites-off"),
                target(&bench, "event/enabled"),
                target(&bench, "faster than")
            ),
            bench.and_then(|b| costs(&b)),
        ),
        Figure::new(
            "tracedat-report",
            "tracedat: reading trace.dat beside trace-cmd",
            Source::BenchAll,
            format!(
                "Events per second printed from the same trace.dat by hotkern's reader \
                 and by `trace-cmd report`, wall time.{tracedat_target}"
            ),
            tracedat.and_then(|b| reader(&b)),
        ),
    ]
}

fn costs(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let cases: Vec<&str> = CASES
        .iter()
        .copied()
        .filter(|case| bench.figure(case, "hotkern", "ns_per_op").is_some())
        .collect();
    if cases.is_empty() {
        return Err(bench.lacks("event/* case measured for hotkern"));
    }
    let mut peers: Vec<String> = Vec::new();
    for case in &cases {
        for peer in bench.implementations(case) {
            if !peers.contains(&peer) {
                peers.push(peer);
            }
        }
    }
    let cases: Vec<String> = cases.iter().map(|c| (*c).to_owned()).collect();
    let series = bars_by_impl(bench, &peers, &cases, "ns_per_op");
    let note = bench
        .cases()
        .find(|case| case["name"] == "clock/read")
        .and_then(|case| {
            Some(format!(
                "one clock read ({}): {:.1} ns",
                case["impl"].as_str()?,
                case["ns_per_op"].as_f64()?
            ))
        });
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::log("ns per event, pair, site or call"),
        marks: Marks::Grouped {
            categories: cases.iter().map(|c| c.replacen('/', "\n", 1)).collect(),
            series,
        },
        note,
    })
}

fn reader(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let names = bench.names("report/");
    let readers = bench.implementations("report/");
    if names.is_empty() || readers.is_empty() {
        return Err(bench.lacks("report/* cases"));
    }
    let series = bars_by_impl(bench, &readers, &names, "events_per_s");
    let categories = names
        .iter()
        .map(|name| {
            let first = readers.first().map_or("", String::as_str);
            match bench.figure(name, first, "mb") {
                Some(mb) => format!("{name}\n{mb:.1} MB"),
                None => name.clone(),
            }
        })
        .collect();
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::linear("events per second"),
        marks: Marks::Grouped { categories, series },
        note: None,
    })
}
