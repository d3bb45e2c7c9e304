use super::*;

/// A fresh directory holding `trace.dat` with `bytes`, as QEMU leaves it.
fn received(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hotkern-crash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.dat");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn end_line(bytes: &[u8]) -> String {
    format!(
        "hotkern: crash dump {{\"events\":7,\"lost\":1,\"bytes\":{},\"fnv1a64\":\"{:016x}\"}}\r",
        bytes.len(),
        trace::fnv1a64(bytes)
    )
}

fn lines(text: &[&str]) -> DumpLines {
    let mut lines = DumpLines::default();
    for line in text {
        lines.take(line);
    }
    lines
}

const DUMP: &[u8] = b"\x17\x08\x44tracing6 and the rest of a trace.dat";

#[test]
fn only_the_dump_lines_are_taken() {
    let mut dump = DumpLines::default();
    assert!(dump.take("hotkern: crash dump begins: 4096 bytes on COM2"));
    assert!(dump.take("hotkern: crash dump skipped: tracing was not on"));
    assert!(!dump.take("hotkern: panic on cpu 0 at x.rs:1:1: boom"));
    assert!(!dump.take("hotkern: crash dumps are fine"));
    assert_eq!(dump.began, Some(4096));
}

#[test]
fn a_whole_dump_is_renamed_and_described() {
    let path = received("whole", DUMP);
    let said = lines(&[
        "hotkern: crash dump begins: 44 bytes on COM2",
        &end_line(DUMP),
    ]);
    let dump = settle(&said, &path);
    let expected = path.with_file_name(CRASH_TRACE_DAT);
    let Ok(Some(CrashDump::Written(trace))) = &dump else {
        panic!("{dump:?}")
    };
    assert_eq!(
        (trace.events, trace.lost, trace.bytes),
        (7, 1, DUMP.len() as u64)
    );
    assert_eq!(trace.path, expected);
    assert_eq!(std::fs::read(&expected).unwrap(), DUMP);
    assert!(!path.exists(), "the received file was renamed");
    let line = describe(&dump).unwrap();
    assert_eq!(
        line,
        format!(
            "crash dump: 7 events, trace written to {p} (read with trace-cmd report {p})",
            p = expected.display()
        )
    );
    let document = to_json(&dump);
    assert_eq!(document["events"], 7);
    assert_eq!(document["trace_dat"], expected.display().to_string());
    assert!(document["error"].is_null());
}

#[test]
fn a_dump_cut_short_is_kept_as_partial_and_reported() {
    // QEMU died mid-dump: the begin line, part of the bytes, no end line.
    let path = received("cut", &DUMP[..20]);
    let said = lines(&["hotkern: crash dump begins: 44 bytes on COM2"]);
    let error = settle(&said, &path).unwrap_err();
    let partial = path.with_file_name(CRASH_TRACE_PARTIAL);
    assert_eq!(error.partial.as_deref(), Some(partial.as_path()));
    let text = error.to_string();
    assert!(text.starts_with("crash dump incomplete: "), "{text}");
    assert!(text.contains("never announced its end"), "{text}");
    assert!(text.contains("20 bytes arrived"), "{text}");
    assert!(!path.with_file_name(CRASH_TRACE_DAT).exists());
    assert_eq!(std::fs::read(&partial).unwrap(), &DUMP[..20]);
    let document = to_json(&Err(error));
    assert!(document["trace_dat"].is_null());
    assert!(document["error"]
        .as_str()
        .unwrap()
        .starts_with("crash dump incomplete"));
}

#[test]
fn bytes_that_do_not_match_the_end_line_are_incomplete() {
    // The end line came, but the file lost its tail (COM2 output cut).
    let path = received("short", &DUMP[..DUMP.len() - 4]);
    let said = lines(&[
        "hotkern: crash dump begins: 44 bytes on COM2",
        &end_line(DUMP),
    ]);
    let error = settle(&said, &path).unwrap_err();
    let expected = format!("{} bytes, the kernel sent {}", DUMP.len() - 4, DUMP.len());
    assert!(error.cause.contains(&expected), "{error}");
    assert!(!path.with_file_name(CRASH_TRACE_DAT).exists());
    assert!(path.with_file_name(CRASH_TRACE_PARTIAL).exists());
    // One byte changed: the checksum tells.
    let mut changed = DUMP.to_vec();
    changed[5] ^= 1;
    let path = received("changed", &changed);
    let error = settle(&lines(&[&end_line(DUMP)]), &path).unwrap_err();
    assert!(error.cause.contains("checksum"), "{error}");
}

#[test]
fn an_abandoned_dump_says_why() {
    let path = received("abandoned", &DUMP[..10]);
    let said = lines(&[
        "hotkern: crash dump begins: 44 bytes on COM2",
        "hotkern: crash dump abandoned: a second crash while writing it",
    ]);
    let error = settle(&said, &path).unwrap_err();
    assert!(
        error.cause.contains("a second crash while writing it"),
        "{error}"
    );
}

#[test]
fn a_skipped_dump_or_none_is_not_an_error() {
    let path = received("skipped", b"");
    let said = lines(&["hotkern: crash dump skipped: tracing was not on"]);
    assert_eq!(
        settle(&said, &path),
        Ok(Some(CrashDump::Skipped("tracing was not on".to_owned())))
    );
    assert_eq!(settle(&DumpLines::default(), &path), Ok(None));
    assert!(to_json(&Ok(None)).is_null());
    // An empty received file is not kept as a partial dump.
    let error = settle(&lines(&["hotkern: crash dump begins: 9 bytes"]), &path).unwrap_err();
    assert_eq!(error.partial, None);
}

#[test]
fn an_end_line_that_is_not_json_is_incomplete() {
    let path = received("garbled", DUMP);
    let error = settle(&lines(&["hotkern: crash dump {\"events\":"]), &path).unwrap_err();
    assert!(error.cause.contains("not JSON"), "{error}");
}
