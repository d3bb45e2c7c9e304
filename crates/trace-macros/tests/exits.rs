//! Every way out of an instrumented function records its exit: an early
//! `return`, `?`, falling off the end (with and without a value) and
//! unwinding. Read back from a real function_graph tracer.

use hotkern_trace::event::{FUNCGRAPH_ENTRY_ID, FUNCGRAPH_EXIT_ID};
use hotkern_trace::function::TracerKind;
use hotkern_trace::internals::function_name;
use hotkern_trace::{TraceConfig, Tracer};

mod paths {
    use std::num::ParseIntError;

    #[hotkern_trace::function]
    pub fn early(n: u32) -> u32 {
        if n == 0 {
            return 100;
        }
        n
    }

    #[hotkern_trace::function]
    pub fn question(text: &str) -> Result<u32, ParseIntError> {
        let n: u32 = text.parse()?;
        Ok(n)
    }

    #[hotkern_trace::function]
    pub fn falls_off(n: u32) -> u32 {
        n + 1
    }

    #[hotkern_trace::function]
    pub fn unit(counter: &mut u32) {
        *counter += 1;
    }

    #[hotkern_trace::function]
    pub fn from_loop(limit: u32) -> u32 {
        let mut n = 0;
        loop {
            if n == limit {
                return n;
            }
            n += 1;
        }
    }

    #[hotkern_trace::function]
    pub fn panics(n: u32) -> u32 {
        if n == 0 {
            panic!("unwinding through an instrumented function");
        }
        n
    }

    #[hotkern_trace::function]
    pub fn caller(text: &str) -> Result<u32, ParseIntError> {
        let n = early(0);
        Ok(n + question(text)?)
    }
}

#[test]
fn every_return_path_records_an_exit() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 2)
        .and_then(Tracer::install)
        .unwrap();
    tracer.set_ftrace_filter(":mod:*::paths", false).unwrap();
    tracer
        .set_current_tracer(TracerKind::FunctionGraph)
        .unwrap();
    assert_eq!(paths::early(0), 100);
    assert_eq!(paths::early(5), 5);
    assert_eq!(paths::question("7"), Ok(7));
    assert!(paths::question("x").is_err());
    assert_eq!(paths::falls_off(1), 2);
    let mut counter = 0;
    paths::unit(&mut counter);
    assert_eq!(counter, 1);
    assert_eq!(paths::from_loop(3), 3);
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    assert!(std::panic::catch_unwind(|| paths::panics(0)).is_err());
    std::panic::set_hook(previous_hook);
    assert!(paths::caller("x").is_err());
    assert_eq!(paths::caller("1"), Ok(101));
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let records = tracer.drain_records();
    let lost: u64 = (0..tracer.cpus()).map(|cpu| tracer.lost(cpu)).sum();
    tracer.uninstall();
    assert_eq!(lost, 0);

    let shape: Vec<(char, &str, i64)> = records
        .iter()
        .filter(|r| r.event_id == FUNCGRAPH_ENTRY_ID || r.event_id == FUNCGRAPH_EXIT_ID)
        .map(|r| {
            let kind = if r.event_id == FUNCGRAPH_ENTRY_ID {
                'e'
            } else {
                'x'
            };
            let name = function_name(r.unsigned(8, 8)).unwrap_or("?");
            (kind, name, r.signed(16, 4))
        })
        .collect();
    let pair = |name| [('e', name, 0), ('x', name, 0)];
    let mut expected: Vec<(char, &str, i64)> = Vec::new();
    for name in [
        "early",
        "early",
        "question",
        "question",
        "falls_off",
        "unit",
        "from_loop",
        "panics",
    ] {
        expected.extend(pair(name));
    }
    // `caller("x")` leaves through its inner `?`, `caller("1")` at the end.
    for _ in ["x", "1"] {
        expected.extend([
            ('e', "caller", 0),
            ('e', "early", 1),
            ('x', "early", 1),
            ('e', "question", 1),
            ('x', "question", 1),
            ('x', "caller", 0),
        ]);
    }
    assert_eq!(shape, expected);
}
