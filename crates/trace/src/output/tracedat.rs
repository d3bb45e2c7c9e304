//! trace-cmd's `trace.dat`, version 6: what `trace-cmd record` writes and
//! `trace-cmd report` / kernelshark read.
//!
//! Layout (all numbers little-endian here): magic `\x17\x08\x44tracing`,
//! `"6\0"`, endianness byte, long size byte, page size (u32);
//! `"header_page\0"` + u64 size + text; `"header_event\0"` + u64 size +
//! text; u32 count of ftrace event formats, each u64 size + text; u32
//! count of other systems, each `name\0` + u32 count + (u64 size + text)…;
//! kallsyms (u32 size + text); printk formats (u32 size + text); saved
//! cmdlines (u64 size + text); u32 CPU count; `"options  \0"` + options
//! (u16 type, u32 size, data; type 0 ends); `"flyrecord\0"` + per CPU
//! (u64 offset, u64 size); then each CPU's raw ring-buffer pages,
//! page-aligned.

mod pages;
mod reader;
mod writer;

use alloc::string::String;
use alloc::vec::Vec;

pub use pages::{decode_pages, TraceDatPageError};
pub use reader::{read_trace_dat, TraceDatError};
pub use writer::write_trace_dat;

/// The file's magic bytes.
pub const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";

/// trace-cmd option: the trace clock (`TRACECMD_OPTION_TRACECLOCK`).
pub const OPTION_TRACECLOCK: u16 = 4;
/// trace-cmd option: `uname` of the traced machine.
pub const OPTION_UNAME: u16 = 5;
/// trace-cmd option: the CPU count (`TRACECMD_OPTION_CPUCOUNT`).
pub const OPTION_CPUCOUNT: u16 = 8;

/// The contents of a `trace.dat` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceDat {
    /// Ring-buffer page size.
    pub page_size: u32,
    /// Text of `events/header_page`.
    pub header_page: String,
    /// Text of `events/header_event`.
    pub header_event: String,
    /// Format texts of the `ftrace` system's events.
    pub ftrace_formats: Vec<String>,
    /// Other systems: name and the format texts of its events.
    pub systems: Vec<(String, Vec<String>)>,
    /// `/proc/kallsyms` text.
    pub kallsyms: String,
    /// `printk_formats` text (`0xaddr : "format"` lines).
    pub printk_formats: String,
    /// `saved_cmdlines` text.
    pub cmdlines: String,
    /// Options as (type, data).
    pub options: Vec<(u16, Vec<u8>)>,
    /// Each CPU's raw ring-buffer pages, back to back.
    pub cpu_data: Vec<Vec<u8>>,
}
