//! `hotkern trace`: record a demo trace, print a saved one.
//!
//! `hotkern trace demo -o DIR` runs a small multi-threaded request-handling
//! workload under the function_graph tracer with a few events enabled and
//! writes `DIR/trace.dat` (trace-cmd's format), `DIR/trace.txt` (ftrace's
//! `trace` text), `DIR/trace.json` (Chrome trace events, for Perfetto) and
//! `DIR/hist.txt` (a hist trigger on `demo:request_done`, keyed by status);
//! `--file-version 7` (with `--compression zlib|zstd`) writes trace-cmd
//! 3.x's format instead of version 6.
//! `hotkern trace report FILE` prints a `trace.dat` the way
//! `trace-cmd report -N` does; with `--json`, as Chrome trace events that
//! Perfetto's UI opens.

use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use hotkern_trace::control::{view, Control};
use hotkern_trace::output::{write_trace, TextOptions};
use hotkern_trace::{TraceConfig, Tracer};
use hotkern_tracedat::write::{write_trace_dat, Compression, FileVersion, WriteOptions};

use crate::progress::ProgressReader;

/// The `hotkern trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Trace a built-in multi-threaded workload; write trace.dat, trace.txt,
    /// trace.json and hist.txt into DIR and print `events: N`.
    Demo {
        /// Output directory (created if missing).
        #[arg(short, long)]
        output: PathBuf,
        /// Worker threads.
        #[arg(long, default_value_t = 3)]
        threads: usize,
        /// Requests per worker.
        #[arg(long, default_value_t = 150)]
        requests: u32,
        /// trace.dat version: 6 (trace-cmd 2.x and later) or 7 (3.x).
        #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(6..=7))]
        file_version: u32,
        /// Compression of a version 7 file.
        #[arg(long, value_enum, default_value_t = CompressionArg::None)]
        compression: CompressionArg,
    },
    /// Print a saved trace.dat as `trace-cmd report -N` does.
    Report {
        /// The trace.dat file.
        file: PathBuf,
        /// Print nanosecond time stamps (as `trace-cmd report -t`).
        #[arg(short = 't', long = "ns")]
        full_timestamps: bool,
        /// Only this CPU's events.
        #[arg(long)]
        cpu: Option<u32>,
        /// Only events whose name or system:name matches this glob.
        #[arg(long)]
        events: Option<String>,
        /// Write Chrome trace JSON (for Perfetto's UI) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `--compression`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    /// Not compressed.
    None,
    /// zlib.
    Zlib,
    /// zstd.
    Zstd,
}

/// The writer's options for `--file-version` and `--compression`; version 6
/// has no compression, so asking for both is an error.
fn write_options(file_version: u32, compression: CompressionArg) -> Result<WriteOptions, String> {
    let version = if file_version == 7 {
        FileVersion::V7
    } else {
        FileVersion::V6
    };
    let compression = match compression {
        CompressionArg::None => Compression::None,
        CompressionArg::Zlib => Compression::Zlib,
        CompressionArg::Zstd => Compression::Zstd,
    };
    if version == FileVersion::V6 && compression != Compression::None {
        return Err("--compression needs --file-version 7".to_string());
    }
    Ok(WriteOptions {
        version,
        compression,
    })
}

/// Runs a `hotkern trace` subcommand.
pub fn run(command: TraceCommand) -> Result<(), String> {
    match command {
        TraceCommand::Demo {
            output,
            threads,
            requests,
            file_version,
            compression,
        } => demo(
            &output,
            threads,
            requests,
            write_options(file_version, compression)?,
        ),
        TraceCommand::Report {
            file,
            full_timestamps,
            cpu,
            events,
            json,
        } => {
            let opts = hotkern_tracedat::ReportOptions {
                cpu,
                events,
                nanoseconds: full_timestamps,
            };
            report(&file, opts, json)
        }
    }
}

/// The traced workload: requests parsed, checksummed and looked up, with
/// an occasional cache miss that reads a block.
mod workload {
    hotkern_trace::define_event! {
        /// A request arrives.
        pub request_start in demo {
            id: u32,
            bytes: u32,
        }
        print "id=%u bytes=%u", id, bytes
    }

    hotkern_trace::define_event! {
        /// A request is answered.
        pub request_done in demo {
            id: u32,
            status: i32,
            checksum: u64,
        }
        print "id=%u status=%d checksum=0x%llx", id, status, checksum
    }

