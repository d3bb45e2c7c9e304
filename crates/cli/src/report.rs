//! `hotkern report`: the benchmarks as pictures. One self-contained HTML
//! page (style, SVG and its check script inline; nothing fetched) with
//! the figures the compared designs were argued with — the uvm_hotplug
//! paper's lookup cost against fragmentation, FreeBSD's load times per
//! device, Bolt (ATC 2015)'s stacked stages — drawn by
//! `plotters` from the JSON documents the benchmarks print.
//!
//! The page is written whatever the inputs: a figure whose input is
//! missing or broken says which file and why, in its place.
//!
//! ```sh
//! hotkern report                       # run the quick benchmarks, write report.html
//! hotkern report --qemu                # and the kernel's (and Linux's) under QEMU
//! hotkern report --from DIR -o r.html  # draw DIR/bench-all.json, DIR/boot.json, …
//! ```

mod bcache;
mod chart;
mod collect;
mod cpuhp;
mod figure;
mod inputs;
mod page;
mod physmem;
mod trace;
mod vmem;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::bench::{BenchOptions, Platform};
pub use collect::{not_run, RunSize};
pub use inputs::{Inputs, Source};
use page::{Header, Target};

/// `hotkern report`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Where to write the page.
    #[arg(short, long, default_value = "report.html")]
    pub output: PathBuf,
    /// Draw the JSON documents in DIR instead of running the benchmarks:
    /// bench-all.json (`bench all --json`), and when present
    /// cpuhp-qemu.json, cpuhp-linux.json, bcache-qemu.json and boot.json.
    #[arg(long, value_name = "DIR", conflicts_with = "run")]
    pub from: Option<PathBuf>,
    /// Run `bench all` first (the default: quick) and keep its JSON in
    /// the directory beside the page, `<output>-data/`.
    #[arg(long, value_enum)]
    pub run: Option<RunSize>,
    /// With the run, also boot the kernel under QEMU for its documents:
    /// cpuhp and bcache on the kernel, the virtio-mem resizes, and Linux's
    /// beside them when its packages are installed (a minute or two more).
    #[arg(long, conflicts_with = "from")]
    pub qemu: bool,
}

/// Runs `hotkern report`.
pub fn run(args: &ReportArgs) -> Result<(), String> {
    let (inputs, described) = match &args.from {
        Some(dir) => (Inputs::read(dir), format!("documents in {}", dir.display())),
        None => {
            let size = args.run.unwrap_or(RunSize::Quick);
            let dir = data_dir(&args.output);
            let inputs = collect::collect(size, args.qemu, &dir)?;
            let described = format!(
                "this report's {} run of hotkern bench all{}, kept in {}",
                if size == RunSize::Full {
                    "full"
                } else {
                    "quick"
                },
                if args.qemu { " and the QEMU runs" } else { "" },
                dir.display()
            );
            (inputs, described)
        }
    };
    write(&inputs, &described, &args.output)?;
    println!("report: {}", args.output.display());
    Ok(())
}

/// Writes the page for `inputs` to `path`; `described` says where the
/// inputs came from, for the header.
pub fn write(inputs: &Inputs, described: &str, path: &Path) -> Result<(), String> {
    let html = render(inputs, &header(described));
    std::fs::write(path, html).map_err(|e| format!("{}: {e}", path.display()))
}

