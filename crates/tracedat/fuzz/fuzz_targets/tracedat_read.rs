//! Reading any bytes as a trace.dat (version 6 or 7, compressed or not)
//! never panics, and whatever reads prints as a report.
#![no_main]

use hotkern_tracedat::{write_report, ReportOptions, TraceFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut file) = TraceFile::from_bytes(data.to_vec()) {
        let _ = write_report(&mut file, &ReportOptions::default(), &mut std::io::sink());
    }
});
