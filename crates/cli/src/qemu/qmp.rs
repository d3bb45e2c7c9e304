//! A small QMP client (QEMU's JSON machine protocol, `docs/interop/qmp-spec`
//! in QEMU's tree) and the virtio-mem resizes it drives, for the hotkern
//! kernel (`hotkern boot --hotplug SIZE --resize LIST`) and for Linux
//! (`boot --linux`) alike.
//!
//! QMP over a Unix socket: the server greets, the client sends
//! `qmp_capabilities`, then each command gets one `return` or `error`
//! answer, with asynchronous `event` messages interleaved (skipped here).
//! A resize is `qom-set` of the virtio-mem device's `requested-size`; it
//! is done when `qom-get` of its `size` (what the guest plugged) equals
//! the request, polled every 200 µs.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The virtio-mem device's QOM id on QEMU's command line.
pub const DEVICE_ID: &str = "vm0";
const MIB: u64 = 1 << 20;
/// Between two `qom-get size`: short beside a resize, long beside a QMP
/// round trip (tens of microseconds).
const POLL: Duration = Duration::from_micros(200);

/// A connected, negotiated QMP session.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to `socket`, retrying until `wait` runs out (QEMU creates
    /// the socket while it starts), and negotiates capabilities.
    pub fn connect(socket: &Path, wait: Duration) -> Result<Qmp, String> {
        let until = Instant::now() + wait;
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(stream) => break stream,
                Err(error) if Instant::now() >= until => {
                    return Err(format!("QMP socket {}: {error}", socket.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let io = |error: std::io::Error| format!("QMP: {error}");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        let writer = stream.try_clone().map_err(io)?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = qmp.message()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("QMP: expected a greeting, got {greeting}"));
        }
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// One message from the server.
    fn message(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("QMP: QEMU closed the connection".to_owned()),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|error| format!("QMP: unreadable message {line:?}: {error}")),
            Err(error) => Err(format!("QMP: {error}")),
        }
    }

    /// Runs `command` and returns its `return` value; an `error` answer
    /// becomes its description.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, String> {
        let mut request = json!({ "execute": command });
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        writeln!(self.writer, "{request}").map_err(|error| format!("QMP: {error}"))?;
        loop {
            let answer = self.message()?;
            if let Some(value) = answer.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = answer.get("error") {
                return Err(format!(
                    "QMP {command}: {}",
                    error["desc"].as_str().unwrap_or("error")
                ));
            }
            // An asynchronous event: not this command's answer.
        }
    }

    /// Sets the virtio-mem device's `requested-size`.
    pub fn request_size(&mut self, bytes: u64) -> Result<(), String> {
        self.execute(
            "qom-set",
            Some(json!({ "path": DEVICE_ID, "property": "requested-size", "value": bytes })),
        )
        .map(drop)
    }

    /// What the guest has plugged (`size`).
    pub fn plugged_size(&mut self) -> Result<u64, String> {
        let value = self.execute(
            "qom-get",
            Some(json!({ "path": DEVICE_ID, "property": "size" })),
        )?;
        value
            .as_u64()
            .ok_or_else(|| format!("QMP qom-get size: not a number: {value}"))
    }

    /// Asks for `mib` and polls `size` every `limits.poll` until it is
    /// reached, `limits.total` has passed since the request, or it stayed
    /// put for `limits.stall`. `plugged` (bytes) is the size last seen,
    /// kept up to date. Returns the resize and whether QEMU went away
    /// while it was polled; an error if the request itself failed.
    pub fn resize(
        &mut self,
        mib: u64,
        plugged: &mut u64,
        limits: Limits,
    ) -> Result<(Resized, bool), String> {
        let started = Instant::now();
        self.request_size(mib * MIB)?;
        let mut moved_at = started;
        let mut gone = false;
        let latency = loop {
            let Ok(now) = self.plugged_size() else {
                gone = true;
                break None;
            };
            if now != *plugged {
                (*plugged, moved_at) = (now, Instant::now());
            }
            if *plugged == mib * MIB {
                break Some((started.elapsed().as_secs_f64() * 1e6).round() / 1e3);
            }
            if started.elapsed() >= limits.total || moved_at.elapsed() >= limits.stall {
                break None;
            }
            std::thread::sleep(limits.poll);
        };
        let resized = Resized {
            requested_mib: mib,
            plugged_mib: *plugged / MIB,
            latency_ms: latency,
        };
        Ok((resized, gone))
    }
}

