//! Stack traces (`ftrace/kernel_stack`, written by the `stacktrace`
//! trigger): reading their return addresses, naming them, and giving a
//! `trace.dat` the symbols that name them.
//!
//! An event holds addresses only; names are found when the trace is shown,
//! as in ftrace. A table built in the traced process ([`Symbols::new`])
//! names a frame by symbolizing the address in this process (with `std`);
//! a table read from a file ([`Symbols::from_kallsyms`]) names it by the
//! nearest symbol at or below it, as trace-cmd does.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use super::data::{Entry, RawRecord, TraceData};
use hotkern_tracedat::EventFormat;

use super::format::read_int;
use super::pages::decode_pages;
use super::symbols::Symbols;
use crate::event::format::{KERNEL_STACK_CALLER_OFFSET, KERNEL_STACK_ID};

/// The return addresses of a `kernel_stack` record, innermost first: `size`
/// of them, as far as the payload reaches, up to the first 0 or `ULONG_MAX`
/// (ftrace's end markers).
///
/// ```
/// use hotkern_trace::internals::output::stack_frames;
/// use hotkern_tracedat::EventFormat;
///
/// let format = hotkern_trace::internals::builtin_formats().into_iter().find(|f| f.name() == "kernel_stack").unwrap();
/// let event = EventFormat::parse("ftrace", &format.to_format_file()).unwrap();
/// let mut payload = vec![0u8; 16];
/// payload[..2].copy_from_slice(&4u16.to_ne_bytes());
/// payload[8..12].copy_from_slice(&3i32.to_ne_bytes());
/// for frame in [0x1000u64, 0x2000, u64::MAX] {
///     payload.extend_from_slice(&frame.to_ne_bytes());
/// }
/// assert_eq!(stack_frames(&event, &payload), [0x1000, 0x2000]);
/// ```
pub fn stack_frames(event: &EventFormat, payload: &[u8]) -> Vec<u64> {
    let size = event
        .field("size")
        .and_then(|field| read_int(field, payload))
        .map_or(0, |size| size as u32 as usize);
    let offset = event
        .field("caller")
        .map_or(KERNEL_STACK_CALLER_OFFSET, |field| field.offset);
    frames_at(payload, size, offset)
}

/// Up to `size` addresses from `offset`, ending early at a marker.
fn frames_at(payload: &[u8], size: usize, offset: usize) -> Vec<u64> {
    payload
        .get(offset..)
        .unwrap_or_default()
        .chunks_exact(8)
        .take(size)
        .map(|bytes| u64::from_ne_bytes(bytes.try_into().unwrap_or_default()))
        .take_while(|&address| address != 0 && address != u64::MAX)
        .collect()
}

/// Writes the body of a `kernel_stack` line as ftrace does: `<stack trace>`,
/// then one ` => name` line per frame.
pub(crate) fn write_stack_body(
    data: &TraceData,
    event: &EventFormat,
    record: &RawRecord,
    out: &mut String,
) {
    out.push_str("<stack trace>\n");
    for address in stack_frames(event, &record.payload) {
        out.push_str(" => ");
        out.push_str(&data.symbols.frame_name(address));
        out.push('\n');
    }
}

/// The name of the function holding `address` in this process, from its
/// debug information or symbol table (the outermost function when calls
/// were inlined), without the hash and with blanks as `_` so that it fits
/// a kallsyms line. Cached: symbolizing the first address reads the
/// binary's debug information.
#[cfg(feature = "std")]
pub(crate) fn resolve_in_process(address: u64) -> Option<String> {
    use alloc::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};

    static CACHE: OnceLock<Mutex<BTreeMap<u64, Option<String>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(known) = cache.lock().ok()?.get(&address) {
        return known.clone();
    }
    let mut found = None;
    backtrace::resolve(address as usize as *mut core::ffi::c_void, |symbol| {
        // Inlined calls come first and the function that holds them last.
        if let Some(name) = symbol.name() {
            let mut text = String::new();
            let _ = write!(text, "{name:#}");
            found = Some(text.split_whitespace().collect::<Vec<_>>().join("_"));
        }
    });
    if let Ok(mut cache) = cache.lock() {
        cache.insert(address, found.clone());
    }
    found
}

