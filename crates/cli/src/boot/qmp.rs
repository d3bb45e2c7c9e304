//! A small QMP client (QEMU's JSON machine protocol, `docs/interop/qmp-spec`
//! in QEMU's tree) and the resizes `hotkern boot --hotplug SIZE --resize
//! LIST` drives with it.
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
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::statistics::median;

/// The virtio-mem device's QOM id on QEMU's command line.
pub const DEVICE_ID: &str = "vm0";
/// The console line the kernel prints when it follows `requested-size`
/// (crates/kernel-x86_64/src/virtio_mem.rs).
pub const READY: &str = "hotkern: virtio-mem ready";

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
/// way is recorded as not reached and the rest are not made.
pub fn drive(socket: &Path, sizes_mib: &[u64], wait: Duration) -> Result<Vec<Resized>, String> {
    let mut qmp = Qmp::connect(socket, Duration::from_secs(10))?;
    let mut done = Vec::with_capacity(sizes_mib.len());
    let mut plugged = 0;
    for &mib in sizes_mib {
        let started = Instant::now();
        if qmp.request_size(mib * MIB).is_err() {
            done.push(Resized {
                requested_mib: mib,
                plugged_mib: plugged / MIB,
                latency_ms: None,
            });
            break;
        }
        let mut gone = false;
        let latency = loop {
            let Ok(now) = qmp.plugged_size() else {
                gone = true;
                break None;
            };
            plugged = now;
            if plugged == mib * MIB {
                break Some(started.elapsed().as_secs_f64() * 1e3);
            }
            if started.elapsed() >= wait {
                break None;
            }
            std::thread::sleep(POLL);
        };
        done.push(Resized {
            requested_mib: mib,
            plugged_mib: plugged / MIB,
            latency_ms: latency.map(|ms| (ms * 1e3).round() / 1e3),
        });
        if gone {
            break;
        }
    }
    Ok(done)
}

/// The kernel's virtio-mem figures (its summary's `"vmem"`) as table
/// rows: the guest's time per 128 MiB moved, by part, and its audit.
pub fn guest_rows(vmem: &Value, row: &mut impl FnMut(&str, String)) {
    if let Some(error) = vmem["error"].as_str() {
        row("virtio-mem", error.to_owned());
        return;
    }
    if vmem.is_null() {
        return;
    }
    let per = &vmem["per_128mib_ns"];
    let us = |key: &str| {
        per[key]
            .as_u64()
            .map_or("?".to_owned(), |ns| format!("{:.1}", ns as f64 / 1e3))
    };
    row(
        "virtio-mem",
        format!(
            "per 128 MiB: device {} us, physmem {} us, page tables {} us, allocator {} us; {} pages lost, {} stale",
            us("device"),
            us("physmem"),
            us("tables"),
            us("allocator"),
            vmem["pages_lost"],
            vmem["stale"]
        ),
    );
    if let Some(median) = median_resize(vmem) {
        let us = |index: usize| format!("{:.1}", median[index] / 1e3);
        row(
            "",
            format!(
                "the median resize per 128 MiB (a host stall of a vCPU moves the sums above, not this): device {} us, physmem {} us, page tables {} us, allocator {} us",
                us(0),
                us(1),
                us(2),
                us(3)
            ),
        );
    }
    let config = &vmem["config_changes"];
    if config.is_object() {
        row(
            "",
            format!(
                "configuration changes by {}: {} interrupts, {} seen only by polling",
                config["route"].as_str().unwrap_or("?"),
                config["interrupts"],
                config["missed"]
            ),
        );
    }
    let lookups = &vmem["lookups"];
    if lookups.is_object() {
        row(
            "",
            format!(
                "lookups on {} CPUs: {} ns idle, {} ns during resizes (median batch {} ns, {} ns); {} of {} blocks seen half plugged",
                lookups["cpus"].as_array().map_or(0, Vec::len),
                lookups["idle_ns"],
                lookups["resizing_ns"],
                lookups["idle_median_ns"],
                lookups["resizing_median_ns"],
                lookups["half_plugged"],
                lookups["blocks_checked"]
            ),
        );
    }
}