    hotkern_trace::define_event! {
        /// A lookup missed the cache.
        pub cache_miss in demo {
            block: u64,
        }
        print "block=%llu", block
    }

    /// Handles one request.
    #[hotkern_trace::function]
    pub fn handle_request(id: u32, data: &[u8]) -> u64 {
        request_start::trace(id, data.len() as u32);
        let header = parse_header(data);
        let sum = checksum(data);
        let hit = lookup(u64::from(id) ^ header);
        let status = if hit { 200 } else { 404 };
        request_done::trace(id, status, sum);
        sum ^ header
    }

    #[hotkern_trace::function]
    fn parse_header(data: &[u8]) -> u64 {
        data.iter()
            .take(8)
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    }

    #[hotkern_trace::function]
    fn checksum(data: &[u8]) -> u64 {
        data.iter().fold(0xcbf2_9ce4_8422_2325u64, |acc, &b| {
            (acc ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    }

    #[hotkern_trace::function]
    fn lookup(key: u64) -> bool {
        if key % 7 == 0 {
            cache_miss::trace(key);
            // A third of the misses find nothing on disk either.
            return read_block(key) % 3 != 0;
        }
        true
    }

    #[hotkern_trace::function]
    fn read_block(block: u64) -> u64 {
        std::hint::black_box(block.rotate_left(13) | 1)
    }

    /// Registers the events so they can be enabled before they first fire.
    pub fn register() {
        hotkern_trace::event::register(&request_start::EVENT);
        hotkern_trace::event::register(&request_done::EVENT);
        hotkern_trace::event::register(&cache_miss::EVENT);
    }
}

fn demo(dir: &Path, threads: usize, requests: u32, format: WriteOptions) -> Result<(), String> {
    let threads = threads.clamp(1, 16);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    workload::register();
    // One CPU slot per worker plus one for this thread (it writes markers).
    let tracer = Tracer::with_threads(TraceConfig::default(), threads + 1)
        .and_then(Tracer::install)
        .map_err(|e| e.to_string())?;
    let result = record_demo(tracer, dir, threads, requests, format);
    tracer.uninstall();
    result
}

fn record_demo(
    tracer: &'static Tracer,
    dir: &Path,
    threads: usize,
    requests: u32,
    format: WriteOptions,
) -> Result<(), String> {
    let control = Control::new(tracer);
    let setup = [
        ("current_tracer", "function_graph"),
        ("set_ftrace_filter", ":mod:hotkern::trace_cmd::workload"),
        ("set_event", "demo:*"),
        (
            "events/demo/request_done/trigger",
            "hist:keys=status:vals=id:sort=hitcount.descending",
        ),
        ("trace", ""),
    ];
    for (file, value) in setup {
        control.write(file, value).map_err(|e| e.to_string())?;
    }
    control
        .write("trace_marker", "demo starts")
        .map_err(|e| e.to_string())?;
    let workers: Vec<_> = (0..threads)
        .map(|index| {
            std::thread::Builder::new()
                .name(format!("worker-{index}"))
                .spawn(move || {
                    let mut total = 0u64;
                    for request in 0..requests {
                        let id = index as u32 * 10_000 + request;
                        let data: Vec<u8> = (0..64 + (request % 32) as usize)
                            .map(|i| (i as u32 ^ id) as u8)
                            .collect();
                        total ^= workload::handle_request(id, &data);
                    }
                    hotkern_trace::trace_printk!(
                        "worker {} handled {} requests, digest {:#x}",
                        index as u32,
                        requests,
                        total
                    );
                    total
                })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot start a worker: {e}"))?;
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked".to_string())?;
    }
    control
        .write("trace_marker", "demo ends")
        .map_err(|e| e.to_string())?;
    control
        .write("tracing_on", "0")
        .map_err(|e| e.to_string())?;

    let lost: u64 = (0..tracer.cpus()).map(|cpu| tracer.lost(cpu)).sum();
    if lost != 0 {
        return Err(format!(
            "{lost} events were lost; the demo buffer is too small"
        ));
    }
    let pages = view::drain_pages(tracer);
    let data = view::trace_data_from_pages(tracer, &pages);
    let events = data.event_count();

    let mut text = String::new();
    write_trace(&data, "function_graph", &TextOptions::default(), &mut text);
    write_file(&dir.join("trace.txt"), text.as_bytes())?;
    let hist = control
        .read("events/demo/request_done/hist")
        .map_err(|e| e.to_string())?;
    write_file(&dir.join("hist.txt"), hist.as_bytes())?;
    let file = view::trace_dat(tracer, pages);
    let bytes = write_trace_dat(&file, &format).map_err(|e| e.to_string())?;
    write_file(&dir.join("trace.dat"), &bytes)?;
    // The JSON is the saved file's, through the one exporter that serves
    // any trace.dat (frames named from the kallsyms the file carries).
    let mut json = Vec::new();
    let mut saved = hotkern_tracedat::TraceFile::from_bytes(bytes).map_err(|e| e.to_string())?;
    hotkern_tracedat::json::write_chrome_json(&mut saved, &Default::default(), &mut json)
        .map_err(|e| e.to_string())?;
    write_file(&dir.join("trace.json"), &json)?;

    println!(
        "wrote {}/trace.dat, trace.txt, trace.json, hist.txt",
        dir.display()
    );
    println!("events: {events}");
    // Whether the instrumented functions' call sites were NOPs patched in
    // place, or stayed load-and-branch (and why).
    println!("call sites: {}", hotkern_trace::site::status());
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn report(file: &Path, opts: hotkern_tracedat::ReportOptions, json: bool) -> Result<(), String> {
    // hotkern-tracedat reads what trace-cmd writes, Linux's files and
    // hotkern's alike, a page at a time.
    report_tracedat(file, &opts, json).map_err(|error| format!("{}: {error}", file.display()))
}

/// Files this large get a progress bar on standard error (hidden when
/// standard error is not a terminal), so a long report shows it is moving.
const PROGRESS_FROM: u64 = 64 << 20;

/// Prints `file` with hotkern-tracedat, as text or as Chrome trace JSON;
/// the reason if it cannot read the file's metadata. An error while
/// printing is reported on standard error (a closed pipe, as with
/// `| head`, is not).
fn report_tracedat(
    file: &Path,
    opts: &hotkern_tracedat::ReportOptions,
    json: bool,
) -> Result<(), hotkern_tracedat::Error> {
    let handle = std::fs::File::open(file)?;
    let size = handle.metadata()?.len();
    let reader = std::io::BufReader::new(handle);
    let mut trace = if size >= PROGRESS_FROM {
        hotkern_tracedat::TraceFile::from_reader(ProgressReader::new(reader, size))?
    } else {
        hotkern_tracedat::TraceFile::from_reader(reader)?
    };
    let stdout = std::io::stdout();
    let mut lock = std::io::BufWriter::new(stdout.lock());
    let written = if json {
        hotkern_tracedat::json::write_chrome_json(&mut trace, opts, &mut lock)
    } else {
        hotkern_tracedat::write_report(&mut trace, opts, &mut lock)
    };
    match written {
        Err(hotkern_tracedat::Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => eprintln!("{}: {e}", file.display()),
        Ok(summary) if summary.corrupt_pages > 0 => eprintln!(
            "{}: {} damaged pages skipped",
            file.display(),
            summary.corrupt_pages
        ),
        Ok(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_version_and_compression_choose_the_writer_options() {
        let v6 = write_options(6, CompressionArg::None).unwrap();
        assert_eq!(v6, WriteOptions::default());
        let v7 = write_options(7, CompressionArg::Zstd).unwrap();
        assert_eq!(
            (v7.version, v7.compression),
            (FileVersion::V7, Compression::Zstd)
        );
        let zlib = write_options(7, CompressionArg::Zlib).unwrap();
        assert_eq!(zlib.compression, Compression::Zlib);
        let refused = write_options(6, CompressionArg::Zlib).unwrap_err();
        assert_eq!(refused, "--compression needs --file-version 7");
    }

    #[test]
    fn file_version_accepts_6_and_7_only() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(subcommand)]
            command: TraceCommand,
        }
        let parse =
            |args: &[&str]| Cli::try_parse_from([&["hotkern", "demo", "-o", "d"], args].concat());
        let Ok(Cli {
            command:
                TraceCommand::Demo {
                    file_version,
                    compression,
                    ..
                },
        }) = parse(&["--file-version", "7", "--compression", "zstd"])
        else {
            panic!("--file-version 7 --compression zstd refused");
        };
        assert_eq!((file_version, compression), (7, CompressionArg::Zstd));
        assert!(parse(&["--file-version", "8"]).is_err());
        assert!(parse(&["--file-version", "5"]).is_err());
        assert!(parse(&["--compression", "lz4"]).is_err());
    }
}