impl Symbols {
    /// The name of the function a stack frame's return address is in, as
    /// ftrace prints it in a stack trace: the name alone, or the address in
    /// hex when no symbol holds it.
    ///
    /// A table of this process ([`Symbols::new`], with `std`) symbolizes the
    /// address here; a table from a file looks up the nearest symbol at or
    /// below it.
    ///
    /// ```
    /// use hotkern_trace::output::Symbols;
    ///
    /// let symbols = Symbols::from_kallsyms("ffffffff81000100 T schedule\n");
    /// assert_eq!(symbols.frame_name(0xffffffff81000123), "schedule");
    /// assert_eq!(symbols.frame_name(0x42), "0x42");
    /// ```
    pub fn frame_name(&self, address: u64) -> String {
        #[cfg(feature = "std")]
        if self.in_process() {
            return resolve_in_process(address).unwrap_or_else(|| alloc::format!("0x{address:x}"));
        }
        match self.lookup(address) {
            Some((name, _)) => String::from(name),
            None => alloc::format!("0x{address:x}"),
        }
    }
}

/// Adds a kallsyms line to `file` for every `kernel_stack` return address
/// in its CPU data that `resolve` names and kallsyms does not list yet, so
/// that `trace-cmd report` prints the frames by name. Each symbol starts at
/// the address itself: the start of the function is not needed for a
/// lookup that takes the nearest symbol at or below.
///
/// Used on a file made from this process's buffers with
/// [`resolve_in_process`].
// Only the `std` build names frames in the process (`resolve_in_process`).
#[cfg_attr(not(feature = "std"), allow(dead_code))]
pub(crate) fn add_stack_symbols(
    file: &mut hotkern_tracedat::write::TraceDat,
    resolve: impl Fn(u64) -> Option<String>,
) {
    let listed = Symbols::from_kallsyms(&file.kallsyms);
    let mut added = alloc::collections::BTreeMap::new();
    let page_size = file.page_size as usize;
    for (cpu, bytes) in file.cpu_data.iter().enumerate() {
        let entries = decode_pages(cpu as u32, bytes, page_size).unwrap_or_default();
        for entry in entries {
            let Entry::Event(record) = entry else {
                continue;
            };
            if record.event_id() != KERNEL_STACK_ID {
                continue;
            }
            for address in raw_frames(&record.payload) {
                let exact = listed
                    .lookup(address)
                    .is_some_and(|(_, offset)| offset == 0);
                if exact || added.contains_key(&address) {
                    continue;
                }
                if let Some(name) = resolve(address) {
                    added.insert(address, name);
                }
            }
        }
    }
    if !file.kallsyms.is_empty() && !file.kallsyms.ends_with('\n') {
        file.kallsyms.push('\n');
    }
    for (address, name) in added {
        let _ = writeln!(file.kallsyms, "{address:016x} t {name}");
    }
}

/// [`stack_frames`] for the built-in layout, without an event description.
fn raw_frames(payload: &[u8]) -> Vec<u64> {
    let size = payload.get(8..12).map_or(0, |b| {
        i32::from_ne_bytes([b[0], b[1], b[2], b[3]]).max(0) as usize
    });
    frames_at(payload, size, KERNEL_STACK_CALLER_OFFSET)
}

#[cfg(all(test, feature = "std"))]
mod tests {
    #[inline(never)]
    fn marker_function() -> u64 {
        marker_function as *const () as usize as u64
    }

    #[test]
    fn resolves_a_function_of_this_process() {
        let name = super::resolve_in_process(marker_function() + 1).unwrap();
        assert!(name.ends_with("marker_function"), "{name}");
    }
}
