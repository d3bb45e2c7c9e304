//! How much of each single-CPU case's latency its stages account for: the
//! engine's own stages (the hotplug lock and its release, the grace
//! period, the stop-machine or bring-up, the runs on the target with
//! their hand-offs, power, the deferred worker's kick) and the `Prepare`
//! steps, each step timed inside another stage counted once. The remainder
//! is what no stage explains.

use super::super::Report;

/// The share of the latency the stages must account for.
pub const GOAL_PERCENT: f64 = 95.0;

/// One note per single-CPU case (`*/1-load`, `*/1`) that has both its
/// latency and its unaccounted time: the share, the remainder, the verdict.
pub fn notes(report: &Report) -> Vec<String> {
    report
        .cases
        .iter()
        .filter(|case| case.name.ends_with("/1-load") || case.name.ends_with("/1"))
        .filter_map(|case| {
            let latency = case.figure("latency_us").filter(|us| *us > 0.0)?;
            let unaccounted = case.figure("unaccounted_us")?;
            let share = 100.0 * (1.0 - unaccounted / latency);
            Some(format!(
                "target {} {}: stages account for {share:.1}% of the latency ({unaccounted:.1} us \
                 in no stage; goal >= {GOAL_PERCENT}%) {}",
                case.implementation,
                case.name,
                if share >= GOAL_PERCENT {
                    "met"
                } else {
                    "missed"
                }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::super::Case;
    use super::*;

    #[test]
    fn each_single_cpu_case_gets_its_share_and_verdict() {
        let mut report = Report::new("cpuhp");
        report.cases = vec![
            Case::new("offline/1-load", "bolt", 5)
                .with("latency_us", 500.0)
                .with("unaccounted_us", 20.0),
            Case::new("online/1", "classic", 5)
                .with("latency_us", 100.0)
                .with("unaccounted_us", 6.0),
            // A bulk case, and one without the figure: no note.
            Case::new("offline/bulk-3-load", "bolt", 5)
                .with("latency_us", 900.0)
                .with("unaccounted_us", 90.0),
            Case::new("online/1-load", "bolt", 5).with("latency_us", 300.0),
        ];
        assert_eq!(
            notes(&report),
            [
                "target bolt offline/1-load: stages account for 96.0% of the latency (20.0 us in \
                 no stage; goal >= 95%) met",
                "target classic online/1: stages account for 94.0% of the latency (6.0 us in no \
                 stage; goal >= 95%) missed",
            ]
        );
    }
}
