//! The argument parser against kernel format shapes and libtraceevent's
//! quirks.

use super::*;

#[test]
fn parses_kernel_shapes() {
    let args = parse_args(
        "REC->prev_state & ((((0x00000000 | 0x00000001) + 1) << 1) - 1) ? __print_flags(REC->prev_state & 3, \"|\", { 0x01, \"S\" }) : \"R\", (unsigned long)REC->x, __get_str(name)",
    )
    .unwrap();
    assert_eq!(args.len(), 3);
    assert!(matches!(args[0], Arg::Ternary(..)));
    assert!(matches!(&args[1], Arg::Cast(t, _) if t == "unsigned long"));
    assert_eq!(args[2], Arg::GetStr("name".into()));
    assert!(parse_args("unknown_helper(REC->x)").is_none());
}

#[test]
fn libtraceevent_quirks() {
    // likely()/unlikely() are their condition.
    let args = parse_args("__builtin_expect(!!(REC->a >= 5), 0) ? 0 : REC->a").unwrap();
    assert!(matches!(args[0], Arg::Ternary(..)));
    // A tab inside the format string ends it: the event fails to parse
    // (maple_tree's events in Linux 6.x print as `[FAILED TO PARSE]`).
    assert!(crate::print::PrintFmt::parse("\"%s\\tNode\", REC->fn").is_some());
    assert!(crate::print::PrintFmt::parse("\"%s\u{9}Node\", REC->fn").is_none());
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(parse_args(&deep).is_none());
    let long = vec!["1"; 100_000].join(" + ");
    assert!(parse_args(&long).is_none());
    assert!(parse_args(&"-".repeat(100_000)).is_none());
}

#[test]
fn c_numbers() {
    assert_eq!(parse_c_number("0x10UL"), Some(16));
    assert_eq!(parse_c_number("010"), Some(8));
    assert_eq!(parse_c_number("12"), Some(12));
    assert_eq!(parse_c_number("ABC"), None);
}
