//! The `hist` trigger: hits aggregated by key, with sums of values, shown
//! in the event's `hist` file the way ftrace shows it.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use super::error::TriggerError;
use crate::filter::{FieldKind, FieldSpec};

/// Most keys per histogram (ftrace's `TRACING_MAP_KEYS_MAX`).
pub const MAX_KEYS: usize = 3;
/// Most values per histogram besides `hitcount`.
pub const MAX_VALUES: usize = 8;
/// Most sort keys (`sort=a,b`), as in ftrace.
pub const MAX_SORT_KEYS: usize = 2;
/// Entries a histogram holds when no `:size=` is given (ftrace's 2048).
pub const DEFAULT_SIZE: u32 = 2048;
const MIN_SIZE: u32 = 1 << 7;
const MAX_SIZE: u32 = 1 << 17;

/// How a key is shown: the suffix after its field name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDisplay {
    /// No suffix: a decimal number (or the string, for string fields).
    Plain,
    /// `.hex`: a hexadecimal number.
    Hex,
    /// `.log2`: grouped by power of two.
    Log2,
    /// `.sym`: an address shown with its function's name.
    Sym,
    /// `.execname`: a pid shown with its task's name.
    Execname,
}

/// Names for `.sym` and `.execname` keys, looked up when the histogram is
/// printed (never while events are recorded).
pub trait HistNames {
    /// The function containing `address`.
    fn symbol(&self, address: u64) -> Option<String>;
    /// The name of task `pid`.
    fn comm(&self, pid: i64) -> Option<String>;
}

/// No names: `.sym` and `.execname` keys print their numbers.
#[derive(Debug, Clone, Copy, Default)]
#[cfg(any(test, feature = "internals"))]
pub struct NoNames;

#[cfg(any(test, feature = "internals"))]
impl HistNames for NoNames {
    fn symbol(&self, _address: u64) -> Option<String> {
        None
    }
    fn comm(&self, _pid: i64) -> Option<String> {
        None
    }
}

/// A key of the histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistKey {
    /// Where the key's value sits in the event payload.
    pub(crate) field: FieldSpec,
    /// How it is shown (and, for `.log2`, bucketed).
    pub(crate) display: KeyDisplay,
}

/// One sort key: `hitcount`, a value or a key, ascending unless `.descending`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The name as written (without the `.descending` suffix).
    pub(crate) name: String,
    /// True for `.descending`.
    pub(crate) descending: bool,
}

/// A command to an existing histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistControl {
    /// Stop aggregating (`:pause`).
    Pause,
    /// Aggregate again (`:cont`, `:continue`).
    Continue,
    /// Forget every entry (`:clear`).
    Clear,
}

/// The layout of a hist trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistSpec {
    /// The fields entries are grouped by (`keys=a,b`); together they
    /// identify one entry.
    pub(crate) keys: Vec<HistKey>,
    /// The summed values besides `hitcount`.
    pub(crate) values: Vec<FieldSpec>,
    /// How entries are ordered when printed (`sort=`; `hitcount` when the
    /// trigger names none).
    pub(crate) sort: Vec<SortKey>,
    /// Most entries; further new keys are dropped and counted.
    pub(crate) size: u32,
    /// `:pause`, `:cont` or `:clear`: on a new trigger `:pause` creates it
    /// paused; on an existing one with the same keys and values, the
    /// command acts on it instead of adding a second histogram.
    pub(crate) control: Option<HistControl>,
}

fn hist_error(message: &'static str, position: usize) -> TriggerError {
    TriggerError::Hist { message, position }
}

