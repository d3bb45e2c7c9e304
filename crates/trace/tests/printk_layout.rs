//! `trace_printk!` arguments are stored as the kernel's `vbin_printf` packs
//! them, so both our formatter and the C-format renderer that trace.dat
//! readers use (strings unaligned, integers on 4-byte boundaries) agree,
//! even with strings in a row. Its own test binary: it installs a tracer
//! globally.

use hotkern_trace::{printk, trace_printk, TraceConfig, Tracer};
use hotkern_tracedat::print::{write_binary_message, Tables};

#[test]
fn strings_in_a_row_read_back_through_both_formatters() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 1)
        .unwrap()
        .install()
        .unwrap();
    trace_printk!("a={} s1={} s2={} b={}", 5u32, "xy", "hello", 9u64);
    trace_printk!("{}{}{} n={:#x}", "", 'c', "odd", 0xabcu64);
    let records = tracer.drain_records();
    tracer.uninstall();
    assert_eq!(records.len(), 2);

    let expected = ["a=5 s1=xy s2=hello b=9", "codd n=0xabc"];
    let formats = hotkern_trace::internals::printk_formats();
    for (record, expected) in records.iter().zip(expected) {
        assert_eq!(printk::format_bprint(&record.payload).unwrap(), expected);
        // bprint payload: common header (8), ip (8), fmt address (8), args.
        let address = u64::from_ne_bytes(record.payload[16..24].try_into().unwrap());
        let (_, c_format) = formats.iter().find(|(a, _)| *a == address).unwrap();
        let mut rendered = String::new();
        let tables = Tables::new(
            cfg!(target_endian = "big"),
            std::mem::size_of::<usize>(),
            Default::default(),
            [],
        );
        write_binary_message(c_format, &record.payload[24..], &tables, &mut rendered);
        assert_eq!(rendered, expected, "C format {c_format:?}");
    }
}
