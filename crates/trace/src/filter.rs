//! Event filters in ftrace's expression language.
//!
//! A filter is a boolean expression over an event's fields:
//! `field op value` with `==`, `!=`, `<`, `<=`, `>`, `>=`, `&` (any common
//! bit) on integers, `==`, `!=` and `~` (glob) on strings, combined with
//! `&&`, `||`, `!` and parentheses; `CPU` names the recording CPU and
//! `COMM` (or `comm`) the name of the task that hit the event. Strings
//! are quoted, numbers are decimal, `0x` hex or `0` octal, as in ftrace.
//!
//! [`Filter::compile`] parses the text once against the event's fields and
//! turns it into a short-circuit program; [`Filter::matches`] then runs that
//! program on a payload without allocating. Errors carry ftrace's message
//! and the byte position of the problem.
//!
//! ```
//! use hotkern_trace::internals::filter::{Filter, FieldSpec};
//!
//! let fields = [
//!     FieldSpec::fixed_string("prev_comm", 8, 16),
//!     FieldSpec::signed("prev_pid", 24, 4),
//! ];
//! let filter = Filter::compile(r#"prev_comm ~ "kwork*" && !(prev_pid < 10)"#, &fields).unwrap();
//! let mut payload = [0u8; 28];
//! payload[8..14].copy_from_slice(b"kwork1");
//! payload[24..28].copy_from_slice(&42i32.to_ne_bytes());
//! assert!(filter.matches(&payload));
//! payload[24..28].copy_from_slice(&3i32.to_ne_bytes());
//! assert!(!filter.matches(&payload));
//! ```

mod error;
mod field;
mod parse;
mod program;
// The tree-walking evaluator the compiled programs are checked against.
#[cfg(any(test, feature = "internals"))]
pub(crate) mod reference;

use alloc::string::String;

use crate::platform::TASK_COMM_LEN;

pub use error::{FilterError, FilterErrorKind};
#[cfg(test)]
pub(crate) use field::common_fields;
pub(crate) use field::Location;
pub use field::{FieldKind, FieldSpec};
pub use parse::parse;
#[cfg(feature = "internals")]
pub use parse::{CompareOp, Expr, Operand, Predicate};

use program::Program;

/// A compiled event filter.
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    program: Program,
}

impl Filter {
    /// Parses and compiles `text` for an event with `fields`.
    pub fn compile(text: &str, fields: &[FieldSpec]) -> Result<Filter, FilterError> {
        let expr = parse(text, fields)?;
        Ok(Filter {
            text: String::from(text.trim()),
            program: Program::compile(&expr, fields),
        })
    }

    /// True if the event in `payload` passes (the `CPU` pseudo-field reads
    /// as 0, and the task name is unknown).
    #[cfg(any(test, feature = "internals"))]
    pub fn matches(&self, payload: &[u8]) -> bool {
        self.program.run(payload, 0, None)
    }

    /// True if the event in `payload`, recorded on `cpu`, passes (the task
    /// name is unknown).
    #[cfg(any(test, feature = "internals"))]
    pub fn matches_on(&self, payload: &[u8], cpu: u32) -> bool {
        self.program.run(payload, cpu, None)
    }

    /// True if the event in `payload`, recorded on `cpu` by the task named
    /// `comm`, passes. `comm` is the kernel's fixed `task->comm` buffer: the
    /// name ends at the first NUL. Without a name (`None`), `COMM == ".."`
    /// and `COMM ~ ".."` fail and `COMM != ".."` holds.
    ///
    /// ```
    /// use hotkern_trace::internals::filter::{Filter, FieldSpec};
    ///
    /// let filter = Filter::compile(r#"COMM ~ "worker-*" && pid > 1"#, &[FieldSpec::signed("pid", 8, 4)]).unwrap();
    /// assert!(filter.uses_comm());
    /// let mut payload = [0u8; 12];
    /// payload[8..].copy_from_slice(&2i32.to_ne_bytes());
    /// let mut comm = [0u8; 16];
    /// comm[..8].copy_from_slice(b"worker-1");
    /// assert!(filter.matches_task(&payload, 0, Some(&comm)));
    /// assert!(!filter.matches_task(&payload, 0, Some(b"main")));
    /// assert!(!filter.matches_task(&payload, 0, None));
    /// ```
    pub fn matches_task(&self, payload: &[u8], cpu: u32, comm: Option<&[u8]>) -> bool {
        let comm = comm.map(|raw| &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())]);
        self.program.run(payload, cpu, comm)
    }

    /// [`Filter::matches_task`] with the task name looked up by `comm` only
    /// if the filter names `COMM` (finding the name may cost a lookup the
    /// other filters should not pay).
    ///
    /// ```
    /// use hotkern_trace::internals::filter::{Filter, FieldSpec};
    ///
    /// let filter = Filter::compile("pid > 1", &[FieldSpec::signed("pid", 8, 4)]).unwrap();
    /// let mut payload = [0u8; 12];
    /// payload[8..].copy_from_slice(&2i32.to_ne_bytes());
    /// assert!(filter.matches_looking_up(&payload, 0, || unreachable!("COMM not named")));
    /// ```
    pub fn matches_looking_up(
        &self,
        payload: &[u8],
        cpu: u32,
        comm: impl FnOnce() -> Option<[u8; TASK_COMM_LEN]>,
    ) -> bool {
        let name = if self.uses_comm() { comm() } else { None };
        self.matches_task(payload, cpu, name.as_ref().map(|name| &name[..]))
    }

    /// True if the filter names `COMM`: only then does a caller need to
    /// look the task name up for [`Filter::matches_task`].
    pub fn uses_comm(&self) -> bool {
        self.program.uses_comm()
    }

    /// The filter as written (what the `filter` file shows).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Number of predicates in the compiled program.
    #[cfg(any(test, feature = "internals"))]
    pub fn predicates(&self) -> usize {
        self.program.len()
    }
}

#[cfg(test)]
mod tests;