impl HistSpec {
    /// Parses the part after `hist:`, which starts at byte `base` of the command.
    pub fn parse(text: &str, base: usize, fields: &[FieldSpec]) -> Result<HistSpec, TriggerError> {
        let mut keys = Vec::new();
        let mut values = Vec::new();
        let mut sort = Vec::new();
        let mut size = DEFAULT_SIZE;
        let mut control = None;
        let mut at = base;
        for clause in text.split(':') {
            let clause_at = at;
            at += clause.len() + 1;
            let (name, argument) = match clause.split_once('=') {
                Some((name, argument)) => (name, Some(argument)),
                None => (clause, None),
            };
            let argument_at = clause_at + name.len() + 1;
            match (name, argument) {
                ("keys" | "key", Some(list)) => {
                    for (item, item_at) in items(list, argument_at) {
                        let (field_name, modifier) = item.split_once('.').unwrap_or((item, ""));
                        let field = find(fields, field_name)
                            .ok_or(hist_error("Couldn't find field", item_at))?;
                        let display = match modifier {
                            "" => KeyDisplay::Plain,
                            "hex" => KeyDisplay::Hex,
                            "log2" => KeyDisplay::Log2,
                            "sym" => KeyDisplay::Sym,
                            "execname" => KeyDisplay::Execname,
                            _ => return Err(hist_error("Invalid field modifier", item_at)),
                        };
                        if display != KeyDisplay::Plain && field.kind.is_string() {
                            return Err(hist_error("Invalid field modifier", item_at));
                        }
                        if keys.len() == MAX_KEYS {
                            return Err(hist_error("Too many keys", item_at));
                        }
                        keys.push(HistKey { field, display });
                    }
                }
                ("values" | "vals" | "val", Some(list)) => {
                    for (item, item_at) in items(list, argument_at) {
                        if item == "hitcount" {
                            continue;
                        }
                        let field =
                            find(fields, item).ok_or(hist_error("Couldn't find field", item_at))?;
                        if field.kind.is_string() {
                            return Err(hist_error(
                                "Invalid value field: strings cannot be summed",
                                item_at,
                            ));
                        }
                        if values.len() == MAX_VALUES {
                            return Err(hist_error("Too many values", item_at));
                        }
                        values.push(field);
                    }
                }
                ("sort", Some(list)) => {
                    for (item, item_at) in items(list, argument_at) {
                        let (name, order) = item.split_once('.').unwrap_or((item, "ascending"));
                        let descending = match order {
                            "ascending" => false,
                            "descending" => true,
                            _ => return Err(hist_error("Invalid sort modifier", item_at)),
                        };
                        if sort.len() == MAX_SORT_KEYS {
                            return Err(hist_error("Too many sort fields", item_at));
                        }
                        sort.push((String::from(name), descending, item_at));
                    }
                }
                ("size", Some(number)) => {
                    let requested: u32 = number
                        .parse()
                        .map_err(|_| hist_error("Invalid size", argument_at))?;
                    if !(1..=MAX_SIZE).contains(&requested) {
                        return Err(hist_error("Invalid size", argument_at));
                    }
                    size = requested.next_power_of_two().max(MIN_SIZE);
                }
                ("pause", None) => control = Some(HistControl::Pause),
                ("cont" | "continue", None) => control = Some(HistControl::Continue),
                ("clear", None) => control = Some(HistControl::Clear),
                _ => return Err(hist_error("Unknown hist clause", clause_at)),
            }
        }
        if keys.is_empty() {
            return Err(hist_error("No keys specified", base));
        }
        let mut sort_keys = Vec::new();
        for (name, descending, item_at) in sort {
            let known = name == "hitcount"
                || keys.iter().any(|k: &HistKey| k.field.name == name)
                || values.iter().any(|v: &FieldSpec| v.name == name);
            if !known {
                return Err(hist_error("Sort key not a key or value", item_at));
            }
            sort_keys.push(SortKey { name, descending });
        }
        if sort_keys.is_empty() {
            sort_keys.push(SortKey {
                name: String::from("hitcount"),
                descending: false,
            });
        }
        Ok(HistSpec {
            keys,
            values,
            sort: sort_keys,
            size,
            control,
        })
    }

