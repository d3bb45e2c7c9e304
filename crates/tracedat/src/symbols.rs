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

impl Kallsyms {
    /// Parses kallsyms text: `ADDR TYPE NAME [MODULE]` per line.
    pub fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let _kind = it.next()?;
                Some((addr, it.next()?.to_string()))
            })
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

/// Saved command lines: `PID COMM` per line.
#[cfg(feature = "std")]
pub(crate) fn parse_cmdlines(text: &str) -> Map<i32, String> {
    let mut out = Map::new();
    for line in text.lines() {
        let Some((pid, comm)) = line.trim_start().split_once(' ') else {
            continue;
        };
        if let Ok(pid) = pid.parse() {
            out.entry(pid).or_insert_with(|| comm.to_string());
        }
    }
    out
}
