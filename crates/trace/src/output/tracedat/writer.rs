//! Writing `trace.dat` v6.

use alloc::vec::Vec;

use super::{TraceDat, MAGIC};

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Serialises `file` as trace-cmd's version-6 `trace.dat` (little-endian,
/// 64-bit longs). Each CPU's data is placed at a page-aligned offset.
///
/// ```
/// use hotkern_trace::output::tracedat::{read_trace_dat, write_trace_dat, TraceDat};
///
/// let file = TraceDat { page_size: 4096, cpu_data: vec![vec![0; 4096]], ..TraceDat::default() };
/// let bytes = write_trace_dat(&file);
/// assert_eq!(&bytes[..13], b"\x17\x08\x44tracing6\0\0");
/// assert_eq!(read_trace_dat(&bytes).unwrap(), file);
/// ```
pub fn write_trace_dat(file: &TraceDat) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(b"6\0");
    out.push(0); // little endian
    out.push(8); // long size
    put_u32(&mut out, file.page_size);

    out.extend_from_slice(b"header_page\0");
    put_u64(&mut out, file.header_page.len() as u64);
    out.extend_from_slice(file.header_page.as_bytes());
    out.extend_from_slice(b"header_event\0");
    put_u64(&mut out, file.header_event.len() as u64);
    out.extend_from_slice(file.header_event.as_bytes());

    put_u32(&mut out, file.ftrace_formats.len() as u32);
    for format in &file.ftrace_formats {
        put_u64(&mut out, format.len() as u64);
        out.extend_from_slice(format.as_bytes());
    }
    put_u32(&mut out, file.systems.len() as u32);
    for (system, formats) in &file.systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        put_u32(&mut out, formats.len() as u32);
        for format in formats {
            put_u64(&mut out, format.len() as u64);
            out.extend_from_slice(format.as_bytes());
        }
    }
    put_u32(&mut out, file.kallsyms.len() as u32);
    out.extend_from_slice(file.kallsyms.as_bytes());
    put_u32(&mut out, file.printk_formats.len() as u32);
    out.extend_from_slice(file.printk_formats.as_bytes());
    put_u64(&mut out, file.cmdlines.len() as u64);
    out.extend_from_slice(file.cmdlines.as_bytes());

    put_u32(&mut out, file.cpu_data.len() as u32);
    out.extend_from_slice(b"options  \0");
    for (kind, data) in &file.options {
        put_u16(&mut out, *kind);
        put_u32(&mut out, data.len() as u32);
        out.extend_from_slice(data);
    }
    put_u16(&mut out, 0);
    out.extend_from_slice(b"flyrecord\0");

    // The offsets table comes first; data follows, page-aligned.
    let page = (file.page_size.max(1)) as usize;
    let table_at = out.len();
    out.resize(table_at + 16 * file.cpu_data.len(), 0);
    let mut offsets = Vec::with_capacity(file.cpu_data.len());
    for data in &file.cpu_data {
        let aligned = out.len().div_ceil(page) * page;
        out.resize(aligned, 0);
        offsets.push((aligned as u64, data.len() as u64));
        out.extend_from_slice(data);
    }
    for (cpu, (offset, size)) in offsets.into_iter().enumerate() {
        let at = table_at + 16 * cpu;
        out[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&size.to_le_bytes());
    }
    out
}
