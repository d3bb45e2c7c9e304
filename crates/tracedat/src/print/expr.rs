//! The argument list after a `print fmt:` string, parsed into a tree the
//! way libtraceevent reads it: C expressions over `REC->field`, casts, and
//! the kernel's print helpers (`__print_symbolic`, `__get_str`, ...).

#[allow(unused_imports)]
use crate::prelude::*;

/// One parsed argument.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    /// A number, parsed as `strtoull` would, and as written.
    Num(u64, String),
    /// A bare identifier: libtraceevent evaluates it as the address of the
    /// kernel symbol of that name.
    Atom(String),
    /// A string literal.
    Str(String),
    /// `REC->name`.
    Field(String),
    /// `(type) arg`.
    Cast(String, Box<Arg>),
    /// A prefix operator: `-`, `!`, `~`.
    Unary(&'static str, Box<Arg>),
    /// A binary operator.
    Binary(&'static str, Box<Arg>, Box<Arg>),
    /// `cond ? a : b`.
    Ternary(Box<Arg>, Box<Arg>, Box<Arg>),
    /// `array[index]`.
    Index(Box<Arg>, Box<Arg>),
    /// `__print_flags(value, delim, { v, "s" }, ...)`, each table value
    /// worked out when parsed (-1 for a name libtraceevent does not know).
    Flags(Box<Arg>, String, Vec<(i64, String)>),
    /// `__print_symbolic(value, { v, "s" }, ...)`.
    Symbolic(Box<Arg>, Vec<(i64, String)>),
    /// `__print_hex(buf, len)`; `true` for `__print_hex_str` (no spaces).
    Hex(Box<Arg>, Box<Arg>, bool),
    /// `__print_array(array, count, element size)`.
    IntArray(Box<Arg>, Box<Arg>, Box<Arg>),
    /// `__get_str(field)` / `__get_rel_str(field)`.
    GetStr(String),
    /// `__get_bitmask(field)`.
    Bitmask(String),
    /// `__get_cpumask(field)`.
    Cpumask(String),
    /// `__get_dynamic_array(field)` and `__get_sockaddr(field)`.
    DynArray(String),
    /// `__get_dynamic_array_len(field)`.
    DynArrayLen(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Op(&'static str),
}

const OPS: [&str; 31] = [
    "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "(", ")", "{", "}", "[", "]", ",", "?",
    ":", "+", "-", "*", "/", "%", "<", ">", "&", "|", "^", "!", "~", ".",
];

fn tokenize(text: &str) -> Option<Vec<Tok>> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_string()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Num(text[start..i].to_string()));
        } else if c == b'"' || c == b'\'' {
            let (s, next) = read_quoted(text, i)?;
            // Adjacent literals concatenate, as in C.
            if let (Some(Tok::Str(prev)), b'"') = (out.last_mut(), c) {
                prev.push_str(&s);
            } else if c == b'\'' {
                out.push(Tok::Num(s.bytes().next().unwrap_or(0).to_string()));
            } else {
                out.push(Tok::Str(s));
            }
            i = next;
        } else {
            let op = OPS.iter().find(|op| text[i..].starts_with(**op))?;
            out.push(Tok::Op(op));
            i += op.len();
        }
    }
    Some(out)
}

/// The quoted text starting at `b[at]` (a quote), escapes kept as written
/// (they are interpreted when printed), and the index after the quote.
pub(crate) fn read_quoted(text: &str, at: usize) -> Option<(String, usize)> {
    let b = text.as_bytes();
    let quote = b[at];
    let mut i = at + 1;
    while i < b.len() && b[i] != quote {
        if b[i] == b'\\' {
            i += 1;
        } else if !(b[i] == b' ' || b[i].is_ascii_graphic() || b[i] == b'\n') {
            // libtraceevent's tokenizer ends a string at an unprintable
            // byte (a tab, say), and the text after it does not parse.
            return None;
        }
        i += 1;
    }
    if i >= b.len() {
        return None;
    }
    Some((text[at + 1..i].to_string(), i + 1))
}

/// Parses the comma-separated argument list; `None` if libtraceevent would
/// fail on it too (the event then prints as `[FAILED TO PARSE]`).
pub(crate) fn parse_args(text: &str) -> Option<Vec<Arg>> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let mut args = Vec::new();
    while p.pos < p.toks.len() {
        args.push(p.expr()?);
        match p.next() {
            None => break,
            Some(Tok::Op(",")) => {}
            Some(_) => return None,
        }
    }
    Some(args)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    /// Nesting of the recursive descent so far.
    depth: usize,
}

