//! The `lttng-ust` peer: LTTng's user-space tracer recording hotkern's
//! three-integer event into a real session.
//!
//! The benchmark compiles a tracepoint provider (`c/lttng_tp.h`, probes
//! linked into the program as lttng-ust's manual shows) with the system
//! compiler, starts a session daemon of its own (unless one runs already),
//! creates a snapshot session — LTTng's flight-recorder mode: per-CPU ring
//! buffers in overwrite mode, nothing written out, as hotkern's
//! `Mode::Overwrite` — with 4 × 1 MiB sub-buffers per CPU (hotkern's
//! 4096 KB), enables `hotkern_bench:sample` only and starts it. The
//! program then times `event/disabled` (the `quiet` event, not enabled)
//! and `event/enabled` itself, with hotkern's timing (`c/timing.h`), and
//! `event/disabled-cold` as `sites.rs` does (in TSC ticks, turned into ns
//! by the benchmark's own calibration).
//! The session is destroyed and the daemon stopped afterwards, so the
//! trace is discarded.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tools::{self, NotMeasured, Scratch};

/// The peer's name in the report.
pub const NAME: &str = "lttng-ust";

/// What to install for it.
const PACKAGES: &str = "lttng-tools liblttng-ust-dev";

const TP_H: &str = include_str!("c/lttng_tp.h");
const BENCH_C: &str = include_str!("c/lttng_bench.c");

/// The counts of one run: loop turns of four disabled call sites, enabled
/// events, and timed runs (the fastest counts).
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Loop turns of `event/disabled`.
    pub disabled_turns: u64,
    /// Events of `event/enabled`.
    pub enabled_ops: u64,
    /// Runs per case.
    pub runs: u64,
    /// Calls per run of `event/disabled-cold`.
    pub cold_calls: u64,
    /// Bytes streamed through before each of them.
    pub stream_bytes: usize,
}

/// `event/disabled` (per call site) and `event/enabled`, ns per event, and
/// `event/disabled-cold` in TSC ticks per call.
pub fn measure(counts: Counts) -> Result<[(&'static str, f64); 3], NotMeasured> {
    tools::require(&["cc", "lttng", "lttng-sessiond"], PACKAGES)?;
    let scratch = Scratch::new(NAME)?;
    scratch.write(&[
        ("timing.h", tools::TIMING_H),
        ("lttng_tp.h", TP_H),
        ("lttng_bench.c", BENCH_C),
    ])?;
    let program = tools::compile(
        scratch.path(),
        "lttng_bench",
        &["lttng_bench.c"],
        &["-llttng-ust", "-ldl"],
        PACKAGES,
    )?;
    let home = scratch.path();
    let _daemon = Daemon::start(home)?;
    let session = Session::create(home)?;
    let output = tools::run(
        "the lttng-ust peer",
        command(&program, home).args([
            counts.disabled_turns.to_string(),
            counts.enabled_ops.to_string(),
            counts.runs.to_string(),
            counts.cold_calls.to_string(),
            counts.stream_bytes.to_string(),
        ]),
    )?;
    drop(session);
    let stdout = String::from_utf8_lossy(&output.stdout);
    check_enabled(&stdout)?;
    check_loop_aligned(&stdout)?;
    Ok([
        ("event/disabled", tools::figure(&stdout, "event/disabled")?),
        ("event/enabled", tools::figure(&stdout, "event/enabled")?),
        (
            "event/disabled-cold",
            tools::figure(&stdout, "event/disabled-cold-ticks")?,
        ),
    ])
}

/// The program's own word (`enabled <sample> <quiet>`) that the session
/// enabled `sample` and not `quiet`: otherwise its figures would time
/// something other than what they are named after.
fn check_enabled(stdout: &str) -> Result<(), String> {
    match stdout.lines().find(|l| l.starts_with("enabled ")) {
        Some("enabled 1 0") => Ok(()),
        Some(line) => Err(format!(
            "the lttng-ust peer: the session did not enable exactly hotkern_bench:sample \
             (program says `{line}`, wants `enabled 1 0`)"
        )),
        None => Err(format!(
            "the lttng-ust peer printed no `enabled` line: {stdout:?}"
        )),
    }
}

/// The program's own word (`disabled-loop-offset 0`) that its
/// `event/disabled` loop starts a cache line, as hotkern's do (`loops.rs`):
/// a figure from a loop elsewhere would not be compared fairly.
fn check_loop_aligned(stdout: &str) -> Result<(), String> {
    let offset = tools::figure(stdout, "disabled-loop-offset")?;
    if offset == 0.0 {
        Ok(())
    } else {
        Err(format!(
            "the lttng-ust peer's event/disabled loop starts {offset} bytes into a \
             cache line, not at its start"
        ))
    }
}

/// `program` with `LTTNG_HOME` in the scratch directory `home`: the
/// client keeps its current-session file there, not in the user's home,
/// and a user other than root gets a session daemon of the run's own,
/// which the traced program finds there too (root's is always in
/// `/var/run/lttng`).
fn command(program: impl AsRef<OsStr>, home: &Path) -> Command {
    let mut command = Command::new(program);
    command.env("LTTNG_HOME", home);
    command
}

/// `lttng` with `args`, which must succeed.
fn lttng(home: &Path, args: &[&str]) -> Result<(), String> {
    tools::run(
        &format!("lttng {}", args.join(" ")),
        command("lttng", home).args(args),
    )
    .map(drop)
}

fn daemon_answers(home: &Path) -> bool {
    command("lttng", home)
        .arg("list")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The session daemon for the run: ours (stopped when dropped) or one that
/// already ran (left alone).
struct Daemon {
    child: Option<Child>,
}

impl Daemon {
    fn start(home: &Path) -> Result<Daemon, String> {
        if daemon_answers(home) {
            return Ok(Daemon { child: None });
        }
        // No kernel tracer: the benchmark records user-space events only,
        // and a machine without LTTng's kernel modules needs no warning.
        let child = command("lttng-sessiond", home)
            .arg("--no-kernel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting lttng-sessiond: {e}"))?;
        let mut daemon = Daemon { child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !daemon_answers(home) {
            if let Some(child) = daemon.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("lttng-sessiond exited at start: {status}"));
                }
            }
            if Instant::now() > deadline {
                return Err("lttng-sessiond did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(daemon)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: the daemon stops its consumer daemons and cleans up
            // its run directory, which SIGKILL would leave behind.
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) with the pid of our own child, not yet
                // reaped (so the pid cannot have been reused), and a
                // valid signal number; it touches no memory.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let _ = child.wait();
        }
    }
}

