use super::*;
use crate::filter::parse::{MAX_DEPTH, MAX_PREDICATES};
use alloc::string::String;
use alloc::vec::Vec;

fn fields() -> Vec<FieldSpec> {
    let mut fields: Vec<FieldSpec> = common_fields().to_vec();
    fields.push(FieldSpec::fixed_string("comm", 8, 16));
    fields.push(FieldSpec::signed("pid", 24, 4));
    fields.push(FieldSpec::unsigned("flags", 28, 4));
    fields.push(FieldSpec::data_loc_string("msg", 32));
    fields
}

fn payload(comm: &str, pid: i32, flags: u32, msg: &str) -> Vec<u8> {
    let mut p = alloc::vec![0u8; 36];
    p[4..8].copy_from_slice(&77i32.to_ne_bytes());
    p[8..8 + comm.len()].copy_from_slice(comm.as_bytes());
    p[24..28].copy_from_slice(&pid.to_ne_bytes());
    p[28..32].copy_from_slice(&flags.to_ne_bytes());
    let locator = 36u32 | ((msg.len() as u32 + 1) << 16);
    p[32..36].copy_from_slice(&locator.to_ne_bytes());
    p.extend_from_slice(msg.as_bytes());
    p.push(0);
    p
}

fn check(text: &str, payload: &[u8]) -> bool {
    let fields = fields();
    let filter = Filter::compile(text, &fields).unwrap();
    let expr = parse(text, &fields).unwrap();
    let expected = reference::evaluate(&expr, &fields, payload, 1);
    assert_eq!(filter.matches_on(payload, 1), expected, "{text}");
    expected
}

#[test]
fn integers_and_strings() {
    let p = payload("bash", -5, 0b1010, "hello world");
    assert!(check("pid == -5", &p));
    assert!(check("pid < 0 && pid >= -5", &p));
    assert!(!check("pid > -5", &p));
    assert!(check("flags & 2", &p));
    assert!(!check("flags & 0x5", &p));
    assert!(check("flags == 012", &p));
    assert!(check("comm == \"bash\"", &p));
    assert!(check("comm != 'zsh'", &p));
    assert!(check("comm ~ \"b*\"", &p));
    assert!(check("msg ~ \"*wor?d\"", &p));
    assert!(check("msg == 'hello world'", &p));
    assert!(check("common_pid == 77", &p));
    assert!(check("CPU == 1", &p));
}

#[test]
fn precedence_and_negation() {
    let p = payload("bash", 3, 0, "");
    // && binds tighter than ||.
    assert!(check("pid == 3 || pid == 4 && pid == 5", &p));
    assert!(!check("(pid == 3 || pid == 4) && pid == 5", &p));
    assert!(check("!pid == 4", &p));
    assert!(!check("!!!(pid == 3)", &p));
    assert!(check("!(pid == 4 || comm == \"x\")", &p));
}

#[test]
fn short_payloads_never_match_or_panic() {
    let p = payload("bash", 3, 0, "abc");
    let fields = fields();
    for cut in 0..p.len() {
        for text in ["pid == 3", "msg ~ \"a*\"", "comm != \"x\"", "flags & 1"] {
            let filter = Filter::compile(text, &fields).unwrap();
            let expr = parse(text, &fields).unwrap();
            assert_eq!(
                filter.matches(&p[..cut]),
                reference::evaluate(&expr, &fields, &p[..cut], 0)
            );
        }
    }
}

#[test]
fn errors_carry_ftrace_messages_and_positions() {
    let fields = fields();
    let cases: &[(&str, FilterErrorKind, usize)] = &[
        ("", FilterErrorKind::InvalidFilter, 0),
        ("pidd == 3", FilterErrorKind::FieldNotFound, 0),
        ("pid == 3 && nope == 1", FilterErrorKind::FieldNotFound, 12),
        ("pid = 3", FilterErrorKind::InvalidOperator, 4),
        ("pid == abc", FilterErrorKind::InvalidValue, 7),
        ("pid == 12abc", FilterErrorKind::IllegalIntValue, 7),
        ("flags == -1", FilterErrorKind::IllegalIntValue, 9),
        ("pid == \"3\"", FilterErrorKind::ExpectDigit, 7),
        ("comm == 3", FilterErrorKind::ExpectString, 8),
        ("comm < \"a\"", FilterErrorKind::IllegalFieldOp, 7),
        ("pid ~ 3", FilterErrorKind::IllegalFieldOp, 6),
        ("comm == \"abc", FilterErrorKind::MissingQuote, 12),
        ("(pid == 3", FilterErrorKind::TooManyOpen, 0),
        ("pid == 3)", FilterErrorKind::TooManyClose, 8),
        ("pid == 3 &&", FilterErrorKind::InvalidFilter, 11),
        ("pid == 3 pid", FilterErrorKind::InvalidFilter, 9),
        ("()", FilterErrorKind::InvalidFilter, 1),
    ];
    for &(text, kind, position) in cases {
        let error = Filter::compile(text, &fields).unwrap_err();
        assert_eq!((error.kind, error.position), (kind, position), "{text:?}");
    }
}

