//! Reading any bytes as trace.dat never panics, and whatever reads back
//! prints as a report and as ftrace text.
#![no_main]

use hotkern_trace::output::tracedat::read_trace_dat;
use hotkern_trace::output::{write_report, write_trace};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = read_trace_dat(data) {
        if let Ok(trace) = file.to_trace_data() {
            let mut out = String::new();
            write_report(&trace, true, &mut out);
            write_trace(&trace, "function_graph", &mut out);
            write_trace(&trace, "nop", &mut out);
        }
    }
});
