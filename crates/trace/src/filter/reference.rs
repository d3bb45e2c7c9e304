//! A straightforward tree-walking evaluator, the model the compiled program
//! is tested against. It shares nothing with the program but the tree: not
//! even the glob matcher, which it has its own of ([`glob_matches`]), so the
//! crate's [`crate::glob`] is checked too.

use super::field::{FieldKind, FieldSpec};
use super::parse::{CompareOp, Expr, Operand, Predicate};

/// Evaluates `expr` on `payload` recorded on `cpu`, the obvious way (the
/// task name is unknown).
pub fn evaluate(expr: &Expr, fields: &[FieldSpec], payload: &[u8], cpu: u32) -> bool {
    evaluate_task(expr, fields, payload, cpu, None)
}

/// Evaluates `expr` on `payload` recorded on `cpu` by the task named `comm`
/// (a `task->comm` buffer: the name ends at the first NUL).
pub fn evaluate_task(
    expr: &Expr,
    fields: &[FieldSpec],
    payload: &[u8],
    cpu: u32,
    comm: Option<&[u8]>,
) -> bool {
    match expr {
        Expr::Not(inner) => !evaluate_task(inner, fields, payload, cpu, comm),
        Expr::And(a, b) => {
            evaluate_task(a, fields, payload, cpu, comm)
                && evaluate_task(b, fields, payload, cpu, comm)
        }
        Expr::Or(a, b) => {
            evaluate_task(a, fields, payload, cpu, comm)
                || evaluate_task(b, fields, payload, cpu, comm)
        }
        Expr::Compare(predicate) => compare(predicate, fields, payload, cpu, comm),
    }
}

fn compare(
    predicate: &Predicate,
    fields: &[FieldSpec],
    payload: &[u8],
    cpu: u32,
    comm: Option<&[u8]>,
) -> bool {
    let spec = fields.iter().find(|f| f.name == predicate.field);
    match (&predicate.operand, spec) {
        // Not an event field, and the parser only lets `COMM`/`comm` take a
        // string without one.
        (Operand::Str(value), None) => {
            let Some(comm) = comm else {
                return predicate.op == CompareOp::Ne;
            };
            let name = comm.split(|&b| b == 0).next().unwrap_or(comm);
            match predicate.op {
                CompareOp::Eq => name == value.as_bytes(),
                CompareOp::Ne => name != value.as_bytes(),
                CompareOp::Glob => glob_matches(value.as_bytes(), name),
                _ => false,
            }
        }
        (Operand::Unsigned(value), None) => {
            numeric(predicate.op, i128::from(cpu), i128::from(*value))
        }
        (Operand::Signed(value), Some(spec)) => match integer(spec, payload) {
            Some(field) => numeric(predicate.op, field, i128::from(*value)),
            None => false,
        },
        (Operand::Unsigned(value), Some(spec)) => match integer(spec, payload) {
            Some(field) => numeric(predicate.op, field, i128::from(*value)),
            None => false,
        },
        (Operand::Str(value), Some(spec)) => match string(spec, payload) {
            Some(field) => match predicate.op {
                CompareOp::Eq => field == value.as_bytes(),
                CompareOp::Ne => field != value.as_bytes(),
                CompareOp::Glob => glob_matches(value.as_bytes(), field),
                _ => false,
            },
            None => false,
        },
        _ => false,
    }
}

fn numeric(op: CompareOp, left: i128, right: i128) -> bool {
    match op {
        CompareOp::Eq => left == right,
        CompareOp::Ne => left != right,
        CompareOp::Lt => left < right,
        CompareOp::Le => left <= right,
        CompareOp::Gt => left > right,
        CompareOp::Ge => left >= right,
        // Both sides are in range of the field's 64-bit type, so the bit
        // patterns of the low 64 bits are what the hardware would AND.
        CompareOp::BitAnd => (left as u64) & (right as u64) != 0,
        CompareOp::Glob => false,
    }
}

fn integer(spec: &FieldSpec, payload: &[u8]) -> Option<i128> {
    if !matches!(spec.size, 1 | 2 | 4 | 8) || spec.offset + spec.size > payload.len() {
        return None;
    }
    let bytes = &payload[spec.offset..spec.offset + spec.size];
    let mut magnitude: u128 = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let shift = if cfg!(target_endian = "little") {
            8 * i
        } else {
            8 * (spec.size - 1 - i)
        };
        magnitude |= u128::from(byte) << shift;
    }
    let bits = 8 * spec.size as u32;
    if spec.kind == FieldKind::Signed && magnitude >> (bits - 1) & 1 == 1 {
        Some(magnitude as i128 - (1i128 << bits))
    } else {
        Some(magnitude as i128)
    }
}

