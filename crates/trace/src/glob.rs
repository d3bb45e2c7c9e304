//! ftrace's glob patterns, as accepted by `set_ftrace_filter`, `set_event`
//! and the `~` operator of event filters.
//!
//! A pattern is matched against the whole text. `*` matches any run of
//! bytes (also none), `?` exactly one byte, `[abc]`, `[a-z]` one byte out of
//! a class (`[!a-z]` or `[^a-z]` one byte outside it), and `\` makes the next
//! byte literal. A `[` without its closing `]` is an ordinary byte, as in the
//! kernel's `glob_match`.
//!
//! The common shapes ftrace optimises — `name`, `x*`, `*x`, `*x*` — are
//! recognised once, when the [`Glob`] is built, so matching a function name
//! against them is a single comparison. Matching never allocates.

use alloc::string::String;

/// The shape of a pattern, decided once when it is compiled.
///
/// The first four mirror ftrace's `MATCH_FULL`, `MATCH_FRONT_ONLY`,
/// `MATCH_END_ONLY` and `MATCH_MIDDLE_ONLY`; everything else (`a*b`, `?`,
/// classes, escapes) is matched by the general matcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobKind {
    /// No wildcard: the text must equal the pattern.
    Exact,
    /// `x*`: the text must start with `x`.
    Prefix,
    /// `*x`: the text must end with `x`.
    Suffix,
    /// `*x*`: the text must contain `x`.
    Contains,
    /// Anything else.
    General,
}

/// A compiled glob pattern.
///
/// ```
/// use hotkern_trace::internals::glob::Glob;
///
/// let glob = Glob::new("sched_*");
/// assert!(glob.matches("sched_switch"));
/// assert!(!glob.matches("irq_handler_entry"));
/// assert!(Glob::new("k?alloc*").matches("kmalloc_node"));
/// assert!(Glob::new("*_[ab]*").matches("vfs_bread"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    kind: GlobKind,
    /// For the fast shapes: the literal part, as a byte range of `pattern`.
    literal: (usize, usize),
}

impl Glob {
    /// Compiles `pattern`. Every string is a valid pattern.
    pub fn new(pattern: &str) -> Glob {
        let bytes = pattern.as_bytes();
        let special = bytes.iter().any(|&b| matches!(b, b'?' | b'[' | b'\\'));
        let stars = bytes.iter().filter(|&&b| b == b'*').count();
        let leading = bytes.first() == Some(&b'*');
        let trailing = bytes.len() > 1 && bytes.last() == Some(&b'*');
        let n = bytes.len();
        let (kind, literal) = if special {
            (GlobKind::General, (0, n))
        } else {
            match (stars, leading, trailing) {
                (0, _, _) => (GlobKind::Exact, (0, n)),
                (1, false, true) => (GlobKind::Prefix, (0, n - 1)),
                (1, true, false) => (GlobKind::Suffix, (1, n)),
                (2, true, true) => (GlobKind::Contains, (1, n - 1)),
                _ => (GlobKind::General, (0, n)),
            }
        };
        Glob {
            pattern: String::from(pattern),
            kind,
            literal,
        }
    }

    /// The pattern as written.
    #[cfg(any(test, feature = "internals"))]
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Which shape the pattern was recognised as.
    #[cfg(any(test, feature = "internals"))]
    pub fn kind(&self) -> GlobKind {
        self.kind
    }

    /// True if the pattern contains no wildcard (it names exactly one text).
    #[cfg(any(test, feature = "internals"))]
    pub fn is_literal(&self) -> bool {
        self.kind == GlobKind::Exact
    }

    /// Matches `text` against the pattern; never allocates.
    pub fn matches(&self, text: &str) -> bool {
        self.matches_bytes(text.as_bytes())
    }

    /// Matches raw bytes (event string fields need not be UTF-8).
    pub fn matches_bytes(&self, text: &[u8]) -> bool {
        let literal = &self.pattern.as_bytes()[self.literal.0..self.literal.1];
        match self.kind {
            GlobKind::Exact => text == literal,
            GlobKind::Prefix => text.starts_with(literal),
            GlobKind::Suffix => text.ends_with(literal),
            GlobKind::Contains => contains(text, literal),
            GlobKind::General => glob_match_bytes(self.pattern.as_bytes(), text),
        }
    }
}

impl core::fmt::Display for Glob {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.pattern)
    }
}

/// True if `pattern` contains a wildcard character (`*`, `?` or `[`).
///
/// ```
/// assert!(hotkern_trace::internals::glob::has_wildcard("sched_*"));
/// assert!(!hotkern_trace::internals::glob::has_wildcard("sched_switch"));
/// ```
#[cfg(any(test, feature = "internals"))]
pub fn has_wildcard(pattern: &str) -> bool {
    pattern.bytes().any(|b| matches!(b, b'*' | b'?' | b'['))
}

/// Matches `text` against an uncompiled `pattern`; never allocates.
///
/// ```
/// assert!(hotkern_trace::internals::glob::glob_match("a*b", "axxb"));
/// assert!(!hotkern_trace::internals::glob::glob_match("a*b", "axxbc"));
/// ```
#[cfg(any(test, feature = "internals"))]
pub fn glob_match(pattern: &str, text: &str) -> bool {
    glob_match_bytes(pattern.as_bytes(), text.as_bytes())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// The general matcher: a single pass that remembers only the most recent
/// `*`, which is enough because a later star can absorb anything an earlier
/// one would have. Worst case O(pattern × text), no recursion, no heap.
pub fn glob_match_bytes(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Pattern index just after the last `*`, and the text index it resumes at.
    let mut resume: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            let step = match pattern[p] {
                b'*' => {
                    resume = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                b'?' => (t < text.len()).then_some(1),
                b'[' => match class_at(pattern, p) {
                    Some(class) => (t < text.len() && class.contains(text[t])).then_some(class.len),
                    None => (t < text.len() && text[t] == b'[').then_some(1),
                },
                b'\\' if p + 1 < pattern.len() => {
                    (t < text.len() && text[t] == pattern[p + 1]).then_some(2)
                }
                byte => (t < text.len() && text[t] == byte).then_some(1),
            };
            if let Some(width) = step {
                p += width;
                t += 1;
                continue;
            }
        } else if t == text.len() {
            return true;
        }
        match resume {
            Some((star_p, star_t)) if star_t < text.len() => {
                resume = Some((star_p, star_t + 1));
                p = star_p;
                t = star_t + 1;
            }
            _ => return false,
        }
    }
}

