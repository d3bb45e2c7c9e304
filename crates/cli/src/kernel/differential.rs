//! `hotkern boot --differential SEED`: the kernel runs the shared
//! differential hotplug scenario and puts its log in the summary; the
//! user-mode machine runs the same scenario here, on as many vCPUs, and
//! the two logs must be equal line for line
//! ([`hotkern_machine::differential`]).

use hotkern_machine::differential::{Scenario, OPERATIONS, TASKS};
use hotkern_machine::Machine;
use serde_json::{json, Value};

/// The two logs side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The scenario's seed.
    pub seed: u64,
    /// Lines of the machine's log.
    pub lines: usize,
    /// The first line that differs: its number, the kernel's and the
    /// machine's (`None` past the end of a log); `None` if equal.
    pub first_difference: Option<(usize, Option<String>, Option<String>)>,
    /// Why there was nothing to compare (no log from the kernel, or a
    /// machine that did not start).
    pub error: Option<String>,
}

impl Comparison {
    /// Whether the logs are equal.
    pub fn identical(&self) -> bool {
        self.error.is_none() && self.first_difference.is_none()
    }

    /// The comparison as JSON: `{"seed", "identical", "lines",
    /// "first_difference": {"line", "kernel", "machine"} | null, "error"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "seed": self.seed,
            "identical": self.identical(),
            "lines": self.lines,
            "first_difference": self.first_difference.as_ref().map(|(line, kernel, machine)| {
                json!({"line": line, "kernel": kernel, "machine": machine})
            }),
            "error": self.error,
        })
    }

    /// Table rows.
    pub fn rows(&self, row: &mut dyn FnMut(&str, String)) {
        let verdict = match (&self.error, &self.first_difference) {
            (Some(error), _) => format!("seed {}: not compared: {error}", self.seed),
            (None, None) => format!(
                "seed {}: the kernel's log equals the machine's, {} lines",
                self.seed, self.lines
            ),
            (None, Some((line, kernel, machine))) => format!(
                "seed {}: DIFFERENT at line {line}: kernel {:?}, machine {:?}",
                self.seed,
                kernel.as_deref().unwrap_or("(end)"),
                machine.as_deref().unwrap_or("(end)")
            ),
        };
        row("differential", verdict);
    }
}

/// Runs the scenario of `seed` on a machine of `cpus` vCPUs and compares
/// its log with the one the kernel put in `summary`.
pub fn compare(summary: Option<&Value>, seed: u64, cpus: u32) -> Comparison {
    let mut comparison = Comparison {
        seed,
        lines: 0,
        first_difference: None,
        error: None,
    };
    let Some(kernel) = summary.and_then(|s| s["differential"]["log"].as_array()) else {
        comparison.error = Some("the kernel's summary has no differential log".to_owned());
        return comparison;
    };
    let kernel: Vec<&str> = kernel
        .iter()
        .map(|line| line.as_str().unwrap_or(""))
        .collect();
    let machine = Machine::builder()
        .cpus(cpus as usize)
        .record_step_calls()
        .build()
        .map_err(|error| error.to_string())
        .and_then(|machine| {
            let log = machine
                .run_differential(Scenario::new(seed, OPERATIONS), TASKS)
                .map_err(|error| error.to_string());
            machine.shutdown();
            log
        });
    let machine = match machine {
        Ok(log) => log.to_string(),
        Err(error) => {
            comparison.error = Some(format!("the machine: {error}"));
            return comparison;
        }
    };
    let machine: Vec<&str> = machine.lines().collect();
    comparison.lines = machine.len();
    comparison.first_difference = first_difference(&kernel, &machine);
    comparison
}

/// The first line where `kernel` and `machine` differ.
fn first_difference(
    kernel: &[&str],
    machine: &[&str],
) -> Option<(usize, Option<String>, Option<String>)> {
    (0..kernel.len().max(machine.len()))
        .find(|&line| kernel.get(line) != machine.get(line))
        .map(|line| {
            (
                line + 1,
                kernel.get(line).map(|s| s.to_string()),
                machine.get(line).map(|s| s.to_string()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(log: &str) -> Value {
        json!({"differential": {"seed": 4, "log": log.lines().collect::<Vec<_>>()}})
    }

    fn machine_log(seed: u64, cpus: usize) -> String {
        let machine = Machine::builder()
            .cpus(cpus)
            .record_step_calls()
            .build()
            .unwrap();
        let log = machine
            .run_differential(Scenario::new(seed, OPERATIONS), TASKS)
            .unwrap()
            .to_string();
        machine.shutdown();
        log
    }

    #[test]
    fn an_equal_log_is_identical_and_a_changed_line_is_named() {
        let log = machine_log(4, 3);
        let same = compare(Some(&summary_of(&log)), 4, 3);
        assert!(same.identical(), "{same:?}");
        assert_eq!(same.lines, log.lines().count());
        let changed = log.replacen(" ok\n", " failed: diverged\n", 1);
        let line = changed
            .lines()
            .position(|l| l.ends_with("diverged"))
            .unwrap()
            + 1;
        let different = compare(Some(&summary_of(&changed)), 4, 3);
        assert!(!different.identical());
        let (at, kernel, machine) = different.first_difference.clone().unwrap();
        assert_eq!(at, line);
        assert!(kernel.unwrap().ends_with("failed: diverged"));
        assert!(machine.unwrap().ends_with(" ok"));
        let mut rows = String::new();
        different.rows(&mut |name, value| rows.push_str(&format!("{name}|{value}\n")));
        assert!(
            rows.contains(&format!("DIFFERENT at line {line}")),
            "{rows}"
        );
        assert_eq!(different.to_json()["identical"], false);
    }

    #[test]
    fn a_shorter_log_and_no_log_are_not_identical() {
        let log = machine_log(4, 3);
        let cut: String = log.lines().take(5).map(|l| format!("{l}\n")).collect();
        let short = compare(Some(&summary_of(&cut)), 4, 3);
        assert_eq!(short.first_difference.as_ref().unwrap().0, 6);
        assert_eq!(short.first_difference.as_ref().unwrap().1, None);
        let none = compare(Some(&json!({})), 4, 3);
        assert!(!none.identical() && none.error.is_some());
    }
}