    /// True if both aggregate the same keys and values (ftrace's notion of
    /// "the same hist trigger", used for `EEXIST` and `!hist:…` removal).
    pub fn same_layout(&self, other: &HistSpec) -> bool {
        self.keys == other.keys && self.values == other.values
    }

    /// Writes the spec as the `trigger` file shows it (without filter and state).
    pub fn write_spec(&self, out: &mut impl Write) -> fmt::Result {
        out.write_str("hist:keys=")?;
        for (i, key) in self.keys.iter().enumerate() {
            let suffix = match key.display {
                KeyDisplay::Plain => "",
                KeyDisplay::Hex => ".hex",
                KeyDisplay::Log2 => ".log2",
                KeyDisplay::Sym => ".sym",
                KeyDisplay::Execname => ".execname",
            };
            write!(
                out,
                "{}{}{}",
                if i > 0 { "," } else { "" },
                key.field.name,
                suffix
            )?;
        }
        out.write_str(":vals=hitcount")?;
        for value in &self.values {
            write!(out, ",{}", value.name)?;
        }
        out.write_str(":sort=")?;
        for (i, key) in self.sort.iter().enumerate() {
            let suffix = if key.descending { ".descending" } else { "" };
            write!(
                out,
                "{}{}{}",
                if i > 0 { "," } else { "" },
                key.name,
                suffix
            )?;
        }
        write!(out, ":size={}", self.size)
    }
}

fn items(list: &str, base: usize) -> impl Iterator<Item = (&str, usize)> {
    let mut at = base;
    list.split(',').map(move |item| {
        let this = at;
        at += item.len() + 1;
        (item, this)
    })
}

fn find(fields: &[FieldSpec], name: &str) -> Option<FieldSpec> {
    fields.iter().find(|f| f.name == name).cloned()
}

/// One key component of an entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum KeyPart {
    Int(u64),
    Signed(i64),
    Str(Vec<u8>),
}

#[derive(Debug, Clone, Default)]
struct Entry {
    hitcount: u64,
    sums: Vec<u64>,
}

/// The aggregated data of one hist trigger.
#[derive(Debug, Clone, Default)]
pub struct HistTable {
    entries: BTreeMap<Vec<KeyPart>, Entry>,
    hits: u64,
    dropped: u64,
}

impl HistTable {
    /// Adds one hit of `payload`.
    pub fn record(&mut self, spec: &HistSpec, payload: &[u8]) {
        self.hits += 1;
        let mut key = Vec::with_capacity(spec.keys.len());
        for hist_key in &spec.keys {
            let field = &hist_key.field;
            let part = match field.kind {
                FieldKind::FixedString | FieldKind::DataLocString => {
                    KeyPart::Str(field.read_str(payload).unwrap_or_default().to_vec())
                }
                FieldKind::Signed if hist_key.display == KeyDisplay::Plain => {
                    KeyPart::Signed(field.read_bits(payload).unwrap_or(0) as i64)
                }
                _ => {
                    let raw = field.read_bits(payload).unwrap_or(0);
                    KeyPart::Int(match hist_key.display {
                        KeyDisplay::Log2 => {
                            u64::from(raw.max(1).next_power_of_two().trailing_zeros())
                        }
                        _ => raw,
                    })
                }
            };
            key.push(part);
        }
        let full = self.entries.len() >= spec.size as usize;
        if full && !self.entries.contains_key(&key) {
            self.dropped += 1;
            return;
        }
        let entry = self.entries.entry(key).or_insert_with(|| Entry {
            hitcount: 0,
            sums: alloc::vec![0; spec.values.len()],
        });
        entry.hitcount += 1;
        for (sum, value) in entry.sums.iter_mut().zip(&spec.values) {
            *sum = sum.wrapping_add(value.read_bits(payload).unwrap_or(0));
        }
    }

    /// Forgets every entry (`:clear`).
    pub fn clear(&mut self) {
        *self = HistTable::default();
    }