/// Deeper nesting than any kernel format has; a hostile format could
/// otherwise exhaust the stack.
const MAX_DEPTH: usize = 400;

/// libtraceevent's operator priorities: lower binds tighter.
fn prio(op: &str) -> i32 {
    match op {
        "*" | "/" | "%" => 6,
        "+" | "-" => 7,
        "<<" | ">>" => 8,
        "<" | ">" | "<=" | ">=" => 9,
        "==" | "!=" => 10,
        "&" => 11,
        "^" => 12,
        "|" => 13,
        "&&" => 14,
        "||" => 15,
        "?" => 16,
        _ => 0,
    }
}

/// The priority a parsed node carries for what follows it: a binary
/// operator's own; 0 for unary operators, ternaries and indexing.
fn node_prio(arg: &Arg) -> i32 {
    match arg {
        Arg::Binary(op, ..) => prio(op),
        _ => 0,
    }
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn eat(&mut self, op: &str) -> Option<()> {
        match self.next()? {
            Tok::Op(o) if o == op => Some(()),
            _ => None,
        }
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    /// A whole expression, built the way libtraceevent builds it: each
    /// operator after the first attaches either at the root (when it binds
    /// more loosely than the root) or to the latest right operand, and a
    /// right operand that is itself a looser operation (a parenthesised
    /// one included) is rotated above. For most formats this is C's
    /// grouping; where it is not (`a & (b | c)` groups as `(a & b) | c`),
    /// trace-cmd prints what this grouping computes, so this does too.
    fn expr(&mut self) -> Option<Arg> {
        let mut arg = self.operand()?;
        if let Some(op) = self.binop() {
            self.process_op(&mut arg, op)?;
        }
        Some(arg)
    }

    /// The operator token next, if it continues an expression.
    fn binop(&mut self) -> Option<&'static str> {
        match self.peek()? {
            Tok::Op(op) if prio(op) > 0 || *op == "[" => {
                let op = *op;
                self.pos += 1;
                Some(op)
            }
            _ => None,
        }
    }

    fn process_op(&mut self, slot: &mut Arg, op: &'static str) -> Option<()> {
        self.enter()?;
        let done = self.process_op_inner(slot, op);
        self.depth -= 1;
        done
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return None;
        }
        Some(())
    }

    fn process_op_inner(&mut self, slot: &mut Arg, op: &'static str) -> Option<()> {
        let take = |slot: &mut Arg| Box::new(core::mem::replace(slot, Arg::Atom(String::new())));
        // Which child the next operator may attach to.
        let mut child_is_left = false;
        match op {
            "?" => {
                let cond = take(slot);
                let mut a = self.operand()?;
                if let Some(op) = self.binop() {
                    self.process_op(&mut a, op)?;
                }
                self.eat(":")?;
                let b = self.operand()?;
                *slot = Arg::Ternary(cond, Box::new(a), Box::new(b));
            }
            "[" => {
                let base = take(slot);
                let index = self.expr()?;
                self.eat("]")?;
                *slot = Arg::Index(base, Box::new(index));
            }
            _ => {
                let left = take(slot);
                let right = self.operand()?;
                *slot = match right {
                    Arg::Binary(rop, rl, rr) if prio(op) < prio(rop) => {
                        child_is_left = true;
                        Arg::Binary(rop, Box::new(Arg::Binary(op, left, rl)), rr)
                    }
                    Arg::Ternary(c, a, b) if prio(op) < prio("?") => {
                        child_is_left = true;
                        Arg::Ternary(Box::new(Arg::Binary(op, left, c)), a, b)
                    }
                    right => Arg::Binary(op, left, Box::new(right)),
                };
            }
        }
        let Some(next) = self.binop() else {
            return Some(());
        };
        if prio(next) > node_prio(slot) {
            return self.process_op(slot, next);
        }
        let child = match slot {
            Arg::Binary(_, l, _) if child_is_left => l,
            Arg::Ternary(c, ..) if child_is_left => c,
            Arg::Binary(_, _, r) => r,
            _ => return self.process_op(slot, next),
        };
        self.process_op(child, next)
    }

    /// One operand: a primary, a cast, or a prefix operator (which, as in
    /// libtraceevent, takes the operators after it into its operand's
    /// expression).
    fn operand(&mut self) -> Option<Arg> {
        self.enter()?;
        let arg = self.operand_inner();
        self.depth -= 1;
        arg
    }

    fn operand_inner(&mut self) -> Option<Arg> {
        match self.peek()? {
            Tok::Op(op @ ("-" | "!" | "~" | "+" | "&" | "*")) => {
                let op = *op;
                self.pos += 1;
                let inner = self.operand_primary()?;
                let mut arg = match op {
                    "-" | "!" | "~" => Arg::Unary(op, Box::new(inner)),
                    // `&x`, `*p`, `+x`: the operand's value is what a
                    // reader of the record can have.
                    _ => inner,
                };
                if let Some(next) = self.binop() {
                    self.process_op(&mut arg, next)?;
                }
                Some(arg)
            }
            _ => self.operand_primary(),
        }
    }

    fn operand_primary(&mut self) -> Option<Arg> {
        match self.peek()? {
            Tok::Op("-" | "!" | "~" | "+" | "&" | "*") => self.operand(),
            Tok::Op("(") if self.cast_ahead() => {
                self.pos += 1;
                let mut ty = Vec::new();
                while !self.is_op(")") {
                    match self.next()? {
                        Tok::Ident(s) => ty.push(s),
                        Tok::Op("*") => ty.push("*".to_string()),
                        _ => return None,
                    }
                }
                self.pos += 1;
                let ty = ty.join(" ").replace(" *", "*");
                Some(Arg::Cast(ty, Box::new(self.operand_primary()?)))
            }
            _ => self.postfix(),
        }
    }

    /// A parenthesised run of identifiers and `*` followed by an operand
    /// is a cast; anything else in parentheses is an expression.
    fn cast_ahead(&self) -> bool {
        let mut i = self.pos + 1;
        let mut any = false;
        while let Some(t) = self.toks.get(i) {
            match t {
                Tok::Ident(s) if s != "REC" => any = true,
                Tok::Op("*") if any => {}
                Tok::Op(")") => break,
                _ => return false,
            }
            i += 1;
        }
        any && matches!(
            self.toks.get(i + 1),
            Some(
                Tok::Ident(_)
                    | Tok::Num(_)
                    | Tok::Str(_)
                    | Tok::Op("(" | "-" | "~" | "!" | "&" | "*")
            )
        )
    }

    fn postfix(&mut self) -> Option<Arg> {
        let arg = self.primary()?;
        loop {
            if self.is_op("->") || self.is_op(".") {
                // Members of members (`REC->a.b`) are not fields a record has.
                self.pos += 1;
                self.next()?;
            } else {
                return Some(arg);
            }
        }
    }

    fn primary(&mut self) -> Option<Arg> {
        match self.next()? {
            Tok::Num(n) => Some(Arg::Num(parse_c_number(&n).unwrap_or(0), n)),
            Tok::Str(s) => Some(Arg::Str(s)),
            Tok::Op("(") => {
                let e = self.expr()?;
                self.eat(")")?;
                Some(e)
            }
            Tok::Ident(name) if name == "REC" => {
                self.eat("->")?;
                match self.next()? {
                    Tok::Ident(field) => Some(Arg::Field(field)),
                    _ => None,
                }
            }
            Tok::Ident(name) if self.is_op("(") => self.call(&name),
            Tok::Ident(name) => Some(Arg::Atom(name)),
            Tok::Op(_) => None,
        }
    }

    fn field_name(&mut self) -> Option<String> {
        match self.expr()? {
            Arg::Field(f) | Arg::Atom(f) => Some(f),
            _ => None,
        }
    }

    fn call(&mut self, name: &str) -> Option<Arg> {
        self.eat("(")?;
        let arg = match name {
            "__print_flags" => {
                let value = self.expr()?;
                self.eat(",")?;
                let delim = match self.next()? {
                    Tok::Str(s) => s,
                    _ => return None,
                };
                Arg::Flags(Box::new(value), delim, self.table()?)
            }
            "__print_symbolic" => {
                let value = self.expr()?;
                Arg::Symbolic(Box::new(value), self.table()?)
            }
            "__print_hex" | "__print_hex_str" => {
                let buf = self.expr()?;
                self.eat(",")?;
                let len = self.expr()?;
                Arg::Hex(Box::new(buf), Box::new(len), name == "__print_hex_str")
            }
            "__print_array" => {
                let array = self.expr()?;
                self.eat(",")?;
                let count = self.expr()?;
                self.eat(",")?;
                let size = self.expr()?;
                Arg::IntArray(Box::new(array), Box::new(count), Box::new(size))
            }
            "__get_str" | "__get_rel_str" => Arg::GetStr(self.field_name()?),
            "__get_bitmask" | "__get_rel_bitmask" => Arg::Bitmask(self.field_name()?),
            "__get_cpumask" | "__get_rel_cpumask" => Arg::Cpumask(self.field_name()?),
            "__get_dynamic_array"
            | "__get_rel_dynamic_array"
            | "__get_sockaddr"
            | "__get_rel_sockaddr" => Arg::DynArray(self.field_name()?),
            "__get_dynamic_array_len" | "__get_rel_dynamic_array_len" => {
                Arg::DynArrayLen(self.field_name()?)
            }
            // The kernel's likely()/unlikely(): the condition is the value.
            "__builtin_expect" => {
                let value = self.expr()?;
                self.eat(",")?;
                self.expr()?;
                value
            }
            "sizeof" => {
                let mut words = Vec::new();
                while !self.is_op(")") {
                    match self.next()? {
                        Tok::Ident(s) => words.push(s),
                        Tok::Op("*") => words.push("*".to_string()),
                        _ => return None,
                    }
                }
                let size = sizeof(&words.join(" "))?;
                Arg::Num(size, size.to_string())
            }
            // Any other function needs a plugin; without one libtraceevent
            // cannot parse the event.
            _ => return None,
        };
        self.eat(")")?;
        Some(arg)
    }

    /// `, { value, "text" }, ...` up to the closing parenthesis.
    fn table(&mut self) -> Option<Vec<(i64, String)>> {
        let mut out = Vec::new();
        while self.is_op(",") {
            self.pos += 1;
            self.eat("{")?;
            let value = self.expr()?;
            self.eat(",")?;
            // The kernel ends some tables with `{ 0, NULL }`.
            let text = atom_text(&self.expr()?);
            self.eat("}")?;
            out.push((super::eval::flag_value(&atom_text(&value)), text));
        }
        Some(out)
    }
}

