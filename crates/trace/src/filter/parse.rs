//! The parser: filter text to an [`Expr`] tree whose predicates are
//! already checked against the event's fields.

use alloc::boxed::Box;
use alloc::string::String;
use core::fmt;

use super::error::{FilterError, FilterErrorKind};
use super::field::{FieldKind, FieldSpec};

/// Longest quoted string operand, as in ftrace's operand limit.
pub const MAX_STRING_OPERAND: usize = 256;
/// Most predicates one filter may hold.
pub const MAX_PREDICATES: usize = 1024;
/// Deepest nesting of parentheses.
pub const MAX_DEPTH: usize = 64;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`: true when the field and the value share a set bit.
    BitAnd,
    /// `~`: glob match on a string field.
    Glob,
}

impl CompareOp {
    /// The operator as written in a filter.
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "==",
            CompareOp::Ne => "!=",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
            CompareOp::BitAnd => "&",
            CompareOp::Glob => "~",
        }
    }
}

/// The right-hand side of a comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A number compared with a signed field.
    Signed(i64),
    /// A number compared with an unsigned field (or `CPU`).
    Unsigned(u64),
    /// A string (the quotes removed).
    Str(String),
}

/// `field op value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    /// The event field compared, by its name in the `format` file.
    pub field: String,
    /// How the field's value is compared with the operand.
    pub op: CompareOp,
    /// The literal on the right-hand side: a number or a quoted string.
    pub operand: Operand,
}

/// A parsed filter expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// A leaf: one `field op value` comparison.
    Compare(Predicate),
    /// `!expr`
    Not(Box<Expr>),
    /// `a && b`
    And(Box<Expr>, Box<Expr>),
    /// `a || b`
    Or(Box<Expr>, Box<Expr>),
}

impl fmt::Display for Expr {
    /// Fully parenthesised filter text that parses back to the same tree.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Compare(p) => {
                write!(f, "{} {} ", p.field, p.op.symbol())?;
                match &p.operand {
                    Operand::Signed(v) => write!(f, "{v}"),
                    Operand::Unsigned(v) => write!(f, "{v}"),
                    Operand::Str(s) => write!(f, "\"{s}\""),
                }
            }
            Expr::Not(e) => write!(f, "!({e})"),
            Expr::And(a, b) => write!(f, "({a}) && ({b})"),
            Expr::Or(a, b) => write!(f, "({a}) || ({b})"),
        }
    }
}

/// Looks a name up among `fields`, adding ftrace's pseudo-fields `CPU` and
/// `COMM`. As in ftrace, an event's own field wins over a pseudo-field of
/// the same name (an event with a `comm` field filters on that field).
pub(crate) fn find_field<'f>(fields: &'f [FieldSpec], name: &str) -> Option<FieldLookup<'f>> {
    if let Some(spec) = fields.iter().find(|f| f.name == name) {
        return Some(FieldLookup::Spec(spec));
    }
    match name {
        "CPU" | "cpu" => Some(FieldLookup::Cpu),
        "COMM" | "comm" => Some(FieldLookup::Comm),
        _ => None,
    }
}

/// The result of a field lookup.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FieldLookup<'f> {
    Spec(&'f FieldSpec),
    Cpu,
    Comm,
}

impl FieldLookup<'_> {
    pub(crate) fn kind(self) -> FieldKind {
        match self {
            FieldLookup::Spec(spec) => spec.kind,
            FieldLookup::Cpu => FieldKind::Cpu,
            FieldLookup::Comm => FieldKind::Comm,
        }
    }
}

/// Parses `text` against `fields`.
pub fn parse(text: &str, fields: &[FieldSpec]) -> Result<Expr, FilterError> {
    let mut parser = Parser {
        text: text.as_bytes(),
        pos: 0,
        fields,
        depth: 0,
        predicates: 0,
    };
    parser.skip_space();
    if parser.at_end() {
        return Err(FilterError::new(FilterErrorKind::InvalidFilter, 0));
    }
    let expr = parser.parse_or()?;
    parser.skip_space();
    match parser.peek() {
        None => Ok(expr),
        Some(b')') => Err(parser.error(FilterErrorKind::TooManyClose)),
        Some(_) => Err(parser.error(FilterErrorKind::InvalidFilter)),
    }
}

struct Parser<'t, 'f> {
    text: &'t [u8],
    pos: usize,
    fields: &'f [FieldSpec],
    depth: usize,
    predicates: usize,
}