fn string<'p>(spec: &FieldSpec, payload: &'p [u8]) -> Option<&'p [u8]> {
    let (start, len) = match spec.kind {
        FieldKind::FixedString => (spec.offset, spec.size),
        FieldKind::DataLocString => {
            let raw = integer(&FieldSpec::unsigned("", spec.offset, 4), payload)? as u32;
            ((raw & 0xffff) as usize, (raw >> 16) as usize)
        }
        _ => return None,
    };
    let raw = payload.get(start..start.checked_add(len)?)?;
    Some(raw.split(|&b| b == 0).next().unwrap_or(raw))
}

/// Matches `text` against the glob `pattern` as `set_ftrace_filter` and event filters define
/// it: `*` any run of bytes, `?` one byte, `[...]` one byte of a class
/// (`[!...]` or `[^...]` one outside it, `a-z` a range, a `]` first in the
/// class a member; no closing `]` makes the `[` an ordinary byte), `\` the
/// next byte literally (a trailing `\` is itself).
///
/// Written straight from that definition by recursion, trying every split
/// at a `*`, with each (pattern, text) suffix pair answered once: without
/// that, a fuzzed pattern of many stars took exponential time.
///
/// ```
/// use hotkern_trace::internals::filter_reference::glob_matches;
/// assert!(glob_matches(b"k?alloc*", b"kmalloc_node"));
/// assert!(glob_matches(b"[!a-c]x", b"dx"));
/// assert!(!glob_matches(b"a\\*", b"ab"));
/// ```
pub fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let mut known = alloc::vec![None; (pattern.len() + 1) * (text.len() + 1)];
    suffix_matches(pattern, text, text.len() + 1, &mut known)
}

/// [`glob_matches`] of two suffixes, remembered in `known` by their lengths
/// (`width` is the whole text's length plus one).
fn suffix_matches(pattern: &[u8], text: &[u8], width: usize, known: &mut [Option<bool>]) -> bool {
    let slot = pattern.len() * width + text.len();
    if let Some(answer) = known[slot] {
        return answer;
    }
    let answer = match pattern.split_first() {
        None => text.is_empty(),
        Some((&first, rest)) => {
            // Whether the first text byte passes `test` and the rest matches `after`.
            let mut one = |test: &dyn Fn(u8) -> bool, after: &[u8]| match text.split_first() {
                Some((&byte, text_rest)) => {
                    test(byte) && suffix_matches(after, text_rest, width, known)
                }
                None => false,
            };
            match first {
                b'*' => {
                    (0..=text.len()).any(|skip| suffix_matches(rest, &text[skip..], width, known))
                }
                b'?' => one(&|_| true, rest),
                b'\\' if !rest.is_empty() => one(&|byte| byte == rest[0], &rest[1..]),
                b'[' => match Bracket::parse(rest) {
                    Some(class) => one(&|byte| class.admits(byte), class.after),
                    None => one(&|byte| byte == b'[', rest),
                },
                literal => one(&|byte| byte == literal, rest),
            }
        }
    };
    known[slot] = Some(answer);
    answer
}

/// A `[...]` class: its members as written and the pattern after it.
struct Bracket<'p> {
    negated: bool,
    members: &'p [u8],
    after: &'p [u8],
}

impl<'p> Bracket<'p> {
    /// `pattern` starts just after the `[`.
    fn parse(pattern: &'p [u8]) -> Option<Bracket<'p>> {
        let negated = matches!(pattern.first(), Some(b'!' | b'^'));
        let members = &pattern[usize::from(negated)..];
        // A `]` right at the start is a member, so the search for the
        // closing one starts after it.
        let first_close = usize::from(members.first() == Some(&b']'));
        let close = first_close + members[first_close..].iter().position(|&b| b == b']')?;
        Some(Bracket {
            negated,
            members: &members[..close],
            after: &members[close + 1..],
        })
    }

    fn admits(&self, byte: u8) -> bool {
        let mut listed = false;
        let mut rest = self.members;
        while let Some(&low) = rest.first() {
            if let [_, b'-', high, ..] = rest {
                listed |= (low..=*high).contains(&byte);
                rest = &rest[3..];
            } else {
                listed |= low == byte;
                rest = &rest[1..];
            }
        }
        listed != self.negated
    }
}
