//! The page as a whole, from fixtures shaped as `hotkern bench all
//! --json` prints them: every figure drawn with as many series as its
//! data has, and a missing or broken input named where its figure goes.

use serde_json::{json, Value};

use super::chart::{hex, PALETTE};
use super::page::Header;
use super::*;

fn case(name: &str, implementation: &str, figures: Value) -> Value {
    let mut case = json!({"name": name, "impl": implementation, "ops": 10});
    for (key, value) in figures.as_object().unwrap() {
        case[key] = value.clone();
    }
    case
}

fn physmem() -> Value {
    let mut cases = Vec::new();
    for (size, segments) in [("1MB", 32), ("256MB", 8192)] {
        for (i, name) in ["static", "rbtree", "hotkern"].iter().enumerate() {
            let ns = 10.0 * (i + 1) as f64 + segments as f64 / 1000.0;
            cases.push(case(
                &format!("fragmented/{size}"),
                name,
                json!({"ns_per_op": ns, "segments": segments}),
            ));
            cases.push(case("fixed/1M", name, json!({"ns_per_op": ns})));
            cases.push(case(
                &format!("plug-unplug/{}", segments),
                name,
                json!({"ns_per_op": ns}),
            ));
        }
    }
    cases.push(case(
        "churn/idle",
        "hotkern",
        json!({"ns_per_op": 9.0, "cpu_ns_per_op": 8.5, "writer_ops": 0}),
    ));
    cases.push(case(
        "churn/busy",
        "hotkern",
        json!({"ns_per_op": 9.5, "cpu_ns_per_op": 9.0, "writer_ops": 60}),
    ));
    json!({"bench": "physmem", "cases": cases,
           "notes": ["target >= 5x faster than rbtree at 256MB: met (5.8x)",
                     "target churn/busy within 1.25x of churn/idle: missed (1.3x)"]})
}

fn bcache() -> Value {
    let mut cases = Vec::new();
    for name in ["load/usb-stick", "load/nvme", "walk/usb-stick"] {
        for (i, cache) in ["none", "legacy", "freebsd2016", "hotkern"]
            .iter()
            .enumerate()
        {
            let s = 100.0 / (i + 1) as f64;
            cases.push(case(
                name,
                cache,
                json!({"modeled_s": s, "limit_s": 20.0, "device_ops": s * 10.0}),
            ));
        }
    }
    json!({"bench": "bcache", "cases": cases, "notes": []})
}

fn cpuhp() -> Value {
    let mut cases = Vec::new();
    for direction in ["offline", "online"] {
        for (engine, us) in [("classic", 5000.0), ("bolt", 200.0)] {
            for suffix in ["1", "1-load"] {
                cases.push(case(
                    &format!("{direction}/{suffix}"),
                    engine,
                    json!({
                    "latency_us": us,
                    "latency_samples_us": [us, us * 1.1, us * 0.9],
                    "stages": {"grace-period": us / 2.0, "mm:vmstat": us / 4.0, "power": 10.0}}),
                ));
            }
            for n in [1, 15] {
                cases.push(case(
                    &format!("{direction}/bulk-{n}"),
                    engine,
                    json!({"latency_us": us * n as f64}),
                ));
            }
        }
    }
    cases.push(case(
        "mechanism/grace-period-normal",
        "machine",
        json!({"latency_us": 2600.0}),
    ));
    cases.push(case(
        "mechanism/stop-machine",
        "machine",
        json!({"latency_us": 50.0}),
    ));
    json!({"bench": "cpuhp", "cases": cases, "notes": ["target bolt offline faster than classic: 25x (goal >= 20x) met"]})
}

fn trace() -> Value {
    json!({"bench": "trace", "cases": [
        case("clock/read", "tsc", json!({"ns_per_op": 9.5})),
        case("event/disabled", "hotkern", json!({"ns_per_op": 0.17})),
        case("event/disabled", "lttng-ust", json!({"ns_per_op": 0.18})),
        case("event/enabled", "hotkern", json!({"ns_per_op": 14.0})),
        case("event/enabled", "tracing-fmt", json!({"ns_per_op": 780.0})),
        case("overhead/all-sites-off", "hotkern", json!({"ns_per_op": 7.8})),
        case("overhead/all-sites-off", "none", json!({"ns_per_op": 7.7})),
        case("function/enabled", "hotkern", json!({"ns_per_op": 27.0})),
        case("function/enabled", "hotkern-list", json!({"ns_per_op": 28.0})),
    ], "notes": []})
}

fn tracedat() -> Value {
    json!({"bench": "tracedat", "cases": [
        case("report/large", "hotkern", json!({"events_per_s": 1.9e6, "mb": 4.4})),
        case("report/large", "trace-cmd", json!({"events_per_s": 4.7e5, "mb": 4.4})),
    ], "notes": []})
}

fn all() -> Value {
    json!([physmem(), bcache(), trace(), cpuhp(), tracedat()])
}

