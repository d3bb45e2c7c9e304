//! Address → name tables: the function symbols (`kallsyms`) and the task
//! names (`saved_cmdlines`) that the output needs to print an event.

use alloc::collections::BTreeMap;
use alloc::string::String;
use core::fmt::Write;

/// Function symbols by start address, as in `/proc/kallsyms`.
///
/// ```
/// use hotkern_trace::output::Symbols;
///
/// let symbols = Symbols::from_kallsyms("ffffffff81000100 T schedule\nffffffff81000200 t helper [demo]\n");
/// assert_eq!(symbols.lookup(0xffffffff81000108), Some(("schedule", 8)));
/// assert_eq!(symbols.to_kallsyms(), "ffffffff81000100 T schedule\nffffffff81000200 t helper [demo]\n");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbols {
    by_address: BTreeMap<u64, (String, char, Option<String>)>,
    /// Whether the addresses are this process's, so that stack frames can
    /// be symbolized here (see [`Symbols::frame_name`]).
    in_process: bool,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols::new()
    }
}

impl Symbols {
    /// An empty table of this process's addresses (a live trace's).
    pub fn new() -> Symbols {
        Symbols {
            by_address: BTreeMap::new(),
            in_process: true,
        }
    }

    /// Whether the table describes this process (made with
    /// [`Symbols::new`]) rather than a saved trace's system (made with
    /// [`Symbols::from_kallsyms`]).
    #[cfg(feature = "std")]
    pub(crate) fn in_process(&self) -> bool {
        self.in_process
    }

    /// Adds a global text symbol.
    pub fn insert(&mut self, address: u64, name: &str) {
        self.by_address
            .insert(address, (String::from(name), 'T', None));
    }

    /// Adds a symbol with its kallsyms type letter and module.
    pub(crate) fn insert_full(
        &mut self,
        address: u64,
        name: &str,
        kind: char,
        module: Option<&str>,
    ) {
        self.by_address.insert(
            address,
            (String::from(name), kind, module.map(String::from)),
        );
    }

    /// Parses `kallsyms` text (`address type name [module]` lines, read by
    /// [`hotkern_tracedat::kallsyms_lines`]); lines that do not parse are
    /// skipped. The table describes the system the
    /// text came from, not this process.
    pub fn from_kallsyms(text: &str) -> Symbols {
        let mut symbols = Symbols::new();
        symbols.in_process = false;
        for (address, kind, name, module) in hotkern_tracedat::kallsyms_lines(text) {
            symbols.insert_full(address, name, kind, module);
        }
        symbols
    }

    /// The table as `kallsyms` text.
    pub fn to_kallsyms(&self) -> String {
        let mut out = String::new();
        for (address, (name, kind, module)) in &self.by_address {
            let _ = write!(out, "{address:016x} {kind} {name}");
            if let Some(module) = module {
                let _ = write!(out, " [{module}]");
            }
            out.push('\n');
        }
        out
    }

    /// The symbol containing `address` and the offset into it.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        let (start, (name, _, _)) = self.by_address.range(..=address).next_back()?;
        Some((name.as_str(), address - start))
    }

    /// `address` as ftrace's `%pS` prints it: `name`, `name+0xoffset`, or
    /// the bare address when no symbol contains it.
    pub(crate) fn offset_name(&self, address: u64) -> String {
        match self.lookup(address) {
            Some((name, 0)) => String::from(name),
            Some((name, offset)) => alloc::format!("{name}+0x{offset:x}"),
            None => alloc::format!("0x{address:x}"),
        }
    }
}

/// Task names by pid, as in `saved_cmdlines`.
///
/// ```
/// use hotkern_trace::output::Comms;
///
/// let mut comms = Comms::new();
/// comms.insert(42, "worker");
/// assert_eq!(comms.get(42), "worker");
/// assert_eq!(comms.get(0), "<idle>");
/// assert_eq!(comms.get(7), "<...>");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comms {
    by_pid: BTreeMap<i32, String>,
}

impl Comms {
    /// An empty table.
    pub fn new() -> Comms {
        Comms::default()
    }

    /// Records the name of `pid` (ftrace keeps at most 15 bytes).
    pub fn insert(&mut self, pid: i32, comm: &str) {
        let mut end = comm.len().min(15);
        while !comm.is_char_boundary(end) {
            end -= 1;
        }
        self.by_pid.insert(pid, String::from(&comm[..end]));
    }

    /// The name of `pid`: `<idle>` for 0 and `<...>` when unknown, as ftrace prints.
    pub fn get(&self, pid: i32) -> &str {
        match self.by_pid.get(&pid) {
            Some(comm) => comm,
            None if pid == 0 => "<idle>",
            None => "<...>",
        }
    }

    /// Parses `saved_cmdlines` text (`pid comm` lines, read by
    /// [`hotkern_tracedat::cmdline_lines`]).
    pub fn from_saved_cmdlines(text: &str) -> Comms {
        let mut comms = Comms::new();
        for (pid, comm) in hotkern_tracedat::cmdline_lines(text) {
            comms.insert(pid, comm);
        }
        comms
    }

    /// The table as `saved_cmdlines` text.
    pub fn to_saved_cmdlines(&self) -> String {
        let mut out = String::new();
        for (pid, comm) in &self.by_pid {
            let _ = writeln!(out, "{pid} {comm}");
        }
        out
    }
}
