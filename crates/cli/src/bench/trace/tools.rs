//! What the C peers of `hotkern bench trace` share: finding the programs
//! they need (and which Debian package brings a missing one), compiling
//! their sources with the system compiler, running them and reading the
//! figures they print.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::qemu::find_in_path;

/// The C sources every C peer includes: hotkern's timing, pasted into the
/// peer's loop (see `measure::fastest_ns_per_op`).
pub const TIMING_H: &str = include_str!("c/timing.h");

/// Optimisation of every C peer: the level Debian builds its packages with,
/// as a user's own build would be.
pub const C_OPT: &str = "-O2";

/// Why a peer was not measured on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A program or header it needs is not installed.
    Missing {
        /// The missing program or header.
        what: String,
        /// The Debian packages that bring it and the peer's other tools.
        packages: &'static str,
    },
}

/// Why a peer has no figures: skipped (a note) or failed (an error).
#[derive(Debug)]
pub enum NotMeasured {
    /// Its tools are not installed here.
    Skip(Skip),
    /// Its tools are there but the run failed.
    Failed(String),
}

impl From<Skip> for NotMeasured {
    fn from(skip: Skip) -> Self {
        NotMeasured::Skip(skip)
    }
}

impl From<String> for NotMeasured {
    fn from(error: String) -> Self {
        NotMeasured::Failed(error)
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Missing { what, packages } => write!(
                f,
                "{what} not found; install Debian's {packages} (apt-get install {packages}, \
                 or scripts/setup)"
            ),
        }
    }
}

/// The first of `programs` missing from this process's `PATH`, as a
/// [`Skip`] naming `packages`.
pub fn require(programs: &[&str], packages: &'static str) -> Result<(), Skip> {
    // The look-up `hotkern boot` finds QEMU with.
    let path = std::env::var_os("PATH");
    match programs
        .iter()
        .find(|p| find_in_path(p, path.clone()).is_none())
    {
        Some(missing) => Err(Skip::Missing {
            what: format!("`{missing}`"),
            packages,
        }),
        None => Ok(()),
    }
}

/// A header the compiler could not find, from its error output
/// (`fatal error: lttng/tracepoint.h: No such file or directory`).
pub fn missing_header(compiler_stderr: &str) -> Option<&str> {
    compiler_stderr.lines().find_map(|line| {
        let (_, rest) = line.split_once("fatal error: ")?;
        // gcc: `h.h: No such file or directory`; clang: `'h.h' file not found`.
        match rest.split_once(": ") {
            Some((header, reason)) if reason.starts_with("No such file") => Some(header),
            _ => rest
                .strip_suffix(" file not found")
                .map(|header| header.trim_matches('\'')),
        }
    })
}

/// A scratch directory for one peer's sources, binaries and trace,
/// removed when dropped: nothing a peer records outlives the run.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// A new, empty directory for `peer`.
    pub fn new(peer: &str) -> Result<Scratch, String> {
        let path =
            std::env::temp_dir().join(format!("hotkern-bench-{peer}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("{peer}: creating {}: {e}", path.display()))?;
        Ok(Scratch { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `files` (name, contents) into the directory.
    pub fn write(&self, files: &[(&str, &str)]) -> Result<(), String> {
        for (name, contents) in files {
            let file = self.path.join(name);
            std::fs::write(&file, contents)
                .map_err(|e| format!("writing {}: {e}", file.display()))?;
        }
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Compiles `sources` (in `dir`) into `dir/output` with the system
/// compiler at [`C_OPT`] plus `flags`; a missing header is a [`Skip`]
/// naming `packages`.
pub fn compile(
    dir: &Path,
    output: &str,
    sources: &[&str],
    flags: &[&str],
    packages: &'static str,
) -> Result<PathBuf, NotMeasured> {
    let binary = dir.join(output);
    let result = Command::new("cc")
        .current_dir(dir)
        .args([C_OPT, "-Wall", "-I."])
        .args(sources)
        .arg("-o")
        .arg(&binary)
        .args(flags)
        .output()
        .map_err(|e| format!("running cc: {e}"))?;
    if result.status.success() {
        return Ok(binary);
    }
    let stderr = String::from_utf8_lossy(&result.stderr);
    match missing_header(&stderr) {
        Some(header) => Err(Skip::Missing {
            what: format!("the header <{header}>"),
            packages,
        }
        .into()),
        None => Err(format!("cc {}: {}", sources.join(" "), stderr.trim()).into()),
    }
}

/// Runs `command`, which must succeed; its output.
pub fn run(what: &str, command: &mut Command) -> Result<Output, String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what}: {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output)
}

/// The figure a C peer printed for `case` (a line `case ns`).
pub fn figure(stdout: &str, case: &str) -> Result<f64, String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(name, _)| *name == case)
        .and_then(|(_, value)| value.trim().parse::<f64>().ok())
        .filter(|ns| ns.is_finite() && *ns >= 0.0)
        .ok_or_else(|| format!("no figure for {case} in the peer's output: {stdout:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_names_its_package() {
        let skip = Skip::Missing {
            what: "`uftrace`".into(),
            packages: "uftrace",
        };
        assert_eq!(
            skip.to_string(),
            "`uftrace` not found; install Debian's uftrace (apt-get install uftrace, or scripts/setup)"
        );
        let err = require(&["hotkern-no-such-program"], "lttng-tools").unwrap_err();
        assert!(
            matches!(err, Skip::Missing { ref what, packages: "lttng-tools" }
            if what == "`hotkern-no-such-program`")
        );
    }

    #[test]
    fn a_missing_header_is_read_from_gcc_and_clang() {
        let gcc = "lttng_bench.c:9:10: fatal error: lttng/tracepoint.h: No such file or directory\n    9 | #include <lttng/tracepoint.h>\ncompilation terminated.\n";
        assert_eq!(missing_header(gcc), Some("lttng/tracepoint.h"));
        let clang = "./lttng_tp.h:12:10: fatal error: 'lttng/tracepoint.h' file not found";
        assert_eq!(missing_header(clang), Some("lttng/tracepoint.h"));
        assert_eq!(missing_header("x.c:1: error: expected ';'"), None);
    }

    #[test]
    fn figures_are_read_by_case_name() {
        let out = "enabled 1 0\nevent/disabled 0.1693\nevent/enabled 92.7777\n";
        assert_eq!(figure(out, "event/enabled"), Ok(92.7777));
        assert_eq!(figure(out, "event/disabled"), Ok(0.1693));
        assert!(figure(out, "function_graph/pair").is_err());
        assert!(figure("event/enabled nan\n", "event/enabled").is_err());
        assert!(figure("event/enabled -1\n", "event/enabled").is_err());
    }
}
