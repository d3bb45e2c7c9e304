//! Functions register on their first call. Threads whose first calls race
//! the registering thread must still be traced: no call may go missing
//! without being counted as lost. Its own test binary: it installs a tracer.

use std::sync::{Arc, Barrier};

use hotkern_trace::function::TracerKind;
use hotkern_trace::{TraceConfig, Tracer};

const THREADS: usize = 4;

macro_rules! fresh_functions {
    ($($name:ident)*) => {
        mod fresh {
            $(
                #[hotkern_trace::function]
                pub fn $name(x: u64) -> u64 {
                    std::hint::black_box(x + 1)
                }
            )*
        }
        const FUNCTIONS: &[fn(u64) -> u64] = &[$(fresh::$name),*];
    };
}

fresh_functions! {
    f00 f01 f02 f03 f04 f05 f06 f07 f08 f09 f10 f11 f12 f13 f14 f15
    f16 f17 f18 f19 f20 f21 f22 f23 f24 f25 f26 f27 f28 f29 f30 f31
    f32 f33 f34 f35 f36 f37 f38 f39 f40 f41 f42 f43 f44 f45 f46 f47
    f48 f49 f50 f51 f52 f53 f54 f55 f56 f57 f58 f59 f60 f61 f62 f63
}

#[test]
fn racing_first_calls_are_all_traced() {
    let tracer = Tracer::with_threads(TraceConfig::small(), THREADS)
        .and_then(Tracer::install)
        .unwrap();
    tracer.set_current_tracer(TracerKind::Function).unwrap();
    let function_event = tracer.event_id("ftrace", "function");
    for (n, &function) in FUNCTIONS.iter().enumerate() {
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let start = Arc::clone(&start);
                // Joined (not scoped) so each thread has given its CPU
                // slot back before the next round claims one.
                std::thread::spawn(move || {
                    start.wait();
                    function(n as u64)
                })
            })
            .collect();
        for thread in threads {
            assert_eq!(thread.join().unwrap(), n as u64 + 1);
        }
    }
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let records = tracer.drain_records();
    let lost: u64 = (0..THREADS).map(|cpu| tracer.lost(cpu)).sum();
    tracer.uninstall();
    let calls = records
        .iter()
        .filter(|r| Some(r.event_id) == function_event)
        .count();
    assert_eq!(lost, 0);
    assert_eq!(calls, FUNCTIONS.len() * THREADS);
}
