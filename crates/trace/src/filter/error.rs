//! Filter parse errors, with ftrace's messages and the position of the
//! offending byte (ftrace's `^` marker).

use core::fmt;

/// What went wrong; the messages are ftrace's own (`err_text` in
/// `trace_events_filter.c`), so scripts that grep for them keep working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterErrorKind {
    /// No valid comparison operator after a field name.
    InvalidOperator,
    /// A `(` that is never closed, or nesting deeper than the parser allows.
    TooManyOpen,
    /// A `)` without its `(`.
    TooManyClose,
    /// A quoted string without its closing quote.
    MissingQuote,
    /// A string operand longer than the parser accepts.
    OperandTooLong,
    /// A number compared with a string field.
    ExpectString,
    /// A string compared with a numeric field.
    ExpectDigit,
    /// An operator the field's type does not support (`~` on a number, `<` on a string).
    IllegalFieldOp,
    /// The event has no field of that name.
    FieldNotFound,
    /// A number that does not parse or does not fit the field.
    IllegalIntValue,
    /// More predicates than a filter may hold.
    TooManyPreds,
    /// Empty expression, dangling `&&`, trailing garbage.
    InvalidFilter,
    /// A value that is neither a number nor a quoted string.
    InvalidValue,
}

impl FilterErrorKind {
    /// ftrace's text for this error.
    pub fn message(self) -> &'static str {
        match self {
            FilterErrorKind::InvalidOperator => "Invalid operator",
            FilterErrorKind::TooManyOpen => "Too many '('",
            FilterErrorKind::TooManyClose => "Too few '('",
            FilterErrorKind::MissingQuote => "Missing matching quote",
            FilterErrorKind::OperandTooLong => "Operand too long",
            FilterErrorKind::ExpectString => "Expecting string field",
            FilterErrorKind::ExpectDigit => "Expecting numeric literal",
            FilterErrorKind::IllegalFieldOp => "Illegal operation for field type",
            FilterErrorKind::FieldNotFound => "Field not found",
            FilterErrorKind::IllegalIntValue => "Illegal integer value",
            FilterErrorKind::TooManyPreds => "Too many terms in predicate expression",
            FilterErrorKind::InvalidFilter => "Meaningless filter expression",
            FilterErrorKind::InvalidValue => "Invalid value (did you forget quotes)?",
        }
    }
}

/// A parse error at byte `position` of the filter text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterError {
    /// What went wrong.
    pub kind: FilterErrorKind,
    /// Byte offset in the filter text where ftrace would put its `^`.
    pub position: usize,
}

impl FilterError {
    pub(crate) fn new(kind: FilterErrorKind, position: usize) -> FilterError {
        FilterError { kind, position }
    }

    /// Writes the text ftrace shows in the event's `filter` file after a
    /// failed write: the filter, a line with `^` under the error, and the
    /// message.
    ///
    /// ```
    /// use hotkern_trace::internals::filter::{Filter, FieldSpec};
    ///
    /// let fields = [FieldSpec::unsigned("next_pid", 8, 4)];
    /// let error = Filter::compile("nxt_pid == 1", &fields).unwrap_err();
    /// let mut text = String::new();
    /// error.write_report(&mut text, "nxt_pid == 1").unwrap();
    /// assert_eq!(text, "nxt_pid == 1\n^\nparse_error: Field not found\n");
    /// ```
    pub fn write_report(&self, out: &mut impl fmt::Write, filter_text: &str) -> fmt::Result {
        let column = self.position.min(filter_text.len());
        writeln!(out, "{filter_text}")?;
        writeln!(out, "{:>width$}", "^", width = column + 1)?;
        writeln!(out, "parse_error: {}", self.kind.message())
    }
}

impl fmt::Display for FilterErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl core::error::Error for FilterErrorKind {}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.kind, self.position)
    }
}

// The kind's message is already in Display, so no `source`.
impl core::error::Error for FilterError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn messages_are_ftraces_with_the_position() {
        let kind: &dyn core::error::Error = &FilterErrorKind::TooManyClose;
        assert_eq!(kind.to_string(), "Too few '('");
        let error: &dyn core::error::Error = &FilterError::new(FilterErrorKind::MissingQuote, 7);
        assert_eq!(error.to_string(), "Missing matching quote (at byte 7)");
    }
}