/// The recording session: snapshot mode, `hotkern_bench:sample` enabled,
/// started; destroyed (its buffers freed, nothing written) when dropped.
struct Session {
    name: String,
    home: PathBuf,
}

impl Session {
    fn create(home: &Path) -> Result<Session, String> {
        let name = format!("hotkern-bench-{}", std::process::id());
        lttng(home, &["create", &name, "--snapshot", "--no-output"])?;
        let session = Session {
            name,
            home: home.to_owned(),
        };
        let s = session.name.as_str();
        lttng(
            home,
            &[
                "enable-channel",
                "--userspace",
                "--session",
                s,
                "--subbuf-size",
                "1M",
                "--num-subbuf",
                "4",
                "bench",
            ],
        )?;
        lttng(
            home,
            &[
                "enable-event",
                "--userspace",
                "--session",
                s,
                "--channel",
                "bench",
                "hotkern_bench:sample",
            ],
        )?;
        lttng(home, &["start", s])?;
        Ok(session)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = lttng(&self.home, &["destroy", &self.name]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tools::Skip;
    use super::*;

    #[test]
    fn figures_count_only_when_the_session_enabled_the_right_event() {
        assert!(check_enabled("enabled 1 0\nevent/enabled 90\n").is_ok());
        let err = check_enabled("enabled 0 0\n").unwrap_err();
        assert!(err.contains("enabled 0 0"), "{err}");
        assert!(check_enabled("enabled 1 1\n").is_err());
        assert!(check_enabled("event/enabled 90\n").is_err());
    }

    #[test]
    fn a_disabled_loop_off_a_line_start_is_refused() {
        assert!(check_loop_aligned("disabled-loop-offset 0\nevent/disabled 0.2\n").is_ok());
        let err = check_loop_aligned("disabled-loop-offset 16\n").unwrap_err();
        assert!(err.contains("starts 16 bytes into"), "{err}");
        assert!(check_loop_aligned("event/disabled 0.2\n").is_err());
    }

    #[test]
    fn the_sources_name_the_events_the_session_enables() {
        assert!(TP_H.contains("hotkern_bench, sample"));
        assert!(TP_H.contains("hotkern_bench, quiet"));
        assert!(BENCH_C.contains("lttng_ust_tracepoint(hotkern_bench, sample"));
        // The cold case's figure is in ticks, turned into ns by the caller.
        assert!(BENCH_C.contains("event/disabled-cold-ticks"));
        assert_eq!(PACKAGES, "lttng-tools liblttng-ust-dev");
        let skip = Skip::Missing {
            what: "`lttng`".into(),
            packages: PACKAGES,
        };
        assert!(skip
            .to_string()
            .contains("apt-get install lttng-tools liblttng-ust-dev"));
    }
}
