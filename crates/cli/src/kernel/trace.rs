//! The kernel's trace: a `trace.dat` the kernel sends raw on its second
//! serial port (COM2, `-serial file:DIR/trace.dat`), checked against the
//! size and FNV-1a checksum its summary announces (`"trace"`), so a file
//! cut short or mixed with other output is reported, not handed to
//! trace-cmd.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The trace file's name in the output directory.
pub const TRACE_DAT: &str = "trace.dat";

/// A trace that arrived whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Where it is.
    pub path: PathBuf,
    /// Events in it, as the kernel counted them.
    pub events: u64,
    /// Events the kernel's rings lost.
    pub lost: u64,
    /// Its size.
    pub bytes: u64,
}

/// FNV-1a, 64 bits (the kernel's checksum of the file).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Checks `bytes` (read from `path`) against the summary's `"trace"`
/// object.
pub fn verify(announced: &Value, path: &Path, bytes: &[u8]) -> Result<Trace, String> {
    let field = |name: &str| {
        announced[name]
            .as_u64()
            .ok_or_else(|| format!("the summary's trace has no {name:?}"))
    };
    let (events, lost, size) = (field("events")?, field("lost")?, field("bytes")?);
    let checksum = announced["fnv1a64"]
        .as_str()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or("the summary's trace has no fnv1a64 checksum")?;
    if bytes.len() as u64 != size {
        return Err(format!(
            "{}: {} bytes, the kernel sent {size}",
            path.display(),
            bytes.len()
        ));
    }
    if fnv1a64(bytes) != checksum {
        return Err(format!(
            "{}: checksum {:016x}, the kernel's is {checksum:016x}",
            path.display(),
            fnv1a64(bytes)
        ));
    }
    Ok(Trace {
        path: path.to_owned(),
        events,
        lost,
        bytes: size,
    })
}

/// Reads the file QEMU wrote and checks it; `Ok(None)` when the kernel
/// announced no trace (it printed no summary, or `"trace": null`).
pub fn collect(summary: Option<&Value>, path: &Path) -> Result<Option<Trace>, String> {
    let Some(announced) = summary.map(|s| &s["trace"]).filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    let bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    verify(announced, path, &bytes).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_values() {
        // From the FNV reference test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    fn announced(bytes: &[u8]) -> Value {
        json!({"events": 7, "lost": 0, "bytes": bytes.len(),
               "fnv1a64": format!("{:016x}", fnv1a64(bytes))})
    }

    #[test]
    fn a_whole_file_is_accepted() {
        let bytes = b"\x17\x08\x44tracing6";
        let trace = verify(&announced(bytes), Path::new("t.dat"), bytes).unwrap();
        assert_eq!((trace.events, trace.lost, trace.bytes), (7, 0, 11));
        assert_eq!(trace.path, Path::new("t.dat"));
    }

    #[test]
    fn a_cut_or_changed_file_is_refused() {
        let bytes = b"\x17\x08\x44tracing6";
        let cut = verify(&announced(bytes), Path::new("t.dat"), &bytes[..5]).unwrap_err();
        assert!(cut.contains("5 bytes, the kernel sent 11"), "{cut}");
        let mut changed = bytes.to_vec();
        changed[3] ^= 1;
        let changed = verify(&announced(bytes), Path::new("t.dat"), &changed).unwrap_err();
        assert!(changed.contains("checksum"), "{changed}");
    }

    #[test]
    fn a_summary_without_the_fields_is_refused() {
        let error = verify(&json!({"events": 1}), Path::new("t"), b"").unwrap_err();
        assert!(error.contains("\"lost\""), "{error}");
        let error = verify(
            &json!({"events": 1, "lost": 0, "bytes": 0, "fnv1a64": "xyz"}),
            Path::new("t"),
            b"",
        )
        .unwrap_err();
        assert!(error.contains("fnv1a64"), "{error}");
    }

    #[test]
    fn no_trace_announced_is_not_an_error() {
        let path = Path::new("/nonexistent/trace.dat");
        assert_eq!(collect(None, path), Ok(None));
        assert_eq!(collect(Some(&json!({"trace": null})), path), Ok(None));
        assert!(collect(Some(&json!({"trace": {"events": 1}})), path).is_err());
    }
}