/// Each part's guest ns per 128 MiB in the median resize (device,
/// physmem, page tables, allocator), over the resizes that moved memory;
/// `None` without any. Under TCG a vCPU the host deschedules for a time
/// slice adds milliseconds to whichever part it was in; a median of
/// resizes shows the typical cost that a sum hides.
pub fn median_resize(vmem: &Value) -> Option<[f64; 4]> {
    let resizes = vmem["resizes"].as_array()?;
    let block_bytes = u128::from(vmem["block_bytes"].as_u64()?);
    let moved: Vec<(&Value, u128)> = resizes
        .iter()
        .filter_map(|r| {
            let blocks = r["blocks"].as_i64()?.unsigned_abs();
            (blocks != 0).then(|| (r, u128::from(blocks) * block_bytes))
        })
        .collect();
    if moved.is_empty() {
        return None;
    }
    let per_128mib = |key: &str| -> Vec<u64> {
        moved
            .iter()
            .map(|&(r, bytes)| {
                let ns = u128::from(r[key].as_u64().unwrap_or(0));
                (ns * (128 << 20) / bytes) as u64
            })
            .collect()
    };
    Some(
        ["device_ns", "physmem_ns", "tables_ns", "allocator_ns"]
            .map(|key| median(&per_128mib(key))),
    )
}

/// Parses `--resize`'s list: sizes as `--memory` takes them (`128M`,
/// `1G`), each a multiple of 2 MiB (the device's block), 0 allowed, each
/// a change: the kernel counts resizes by the requested size changing, so
/// a first 0 (the size at boot) or a size repeated at once never comes.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, String> {
    let sizes = parse_each(text)?;
    let mut before = 0;
    for &mib in &sizes {
        if mib == before {
            return Err(format!(
                "--resize {text:?}: {mib} MiB is the size already asked for; each size must change it"
            ));
        }
        before = mib;
    }
    Ok(sizes)
}

fn parse_each(text: &str) -> Result<Vec<u64>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let mib = if item == "0" {
                0
            } else {
                let digits = item.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                let unit = &item[digits.len()..];
                let number: u64 = digits
                    .parse()
                    .map_err(|_| format!("--resize {item:?}: expected a size like 128M or 1G"))?;
                match unit.to_ascii_lowercase().as_str() {
                    "" | "m" | "mb" | "mib" => number,
                    "g" | "gb" | "gib" => number.saturating_mul(1024),
                    _ => {
                        return Err(format!(
                            "--resize {item:?}: unknown unit {unit:?} (use M or G)"
                        ))
                    }
                }
            };
            if mib % 2 != 0 {
                return Err(format!(
                    "--resize {item:?}: not a multiple of the 2 MiB block"
                ));
            }
            Ok(mib)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_sizes("128M,1G,0,64"), Ok(vec![128, 1024, 0, 64]));
        assert!(parse_sizes("0,64")
            .unwrap_err()
            .contains("already asked for"));
        assert!(parse_sizes("64,64M")
            .unwrap_err()
            .contains("already asked for"));
        assert!(parse_sizes("3M").unwrap_err().contains("2 MiB"));
        assert!(parse_sizes("1T").unwrap_err().contains("unknown unit"));
        assert!(parse_sizes("lots").is_err());
        assert!(parse_sizes("").is_err());
    }

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
        let done = drive(&socket, &[4, 2, 6, 8], Duration::from_millis(50)).unwrap();
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

    #[test]
    fn the_median_resize_is_per_128_mib_and_skips_resizes_that_moved_nothing() {
        let resize = |blocks: i64, physmem: u64| {
            serde_json::json!({"blocks": blocks, "device_ns": 10 * blocks.unsigned_abs(),
                "physmem_ns": physmem, "tables_ns": 0, "allocator_ns": 64})
        };
        // 2 MiB blocks: 64 blocks are 128 MiB.
        let vmem = serde_json::json!({"block_bytes": 2 << 20, "resizes": [
            resize(64, 50_000), resize(-128, 60_000), resize(0, 9_000_000),
            resize(64, 9_000_000), resize(32, 40_000)]});
        let median = median_resize(&vmem).unwrap();
        // physmem per 128 MiB: 50,000, 30,000, 9,000,000, 80,000.
        assert_eq!(median[1], 65_000.0);
        assert_eq!(median[0], 640.0, "device ns scale with the blocks");
        // allocator: 64, 32, 64, 128 per 128 MiB.
        assert_eq!(median[3], 64.0);
        let none = serde_json::json!({"block_bytes": 2 << 20, "resizes": [resize(0, 1)]});
        assert_eq!(median_resize(&none), None);
    }

    #[test]
    fn the_table_says_how_configuration_changes_came() {
        let vmem = serde_json::json!({
            "per_128mib_ns": {"device": 1000, "physmem": 2000, "tables": 3000, "allocator": 4000},
            "pages_lost": 0,
            "stale": 0,
            "config_changes": {"route": "intx", "interrupts": 3, "missed": 1},
        });
        let mut rows = Vec::new();
        guest_rows(&vmem, &mut |name: &str, text: String| {
            rows.push((name.to_owned(), text))
        });
        assert!(
            rows.iter().any(|(_, text)| text
                == "configuration changes by intx: 3 interrupts, 1 seen only by polling"),
            "{rows:?}"
        );
    }
}
