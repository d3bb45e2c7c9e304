//! physmem's figures: the uvm_hotplug paper's (Raju and Mathew, 2017)
//! lookup cost against fragmentation, the write side's plug+unplug cost,
//! and lookups while a writer churns.

use super::chart::{Axis, Bars, Chart, Line, Marks};
use super::figure::{target, Figure};
use super::inputs::{Bench, Inputs, Problem, Source};

const IMPLS: [&str; 3] = ["static", "rbtree", "hotkern"];

/// The paper's finding the lookup figure marks: docs/RESULTS.md's reading of its
/// fixed-set load test.
const PAPER: &str = "uvm_hotplug paper: rbtree 5.6 % slower than static";

/// physmem's figures, from `bench all`.
pub fn figures(inputs: &Inputs) -> Vec<Figure> {
    let bench = inputs.bench(Source::BenchAll, "physmem");
    vec![
        Figure::new(
            "physmem-lookup",
            "physmem: lookup cost against fragmentation",
            Source::BenchAll,
            format!(
                "Nanoseconds per random PFN lookup against the number of segments (log x), \
                 one fragmented set per point, for NetBSD's static array, its rbtree and \
                 hotkern — the uvm_hotplug paper's load test.{}",
                target(&bench, "256MB")
            ),
            bench.clone().and_then(|b| lookup(&b)),
        ),
        Figure::new(
            "physmem-plug-unplug",
            "physmem: plug + unplug cost",
            Source::BenchAll,
            "Nanoseconds per plug+unplug pair against the segments already present (log \
             x, log y): the price hotkern pays on the write side for lock-free lookups, \
             which rebuild and publish the sections a write touches."
                .to_owned(),
            bench.clone().and_then(|b| plug_unplug(&b)),
        ),
        Figure::new(
            "physmem-churn",
            "physmem: lookups while a writer churns",
            Source::BenchAll,
            format!(
                "hotkern's lookups with no writer (idle) and with a writer plugging and \
                 unplugging all the while (busy): wall time and the reader's CPU time per \
                 lookup.{}",
                target(&bench, "churn")
            ),
            bench.and_then(|b| churn(&b)),
        ),
    ]
}

/// `32`, `1K`, `8K`, `1M` as numbers.
fn count(label: &str) -> Option<f64> {
    let (digits, scale) = match label.as_bytes().last()? {
        b'K' => (&label[..label.len() - 1], 1e3),
        b'M' => (&label[..label.len() - 1], 1e6),
        _ => (label, 1.0),
    };
    digits.parse::<f64>().ok().map(|n| n * scale)
}

/// One line per implementation with a case starting with `prefix`: ns per
/// operation against `x` of (case, implementation).
fn lines(bench: &Bench<'_>, prefix: &str, x: impl Fn(&str, &str) -> Option<f64>) -> Vec<Line> {
    let names = bench.names(prefix);
    IMPLS
        .iter()
        .map(|implementation| Line {
            name: (*implementation).to_owned(),
            points: names
                .iter()
                .filter_map(|name| {
                    let ns = bench.figure(name, implementation, "ns_per_op")?;
                    Some((x(name, implementation)?, ns))
                })
                .collect(),
            steps: false,
        })
        .filter(|line| !line.points.is_empty())
        .collect()
}

fn lookup(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let lines = lines(bench, "fragmented/", |name, implementation| {
        bench.figure(name, implementation, "segments")
    });
    if lines.is_empty() {
        return Err(bench.lacks("fragmented/* cases with segments and ns_per_op"));
    }
    // This run's rbtree against static on the fixed set, beside the paper's.
    let fixed = bench.names("fixed/").pop();
    let ratio = fixed.as_deref().and_then(|name| {
        let rbtree = bench.figure(name, "rbtree", "ns_per_op")?;
        Some((name, rbtree / bench.figure(name, "static", "ns_per_op")?))
    });
    let note = match ratio {
        Some((name, ratio)) => format!("{PAPER}; here {:+.1} % on {name}", (ratio - 1.0) * 100.0),
        None => PAPER.to_owned(),
    };
    Ok(Chart {
        x: Axis::log("segments"),
        y: Axis::linear("ns per lookup"),
        marks: Marks::Lines(lines),
        note: Some(note),
    })
}

fn plug_unplug(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let lines = lines(bench, "plug-unplug/", |name, _| {
        count(name.strip_prefix("plug-unplug/")?)
    });
    if lines.is_empty() {
        return Err(bench.lacks("plug-unplug/* cases"));
    }
    Ok(Chart {
        x: Axis::log("segments present"),
        y: Axis::log("ns per plug + unplug"),
        marks: Marks::Lines(lines),
        note: None,
    })
}

fn churn(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let names = bench.names("churn/");
    if names.is_empty() {
        return Err(bench.lacks("churn/* cases"));
    }
    let series = [
        ("wall time", "ns_per_op"),
        ("reader CPU time", "cpu_ns_per_op"),
    ]
    .iter()
    .map(|(label, key)| Bars {
        name: (*label).to_owned(),
        values: names
            .iter()
            .map(|name| bench.figure(name, "hotkern", key))
            .collect(),
    })
    .collect();
    let categories = names
        .iter()
        .map(|name| {
            let writes = bench.figure(name, "hotkern", "writer_ops").unwrap_or(0.0);
            format!("{}\n{writes} writes", name.trim_start_matches("churn/"))
        })
        .collect();
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::linear("ns per lookup"),
        marks: Marks::Grouped { categories, series },
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_labels_read_as_counts() {
        assert_eq!(count("32"), Some(32.0));
        assert_eq!(count("8K"), Some(8000.0));
        assert_eq!(count("1M"), Some(1e6));
        assert_eq!(count("x"), None);
    }
}
