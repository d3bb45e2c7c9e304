//! Benchmark results: one document per subsystem, as ARCHITECTURE.md fixes
//! it, rendered as JSON or as a table a person can read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One measured (case, implementation) pair.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's name, e.g. `fragmented/256MB`.
    pub name: String,
    /// The implementation, e.g. `hotkern`, `rbtree`.
    pub implementation: String,
    /// Operations timed.
    pub ops: u64,
    /// Nanoseconds per operation, where the case has one.
    pub ns_per_op: Option<f64>,
    /// Case-specific figures, in the order they were added.
    pub extra: Vec<(String, Value)>,
}

impl Case {
    /// A case with its timing.
    pub fn new(name: impl Into<String>, implementation: impl Into<String>, ops: u64) -> Self {
        Case {
            name: name.into(),
            implementation: implementation.into(),
            ops,
            ns_per_op: None,
            extra: Vec::new(),
        }
    }

    /// Sets nanoseconds per operation.
    pub fn ns_per_op(mut self, ns: f64) -> Self {
        self.ns_per_op = Some(ns);
        self
    }

    /// Adds a case-specific figure.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.push((key.to_owned(), value.into()));
        self
    }

    /// A case-specific figure as a number, if present.
    pub fn figure(&self, key: &str) -> Option<f64> {
        if key == "ns_per_op" {
            return self.ns_per_op;
        }
        self.extra
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_f64())
    }
}

/// All cases of one subsystem's benchmark, with ratios from the same run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The subsystem, e.g. `physmem`.
    pub bench: String,
    /// Measured cases, in run order.
    pub cases: Vec<Case>,
    /// Ratios between cases of this run, e.g. `fragmented-256MB/rbtree_over_hotkern`.
    pub ratios: BTreeMap<String, f64>,
    /// Lines printed under the table (targets met or missed, caveats).
    pub notes: Vec<String>,
    /// The case-specific figures the table shows, in this order; empty
    /// shows them all. The JSON always carries every figure.
    pub table_figures: Vec<&'static str>,
}

impl Report {
    /// An empty report for `bench`.
    pub fn new(bench: &str) -> Self {
        Report {
            bench: bench.to_owned(),
            cases: Vec::new(),
            ratios: BTreeMap::new(),
            notes: Vec::new(),
            table_figures: Vec::new(),
        }
    }

    /// The case `name` measured for `implementation`.
    pub fn case(&self, name: &str, implementation: &str) -> Option<&Case> {
        self.cases
            .iter()
            .find(|c| c.name == name && c.implementation == implementation)
    }

    /// Records `key` = `numerator`'s figure ÷ `denominator`'s figure for case
    /// `name`, when both were measured; returns the ratio.
    pub fn ratio(
        &mut self,
        key: &str,
        name: &str,
        figure: &str,
        numerator: &str,
        denominator: &str,
    ) -> Option<f64> {
        let top = self.case(name, numerator)?.figure(figure)?;
        let bottom = self.case(name, denominator)?.figure(figure)?;
        if bottom <= 0.0 {
            return None;
        }
        let ratio = top / bottom;
        self.ratios.insert(key.to_owned(), ratio);
        Some(ratio)
    }