/// A bracket expression, borrowed from the pattern.
struct Class<'a> {
    negated: bool,
    /// The bytes between the brackets (after the negation mark).
    body: &'a [u8],
    /// Pattern bytes the whole expression occupies, brackets included.
    len: usize,
}

impl Class<'_> {
    fn contains(&self, byte: u8) -> bool {
        let mut i = 0;
        let mut found = false;
        while i < self.body.len() {
            let low = self.body[i];
            if i + 2 < self.body.len() && self.body[i + 1] == b'-' {
                let high = self.body[i + 2];
                found |= low <= byte && byte <= high;
                i += 3;
            } else {
                found |= low == byte;
                i += 1;
            }
        }
        found != self.negated
    }
}

/// Parses the bracket expression starting at `pattern[start] == b'['`;
/// `None` when it has no closing bracket. A `]` right after the opening
/// (or after the negation mark) is a member, not the end.
fn class_at(pattern: &[u8], start: usize) -> Option<Class<'_>> {
    let mut i = start + 1;
    let negated = matches!(pattern.get(i), Some(b'!') | Some(b'^'));
    if negated {
        i += 1;
    }
    let body_start = i;
    if pattern.get(i) == Some(&b']') {
        i += 1;
    }
    while i < pattern.len() {
        if pattern[i] == b']' {
            return Some(Class {
                negated,
                body: &pattern[body_start..i],
                len: i + 1 - start,
            });
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_recognised() {
        assert_eq!(Glob::new("schedule").kind(), GlobKind::Exact);
        assert_eq!(Glob::new("sched*").kind(), GlobKind::Prefix);
        assert_eq!(Glob::new("*lock").kind(), GlobKind::Suffix);
        assert_eq!(Glob::new("*lock*").kind(), GlobKind::Contains);
        // A lone star is a suffix match of the empty string: everything.
        assert_eq!(Glob::new("*").kind(), GlobKind::Suffix);
        assert_eq!(Glob::new("**").kind(), GlobKind::Contains);
        assert_eq!(Glob::new("a*b").kind(), GlobKind::General);
        assert_eq!(Glob::new("a?").kind(), GlobKind::General);
        assert_eq!(Glob::new("[ab]*").kind(), GlobKind::General);
        assert_eq!(Glob::new("").kind(), GlobKind::Exact);
    }

    #[test]
    fn ftrace_forms() {
        let cases: &[(&str, &str, bool)] = &[
            ("schedule", "schedule", true),
            ("schedule", "schedule_tail", false),
            ("sched*", "schedule_tail", true),
            ("sched*", "xsched", false),
            ("*lock", "spin_lock", true),
            ("*lock", "spin_lock_irq", false),
            ("*lock*", "spin_lock_irq", true),
            ("*lock*", "mutex", false),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*b", "ab", true),
            ("a*b", "a_to_b", true),
            ("a*b", "a_to_bc", false),
            ("a*b*c", "abbbc", true),
            ("a*b*c", "acb", false),
            ("k?alloc", "kmalloc", true),
            ("k?alloc", "kalloc", false),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("[!a-c]x", "dx", true),
            ("[^a-c]x", "ax", false),
            ("[]]", "]", true),
            ("[!]]", "a", true),
            // A `-` last (or first) in a class is a member, not a range.
            ("[a-]x", "-x", true),
            ("[a-]x", "ax", true),
            ("[a-]x", "bx", false),
            ("[-a]", "-", true),
            ("[ab", "[ab", true),
            ("[ab", "a", false),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("*_[0-9]", "cpu_7", true),
            ("*_[0-9]", "cpu_x", false),
            ("*?", "", false),
            ("*?", "z", true),
        ];
        for &(pattern, text, expected) in cases {
            assert_eq!(
                Glob::new(pattern).matches(text),
                expected,
                "{pattern} vs {text}"
            );
            assert_eq!(
                glob_match(pattern, text),
                expected,
                "{pattern} vs {text} (general)"
            );
        }
    }

    #[test]
    fn the_pattern_is_kept_as_written() {
        for pattern in ["schedule", "k?alloc*", "[!a-c]x", "a\\*", ""] {
            let glob = Glob::new(pattern);
            assert_eq!(glob.as_str(), pattern);
            assert_eq!(alloc::format!("{glob}"), pattern);
        }
    }

    #[test]
    fn only_a_pattern_without_wildcards_is_literal() {
        assert!(Glob::new("schedule").is_literal());
        assert!(Glob::new("").is_literal());
        for pattern in ["sched*", "*lock", "*lock*", "a*b", "a?", "[ab]", "a\\*"] {
            assert!(!Glob::new(pattern).is_literal(), "{pattern}");
        }
    }

    #[test]
    fn wildcard_detection() {
        assert!(has_wildcard("a?"));
        assert!(has_wildcard("[a]"));
        assert!(!has_wildcard("plain_name"));
    }
}