/// `hotkern bench … --html FILE`: the page of the benchmarks one bench
/// command ran (`documents`, as `--json` prints them), with only their
/// sections; `options` say which input they are (QEMU's, Linux's).
pub fn write_bench(
    documents: Vec<Value>,
    options: &BenchOptions,
    path: &Path,
) -> Result<(), String> {
    let benches: Vec<String> = documents
        .iter()
        .filter_map(|d| d["bench"].as_str().map(str::to_owned))
        .collect();
    let source = match (options.linux, options.platform) {
        (true, _) => Source::CpuhpLinux,
        (false, Platform::Qemu) if benches.iter().any(|b| b == "bcache") => Source::BcacheQemu,
        (false, Platform::Qemu) => Source::CpuhpQemu,
        (false, Platform::User) => Source::BenchAll,
    };
    let inputs = Inputs::from_documents([(source, Value::Array(documents))]);
    let described = format!(
        "this run of hotkern bench {} ({})",
        benches.join(", "),
        source.file()
    );
    // tracedat's figure sits in trace's section.
    let sections: Vec<&str> = benches
        .iter()
        .map(|b| if b == "tracedat" { "trace" } else { b.as_str() })
        .collect();
    let html = render_sections(&inputs, &header(&described), Some(&sections));
    std::fs::write(path, html).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("report: {}", path.display());
    Ok(())
}

/// The page for `inputs`.
pub fn render(inputs: &Inputs, header: &Header) -> String {
    render_sections(inputs, header, None)
}

/// The page for `inputs`, with only the sections named in `only` (by
/// subsystem: physmem, bcache, cpuhp, trace, vmem) when given.
fn render_sections(inputs: &Inputs, header: &Header, only: Option<&[&str]>) -> String {
    let targets: Vec<Target> = inputs
        .notes()
        .iter()
        .filter(|(_, note)| {
            note.split_once(": ")
                .is_some_and(|(_, n)| n.starts_with("target"))
        })
        .map(|(_, note)| Target::from_note(note))
        .collect();
    let sections: [(&str, &str, Figures); 5] = [
        (
            "physmem",
            "physmem — vs NetBSD's uvm_hotplug(9)",
            physmem::figures,
        ),
        (
            "bcache",
            "bcache — vs FreeBSD's loader cache",
            bcache::figures,
        ),
        ("cpuhp", "cpuhp — vs Linux's CPU hotplug", cpuhp::figures),
        (
            "trace",
            "trace — vs LTTng-UST, uftrace and tracing",
            trace::figures,
        ),
        ("vmem", "memory devices — virtio-mem", vmem::figures),
    ];
    let drawn: Vec<(&str, Vec<figure::Figure>)> = sections
        .iter()
        .filter(|(key, _, _)| only.is_none_or(|only| only.contains(key)))
        .map(|(_, title, figures)| (*title, figures(inputs)))
        .collect();
    page::render(header, &targets, &drawn)
}

/// A subsystem's figures from the inputs.
type Figures = fn(&Inputs) -> Vec<figure::Figure>;

/// `report.html` → `report-data/`, beside it.
fn data_dir(output: &Path) -> PathBuf {
    let stem = output
        .file_stem()
        .map_or("report".into(), |s| s.to_string_lossy().into_owned());
    output.with_file_name(format!("{stem}-data"))
}

/// The header's facts about this host, read now.
fn header(described: &str) -> Header {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':'))
        .map_or("CPU model unknown".to_owned(), |(_, model)| {
            model.trim().to_owned()
        });
    let load = std::fs::read_to_string("/proc/loadavg").map_or_else(
        |e| format!("unknown ({e})"),
        |text| {
            let fields: Vec<&str> = text.split_whitespace().take(3).collect();
            format!(
                "{} (1, 5, 15 min, when the report was written)",
                fields.join(" ")
            )
        },
    );
    Header {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load,
        qemu: first_line("qemu-system-x86_64", &["--version"])
            .unwrap_or_else(|| "qemu-system-x86_64 not found".to_owned()),
        commit: first_line("git", &["describe", "--always", "--dirty", "--abbrev=12"])
            .unwrap_or_else(|| "unknown (not run from a git checkout)".to_owned()),
        date: utc_now(),
        inputs: described.to_owned(),
    }
}

/// The first line `program args` prints, if it runs and succeeds.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().next().map(str::to_owned)
}

/// Now, as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (year, month, day) = civil(seconds / 86_400);
    let minute = seconds % 86_400 / 60;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        minute / 60,
        minute % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, by counting
/// 400-year eras of 146,097 days from 0000-03-01 (so that a leap day is
/// the last of its year).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