    /// Hits aggregated since the last clear, dropped ones included (the
    /// `Hits:` line of the `hist` file).
    #[cfg(test)]
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }

    /// Number of distinct keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing was recorded.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Hits dropped because the table was full.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Writes the `hist` file body for this trigger: `info` is the trigger
    /// line as the `trigger` file shows it.
    pub fn write(
        &self,
        spec: &HistSpec,
        info: &str,
        names: &dyn HistNames,
        out: &mut impl Write,
    ) -> fmt::Result {
        writeln!(out, "# event histogram\n#\n# trigger info: {info}\n#\n")?;
        let mut rows: Vec<(&Vec<KeyPart>, &Entry)> = self.entries.iter().collect();
        rows.sort_by(|a, b| {
            for key in &spec.sort {
                let order = sort_value(spec, &key.name, a).cmp(&sort_value(spec, &key.name, b));
                let order = if key.descending {
                    order.reverse()
                } else {
                    order
                };
                if order.is_ne() {
                    return order;
                }
            }
            a.0.cmp(b.0)
        });
        for (key, entry) in rows {
            out.write_str("{ ")?;
            for (i, (part, hist_key)) in key.iter().zip(&spec.keys).enumerate() {
                if i > 0 {
                    out.write_str(", ")?;
                }
                let name = &hist_key.field.name;
                match (part, hist_key.display) {
                    (KeyPart::Str(s), _) => write!(out, "{name}: {:<50}", Lossy(s))?,
                    (KeyPart::Int(v), KeyDisplay::Hex) => write!(out, "{name}: {v:x}")?,
                    (KeyPart::Int(v), KeyDisplay::Log2) => write!(out, "{name}: ~ 2^{v:<2}")?,
                    (KeyPart::Int(v), KeyDisplay::Plain) => write!(out, "{name}: {v:>10}")?,
                    (KeyPart::Int(v), KeyDisplay::Sym) => {
                        let symbol = names.symbol(*v).unwrap_or_default();
                        write!(out, "{name}: [{v:x}] {symbol:<45}")?
                    }
                    (KeyPart::Int(v), KeyDisplay::Execname) => {
                        let comm = names
                            .comm(*v as i64)
                            .unwrap_or_else(|| String::from("<...>"));
                        write!(out, "{name}: {comm:<16}[{v:>10}]")?
                    }
                    (KeyPart::Signed(v), _) => write!(out, "{name}: {v:>10}")?,
                }
            }
            write!(out, " }} hitcount: {:>10}", entry.hitcount)?;
            for (sum, value) in entry.sums.iter().zip(&spec.values) {
                write!(out, "  {}: {:>10}", value.name, sum)?;
            }
            out.write_char('\n')?;
        }
        write!(
            out,
            "\nTotals:\n    Hits: {}\n    Entries: {}\n    Dropped: {}\n",
            self.hits,
            self.entries.len(),
            self.dropped
        )
    }
}

/// Sort values compare as (kind, number, string) so keys and sums mix.
fn sort_value<'e>(
    spec: &HistSpec,
    name: &str,
    row: &(&'e Vec<KeyPart>, &'e Entry),
) -> (i128, &'e [u8]) {
    if name == "hitcount" {
        return (i128::from(row.1.hitcount), &[]);
    }
    if let Some(i) = spec.values.iter().position(|v| v.name == name) {
        return (i128::from(row.1.sums[i]), &[]);
    }
    match spec
        .keys
        .iter()
        .position(|k| k.field.name == name)
        .map(|i| &row.0[i])
    {
        Some(KeyPart::Int(v)) => (i128::from(*v), &[]),
        Some(KeyPart::Signed(v)) => (i128::from(*v), &[]),
        Some(KeyPart::Str(s)) => (0, s.as_slice()),
        None => (0, &[]),
    }
}

/// Shows bytes as text, replacing what is not UTF-8.
struct Lossy<'a>(&'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        for chunk in self.0.utf8_chunks() {
            text.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                text.push('\u{fffd}');
            }
        }
        f.pad(&text)
    }
}