/// How long [`Qmp::resize`] waits, and how often it looks.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the request on.
    pub total: Duration,
    /// With `size` not moving.
    pub stall: Duration,
    /// Between two reads of `size`.
    pub poll: Duration,
}

/// One resize as the host saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resized {
    /// The size asked for.
    pub requested_mib: u64,
    /// What the guest had plugged when the host stopped waiting.
    pub plugged_mib: u64,
    /// From the `qom-set` to `size` reaching the request; `None` if it
    /// did not within the wait.
    pub latency_ms: Option<f64>,
}

impl Resized {
    /// The JSON object `--json`'s `"resizes"` list holds.
    pub fn to_json(&self) -> Value {
        json!({
            "requested_mib": self.requested_mib,
            "plugged_mib": self.plugged_mib,
            "latency_ms": self.latency_ms,
        })
    }
}

/// Drives each size of `sizes_mib` in turn: `qom-set`, then polls
/// `qom-get size` until it matches or `wait` passes (then goes on with
/// the next size: the guest reports why it stopped short). If QEMU goes
/// away in the middle (the guest gave up and exited), the resize under
/// way is recorded as not reached and the rest are not made. With a
/// `gate`, each size waits (up to `wait`) for the guest's word that it is
/// ready for it — hotkern's owners fill memory first — so that the time
/// measured is the resize's alone.
pub fn drive(
    socket: &Path,
    sizes_mib: &[u64],
    wait: Duration,
    gate: Option<&Receiver<()>>,
) -> Result<Vec<Resized>, String> {
    let mut qmp = Qmp::connect(socket, Duration::from_secs(10))?;
    let mut done = Vec::with_capacity(sizes_mib.len());
    let mut plugged = 0;
    for &mib in sizes_mib {
        if let Some(gate) = gate {
            let _ = gate.recv_timeout(wait);
        }
        let limits = Limits {
            total: wait,
            stall: wait,
            poll: POLL,
        };
        let Ok((resized, gone)) = qmp.resize(mib, &mut plugged, limits) else {
            done.push(Resized {
                requested_mib: mib,
                plugged_mib: plugged / MIB,
                latency_ms: None,
            });
            break;
        };
        done.push(resized);
        if gone {
            break;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A fake QEMU: greets, answers capabilities, and plugs what is asked
    /// after two polls (with an event in between, which must be skipped);
    /// a size of 6 MiB is never reached.
    #[test]
    fn resizes_are_timed_until_the_size_is_reached() {
        let socket =
            std::env::temp_dir().join(format!("hotkern-qmp-test-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            writeln!(writer, r#"{{"QMP":{{"version":{{}},"capabilities":[]}}}}"#).unwrap();
            let (mut requested, mut polls, mut plugged) = (0u64, 0, 0u64);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                let request: Value = serde_json::from_str(&line).unwrap();
                line.clear();
                let answer = match request["execute"].as_str().unwrap() {
                    "qmp_capabilities" => json!({"return": {}}),
                    // The guest gave up: QEMU exits.
                    "qom-set" if request["arguments"]["value"] == 8 * MIB => break,
                    "qom-set" => {
                        requested = request["arguments"]["value"].as_u64().unwrap();
                        polls = 0;
                        writeln!(writer, r#"{{"event":"MEMORY_DEVICE_SIZE_CHANGE"}}"#).unwrap();
                        json!({"return": {}})
                    }
                    "qom-get" => {
                        polls += 1;
                        if polls > 2 && requested != 6 * MIB {
                            plugged = requested;
                        }
                        json!({"return": plugged})
                    }
                    _ => json!({"error": {"class": "GenericError", "desc": "unknown"}}),
                };
                writeln!(writer, "{answer}").unwrap();
            }
        });
        let done = drive(&socket, &[4, 2, 6, 8], Duration::from_millis(50), None).unwrap();
        let _ = std::fs::remove_file(&socket);
        server.join().unwrap();
        assert_eq!(done.len(), 4, "{done:?}");
        assert_eq!((done[3].requested_mib, done[3].latency_ms), (8, None));
        assert_eq!((done[0].requested_mib, done[0].plugged_mib), (4, 4));
        // Two polls went by before the size was reached: two sleeps at least.
        assert!(done[0].latency_ms.is_some_and(|ms| ms >= 0.4), "{done:?}");
        assert_eq!(done[1].plugged_mib, 2);
        assert_eq!((done[2].plugged_mib, done[2].latency_ms), (2, None));
        assert_eq!(done[2].to_json()["latency_ms"], Value::Null);
    }
}
