//! The compiled form: a flat list of tests, each with where to go when it
//! holds and when it does not. `&&`, `||` and `!` disappear into the jump
//! targets, so evaluation is a loop over at most one test per predicate,
//! stops as soon as the outcome is known, and never allocates.

use alloc::vec::Vec;

use super::field::{FieldSpec, Location};
use super::parse::{find_field, CompareOp, Expr, FieldLookup, Operand};
use crate::glob::Glob;

/// Where a test jumps: another test, or a final verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Step(u32),
    Accept,
    Reject,
}

#[derive(Debug, Clone)]
pub(crate) enum Test {
    Signed {
        field: Location,
        op: CompareOp,
        value: i64,
    },
    Unsigned {
        field: Location,
        op: CompareOp,
        value: u64,
    },
    Cpu {
        op: CompareOp,
        value: u64,
    },
    StrEq {
        field: Location,
        value: Vec<u8>,
        negate: bool,
    },
    StrGlob {
        field: Location,
        glob: Glob,
    },
    CommEq {
        value: Vec<u8>,
        negate: bool,
    },
    CommGlob {
        glob: Glob,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Step {
    test: Test,
    on_true: Target,
    on_false: Target,
}

/// A compiled filter program.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    steps: Vec<Step>,
    entry: Target,
    /// Some test reads the task name (decided once, at compile time).
    uses_comm: bool,
}

impl Program {
    /// Compiles a tree the parser has already checked against `fields`.
    pub(crate) fn compile(expr: &Expr, fields: &[FieldSpec]) -> Program {
        let mut steps = Vec::new();
        let entry = emit(expr, fields, Target::Accept, Target::Reject, &mut steps);
        let uses_comm = steps
            .iter()
            .any(|step| matches!(step.test, Test::CommEq { .. } | Test::CommGlob { .. }));
        Program {
            steps,
            entry,
            uses_comm,
        }
    }

    /// Number of tests in the program.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }

    /// True if some test reads the task name (so callers fetch it only then).
    pub(crate) fn uses_comm(&self) -> bool {
        self.uses_comm
    }

    /// Runs the program on `payload`, recorded on `cpu` by the task named
    /// `comm` (`None`: the platform does not know the name).
    pub(crate) fn run(&self, payload: &[u8], cpu: u32, comm: Option<&[u8]>) -> bool {
        let mut at = self.entry;
        loop {
            match at {
                Target::Accept => return true,
                Target::Reject => return false,
                Target::Step(index) => {
                    let step = &self.steps[index as usize];
                    at = if step.test.holds(payload, cpu, comm) {
                        step.on_true
                    } else {
                        step.on_false
                    };
                }
            }
        }
    }
}

/// Emits `expr` so that it continues at `on_true` / `on_false`; returns its
/// entry. Children are emitted before their parents, so every jump goes to
/// an earlier index or a verdict and the program always terminates.
fn emit(
    expr: &Expr,
    fields: &[FieldSpec],
    on_true: Target,
    on_false: Target,
    steps: &mut Vec<Step>,
) -> Target {
    match expr {
        Expr::Not(inner) => emit(inner, fields, on_false, on_true, steps),
        Expr::And(a, b) => {
            let second = emit(b, fields, on_true, on_false, steps);
            emit(a, fields, second, on_false, steps)
        }
        Expr::Or(a, b) => {
            let second = emit(b, fields, on_true, on_false, steps);
            emit(a, fields, on_true, second, steps)
        }
        Expr::Compare(predicate) => {
            let test = match (find_field(fields, &predicate.field), &predicate.operand) {
                (Some(FieldLookup::Cpu), Operand::Unsigned(value)) => Test::Cpu {
                    op: predicate.op,
                    value: *value,
                },
                (Some(FieldLookup::Comm), Operand::Str(value))
                    if predicate.op == CompareOp::Glob =>
                {
                    Test::CommGlob {
                        glob: Glob::new(value),
                    }
                }
                (Some(FieldLookup::Comm), Operand::Str(value)) => Test::CommEq {
                    value: value.as_bytes().to_vec(),
                    negate: predicate.op == CompareOp::Ne,
                },
                (Some(FieldLookup::Spec(spec)), Operand::Signed(value)) => Test::Signed {
                    field: spec.location(),
                    op: predicate.op,
                    value: *value,
                },
                (Some(FieldLookup::Spec(spec)), Operand::Unsigned(value)) => Test::Unsigned {
                    field: spec.location(),
                    op: predicate.op,
                    value: *value,
                },
                (Some(FieldLookup::Spec(spec)), Operand::Str(value))
                    if predicate.op == CompareOp::Glob =>
                {
                    Test::StrGlob {
                        field: spec.location(),
                        glob: Glob::new(value),
                    }
                }
                (Some(FieldLookup::Spec(spec)), Operand::Str(value)) => Test::StrEq {
                    field: spec.location(),
                    value: value.as_bytes().to_vec(),
                    negate: predicate.op == CompareOp::Ne,
                },
                // The parser only builds the combinations above.
                _ => return on_false,
            };
            steps.push(Step {
                test,
                on_true,
                on_false,
            });
            Target::Step((steps.len() - 1) as u32)
        }
    }
}

#[inline]
fn compare<T: Ord + Copy + core::ops::BitAnd<Output = T> + Default>(
    op: CompareOp,
    left: T,
    right: T,
) -> bool {
    match op {
        CompareOp::Eq => left == right,
        CompareOp::Ne => left != right,
        CompareOp::Lt => left < right,
        CompareOp::Le => left <= right,
        CompareOp::Gt => left > right,
        CompareOp::Ge => left >= right,
        CompareOp::BitAnd => left & right != T::default(),
        CompareOp::Glob => false,
    }
}

impl Test {
    #[inline]
    fn holds(&self, payload: &[u8], cpu: u32, comm: Option<&[u8]>) -> bool {
        match self {
            Test::Signed { field, op, value } => field
                .bits(payload)
                .is_some_and(|bits| compare(*op, bits as i64, *value)),
            Test::Unsigned { field, op, value } => field
                .bits(payload)
                .is_some_and(|bits| compare(*op, bits, *value)),
            Test::Cpu { op, value } => compare(*op, u64::from(cpu), *value),
            Test::StrEq {
                field,
                value,
                negate,
            } => field
                .string(payload)
                .is_some_and(|s| (s == value.as_slice()) != *negate),
            Test::StrGlob { field, glob } => {
                field.string(payload).is_some_and(|s| glob.matches_bytes(s))
            }
            // An unknown task name equals nothing, so `!=` holds for it.
            Test::CommEq { value, negate } => match comm {
                Some(comm) => (comm == value.as_slice()) != *negate,
                None => *negate,
            },
            Test::CommGlob { glob } => comm.is_some_and(|comm| glob.matches_bytes(comm)),
        }
    }
}