#[test]
fn error_report_puts_caret_under_the_error() {
    let fields = fields();
    let text = "pid == 3 && nope == 1";
    let error = Filter::compile(text, &fields).unwrap_err();
    let mut report = String::new();
    error.write_report(&mut report, text).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], text);
    assert_eq!(lines[1].find('^'), Some(12));
    assert_eq!(lines[2], "parse_error: Field not found");
}

#[test]
fn limits_are_enforced() {
    let fields = fields();
    let deep = "(".repeat(MAX_DEPTH + 1) + "pid == 1" + &")".repeat(MAX_DEPTH + 1);
    assert_eq!(
        Filter::compile(&deep, &fields).unwrap_err().kind,
        FilterErrorKind::TooManyOpen
    );
    let many: Vec<&str> = core::iter::repeat_n("pid == 1", MAX_PREDICATES + 1).collect();
    assert_eq!(
        Filter::compile(&many.join(" || "), &fields)
            .unwrap_err()
            .kind,
        FilterErrorKind::TooManyPreds
    );
    let bangs = "!".repeat(100_000) + "pid == 3";
    let p = payload("x", 3, 0, "");
    assert!(Filter::compile(&bangs, &fields).unwrap().matches(&p));
}

/// Compiled program and reference on `payload` hit by the task `comm`.
fn check_task(text: &str, payload: &[u8], comm: Option<&[u8]>) -> bool {
    let fields = fields();
    let filter = Filter::compile(text, &fields).unwrap();
    let expr = parse(text, &fields).unwrap();
    let expected = reference::evaluate_task(&expr, &fields, payload, 0, comm);
    assert_eq!(filter.matches_task(payload, 0, comm), expected, "{text}");
    expected
}

#[test]
fn comm_names_the_task_that_hit_the_event() {
    let p = payload("bash", 3, 0, "");
    let mut worker = [0u8; 16];
    worker[..8].copy_from_slice(b"worker-1");
    let worker = Some(&worker[..]);
    assert!(check_task("COMM == \"worker-1\"", &p, worker));
    assert!(!check_task("COMM == \"worker\"", &p, worker));
    assert!(check_task("COMM != 'worker-2'", &p, worker));
    assert!(check_task("COMM ~ \"work*\" && pid == 3", &p, worker));
    assert!(check_task("COMM ~ \"*-[12]\"", &p, worker));
    assert!(!check_task("COMM ~ \"*-[34]\"", &p, worker));
    // The event's own `comm` field wins over the pseudo-field, as in ftrace;
    // `COMM` still names the task.
    assert!(check_task(
        "comm == \"bash\" && COMM == \"worker-1\"",
        &p,
        worker
    ));
    // A name without a NUL uses all its bytes.
    assert!(check_task(
        "COMM == \"abcdefghijklmnop\"",
        &p,
        Some(b"abcdefghijklmnop")
    ));
    // Unknown task: `==` and `~` fail, `!=` holds.
    assert!(!check_task("COMM == \"worker-1\"", &p, None));
    assert!(!check_task("COMM ~ \"*\"", &p, None));
    assert!(check_task("COMM != \"worker-1\"", &p, None));
    // Without a task name, matches() behaves as an unknown task.
    let filter = Filter::compile("COMM != \"x\"", &fields()).unwrap();
    assert!(filter.uses_comm());
    assert!(filter.matches(&p));
    assert!(!Filter::compile("pid == 3", &fields()).unwrap().uses_comm());
}

#[test]
fn comm_is_a_string_pseudo_field_on_every_event() {
    let bare = [FieldSpec::signed("pid", 8, 4)];
    for text in ["comm == \"a\"", "COMM != \"a\"", "comm ~ \"a*\""] {
        assert!(Filter::compile(text, &bare).is_ok(), "{text}");
    }
    let cases: &[(&str, FilterErrorKind, usize)] = &[
        ("comm > \"x\"", FilterErrorKind::IllegalFieldOp, 7),
        ("COMM & \"x\"", FilterErrorKind::IllegalFieldOp, 7),
        ("COMM == 3", FilterErrorKind::ExpectString, 8),
        ("pid == 1 || COMM ~ 3", FilterErrorKind::ExpectString, 19),
        ("Comm == \"x\"", FilterErrorKind::FieldNotFound, 0),
    ];
    for &(text, kind, position) in cases {
        let error = Filter::compile(text, &bare).unwrap_err();
        assert_eq!((error.kind, error.position), (kind, position), "{text:?}");
    }
}

#[test]
fn one_compiled_test_per_predicate() {
    // Counted by hand: `&&`, `||`, `!` and parentheses compile to jumps,
    // so only the comparisons remain, pseudo-fields included.
    let cases: &[(&str, usize)] = &[
        ("pid == 3", 1),
        ("!pid == 4", 1),
        ("pid == 3 && (comm == \"a\" || !(flags & 1))", 3),
        ("CPU == 1 || COMM ~ \"x*\"", 2),
        ("pid < 0 && pid > -9 && msg ~ \"*a\" && common_pid != 1", 4),
    ];
    for &(text, predicates) in cases {
        let filter = Filter::compile(text, &fields()).unwrap();
        assert_eq!(filter.predicates(), predicates, "{text}");
    }
}
