//! `hotkern report --run`: measuring the inputs instead of reading them.
//! `bench all` runs in this process; with `--qemu`, the documents of the
//! kernel booted under QEMU (and of Debian's Linux beside it, when its
//! packages are installed) come from this same binary run as the commands
//! [`Source::command`] names, each document kept in the data directory so
//! that `--from` can draw it again.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::inputs::{Inputs, Problem, Source};
use crate::bench::{BenchOptions, Subsystem};

/// How long a `--run` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunSize {
    /// `bench all`'s quick sizes (under a minute), trace.dat at 4 MB.
    Quick,
    /// `bench all --full`: the published sizes (many minutes).
    Full,
}

/// The document of a benchmark that did not run, saying `why`; its
/// figures show it in their place.
pub fn not_run(bench: &str, why: &str) -> Value {
    serde_json::json!({"bench": bench, "error": why, "cases": []})
}

/// Runs what `size` and `qemu` ask for, writes each document into `dir`,
/// and returns the inputs (a run that failed is a [`Problem`] there).
pub fn collect(size: RunSize, qemu: bool, dir: &Path) -> Result<Inputs, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut inputs = Inputs::from_documents([]);
    let all = bench_all(size);
    keep(dir, Source::BenchAll, &all)?;
    inputs.set(Source::BenchAll, Ok(all));
    if !qemu {
        return Ok(inputs);
    }
    let linux = crate::linux::Guest::find(crate::qemu::Architecture::X86_64)
        .map(|_| ())
        .map_err(|missing| missing.to_string());
    for source in [
        Source::CpuhpQemu,
        Source::BcacheQemu,
        Source::CpuhpLinux,
        Source::Boot,
    ] {
        let document = match (source, &linux) {
            (Source::CpuhpLinux, Err(missing)) => Err(failed(source, missing)),
            // Without Linux (all but the trailing --linux) the boot still
            // gives hotkern's resizes.
            (Source::Boot, Err(_)) => run(source, &source.args()[..source.args().len() - 1]),
            _ => run(source, source.args()),
        };
        if let Ok(document) = &document {
            keep(dir, source, document)?;
        }
        inputs.set(source, document);
    }
    Ok(inputs)
}

/// `bench all --json`'s array, measured here; a benchmark that fails
/// leaves a document with its error, which its figures then show.
fn bench_all(size: RunSize) -> Value {
    let options = BenchOptions {
        full: size == RunSize::Full,
        // The trace.dat read at 4 MB keeps the quick run under a minute.
        size_mb: (size == RunSize::Quick).then_some(4),
        ..BenchOptions::default()
    };
    let documents = Subsystem::ALL
        .iter()
        .map(|subsystem| match subsystem.measure(&options) {
            Ok(report) => report.to_json(),
            Err(error) => {
                eprintln!("report: bench {} failed: {error}", subsystem.name());
                not_run(subsystem.name(), &error)
            }
        })
        .collect();
    Value::Array(documents)
}

/// This binary run with `args`; its standard output as JSON. Standard
/// error (progress, QEMU's messages) goes to ours.
fn run(source: Source, args: &[&str]) -> Result<Value, Problem> {
    eprintln!("report: hotkern {}", args.join(" "));
    let program = std::env::current_exe().map_err(|e| failed(source, &e.to_string()))?;
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| failed(source, &e.to_string()))?;
    if !output.status.success() {
        return Err(failed(source, &format!("it exited with {}", output.status)));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|error| Problem::NotJson(source, error.to_string()))
}

fn failed(source: Source, why: &str) -> Problem {
    Problem::Failed(source, source.command(), why.to_owned())
}

/// Writes `document` as `source`'s file in `dir`.
fn keep(dir: &Path, source: Source, document: &Value) -> Result<(), String> {
    let file = dir.join(source.file());
    std::fs::write(&file, format!("{document}\n")).map_err(|e| format!("{}: {e}", file.display()))
}