impl Parser<'_, '_> {
    fn error(&self, kind: FilterErrorKind) -> FilterError {
        FilterError::new(kind, self.pos)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, token: &[u8]) -> bool {
        if self.text[self.pos..].starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn parse_or(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_and()?;
        loop {
            self.skip_space();
            if !self.eat(b"||") {
                return Ok(left);
            }
            let right = self.parse_and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
    }

    fn parse_and(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_unary()?;
        loop {
            self.skip_space();
            if !self.eat(b"&&") {
                return Ok(left);
            }
            let right = self.parse_unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
    }

    fn parse_unary(&mut self) -> Result<Expr, FilterError> {
        // A run of `!` is folded by parity, so "!!!!…" cannot exhaust the stack.
        let mut negations = 0usize;
        loop {
            self.skip_space();
            if self.peek() == Some(b'!') && self.text.get(self.pos + 1) != Some(&b'=') {
                self.pos += 1;
                negations += 1;
            } else {
                break;
            }
        }
        let inner = match self.peek() {
            Some(b'(') => {
                let open = self.pos;
                if self.depth >= MAX_DEPTH {
                    return Err(self.error(FilterErrorKind::TooManyOpen));
                }
                self.pos += 1;
                self.depth += 1;
                self.skip_space();
                if self.peek() == Some(b')') {
                    return Err(self.error(FilterErrorKind::InvalidFilter));
                }
                let inner = self.parse_or()?;
                self.skip_space();
                if !self.eat(b")") {
                    return Err(match self.peek() {
                        None => FilterError::new(FilterErrorKind::TooManyOpen, open),
                        Some(_) => self.error(FilterErrorKind::InvalidFilter),
                    });
                }
                self.depth -= 1;
                inner
            }
            _ => self.parse_predicate()?,
        };
        Ok(if negations % 2 == 1 {
            Expr::Not(Box::new(inner))
        } else {
            inner
        })
    }

    fn parse_predicate(&mut self) -> Result<Expr, FilterError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error(match self.peek() {
                Some(b')') => FilterErrorKind::TooManyClose,
                _ => FilterErrorKind::InvalidFilter,
            }));
        }
        // Validated ASCII above, so this cannot fail.
        let name = core::str::from_utf8(&self.text[start..self.pos]).unwrap_or_default();
        let field = find_field(self.fields, name)
            .ok_or(FilterError::new(FilterErrorKind::FieldNotFound, start))?;
        self.skip_space();
        let op = self.parse_operator()?;
        self.skip_space();
        let operand = self.parse_operand(field.kind(), op)?;
        self.predicates += 1;
        if self.predicates > MAX_PREDICATES {
            return Err(FilterError::new(FilterErrorKind::TooManyPreds, start));
        }
        Ok(Expr::Compare(Predicate {
            field: String::from(name),
            op,
            operand,
        }))
    }

    fn parse_operator(&mut self) -> Result<CompareOp, FilterError> {
        const OPERATORS: [(&[u8], CompareOp); 8] = [
            (b"==", CompareOp::Eq),
            (b"!=", CompareOp::Ne),
            (b"<=", CompareOp::Le),
            (b">=", CompareOp::Ge),
            (b"<", CompareOp::Lt),
            (b">", CompareOp::Gt),
            (b"&", CompareOp::BitAnd),
            (b"~", CompareOp::Glob),
        ];
        for (token, op) in OPERATORS {
            // `&&` after a field name is a missing operator, not `&`.
            if token == b"&" && self.text[self.pos..].starts_with(b"&&") {
                break;
            }
            if self.eat(token) {
                return Ok(op);
            }
        }
        Err(self.error(FilterErrorKind::InvalidOperator))
    }

    fn parse_operand(&mut self, kind: FieldKind, op: CompareOp) -> Result<Operand, FilterError> {
        match self.peek() {
            Some(quote @ (b'"' | b'\'')) => {
                if !matches!(op, CompareOp::Eq | CompareOp::Ne | CompareOp::Glob) {
                    return Err(self.error(FilterErrorKind::IllegalFieldOp));
                }
                if !kind.is_string() {
                    return Err(self.error(FilterErrorKind::ExpectDigit));
                }
                let open = self.pos;
                let body = open + 1;
                let Some(len) = self.text[body..].iter().position(|&b| b == quote) else {
                    self.pos = self.text.len();
                    return Err(self.error(FilterErrorKind::MissingQuote));
                };
                if len > MAX_STRING_OPERAND {
                    return Err(FilterError::new(FilterErrorKind::OperandTooLong, open));
                }
                let value = core::str::from_utf8(&self.text[body..body + len])
                    .map_err(|_| FilterError::new(FilterErrorKind::InvalidValue, open))?;
                self.pos = body + len + 1;
                Ok(Operand::Str(String::from(value)))
            }
            Some(b) if b.is_ascii_digit() || b == b'-' => {
                if kind.is_string() {
                    return Err(self.error(FilterErrorKind::ExpectString));
                }
                if op == CompareOp::Glob {
                    return Err(self.error(FilterErrorKind::IllegalFieldOp));
                }
                let start = self.pos;
                self.pos += 1;
                while self.peek().is_some_and(|b| b.is_ascii_alphanumeric()) {
                    self.pos += 1;
                }
                let literal = core::str::from_utf8(&self.text[start..self.pos]).unwrap_or_default();
                let bad = FilterError::new(FilterErrorKind::IllegalIntValue, start);
                if kind == FieldKind::Signed {
                    parse_signed(literal).map(Operand::Signed).ok_or(bad)
                } else {
                    parse_unsigned(literal).map(Operand::Unsigned).ok_or(bad)
                }
            }
            _ => Err(self.error(FilterErrorKind::InvalidValue)),
        }
    }
}

/// `strtoull` with base 0: `0x` hex, leading `0` octal, else decimal.
pub(crate) fn parse_unsigned(literal: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = literal
        .strip_prefix("0x")
        .or_else(|| literal.strip_prefix("0X"))
    {
        (hex, 16)
    } else if literal.len() > 1 && literal.starts_with('0') {
        (&literal[1..], 8)
    } else {
        (literal, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// `strtoll` with base 0.
pub(crate) fn parse_signed(literal: &str) -> Option<i64> {
    match literal.strip_prefix('-') {
        Some(magnitude) => {
            let magnitude = parse_unsigned(magnitude)?;
            if magnitude == 1 << 63 {
                Some(i64::MIN)
            } else {
                i64::try_from(magnitude).ok().map(|m| -m)
            }
        }
        None => i64::try_from(parse_unsigned(literal)?).ok(),
    }
}
