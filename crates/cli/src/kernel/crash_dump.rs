//! The kernel's crash dump (its `ftrace_dump_on_oops`): on a panic or a
//! fatal exception the kernel sends its trace rings on COM2 as a trace.dat,
//! framed by two console lines (crates/baremetal/src/platform/crash.rs):
//!
//! ```text
//! hotkern: crash dump begins: 12288 bytes on COM2
//! hotkern: crash dump {"events":7,"lost":0,"bytes":12288,"fnv1a64":"..."}
//! ```
//!
//! or `hotkern: crash dump skipped: REASON` when there is nothing to send.
//! A dump whose end line never came (QEMU died, a second crash abandoned
//! it) or whose bytes do not match it is [`Incomplete`]: its bytes are kept
//! under a `.partial` name, never presented as a trace.dat.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::trace::{self, Trace};

/// The crash dump's name in the output directory.
pub const CRASH_TRACE_DAT: &str = "crash-trace.dat";
/// The name a dump cut short is kept under.
pub const CRASH_TRACE_PARTIAL: &str = "crash-trace.dat.partial";

const BEGINS: &str = "hotkern: crash dump begins: ";
const SKIPPED: &str = "hotkern: crash dump skipped: ";
const ABANDONED: &str = "hotkern: crash dump abandoned: ";
const ENDS: &str = "hotkern: crash dump {";

/// What the console said about a crash dump, line by line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DumpLines {
    /// The size the begin line announced.
    began: Option<u64>,
    /// The end line's document (or why it did not parse).
    ended: Option<Result<Value, String>>,
    /// Why the kernel sent no dump.
    skipped: Option<String>,
    /// Why the kernel gave up on a dump it had begun.
    abandoned: Option<String>,
}

impl DumpLines {
    /// Takes in one console line; returns whether it was a crash dump line.
    ///
    /// ```ignore
    /// let mut lines = DumpLines::default();
    /// assert!(lines.take("hotkern: crash dump begins: 4096 bytes on COM2"));
    /// assert!(!lines.take("hotkern: panic on cpu 0: boom"));
    /// ```
    pub fn take(&mut self, line: &str) -> bool {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix(BEGINS) {
            self.began = rest.split(' ').next().and_then(|n| n.parse().ok());
        } else if let Some(reason) = line.strip_prefix(SKIPPED) {
            self.skipped = Some(reason.to_owned());
        } else if let Some(reason) = line.strip_prefix(ABANDONED) {
            self.abandoned = Some(reason.to_owned());
        } else if line.starts_with(ENDS) {
            let document = &line[ENDS.len() - 1..];
            self.ended = Some(
                serde_json::from_str(document)
                    .map_err(|error| format!("its end line is not JSON ({error})")),
            );
        } else {
            return false;
        }
        true
    }
}

/// A crash dump the kernel announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashDump {
    /// Sent whole: the trace.dat, checked against the end line.
    Written(Trace),
    /// Not sent, and why (no tracer yet, the trace already went out).
    Skipped(String),
}

/// A crash dump that began but did not arrive whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incomplete {
    /// What went wrong.
    pub cause: String,
    /// Where the bytes that did arrive are kept, if any arrived.
    pub partial: Option<PathBuf>,
}

impl fmt::Display for Incomplete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash dump incomplete: {}", self.cause)?;
        match &self.partial {
            Some(path) => write!(f, " (the bytes received are in {})", path.display()),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Incomplete {}

/// Settles the dump the console announced: `received` is the file QEMU
/// wrote COM2 to. A whole dump is renamed to [`CRASH_TRACE_DAT`] beside
/// it, a cut one to [`CRASH_TRACE_PARTIAL`]. `Ok(None)` when the console
/// said nothing of a dump (no crash, or a kernel from before dumps).
pub fn settle(lines: &DumpLines, received: &Path) -> Result<Option<CrashDump>, Incomplete> {
    let dir = received.parent().unwrap_or(Path::new("."));
    let incomplete = |cause: String| {
        let partial = dir.join(CRASH_TRACE_PARTIAL);
        let kept = std::fs::metadata(received).is_ok_and(|m| m.len() > 0)
            && std::fs::rename(received, &partial).is_ok();
        Incomplete {
            cause,
            partial: kept.then_some(partial),
        }
    };
    match (&lines.began, &lines.ended) {
        (_, Some(Ok(announced))) => {
            let bytes = std::fs::read(received)
                .map_err(|error| incomplete(format!("{}: {error}", received.display())))?;
            let checked = trace::verify(announced, received, &bytes).map_err(incomplete)?;
            let path = dir.join(CRASH_TRACE_DAT);
            std::fs::rename(received, &path)
                .map_err(|error| incomplete(format!("{}: {error}", path.display())))?;
            Ok(Some(CrashDump::Written(Trace { path, ..checked })))
        }
        (_, Some(Err(error))) => Err(incomplete(error.clone())),
        (Some(size), None) => {
            let received_bytes = std::fs::metadata(received).map_or(0, |m| m.len());
            let why = lines
                .abandoned
                .as_deref()
                .unwrap_or("the run ended before it did");
            Err(incomplete(format!(
                "the kernel began a {size}-byte dump but never announced its end ({why}); \
                 {received_bytes} bytes arrived"
            )))
        }
        (None, None) => Ok(lines.skipped.clone().map(CrashDump::Skipped)),
    }
}

/// The one line `hotkern boot` prints about a dump.
pub fn describe(dump: &Result<Option<CrashDump>, Incomplete>) -> Option<String> {
    match dump {
        Ok(Some(CrashDump::Written(trace))) => Some(format!(
            "crash dump: {} events, trace written to {path} (read with trace-cmd report {path})",
            trace.events,
            path = trace.path.display()
        )),
        Ok(Some(CrashDump::Skipped(reason))) => Some(format!("crash dump skipped: {reason}")),
        Ok(None) => None,
        Err(incomplete) => Some(incomplete.to_string()),
    }
}

/// The JSON document's `"crash"` object (`null` without a dump).
pub fn to_json(dump: &Result<Option<CrashDump>, Incomplete>) -> Value {
    match dump {
        Ok(None) => Value::Null,
        Ok(Some(CrashDump::Written(trace))) => json!({
            "trace_dat": trace.path.display().to_string(),
            "events": trace.events,
            "lost": trace.lost,
            "bytes": trace.bytes,
            "skipped": null,
            "error": null,
        }),
        Ok(Some(CrashDump::Skipped(reason))) => json!({
            "trace_dat": null, "events": null, "skipped": reason, "error": null,
        }),
        Err(incomplete) => json!({
            "trace_dat": null,
            "events": null,
            "skipped": null,
            "error": incomplete.to_string(),
            "partial": incomplete.partial.as_ref().map(|p| p.display().to_string()),
        }),
    }
}

#[cfg(test)]
#[path = "crash_dump_tests.rs"]
mod tests;
