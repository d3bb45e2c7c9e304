//! `hotkern bench cpuhp --platform qemu`: the same engines on the x86-64
//! kernel's real (virtual) CPUs under QEMU. The kernel times every
//! operation with its own TSC and reports the cases in this benchmark's
//! shape; this side boots it, refuses a run whose invariants broke, and
//! adds the ratios and notes.

use serde_json::Value;

use super::super::{Case, Report};
use super::accounting;
use crate::kernel::{self, BootArgs};
use crate::qemu::Architecture;

/// vCPUs of the measured guest: one boot CPU and three to take down.
const CPUS: u32 = 4;

/// Boots the kernel built for `arch` with its tick at `hz` and turns its
/// hotplug run into a report.
pub fn run(hz: u32, arch: Architecture) -> Result<Report, String> {
    let args = BootArgs {
        arch,
        ..BootArgs::scenario(CPUS).with_hz(hz)
    };
    let run = kernel::run_quietly(&args)?;
    if !run.outcome.is_success() {
        return Err(format!(
            "the kernel did not finish: {}",
            run.failure_message()
        ));
    }
    let document = run.to_json();
    let mut report = from_document(&document)?;
    for case in &mut report.cases {
        case.extra.push(("hz".to_owned(), u64::from(hz).into()));
        case.extra.push(("arch".to_owned(), arch.name().into()));
    }
    Ok(report)
}

/// The kernel issue's targets, read from the cases: bolt's speed-up over
/// classic for one CPU, and bolt's bulk offline of every application
/// processor against one.
fn targets(report: &Report) -> Vec<String> {
    let latency = |name: &str, engine: &str| {
        report
            .case(name, engine)
            .and_then(|case| case.figure("latency_us"))
            .filter(|us| *us > 0.0)
    };
    let ratio = |top: Option<f64>, bottom: Option<f64>| Some(top? / bottom?);
    let bulk = report
        .cases
        .iter()
        .map(|case| case.name.as_str())
        .find(|name| name.starts_with("offline/bulk-"))
        .unwrap_or("offline/bulk");
    let verdict = |value: Option<f64>, goal: f64, above: bool| match value {
        Some(v) => format!(
            "{v:.2}x (goal {} {goal}x) {}",
            if above { ">=" } else { "<=" },
            if (above && v >= goal) || (!above && v <= goal) {
                "met"
            } else {
                "missed"
            }
        ),
        None => "not measured".to_owned(),
    };
    vec![
        format!(
            "target bolt offline faster than classic: {}",
            verdict(
                ratio(
                    latency("offline/1-load", "classic"),
                    latency("offline/1-load", "bolt")
                ),
                20.0,
                true
            )
        ),
        format!(
            "target bolt online faster than classic: {}",
            verdict(
                ratio(
                    latency("online/1-load", "classic"),
                    latency("online/1-load", "bolt")
                ),
                10.0,
                true
            )
        ),
        format!(
            "target bolt-parked online/1-load (a CPU parked idle, woken by IPI) <= 200 us: {}",
            match latency("online/1-load", "bolt-parked") {
                Some(us) => format!("{us:.0} us {}", if us <= 200.0 { "met" } else { "missed" }),
                None => "not measured".to_owned(),
            }
        ),
        format!(
            "target bolt {bulk} vs offline/1-load: {}",
            verdict(
                ratio(latency(bulk, "bolt"), latency("offline/1-load", "bolt")),
                2.0,
                false
            )
        ),
    ]
}

/// Bolt's stop-machine against what bolt-nostop does instead (drain the
/// hotplug readers, run the dying steps on the dying CPU alone), from
/// the kernel's stage medians of `offline/1-load`.
fn nostop_note(report: &Report) -> Option<String> {
    let stage = |engine: &str, name: &str| {
        let case = report.case("offline/1-load", engine)?;
        let stages = case.extra.iter().find(|(key, _)| key == "stages")?;
        stages.1[name].as_f64()
    };
    let latency = |engine: &str| report.case("offline/1-load", engine)?.figure("latency_us");
    Some(format!(
        "offline/1-load without a stop-machine: bolt's stop-machine {:.1} us of {:.1} us; \
         bolt-nostop's reader-drain {:.1} us and dying {:.1} us of {:.1} us (stage medians)",
        stage("bolt", "stop-machine")?,
        latency("bolt")?,
        stage("bolt-nostop", "reader-drain")?,
        stage("bolt-nostop", "dying")?,
        latency("bolt-nostop")?,
    ))
}

