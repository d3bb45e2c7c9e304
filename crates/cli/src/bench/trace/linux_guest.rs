//! Linux's side of `hotkern bench trace --platform qemu`: Debian's kernel
//! booted on the QEMU configuration the hotkern kernel gets (the guest
//! machinery of [`crate::linux`]), with a static program in its initramfs
//! that times `getppid(2)` in a loop ([`SOURCE`]), run three ways in each
//! round:
//!
//! * `floor`: ftrace off (`current_tracer` = `nop`); every function's
//!   `__fentry__` site is a NOP, as in any kernel built with
//!   `CONFIG_FUNCTION_TRACER`, so this is Linux's untraced call;
//! * `off`: the `function` tracer on, `set_ftrace_filter` = a function the
//!   loop never calls ([`ELSEWHERE`]): the traced path's site stays a NOP;
//! * `on`: the `function` tracer on, `set_ftrace_filter` = the system
//!   call's handler ([`TRACED`]), recording each call.
//!
//! After each loop the script prints how many events CPU 0's ring took
//! (its `entries` plus `overrun`), so the host can tell a loop that
//! recorded from one that did not.

use std::path::Path;
use std::time::Duration;

use super::guests::{Loops, CPUS, MEMORY_MIB};
use super::tools::{self, NotMeasured, Scratch};
use crate::linux::{Guest, Script, PREFIX};
use crate::progress::Progress;
use crate::qemu::{self, QemuConfig};

/// The loop program's C source.
pub const SOURCE: &str = include_str!("c/syscall_loop.c");
/// The system call handler traced in the `on` loop, as a glob: x86's
/// syscall wrappers make `__x64_sys_getppid` an alias of
/// `__do_sys_getppid`, and which of the two names ftrace lists for the
/// one `__fentry__` site depends on the build (Debian's 6.1 lists the
/// latter). The script prints what the glob selected.
pub const TRACED: &str = "*sys_getppid";
/// A function the loop never reaches, for the `off` loop's filter.
pub const ELSEWHERE: &str = "*sys_sync";
/// Linux boots to userspace in 8–9 s under TCG; the loops take a few
/// seconds more.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Runs as PID 1, pinned to CPU 0, with ftrace's `mono` clock irrelevant
/// here (the program times itself with `CLOCK_MONOTONIC`); printk is
/// quieted so that no kernel line lands inside a timed loop.
const SCRIPT: &str = r#"echo 1 > /proc/sys/kernel/printk
recorded() {
    echo "hotkern-linux: recorded $1 $(awk '/^entries:/{e=$2} /^overrun:/{o=$2} END{print e+o}' $T/per_cpu/cpu0/stats)"
}
filter() {
    echo "$2" > $T/set_ftrace_filter || echo "hotkern-linux: error set_ftrace_filter $2 refused"
    echo "hotkern-linux: filter $1 $(cat $T/set_ftrace_filter | tr '\n' ' ')"
}
for rep in $(seq @REPS@); do
    echo nop > $T/current_tracer
    syscall-loop floor @CALLS@
    recorded floor
    filter off '@ELSEWHERE@'
    echo function > $T/current_tracer
    syscall-loop off @CALLS@
    recorded off
    echo nop > $T/current_tracer
    filter on '@TRACED@'
    echo function > $T/current_tracer
    syscall-loop on @CALLS@
    recorded on
    echo nop > $T/current_tracer
done
echo "hotkern-linux: done"
poweroff -f
"#;

/// The /init script: `repetitions` rounds of the three loops of `calls`
/// calls each.
pub fn init_script(repetitions: usize, calls: u64) -> String {
    crate::linux::init_script(SCRIPT)
        .replace("@REPS@", &repetitions.to_string())
        .replace("@CALLS@", &calls.to_string())
        .replace("@TRACED@", TRACED)
        .replace("@ELSEWHERE@", ELSEWHERE)
}

/// One line the script (or its program) writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// Userspace is up: vCPUs online and the kernel release.
    Up { cpus: u32, release: String },
    /// A loop ran: its label, calls and nanoseconds in all.
    Loop {
        label: String,
        calls: u64,
        nanos: u64,
    },
    /// Events CPU 0's ring took since the tracer was last set.
    Recorded { label: String, events: u64 },
    /// The functions a loop's `set_ftrace_filter` selected.
    Filter {
        label: String,
        functions: Vec<String>,
    },
    /// Something the script could not do.
    Error(String),
    /// Every loop ran; the guest powers off.
    Done,
}