/// A table value as libtraceevent keeps it: constant expressions
/// evaluated to a number, names (enum members the kernel left unconverted)
/// kept as written.
fn atom_text(arg: &Arg) -> String {
    match arg {
        Arg::Str(a) => a.clone(),
        Arg::Atom(a) => a.clone(),
        _ => const_eval(arg).map_or_else(String::new, |v| v.to_string()),
    }
}

/// Evaluates an expression without a record.
fn const_eval(arg: &Arg) -> Option<u64> {
    Some(match arg {
        Arg::Num(v, _) => *v,
        Arg::Cast(ty, inner) => super::eval::cast(ty, const_eval(inner)?),
        Arg::Unary(op, inner) => {
            let v = const_eval(inner)?;
            match *op {
                "-" => v.wrapping_neg(),
                "!" => u64::from(v == 0),
                _ => !v,
            }
        }
        Arg::Binary(op, l, r) => super::eval::binary(op, const_eval(l)?, const_eval(r)?),
        Arg::Ternary(c, a, b) => {
            if const_eval(c)? != 0 {
                const_eval(a)?
            } else {
                const_eval(b)?
            }
        }
        _ => return None,
    })
}

fn sizeof(ty: &str) -> Option<u64> {
    Some(match ty {
        "char" | "u8" | "s8" | "unsigned char" | "bool" => 1,
        "short" | "u16" | "s16" | "unsigned short" => 2,
        "int" | "u32" | "s32" | "unsigned int" | "unsigned" => 4,
        "long" | "u64" | "s64" | "unsigned long" | "long long" | "unsigned long long" => 8,
        t if t.ends_with('*') => 8,
        _ => return None,
    })
}

/// `strtoull(text, NULL, 0)`: leading digits in base 16 (`0x`), 8 (`0`)
/// or 10; trailing letters such as `UL` end the number.
pub(crate) fn parse_c_number(text: &str) -> Option<u64> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return if radix == 8 { Some(0) } else { None };
    }
    let mut v: u64 = 0;
    for c in digits[..end].chars() {
        v = v
            .wrapping_mul(u64::from(radix))
            .wrapping_add(u64::from(c.to_digit(radix)?));
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

#[cfg(test)]
mod tests;