/// `(id, data-series)` of each drawn figure and the ids without data.
fn figures(html: &str) -> (Vec<(String, usize)>, Vec<String>) {
    let mut drawn = Vec::new();
    let mut empty = Vec::new();
    for part in html.split("<figure class=\"figure").skip(1) {
        let id = part
            .split("id=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned();
        if part.starts_with(" nodata") {
            empty.push(id);
        } else {
            let series = part
                .split("data-series=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            drawn.push((id, series.parse().unwrap()));
        }
    }
    (drawn, empty)
}

/// The distinct palette colours painted in figure `id`'s SVG.
fn colours(html: &str, id: &str) -> usize {
    let svg = svg_of(html, id);
    (0..PALETTE.len())
        .filter(|&i| {
            let colour = hex(i);
            svg.contains(&format!("fill=\"{colour}\""))
                || svg.contains(&format!("stroke=\"{colour}\""))
        })
        .count()
}

#[test]
fn every_figure_of_bench_all_is_drawn_with_each_series_of_its_data() {
    let inputs = Inputs::from_documents([(Source::BenchAll, all())]);
    let html = render(&inputs, &Header::default());
    let (drawn, empty) = figures(&html);
    let expected = [
        ("physmem-lookup", 3),
        ("physmem-plug-unplug", 3),
        ("physmem-churn", 2),
        ("bcache-load", 5),
        ("bcache-ops", 4),
        ("bcache-walk", 5),
        // grace period, power, mm (the fixture's steps' stages).
        ("cpuhp-stages", 3),
        ("cpuhp-cdf", 4),
        ("cpuhp-bulk", 4),
        ("cpuhp-mechanisms", 2),
        // hotkern, lttng-ust, tracing-fmt, and the baselines none and
        // hotkern-list of overhead/all-sites-off and function/enabled.
        ("trace-costs", 5),
        ("tracedat-report", 2),
    ];
    let expected: Vec<(String, usize)> = expected
        .iter()
        .map(|(id, n)| ((*id).to_owned(), *n))
        .collect();
    assert_eq!(drawn, expected);
    for (id, series) in &drawn {
        assert_eq!(colours(&html, id), *series, "{id}: colours painted");
    }
    // Only the inputs bench all does not write have no data.
    assert_eq!(empty, ["bcache-qemu", "vmem-resize", "vmem-parts"]);
    assert!(html.contains("Targets: 2 met, 1 missed"));
    assert!(html.contains("uvm_hotplug paper: rbtree 5.6 % slower than static"));
}

/// The text of figure `id`'s SVG.
fn svg_of<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html.find(&format!("id=\"{id}\"")).unwrap();
    let svg = &html[start..];
    &svg[svg.find("<svg").unwrap()..svg.find("</svg>").unwrap()]
}

#[test]
fn the_trace_figure_labels_the_sites_off_workload_and_the_function_tracer() {
    let inputs = Inputs::from_documents([(Source::BenchAll, all())]);
    let html = render(&inputs, &Header::default());
    let svg = svg_of(&html, "trace-costs");
    // Categories are drawn as "group\ncase", one text element a line.
    let line = |text: &str| format!(">\n{text}\n<");
    for label in ["overhead", "all-sites-off", "function"] {
        assert!(
            svg.contains(&line(label)),
            "{label} missing from trace-costs"
        );
    }
    // A case no document measured (event/disabled-cold here) is left out.
    assert!(!svg.contains(&line("disabled-cold")));
}

#[test]
fn missing_or_broken_inputs_name_their_figures_and_why() {
    let html = render(&Inputs::from_documents([]), &Header::default());
    let (drawn, empty) = figures(&html);
    assert!(drawn.is_empty());
    assert_eq!(empty.len(), 15);
    assert!(html
        .contains("bench-all.json was not given (it is what `hotkern bench all --json` prints)"));

    let mut partial = all();
    partial
        .as_array_mut()
        .unwrap()
        .retain(|d| d["bench"] != "cpuhp");
    partial[0]["cases"] = json!("not a list");
    let html = render(
        &Inputs::from_documents([(Source::BenchAll, partial)]),
        &Header::default(),
    );
    let (_, empty) = figures(&html);
    assert!(empty.iter().any(|id| id == "physmem-lookup"));
    assert!(empty.iter().filter(|id| id.starts_with("cpuhp-")).count() == 4);
    assert!(html.contains("bench-all.json has no &quot;cases&quot; in &quot;physmem&quot;"));
    assert!(html.contains("bench-all.json has no &quot;cpuhp&quot; document"));
    assert!(!empty.iter().any(|id| id.starts_with("bcache-load")));
}

#[test]
fn a_failed_benchmark_and_a_boot_document_are_shown() {
    let failed = json!([{"bench": "trace", "error": "lttng-sessiond: not found", "cases": []}]);
    let boot = boot_document();
    let inputs = Inputs::from_documents([(Source::BenchAll, failed), (Source::Boot, boot)]);
    let html = render(&inputs, &Header::default());
    assert!(html.contains("bench trace did not run (bench-all.json): lttng-sessiond: not found"));
    let (drawn, _) = figures(&html);
    assert!(drawn.contains(&("vmem-resize".to_owned(), 2)));
    assert!(drawn.contains(&("vmem-parts".to_owned(), 4)));
    assert_eq!(colours(&html, "vmem-parts"), 4);
    assert!(!html.contains("No Linux bars"));
    let mut alone = boot_document();
    alone["linux"] = Value::Null;
    let html = render(
        &Inputs::from_documents([(Source::Boot, alone)]),
        &Header::default(),
    );
    assert!(html.contains("No Linux bars: boot.json was written without --linux"));
}

/// A `hotkern boot --hotplug … --resize … --linux --json` document.
fn boot_document() -> Value {
    json!({
        "resizes": [{"requested_mib": 128, "plugged_mib": 128, "latency_ms": 3.0},
                    {"requested_mib": 256, "plugged_mib": 200, "latency_ms": null}],
        "linux": {"resizes": [{"requested_mib": 128, "latency_ms": 5.0}]},
        "guest": {"vmem": {"per_128mib_ns": {"device": 1000, "physmem": 500, "tables": 200, "allocator": 100}}},
    })
}

/// The booted kernel's document: its cases run with tasks on every CPU.
fn kernel_loaded() -> Value {
    let mut kernel = cpuhp();
    kernel["cases"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["name"].as_str().unwrap().ends_with("1-load"));
    kernel
}

#[test]
fn the_kernel_and_linux_stand_beside_the_machine_on_their_loaded_case() {
    let kernel = kernel_loaded();
    let linux = json!({"bench": "cpuhp", "cases": [
        case("offline/1-load", "linux", json!({"latency_us": 9000.0})),
        case("online/1-load", "linux", json!({"latency_us": 7000.0}))]});
    let inputs = Inputs::from_documents([
        (Source::BenchAll, all()),
        (Source::CpuhpQemu, kernel),
        (Source::CpuhpLinux, linux),
    ]);
    let html = render(&inputs, &Header::default());
    let (drawn, _) = figures(&html);
    // Three stages and Linux's whole operation.
    assert!(drawn.contains(&("cpuhp-stages".to_owned(), 4)));
    let start = html.find("id=\"cpuhp-stages\"").unwrap();
    let svg = &html[start..start + html[start..].find("</svg>").unwrap()];
    // Machine and kernel: offline and online, classic and bolt; Linux twice.
    assert_eq!(svg.matches(">\nmachine\n<").count(), 4);
    assert_eq!(svg.matches(">\nkernel\n<").count(), 4);
    assert_eq!(svg.matches(">\nLinux\n<").count(), 2);
    assert!(svg.contains(">\n9000 µs\n<"), "Linux's total above its bar");
}

#[test]
fn the_kernel_alone_or_within_linuxs_document_still_has_its_bars() {
    let mut kernel = kernel_loaded();
    let labels = |inputs: &Inputs| {
        let html = render(inputs, &Header::default());
        let start = html.find("id=\"cpuhp-stages\"").unwrap();
        let svg = &html[start..start + html[start..].find("</svg>").unwrap_or(0)];
        ["machine", "kernel", "Linux"].map(|l| svg.matches(&format!(">\n{l}\n<")).count())
    };
    let alone = Inputs::from_documents([(Source::CpuhpQemu, kernel.clone())]);
    assert_eq!(labels(&alone), [0, 4, 0]);
    // `bench cpuhp --platform qemu --linux`: the kernel's cases and Linux's.
    kernel["cases"].as_array_mut().unwrap().push(case(
        "offline/1-load",
        "linux",
        json!({"latency_us": 9000.0}),
    ));
    let linux = Inputs::from_documents([(Source::CpuhpLinux, kernel)]);
    assert_eq!(labels(&linux), [0, 4, 1]);
}

#[test]
fn the_caches_under_qemu_are_drawn_in_guest_seconds() {
    let mut qemu = bcache();
    for case in qemu["cases"].as_array_mut().unwrap() {
        case["guest_s"] = case["modeled_s"].take();
    }
    let inputs = Inputs::from_documents([(Source::BenchAll, all()), (Source::BcacheQemu, qemu)]);
    let html = render(&inputs, &Header::default());
    assert!(figures(&html).0.contains(&("bcache-qemu".to_owned(), 5)));
    let start = html.find("id=\"bcache-qemu\"").unwrap();
    assert!(html[start..].contains(">\nguest seconds\n<"));
    let start = html.find("id=\"bcache-load\"").unwrap();
    assert!(html[start..].contains(">\nmodeled device seconds\n<"));
}

/// `bench … --html`'s page has only the sections of the benchmarks run.
#[test]
fn a_bench_page_has_only_its_sections() {
    let dir = std::env::temp_dir().join(format!("hotkern-report-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("physmem.html");
    write_bench(vec![physmem()], &BenchOptions::default(), &page).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    let (drawn, empty) = figures(&html);
    assert_eq!(drawn.len(), 3);
    assert!(empty.is_empty(), "{empty:?}");
    assert!(html.contains("this run of hotkern bench physmem (bench-all.json)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dates_are_civil_and_data_sits_beside_the_page() {
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(11_016), (2000, 2, 29));
    assert_eq!(civil(20_454), (2026, 1, 1));
    assert_eq!(data_dir(Path::new("out/r.html")), Path::new("out/r-data"));
}