/// The report for one `hotkern boot --json` document.
fn from_document(document: &Value) -> Result<Report, String> {
    if document["invariants_hold"] != Value::Bool(true) || document["tasks_lost"] != 0 {
        return Err(format!(
            "the kernel's hotplug run broke its invariants: invariants_hold {}, tasks_lost {}",
            document["invariants_hold"], document["tasks_lost"]
        ));
    }
    let mut report = Report::new("cpuhp");
    report.table_figures = vec!["latency_us", "tasks_lost"];
    let cases = document["cases"].as_array().cloned().unwrap_or_default();
    if cases.is_empty() {
        return Err("the kernel ran no hotplug cases".into());
    }
    for case in &cases {
        let (Some(name), Some(engine), Some(ops)) = (
            case["name"].as_str(),
            case["impl"].as_str(),
            case["ops"].as_u64(),
        ) else {
            return Err(format!("a hotplug case without name, impl or ops: {case}"));
        };
        let mut out = Case::new(name, engine, ops);
        for key in [
            "latency_us",
            "tasks_lost",
            "stages",
            "path_us",
            "unaccounted_us",
            "nested_stages",
        ] {
            if !case[key].is_null() {
                out = out.with(key, case[key].clone());
            }
        }
        report.cases.push(out);
    }
    let mut names: Vec<String> = report.cases.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names.dedup();
    for name in &names {
        let stem = name.replace('/', "-");
        report.ratio(
            &format!("{stem}/classic_over_bolt"),
            name,
            "latency_us",
            "classic",
            "bolt",
        );
        // Linux's design against bolt without a stop-machine, and what
        // leaving the stop-machine out gains bolt.
        report.ratio(
            &format!("{stem}/classic_over_bolt-nostop"),
            name,
            "latency_us",
            "classic",
            "bolt-nostop",
        );
        report.ratio(
            &format!("{stem}/bolt_over_bolt-nostop"),
            name,
            "latency_us",
            "bolt",
            "bolt-nostop",
        );
        // The power mechanism's gain alone: the same engine, its CPUs
        // parked idle rather than off.
        report.ratio(
            &format!("{stem}/bolt_over_bolt-parked"),
            name,
            "latency_us",
            "bolt",
            "bolt-parked",
        );
    }
    for note in targets(&report) {
        report.notes.push(note);
    }
    report.notes.extend(nostop_note(&report));
    report.notes.extend(accounting::notes(&report));
    let guest = &document["guest"];
    let steps = guest["hotplug"]["steps"].as_array().map_or(0, Vec::len);
    let deferrable = guest["hotplug"]["steps"].as_array().map_or(0, |steps| {
        steps.iter().filter(|s| s["class"] == "Deferrable").count()
    });
    // The kernel's document says which architecture ran; the clock and the
    // power mechanism are that architecture's.
    let (clock, power, wake_up) = match document["arch"].as_str() {
        Some("aarch64") => (
            "generic timer",
            "a PSCI CPU_ON per CPU (CPU_OFF to take it down)",
            "SGI",
        ),
        _ => ("TSC", "an INIT-SIPI-SIPI per AP", "IPI"),
    };
    report.notes.push(format!(
        "platform qemu: {CPUS} vCPUs under {}, timed by the kernel's own {clock} ({} MHz); \
         {steps} kernel steps, {deferrable} of them deferrable (the machine has 16); power is \
         {power}, sent to a bulk operation's CPUs all at once (bolt-parked: bolt with offline \
         CPUs parked idle, started by a wake-up {wake_up})",
        document["accel"].as_str().unwrap_or("?").to_uppercase(),
        guest["tsc_mhz"],
    ));
    report.notes.push(format!(
        "tasks: {} issued, {} completed once, {} slices; they run on every CPU through every \
         operation (-load), and were migrated {} times off dying CPUs",
        guest["hotplug"]["tasks"]["issued"],
        guest["hotplug"]["tasks"]["completed"],
        guest["hotplug"]["tasks"]["slices"],
        guest["hotplug"]["tasks"]["migrated"],
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(hold: bool, lost: u64) -> Value {
        json!({
            "accel": "tcg",
            "invariants_hold": hold,
            "tasks_lost": lost,
            "cases": [
                {"name": "offline/1-load", "impl": "classic", "ops": 15, "latency_us": 450.0,
                 "tasks_lost": lost, "stages": {"stop-machine": 400.0}},
                {"name": "offline/1-load", "impl": "bolt", "ops": 15, "latency_us": 225.0,
                 "tasks_lost": lost, "stages": {"stop-machine": 150.0}},
                {"name": "offline/bulk-3-load", "impl": "bolt", "ops": 5, "latency_us": 300.0,
                 "tasks_lost": lost},
            ],
            "guest": {"tsc_mhz": 2596, "hotplug": {"steps": [{"class": "Deferrable"}, {}, {}, {}],
                      "tasks": {"issued": 48, "completed": 48, "slices": 900, "migrated": 12}}}
        })
    }

    #[test]
    fn cases_keep_their_names_and_figures_and_get_ratios() {
        let report = from_document(&document(true, 0)).unwrap();
        assert_eq!(report.cases.len(), 3);
        let bolt = report.case("offline/1-load", "bolt").unwrap();
        assert_eq!((bolt.ops, bolt.figure("latency_us")), (15, Some(225.0)));
        assert_eq!(report.ratios["offline-1-load/classic_over_bolt"], 2.0);
        assert_eq!(
            report.to_json()["cases"][0]["stages"]["stop-machine"],
            400.0
        );
        let notes = report.notes.join("\n");
        assert!(notes.contains("4 vCPUs under TCG"), "{notes}");
        assert!(notes.contains("own TSC (2596 MHz)") && notes.contains("INIT-SIPI-SIPI"));
        assert!(notes.contains("4 kernel steps, 1 of them deferrable"));
        assert!(
            notes.contains("target bolt offline faster than classic: 2.00x (goal >= 20x) missed")
        );
        assert!(notes.contains("target bolt online faster than classic: not measured"));
        // 300 µs for three CPUs against 225 for one.
        assert!(notes
            .contains("target bolt offline/bulk-3-load vs offline/1-load: 1.33x (goal <= 2x) met"));
    }

    #[test]
    fn an_arm64_run_names_its_own_clock_and_power_mechanism() {
        let mut arm = document(true, 0);
        arm["arch"] = "aarch64".into();
        arm["guest"]["tsc_mhz"] = 62.into();
        let notes = from_document(&arm).unwrap().notes.join("\n");
        assert!(notes.contains("own generic timer (62 MHz)"), "{notes}");
        assert!(notes.contains("a PSCI CPU_ON per CPU"), "{notes}");
        assert!(notes.contains("wake-up SGI"), "{notes}");
        assert!(!notes.contains("TSC") && !notes.contains("SIPI"), "{notes}");
    }

    #[test]
    fn parked_starts_are_reported_apart_from_cold_ones() {
        let mut parked = document(true, 0);
        let cases = parked["cases"].as_array_mut().unwrap();
        cases.push(json!({"name": "online/1-load", "impl": "bolt", "ops": 15,
                          "latency_us": 400.0, "unaccounted_us": 40.0, "tasks_lost": 0}));
        cases.push(
            json!({"name": "online/1-load", "impl": "bolt-parked", "ops": 15,
                          "latency_us": 160.0, "unaccounted_us": 8.0, "tasks_lost": 0}),
        );
        let report = from_document(&parked).unwrap();
        assert_eq!(report.ratios["online-1-load/bolt_over_bolt-parked"], 2.5);
        // Classic is not parked: no ratio of classic over the parked cases.
        assert!(!report
            .ratios
            .keys()
            .any(|key| key.contains("classic_over_bolt-parked")));
        let notes = report.notes.join("\n");
        assert!(
            notes.contains(
                "target bolt-parked online/1-load: stages account for 95.0% of the latency (8.0 us"
            ),
            "{notes}"
        );
        assert!(notes.contains("target bolt online/1-load: stages account for 90.0%"));
        assert!(
            notes.contains("online/1-load (a CPU parked idle, woken by IPI) <= 200 us: 160 us met"),
            "{notes}"
        );
    }

    #[test]
    fn bolt_nostop_gets_its_ratios_and_its_stages_beside_the_stop_machine() {
        let mut nostop = document(true, 0);
        let cases = nostop["cases"].as_array_mut().unwrap();
        cases.push(
            json!({"name": "offline/1-load", "impl": "bolt-nostop", "ops": 15,
                          "latency_us": 90.0, "tasks_lost": 0,
                          "stages": {"reader-drain": 0.5, "dying": 20.0}}),
        );
        let report = from_document(&nostop).unwrap();
        assert_eq!(
            report.ratios["offline-1-load/classic_over_bolt-nostop"],
            5.0
        );
        assert_eq!(report.ratios["offline-1-load/bolt_over_bolt-nostop"], 2.5);
        let notes = report.notes.join("\n");
        assert!(
            notes.contains(
                "bolt's stop-machine 150.0 us of 225.0 us; bolt-nostop's reader-drain 0.5 us \
                 and dying 20.0 us of 90.0 us"
            ),
            "{notes}"
        );
        // Without bolt-nostop's case there is neither ratio nor note.
        let report = from_document(&document(true, 0)).unwrap();
        assert!(!report.ratios.keys().any(|key| key.contains("nostop")));
        assert!(!report.notes.join("\n").contains("reader-drain"));
    }

    #[test]
    fn a_run_that_broke_its_invariants_or_lost_a_task_is_refused() {
        assert!(from_document(&document(false, 0))
            .unwrap_err()
            .contains("invariants"));
        assert!(from_document(&document(true, 1)).is_err());
        let mut empty = document(true, 0);
        empty["cases"] = json!([]);
        assert!(from_document(&empty)
            .unwrap_err()
            .contains("no hotplug cases"));
    }
}