    /// The JSON document of ARCHITECTURE.md.
    pub fn to_json(&self) -> Value {
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|case| {
                let mut object = Map::new();
                object.insert("name".into(), case.name.clone().into());
                object.insert("impl".into(), case.implementation.clone().into());
                object.insert("ops".into(), case.ops.into());
                if let Some(ns) = case.ns_per_op {
                    object.insert("ns_per_op".into(), round(ns).into());
                }
                for (key, value) in &case.extra {
                    object.insert(key.clone(), value.clone());
                }
                Value::Object(object)
            })
            .collect();
        let ratios: Map<String, Value> = self
            .ratios
            .iter()
            .map(|(k, v)| (k.clone(), round(*v).into()))
            .collect();
        serde_json::json!({
            "bench": self.bench,
            "machine": { "cpus": super::measure::host_cpus() },
            "cases": cases,
            "ratios": ratios,
            "notes": self.notes,
        })
    }

    /// A plain-text table: one row per case, one column per figure.
    pub fn to_table(&self) -> String {
        let mut columns: Vec<String> = vec!["case".into(), "impl".into(), "ops".into()];
        if self.cases.iter().any(|c| c.ns_per_op.is_some()) {
            columns.push("ns/op".into());
        }
        for case in &self.cases {
            for (key, _) in &case.extra {
                let shown =
                    self.table_figures.is_empty() || self.table_figures.contains(&key.as_str());
                if shown && !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
        if !self.table_figures.is_empty() {
            // The order the report asked for, after the fixed columns.
            let fixed = columns.len()
                - columns
                    .iter()
                    .filter(|c| self.table_figures.contains(&c.as_str()))
                    .count();
            columns[fixed..].sort_by_key(|c| self.table_figures.iter().position(|f| f == c));
        }
        let rows: Vec<Vec<String>> = self
            .cases
            .iter()
            .map(|case| {
                columns
                    .iter()
                    .map(|column| match column.as_str() {
                        "case" => case.name.clone(),
                        "impl" => case.implementation.clone(),
                        "ops" => case.ops.to_string(),
                        "ns/op" => case.ns_per_op.map_or(String::new(), format_number),
                        key => case
                            .extra
                            .iter()
                            .find(|(k, _)| k == key)
                            .map_or(String::new(), |(_, v)| format_value(v)),
                    })
                    .collect()
            })
            .collect();
        let mut out = String::new();
        let _ = writeln!(out, "== {} ==", self.bench);
        render(&mut out, &columns, &rows);
        if !self.ratios.is_empty() {
            let _ = writeln!(out);
            let ratio_rows: Vec<Vec<String>> = self
                .ratios
                .iter()
                .map(|(k, v)| vec![k.clone(), format!("{v:.2}x")])
                .collect();
            render(&mut out, &["ratio".into(), "value".into()], &ratio_rows);
        }
        for note in &self.notes {
            let _ = writeln!(out, "  {note}");
        }
        out
    }
}

fn render(out: &mut String, columns: &[String], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = columns.iter().map(String::len).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            // Text columns (the first two) align left, figures right.
            if i < 2 {
                let _ = write!(out, "{cell:<width$}  ");
            } else {
                let _ = write!(out, "{cell:>width$}  ");
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(out, columns);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(out, &rule);
    for row in rows {
        line(out, row);
    }
}

fn round(value: f64) -> f64 {
    if value.abs() >= 100.0 {
        (value * 10.0).round() / 10.0
    } else {
        (value * 1000.0).round() / 1000.0
    }
}

fn format_number(value: f64) -> String {
    if value.abs() >= 1000.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else if value.abs() >= 1.0 || value == 0.0 {
        format!("{value:.2}")
    } else {
        // Three significant digits, so that 2 ms of device time is not 0.00.
        let decimals = (2.0 - value.abs().log10().floor()).clamp(2.0, 9.0) as usize;
        format!("{value:.decimals$}")
    }
}

fn format_value(value: &Value) -> String {
    match value {
        Value::Number(n) if n.is_f64() => n.as_f64().map_or(String::new(), format_number),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut report = Report::new("physmem");
        report
            .cases
            .push(Case::new("lookup", "rbtree", 10).ns_per_op(30.0));
        report.cases.push(
            Case::new("lookup", "hotkern", 10)
                .ns_per_op(3.0)
                .with("misses", 2),
        );
        report
    }

    #[test]
    fn ratio_divides_the_named_figures_and_is_recorded() {
        let mut report = sample();
        let ratio = report.ratio(
            "lookup/rbtree_over_hotkern",
            "lookup",
            "ns_per_op",
            "rbtree",
            "hotkern",
        );
        assert_eq!(ratio, Some(10.0));
        assert_eq!(report.ratios["lookup/rbtree_over_hotkern"], 10.0);
        assert_eq!(
            report.ratio("x", "lookup", "ns_per_op", "static", "hotkern"),
            None
        );
    }

    #[test]
    fn json_has_the_documented_shape() {
        let json = sample().to_json();
        assert_eq!(json["bench"], "physmem");
        assert_eq!(json["cases"][1]["impl"], "hotkern");
        assert_eq!(json["cases"][1]["ns_per_op"], 3.0);
        assert_eq!(json["cases"][1]["misses"], 2);
        assert!(json["cases"][0].get("misses").is_none());
        assert!(json["machine"]["cpus"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn table_shows_only_the_chosen_figures_in_their_order() {
        let mut report = sample();
        report.cases[1] = report.cases[1].clone().with("hits", 7).with("bytes", 9);
        report.table_figures = vec!["bytes", "misses"];
        let table = report.to_table();
        let header = table.lines().nth(1).unwrap();
        assert!(header.ends_with("bytes  misses"), "{header}");
        assert!(!header.contains("hits"));
        assert_eq!(report.to_json()["cases"][1]["hits"], 7);
    }

    #[test]
    fn small_figures_keep_three_significant_digits() {
        assert_eq!(format_number(0.002134), "0.00213");
        assert_eq!(format_number(0.5), "0.500");
        assert_eq!(format_number(0.0), "0.00");
        assert_eq!(format_number(4.891), "4.89");
        assert_eq!(format_number(1234.4), "1234");
    }

    #[test]
    fn table_aligns_columns_and_leaves_missing_figures_blank() {
        let table = sample().to_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "== physmem ==");
        assert!(lines[1].starts_with("case"));
        assert!(lines[1].ends_with("misses"));
        // Header, rule and rows all end in the same column when filled.
        assert_eq!(lines[1].len(), lines[2].len());
        assert_eq!(lines[4].len(), lines[1].len());
        assert!(lines[3].len() < lines[1].len());
    }
}
