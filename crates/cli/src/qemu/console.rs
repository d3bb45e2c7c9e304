//! QEMU started with the guest's serial console on its standard output:
//! console lines arrive on a channel, stamped with when they came, while
//! another thread keeps what QEMU writes on standard error. What `hotkern
//! boot`, `boot --linux` and `bench cpuhp --linux` each do with the lines
//! is theirs; starting QEMU and collecting its output is this, once.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::mpsc::Receiver;
use std::thread::{self, JoinHandle};
use std::time::Instant;

/// A running QEMU and its console.
pub(crate) struct Console {
    /// The QEMU process (to kill it, or to ask whether it has exited).
    pub(crate) child: Child,
    /// Console lines, without their line ends, with the time each arrived;
    /// the channel closes when QEMU's standard output does.
    pub(crate) lines: Receiver<(Instant, String)>,
    reader: Option<JoinHandle<()>>,
    errors: Option<JoinHandle<String>>,
}

impl Console {
    /// Starts `qemu` with `args`.
    pub(crate) fn start<S: AsRef<OsStr>>(
        qemu: &Path,
        args: impl IntoIterator<Item = S>,
    ) -> Result<Console, String> {
        let mut child = Command::new(qemu)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", qemu.display()))?;
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("QEMU's console is not connected".into());
        };
        let (send, lines) = mpsc::channel();
        let reader = thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut buffer = Vec::new();
            while matches!(stdout.read_until(b'\n', &mut buffer), Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&buffer).trim_end().to_owned();
                buffer.clear();
                if send.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let errors = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Console {
            child,
            lines,
            reader: Some(reader),
            errors: Some(errors),
        })
    }

    /// Waits for QEMU to exit and for its output to be read: its exit
    /// status and what it wrote on standard error. Console lines not
    /// received yet stay in [`Console::lines`].
    pub(crate) fn finish(&mut self) -> (io::Result<ExitStatus>, String) {
        let status = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let said = self
            .errors
            .take()
            .and_then(|errors| errors.join().ok())
            .unwrap_or_default();
        (status, said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for QEMU: lines come through in order, standard error
    /// is kept, the exit status is QEMU's.
    #[test]
    fn lines_and_standard_error_come_back() {
        let mut console = Console::start(
            Path::new("/bin/sh"),
            ["-c", "echo one; printf 'two\\r\\n'; echo oops >&2; exit 3"],
        )
        .unwrap();
        let (status, said) = console.finish();
        let lines: Vec<String> = console.lines.try_iter().map(|(_, line)| line).collect();
        assert_eq!(lines, ["one", "two"]);
        assert_eq!(said, "oops\n");
        assert_eq!(status.unwrap().code(), Some(3));
    }

    #[test]
    fn a_missing_program_is_named() {
        let error = Console::start(Path::new("/nonexistent/qemu"), ["-x"])
            .err()
            .unwrap();
        assert!(error.contains("/nonexistent/qemu"), "{error}");
    }
}