/// Reads one console line: `None` for the kernel's own lines (and for a
/// line of the script's that does not parse, which then counts as the
/// kernel's).
pub fn parse_line(line: &str) -> Option<Line> {
    let rest = line.trim().strip_prefix(PREFIX)?.trim();
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words.as_slice() {
        ["up", cpus, release] => Some(Line::Up {
            cpus: cpus.parse().ok()?,
            release: (*release).to_owned(),
        }),
        ["loop", label, calls, nanos] => Some(Line::Loop {
            label: (*label).to_owned(),
            calls: calls.parse().ok().filter(|&calls: &u64| calls > 0)?,
            nanos: nanos.parse().ok()?,
        }),
        ["recorded", label, events] => Some(Line::Recorded {
            label: (*label).to_owned(),
            events: events.parse().ok()?,
        }),
        ["filter", label, functions @ ..] => Some(Line::Filter {
            label: (*label).to_owned(),
            functions: functions.iter().map(|name| (*name).to_owned()).collect(),
        }),
        ["error", ..] => Some(Line::Error(rest["error".len()..].trim().to_owned())),
        ["done"] => Some(Line::Done),
        _ => None,
    }
}

/// What the console said so far.
#[derive(Default)]
struct Transcript {
    release: Option<(u32, String)>,
    loops: Loops,
    recorded: Vec<(String, u64)>,
    traced: Vec<String>,
    errors: Vec<String>,
    last_line: Option<String>,
    done: bool,
    calls: u64,
}

impl Script for Transcript {
    fn take(&mut self, line: &str, _at: Duration) -> bool {
        if !line.trim().is_empty() {
            self.last_line = Some(line.to_owned());
        }
        match parse_line(line) {
            Some(Line::Up { cpus, release }) => self.release = Some((cpus, release)),
            Some(Line::Loop {
                label,
                calls,
                nanos,
            }) => {
                let per_call = nanos as f64 / calls as f64;
                self.calls = calls;
                match label.as_str() {
                    "floor" => self.loops.floor_ns.push(per_call),
                    "off" => self.loops.off_ns.push(per_call),
                    "on" => self.loops.on_ns.push(per_call),
                    other => self.errors.push(format!("a loop labelled {other}")),
                }
            }
            Some(Line::Recorded { label, events }) => self.recorded.push((label, events)),
            Some(Line::Filter { label, functions }) => {
                if functions.is_empty() {
                    self.errors
                        .push(format!("the {label} loop's filter selected nothing"));
                }
                if label == "on" {
                    self.traced = functions;
                }
            }
            Some(Line::Error(error)) => self.errors.push(error),
            Some(Line::Done) => self.done = true,
            None => {}
        }
        self.done
    }

    fn where_it_got(&self) -> String {
        format!(
            "{} loops ran; last console line: {}",
            self.loops.floor_ns.len() + self.loops.off_ns.len() + self.loops.on_ns.len(),
            self.last_line.as_deref().unwrap_or("(none)")
        )
    }
}

impl Transcript {
    /// The loops, once every round ran and each recorded what it should:
    /// every call in `on`, nothing in `floor` and `off`.
    fn verdict(self, repetitions: usize) -> Result<Measured, String> {
        if !self.errors.is_empty() {
            return Err(format!(
                "Linux's run went wrong: {}",
                self.errors.join("; ")
            ));
        }
        let Some((cpus, release)) = self.release else {
            return Err("the guest's script never said it was up".into());
        };
        if cpus != CPUS {
            return Err(format!("Linux brought up {cpus} of {CPUS} vCPUs"));
        }
        let rounds = [&self.loops.floor_ns, &self.loops.off_ns, &self.loops.on_ns];
        if rounds.iter().any(|loops| loops.len() != repetitions) {
            return Err(format!(
                "Linux ran {} floor, {} off and {} on loops of {repetitions} each",
                rounds[0].len(),
                rounds[1].len(),
                rounds[2].len()
            ));
        }
        for (label, events) in &self.recorded {
            let fits = if label == "on" {
                *events >= self.calls
            } else {
                *events == 0
            };
            if !fits {
                return Err(format!(
                    "Linux's {label} loop of {} calls left {events} events in CPU 0's ring",
                    self.calls
                ));
            }
        }
        Ok(Measured {
            release,
            traced: self.traced,
            loops: self.loops,
        })
    }
}

/// What Linux's run measured.
#[derive(Debug)]
pub struct Measured {
    /// The kernel release, as `uname -r` says.
    pub release: String,
    /// The functions the `on` loop's filter selected.
    pub traced: Vec<String>,
    /// Its loops.
    pub loops: Loops,
}

