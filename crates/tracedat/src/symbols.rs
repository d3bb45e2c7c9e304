//! The tables a trace.dat carries for printing: kallsyms, trace_printk
//! formats and saved command lines.

#[allow(unused_imports)]
use crate::prelude::*;

use crate::prelude::Map;

/// Kernel symbols from `/proc/kallsyms`, sorted by address.
///
/// ```
/// let syms = hotkern_tracedat::Kallsyms::parse("ffffffff81000000 T _stext\nffffffff81000100 t foo\n");
/// assert_eq!(syms.lookup(0xffffffff81000010), Some(("_stext", 0xffffffff81000000)));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    syms: Vec<(u64, String)>,
    /// Name to address, the lowest address for a name defined twice.
    by_name: Map<String, u64>,
}

/// The lines of kallsyms text, `ADDR TYPE NAME [MODULE]` each: the
/// address, the type letter, the name and the module if any. Lines that
/// do not parse are skipped.
///
/// ```
/// let text = "ffffffff81000100 T schedule\nnot a symbol\n1000 t helper [demo]\n";
/// let lines: Vec<_> = hotkern_tracedat::kallsyms_lines(text).collect();
/// assert_eq!(
///     lines,
///     [(0xffffffff81000100, 'T', "schedule", None), (0x1000, 't', "helper", Some("demo"))]
/// );
/// ```
pub fn kallsyms_lines(text: &str) -> impl Iterator<Item = (u64, char, &str, Option<&str>)> {
    text.lines().filter_map(|line| {
        let mut parts = line.split_whitespace();
        let address = u64::from_str_radix(parts.next()?, 16).ok()?;
        let kind = parts.next()?.chars().next()?;
        let name = parts.next()?;
        let module = parts
            .next()
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'));
        Some((address, kind, name, module))
    })
}

/// The lines of `saved_cmdlines` text, `PID COMM` each: the pid and the
/// task name, which starts after the blanks that follow the pid and runs to
/// the end of the line (a task name may hold spaces), as trace-cmd reads
/// it. Lines that do not parse are skipped.
///
/// ```
/// let text = "42 worker\nnot a pid\n7   kworker/0:1\n";
/// let lines: Vec<_> = hotkern_tracedat::cmdline_lines(text).collect();
/// assert_eq!(lines, [(42, "worker"), (7, "kworker/0:1")]);
/// ```
pub fn cmdline_lines(text: &str) -> impl Iterator<Item = (i32, &str)> {
    text.lines().filter_map(|line| {
        let (pid, comm) = line.trim_start().split_once([' ', '\t'])?;
        Some((pid.parse().ok()?, comm.trim_start()))
    })
}

impl Kallsyms {
    /// Parses kallsyms text: `ADDR TYPE NAME [MODULE]` per line
    /// ([`kallsyms_lines`]).
    pub fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = kallsyms_lines(text)
            .map(|(address, _, name, _)| (address, name.to_string()))
            .collect();
        syms.sort_by_key(|s| s.0);
        let mut by_name = Map::default();
        for (addr, name) in &syms {
            by_name.entry(name.clone()).or_insert(*addr);
        }
        Kallsyms { syms, by_name }
    }

    /// The symbol containing `addr` and its start address. As in
    /// libtraceevent, an address past the last symbol matches only that
    /// symbol's exact address.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        if i == 0 {
            return None;
        }
        let (start, name) = &self.syms[i - 1];
        if i == self.syms.len() && *start != addr {
            return None;
        }
        Some((name.as_str(), *start))
    }

    /// The address of the symbol named `name`.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// trace_printk format strings by address (`ADDR : "text"` per line).
#[cfg(feature = "std")]
pub(crate) fn parse_printk(text: &str) -> Map<u64, String> {
    let mut out = Map::new();
    for line in text.lines() {
        let Some((addr, rest)) = line.split_once(':') else {
            continue;
        };
        let addr = addr.trim().trim_start_matches("0x");
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let rest = rest.trim();
        let rest = rest.strip_prefix('"').unwrap_or(rest);
        let rest = rest.strip_suffix('"').unwrap_or(rest);
        out.insert(addr, rest.to_string());
    }
    out
}

/// Saved command lines by pid ([`cmdline_lines`]), the first line of a
/// pid winning.
#[cfg(feature = "std")]
pub(crate) fn parse_cmdlines(text: &str) -> Map<i32, String> {
    let mut out = Map::new();
    for (pid, comm) in cmdline_lines(text) {
        out.entry(pid).or_insert_with(|| comm.to_string());
    }
    out
}
