//! Any text either fails to parse with an in-range position, or compiles
//! to a program that agrees with the tree-walking reference on any payload,
//! for an unknown task and for a task named by the payload's first bytes.
#![no_main]

use hotkern_trace::internals::filter::{parse, FieldSpec, Filter};
use hotkern_trace::internals::filter_reference as reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(text) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let payload = data.get(split + 1..).unwrap_or_default();
    let fields = [
        FieldSpec::unsigned("common_type", 0, 2),
        FieldSpec::signed("common_pid", 4, 4),
        FieldSpec::signed("s8", 8, 1),
        FieldSpec::unsigned("u16", 10, 2),
        FieldSpec::unsigned("u64", 16, 8),
        FieldSpec::signed("s64", 24, 8),
        FieldSpec::fixed_string("name", 32, 8),
        FieldSpec::data_loc_string("msg", 40),
    ];
    match Filter::compile(text, &fields) {
        Err(error) => assert!(error.position <= text.len()),
        Ok(filter) => {
            let expr = parse(text, &fields).expect("compiled filters parse");
            for cpu in [0, 3] {
                assert_eq!(
                    filter.matches_on(payload, cpu),
                    reference::evaluate(&expr, &fields, payload, cpu),
                    "{text}"
                );
            }
            let comm = &payload[..payload.len().min(16)];
            assert_eq!(
                filter.matches_task(payload, 1, Some(comm)),
                reference::evaluate_task(&expr, &fields, payload, 1, Some(comm)),
                "{text}"
            );
        }
    }
});