/// Builds the loop program, boots the guest with it and returns what it
/// measured; missing packages are named.
pub fn measure(
    qemu: &Path,
    guest: &Guest,
    repetitions: usize,
    calls: u64,
) -> Result<Measured, String> {
    let scratch = Scratch::new("linux-ftrace")?;
    scratch.write(&[("syscall_loop.c", SOURCE)])?;
    let binary = tools::compile(
        scratch.path(),
        "syscall-loop",
        &["syscall_loop.c"],
        &["-static"],
        "gcc libc6-dev",
    )
    .map_err(|error| match error {
        NotMeasured::Skip(skip) => skip.to_string(),
        NotMeasured::Failed(error) => error,
    })?;
    let program =
        std::fs::read(&binary).map_err(|error| format!("{}: {error}", binary.display()))?;
    let initramfs = guest.initramfs_with_programs(
        &init_script(repetitions, calls),
        &[],
        &[("syscall-loop".to_owned(), program)],
    );
    let config = QemuConfig {
        firmware: qemu::firmware(),
        append: "console=ttyS0".into(),
        ..QemuConfig::new(guest.kernel.clone(), CPUS, MEMORY_MIB)
    };
    let progress = Progress::spinner("linux ftrace");
    let followed = guest.boot(qemu, config, &initramfs, |console| {
        let mut transcript = Transcript::default();
        crate::linux::follow_script(console, TIMEOUT, &mut transcript)?;
        Ok(transcript)
    });
    progress.finish();
    followed?.verdict(repetitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_line("hotkern-linux: up 4 6.1.0-56-amd64"),
            Some(Line::Up {
                cpus: 4,
                release: "6.1.0-56-amd64".into()
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: loop on 50000 61000000\r"),
            Some(Line::Loop {
                label: "on".into(),
                calls: 50_000,
                nanos: 61_000_000
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: recorded off 0"),
            Some(Line::Recorded {
                label: "off".into(),
                events: 0
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: error set_ftrace_filter x refused"),
            Some(Line::Error("set_ftrace_filter x refused".into()))
        );
        assert_eq!(
            parse_line("hotkern-linux: filter on __do_sys_getppid __ia32_sys_getppid "),
            Some(Line::Filter {
                label: "on".into(),
                functions: vec!["__do_sys_getppid".into(), "__ia32_sys_getppid".into()]
            })
        );
        assert_eq!(parse_line("hotkern-linux: done"), Some(Line::Done));
        for kernel in [
            "[    0.000000] Linux version 6.1.0",
            "hotkern-linux: loop on 0 100",
            "hotkern-linux: loop on many 100",
            "hotkern-linux: recorded on",
        ] {
            assert_eq!(parse_line(kernel), None, "{kernel}");
        }
    }

    fn transcript(lines: &[&str]) -> Transcript {
        let mut transcript = Transcript::default();
        for line in lines {
            transcript.take(line, Duration::ZERO);
        }
        transcript
    }

    const ROUND: [&str; 6] = [
        "hotkern-linux: loop floor 1000 500000",
        "hotkern-linux: recorded floor 0",
        "hotkern-linux: loop off 1000 510000",
        "hotkern-linux: recorded off 0",
        "hotkern-linux: loop on 1000 900000",
        "hotkern-linux: recorded on 1000",
    ];

    #[test]
    fn a_whole_run_gives_ns_per_call_for_each_loop() {
        let mut lines = vec![
            "hotkern-linux: up 4 6.1.0-56-amd64",
            "hotkern-linux: filter on __do_sys_getppid",
        ];
        lines.extend(ROUND);
        lines.push("hotkern-linux: done");
        let seen = transcript(&lines);
        assert!(seen.done);
        let measured = seen.verdict(1).expect("a whole run");
        assert_eq!(measured.release, "6.1.0-56-amd64");
        assert_eq!(measured.traced, ["__do_sys_getppid"]);
        assert_eq!(measured.loops.floor_ns, [500.0]);
        assert_eq!(measured.loops.off_ns, [510.0]);
        assert_eq!(measured.loops.on_ns, [900.0]);
    }

    #[test]
    fn a_loop_that_did_not_record_or_a_missing_round_is_refused() {
        let mut lines = vec!["hotkern-linux: up 4 6.1.0-56-amd64"];
        lines.extend(&ROUND[..5]);
        lines.push("hotkern-linux: recorded on 3");
        let error = transcript(&lines).verdict(1).unwrap_err();
        assert!(
            error.contains("on loop of 1000 calls left 3 events"),
            "{error}"
        );
        let mut lines = vec!["hotkern-linux: up 4 6.1.0-56-amd64"];
        lines.extend(ROUND);
        let error = transcript(&lines).verdict(2).unwrap_err();
        assert!(error.contains("of 2 each"), "{error}");
        let error = transcript(&["hotkern-linux: error x refused"])
            .verdict(1)
            .unwrap_err();
        assert!(error.contains("x refused"), "{error}");
        let error = transcript(&["hotkern-linux: filter on "])
            .verdict(1)
            .unwrap_err();
        assert!(
            error.contains("on loop's filter selected nothing"),
            "{error}"
        );
    }
}
