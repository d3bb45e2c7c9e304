//! The kernel's CPU hotplug run (`"hotplug"` in its summary): the cases as
//! table rows, classic beside bolt, and the figures `hotkern boot --json`
//! lifts to its top level (`invariants_hold`, `tasks_lost`, `cases`).

use serde_json::Value;

/// The top-level figures: whether the kernel's invariants held, tasks
/// lost, and the cases in the benchmark shape. `None` and an empty list
/// when the kernel ran no hotplug (one CPU, or no summary).
pub fn top_level(summary: Option<&Value>) -> (Option<bool>, Option<u64>, Value) {
    let hotplug = summary.map(|summary| &summary["hotplug"]);
    let hotplug = hotplug.filter(|hotplug| hotplug.is_object());
    match hotplug {
        Some(hotplug) => (
            hotplug["invariants_hold"].as_bool(),
            hotplug["tasks"]["lost"].as_u64(),
            match &hotplug["cases"] {
                Value::Array(cases) => Value::Array(cases.clone()),
                _ => Value::Array(Vec::new()),
            },
        ),
        None => (None, None, Value::Array(Vec::new())),
    }
}

/// One case's median latency as "12.3 ms" or "456.7 µs".
fn latency(case: &Value) -> String {
    match case["latency_us"].as_f64() {
        Some(us) if us >= 1000.0 => format!("{:.1} ms", us / 1000.0),
        Some(us) => format!("{us:.1} µs"),
        None => "-".to_owned(),
    }
}

/// Table rows: one per case name with each engine's median, then the
/// tasks' books and the verdict.
pub fn rows(hotplug: &Value, row: &mut impl FnMut(&str, String)) {
    let Some(cases) = hotplug["cases"].as_array() else {
        return;
    };
    // Each name once, in the order the kernel ran them (classic's cases
    // come before bolt's).
    let mut names: Vec<&str> = Vec::new();
    for name in cases.iter().filter_map(|c| c["name"].as_str()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut first = true;
    for name in names {
        let of_name: Vec<&Value> = cases.iter().filter(|c| c["name"] == name).collect();
        let engines: Vec<String> = of_name
            .iter()
            .map(|case| format!("{} {}", case["impl"].as_str().unwrap_or("?"), latency(case)))
            .collect();
        let ops = of_name
            .first()
            .and_then(|case| case["ops"].as_u64())
            .unwrap_or(0);
        row(
            if first { "hotplug" } else { "" },
            format!("{name:<14} {} (median of {ops})", engines.join(", ")),
        );
        first = false;
    }
    let tasks = &hotplug["tasks"];
    let count = |key: &str| tasks[key].as_u64().unwrap_or(0);
    row(
        "tasks",
        format!(
            "{} issued, {} completed once, {} lost, {} twice; {} slices, {} on offline CPUs, {} migrated",
            count("issued"),
            count("completed"),
            count("lost"),
            count("twice"),
            count("slices"),
            count("ran_offline"),
            count("migrated"),
        ),
    );
    row(
        "invariants",
        match hotplug["invariants_hold"].as_bool() {
            Some(true) => format!(
                "hold after every operation ({} grace periods)",
                hotplug["grace_periods"].as_u64().unwrap_or(0)
            ),
            Some(false) => format!(
                "BROKEN: {} violations, {} errors, {} platform failures",
                hotplug["violations"].as_u64().unwrap_or(0),
                hotplug["errors"].as_u64().unwrap_or(0),
                hotplug["platform_failures"].as_u64().unwrap_or(0),
            ),
            None => "not reported".to_owned(),
        },
    );
    // Each failure by name: an operation's error or a platform failure
    // outside one (a CPU late to report dead, a stalled grace period).
    for failure in hotplug["failures"].as_array().into_iter().flatten() {
        row("failed", failure.as_str().unwrap_or("?").to_owned());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample(hold: bool) -> Value {
        json!({"hotplug": {
            "cases": [
                {"name": "offline/1", "impl": "classic", "ops": 15, "latency_us": 7534.2, "tasks_lost": 0},
                {"name": "online/bulk-3", "impl": "classic", "ops": 5, "latency_us": 31370.0, "tasks_lost": 0},
                {"name": "offline/1", "impl": "bolt", "ops": 15, "latency_us": 812.5, "tasks_lost": 0},
            ],
            "tasks": {"issued": 48, "completed": 47, "twice": 0, "lost": 1, "slices": 1868,
                      "ran_offline": 0, "migrated": 1752},
            "violations": 2, "errors": 0, "platform_failures": 1, "grace_periods": 50,
            "failures": if hold { json!([]) } else {
                json!(["bolt offline/1-load: power-off failed for cpu3: did not answer in time"])
            },
            "invariants_hold": hold
        }})
    }

    fn table(summary: &Value) -> String {
        let mut out = String::new();
        rows(&summary["hotplug"], &mut |name, value| {
            out.push_str(&format!("{name:<10}|{value}\n"))
        });
        out
    }

    #[test]
    fn rows_put_the_engines_side_by_side_and_tell_the_books() {
        let out = table(&sample(true));
        assert!(
            out.contains("hotplug   |offline/1      classic 7.5 ms, bolt 812.5 µs (median of 15)"),
            "{out}"
        );
        assert!(out.contains("          |online/bulk-3  classic 31.4 ms (median of 5)"));
        assert_eq!(
            out.matches("offline/1").count(),
            1,
            "one row per case: {out}"
        );
        assert!(out.contains(
            "tasks     |48 issued, 47 completed once, 1 lost, 0 twice; 1868 slices, 0 on offline CPUs, 1752 migrated"
        ));
        assert!(out.contains("invariants|hold after every operation (50 grace periods)"));
        let broken = table(&sample(false));
        assert!(broken.contains("BROKEN: 2 violations, 0 errors, 1 platform failures"));
        assert!(broken.contains(
            "failed    |bolt offline/1-load: power-off failed for cpu3: did not answer in time"
        ));
        assert!(!out.contains("failed"), "{out}");
    }

    #[test]
    fn top_level_lifts_the_verdict_the_losses_and_the_cases() {
        let summary = sample(false);
        let (hold, lost, cases) = top_level(Some(&summary));
        assert_eq!((hold, lost), (Some(false), Some(1)));
        assert_eq!(cases.as_array().map(Vec::len), Some(3));
        assert_eq!(cases[2]["impl"], "bolt");
        let none = json!({"hotplug": null});
        assert_eq!(top_level(Some(&none)), (None, None, json!([])));
        assert_eq!(top_level(None), (None, None, json!([])));
    }

    #[test]
    fn a_summary_without_cases_gives_no_rows() {
        let mut out = Vec::new();
        rows(&json!(null), &mut |name: &str, _| out.push(name.to_owned()));
        assert!(out.is_empty());
    }
}
