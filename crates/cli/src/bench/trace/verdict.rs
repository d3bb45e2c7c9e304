//! Ratios between hotkern and each peer of `hotkern bench trace`, and the
//! benchmark's targets, met or missed, from the cases of one run.

use super::super::Report;

/// The implementation every ratio is taken against.
const HOTKERN: &str = "hotkern";

/// The figure a peer's case carries: its ns ÷ hotkern's on the same case
/// (above 1: hotkern is faster).
pub const OVER_HOTKERN: &str = "over_hotkern";

/// The ratio's key: `event/enabled` and `lttng-ust` give
/// `event-enabled/lttng-ust_over_hotkern`.
pub fn ratio_key(case: &str, peer: &str) -> String {
    format!("{}/{peer}_over_hotkern", case.replace('/', "-"))
}

/// For every case that hotkern and a peer both measured: the ratio in the
/// report's ratios and as the peer case's [`OVER_HOTKERN`] figure.
pub fn add_ratios(report: &mut Report) {
    let pairs: Vec<(String, String)> = report
        .cases
        .iter()
        .filter(|c| c.implementation != HOTKERN && c.ns_per_op.is_some())
        .filter(|c| report.case(&c.name, HOTKERN).is_some())
        .map(|c| (c.name.clone(), c.implementation.clone()))
        .collect();
    for (case, peer) in pairs {
        let key = ratio_key(&case, &peer);
        if let Some(ratio) = report.ratio(&key, &case, "ns_per_op", &peer, HOTKERN) {
            if let Some(c) = report
                .cases
                .iter_mut()
                .find(|c| c.name == case && c.implementation == peer)
            {
                c.extra.push((OVER_HOTKERN.into(), ratio.into()));
            }
        }
    }
}

/// The target "hotkern faster than each of `peers` on every case they
/// share", met or missed, naming each case where it was not, and the
/// peers that were not measured.
pub fn faster_than(report: &Report, peers: &[&str]) -> String {
    let mut shared = 0;
    let mut slower = Vec::new();
    let mut absent = Vec::new();
    for peer in peers {
        let cases: Vec<_> = report
            .cases
            .iter()
            .filter(|c| c.implementation == *peer)
            .collect();
        if cases.is_empty() {
            absent.push(*peer);
        }
        for case in cases {
            if let Some(&ratio) = report.ratios.get(&ratio_key(&case.name, peer)) {
                shared += 1;
                if ratio <= 1.0 {
                    slower.push(format!("{} vs {peer} {ratio:.2}x", case.name));
                }
            }
        }
    }
    let mut note = format!(
        "target faster than {} on every shared case: ",
        peers.join(", ")
    );
    if slower.is_empty() && shared > 0 {
        note += &format!("met ({shared} cases)");
    } else if slower.is_empty() {
        note += "not measured (no peer ran)";
    } else {
        note += &format!("missed (not faster: {})", slower.join(", "));
    }
    if !absent.is_empty() && shared > 0 {
        note += &format!("; not measured here: {}", absent.join(", "));
    }
    note
}

/// `met` or `missed`.
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

/// The targets in clock reads: an enabled event within 2 reads of the
/// clock and a function_graph pair within 4.5, both measured in the run
/// that measured `clock_ns`, so a slow clock does not pass for a slow
/// tracer, nor a fast one hide it.
pub fn clock_targets(enabled_ns: f64, pair_ns: f64, clock_ns: f64) -> [String; 2] {
    let reads = |ns: f64| ns / clock_ns;
    [
        format!(
            "target event/enabled <= 2 clock reads: {enabled_ns:.1} ns = {:.2} reads of {clock_ns:.1} ns, {}",
            reads(enabled_ns),
            verdict(enabled_ns <= 2.0 * clock_ns)
        ),
        format!(
            "target function_graph/pair <= 4.5 clock reads: {pair_ns:.1} ns = {:.2} reads, {}",
            reads(pair_ns),
            verdict(pair_ns <= 4.5 * clock_ns)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::super::Case;
    use super::*;

    fn report() -> Report {
        let mut report = Report::new("trace");
        for (case, implementation, ns) in [
            ("event/enabled", "hotkern", 20.0),
            ("event/enabled", "lttng-ust", 100.0),
            ("event/enabled", "tracing-bare", 25.0),
            ("function_graph/pair", "hotkern", 50.0),
            ("function_graph/pair", "tracing-bare", 40.0),
            ("function_graph/pair", "uftrace", 100.0),
            ("throughput/1", "hotkern", 21.0),
        ] {
            report
                .cases
                .push(Case::new(case, implementation, 10).ns_per_op(ns));
        }
        report
    }

    #[test]
    fn every_peer_case_gets_its_ratio_to_hotkern() {
        let mut report = report();
        add_ratios(&mut report);
        assert_eq!(report.ratios["event-enabled/lttng-ust_over_hotkern"], 5.0);
        assert_eq!(
            report.ratios["function_graph-pair/tracing-bare_over_hotkern"],
            0.8
        );
        assert_eq!(report.ratios.len(), 4);
        let lttng = report.case("event/enabled", "lttng-ust").unwrap();
        assert_eq!(lttng.figure(OVER_HOTKERN), Some(5.0));
        assert_eq!(
            report
                .case("event/enabled", "hotkern")
                .unwrap()
                .figure(OVER_HOTKERN),
            None
        );
    }

    #[test]
    fn faster_than_names_every_case_where_hotkern_was_not() {
        let mut report = report();
        add_ratios(&mut report);
        assert_eq!(
            faster_than(&report, &["lttng-ust", "uftrace"]),
            "target faster than lttng-ust, uftrace on every shared case: met (2 cases)"
        );
        assert_eq!(
            faster_than(&report, &["lttng-ust", "tracing-bare", "tracing-fmt"]),
            "target faster than lttng-ust, tracing-bare, tracing-fmt on every shared case: \
             missed (not faster: function_graph/pair vs tracing-bare 0.80x); \
             not measured here: tracing-fmt"
        );
        assert_eq!(
            faster_than(&report, &["tracing-fmt"]),
            "target faster than tracing-fmt on every shared case: not measured (no peer ran)"
        );
    }

    #[test]
    fn clock_targets_count_in_reads_of_the_same_run() {
        let [enabled, pair] = clock_targets(21.4, 47.9, 11.8);
        assert!(enabled.ends_with("1.81 reads of 11.8 ns, met"), "{enabled}");
        assert!(pair.ends_with("4.06 reads, met"), "{pair}");
        let [enabled, pair] = clock_targets(30.0, 60.0, 10.0);
        assert!(enabled.ends_with("missed"), "{enabled}");
        assert!(pair.ends_with("6.00 reads, missed"), "{pair}");
    }
}
