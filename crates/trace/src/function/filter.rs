//! `set_ftrace_filter` / `set_ftrace_notrace` selections.
//!
//! What a user writes is a list of selectors separated by white space:
//!
//! * `glob` — functions whose name matches (`x*`, `*x`, `*x*`, `a*b`, `?`, `[..]`);
//! * `glob:mod:module` — and whose Rust module path matches `module` (a glob
//!   on the whole path, or a path prefix: `:mod:app::net` also selects
//!   `app::net::tcp`); `:mod:!module` selects functions *not* in it, and a
//!   missing function glob means `*` (`:mod:app` = all of `app`);
//! * a leading `!` removes what the selector matches from the set.
//!
//! The selection keeps the selectors (not a snapshot of matching functions),
//! so functions that register later are judged by the same rules, as ftrace
//! does for modules loaded after `:mod:` was written. The last selector that
//! matches a function decides.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::glob::Glob;

/// A parse error in a filter write: the offending selector and its byte
/// position in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError {
    /// Byte offset of the selector in the written text.
    pub position: usize,
    /// The refused selector, as written.
    pub selector: String,
    /// Why it was refused (`empty module name`, ...).
    pub reason: &'static str,
}

impl core::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "invalid function selector '{}' at {}: {}",
            self.selector, self.position, self.reason
        )
    }
}

impl core::error::Error for SelectorError {}

/// One parsed selector: a function glob, an optional `:mod:` glob, and
/// whether it adds to the selection or (`!`) removes from it.
#[derive(Debug, Clone)]
pub struct Selector {
    text: String,
    function: Glob,
    module: Option<(Glob, bool)>,
    remove: bool,
}

impl Selector {
    /// Parses one selector (no white space inside).
    pub fn parse(token: &str, position: usize) -> Result<Selector, SelectorError> {
        let error = |reason| SelectorError {
            position,
            selector: token.to_string(),
            reason,
        };
        let (remove, body) = match token.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, token),
        };
        if body.is_empty() {
            return Err(error("empty selector"));
        }
        let (function, module) = match body.find(':') {
            None => (body, None),
            Some(at) => {
                let rest = &body[at + 1..];
                let Some(module) = rest.strip_prefix("mod:") else {
                    // Other commands are probes (`function::probe`),
                    // taken out before selectors are parsed.
                    return Err(error("unknown command"));
                };
                let (negated, module) = match module.strip_prefix('!') {
                    Some(m) => (true, m),
                    None => (false, module),
                };
                if module.is_empty() {
                    return Err(error("empty module name"));
                }
                (&body[..at], Some((Glob::new(module), negated)))
            }
        };
        let function = if function.is_empty() { "*" } else { function };
        if function.contains(':') {
            return Err(error("unexpected ':' in function name"));
        }
        Ok(Selector {
            text: token.to_string(),
            function: Glob::new(function),
            module,
            remove,
        })
    }

    /// Whether the selector matches a function.
    pub fn matches(&self, name: &str, module: &str) -> bool {
        if !self.function.matches(name) {
            return false;
        }
        match &self.module {
            None => true,
            Some((glob, negated)) => {
                // The module or any module it is nested in.
                let inside = glob.matches(module)
                    || module
                        .match_indices("::")
                        .any(|(at, _)| glob.matches(&module[..at]));
                inside != *negated
            }
        }
    }

    /// The selector as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether it adds functions to the list (no leading `!`).
    pub(crate) fn adds(&self) -> bool {
        !self.remove
    }
}

/// A `set_ftrace_filter` or `set_ftrace_notrace` list.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    selectors: Vec<Selector>,
}

impl Selection {
    /// Parses `text` and replaces (`append == false`, like `>`) or extends
    /// (`>>`) the list. On error nothing changes.
    #[cfg(test)]
    pub fn write(&mut self, text: &str, append: bool) -> Result<(), SelectorError> {
        let parsed = Selection::parse(text)?;
        self.extend(parsed, append);
        Ok(())
    }

    /// The selectors of `text`, white-space separated.
    pub(crate) fn parse(text: &str) -> Result<Vec<Selector>, SelectorError> {
        let mut parsed = Vec::new();
        let mut position = 0;
        for token in text.split_ascii_whitespace() {
            // Byte position of this token in `text`.
            let at = text[position..]
                .find(token)
                .map_or(position, |p| position + p);
            parsed.push(Selector::parse(token, at)?);
            position = at + token.len();
        }
        Ok(parsed)
    }

    /// Replaces (`append == false`) or extends the list with `parsed`.
    pub(crate) fn extend(&mut self, parsed: Vec<Selector>, append: bool) {
        if !append {
            self.selectors.clear();
        }
        self.selectors.extend(parsed);
    }

    /// True when no selector adds anything (for a filter: trace everything).
    pub fn is_empty(&self) -> bool {
        !self.selectors.iter().any(|s| !s.remove)
    }

    /// Whether the list selects the function (last matching selector wins).
    pub(crate) fn selects(&self, name: &str, module: &str) -> bool {
        self.selectors
            .iter()
            .rev()
            .find(|s| s.matches(name, module))
            .is_some_and(|s| !s.remove)
    }

    /// The selectors as written, one per line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for selector in &self.selectors {
            out.push_str(selector.text());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_modules_select() {
        let mut filter = Selection::default();
        filter.write("read_* *_block", false).unwrap();
        assert!(filter.selects("read_page", "app"));
        assert!(filter.selects("write_block", "app"));
        assert!(!filter.selects("write_page", "app"));
        filter.write(":mod:app::net", false).unwrap();
        assert!(filter.selects("send", "app::net"));
        assert!(filter.selects("send", "app::net::tcp"));
        assert!(!filter.selects("send", "app::network"));
        assert!(!filter.selects("send", "app"));
        filter.write(":mod:*::net", false).unwrap();
        assert!(filter.selects("send", "app::net::tcp"));
        assert!(!filter.selects("send", "app::disk::tcp"));
        filter.write("*:mod:!app::net", false).unwrap();
        assert!(!filter.selects("send", "app::net::tcp"));
        assert!(filter.selects("send", "app::disk"));
        filter.write("s?nd a[bc]d", false).unwrap();
        assert!(filter.selects("send", "x") && filter.selects("acd", "x"));
        assert!(!filter.selects("add", "x"));
    }

    #[test]
    fn removal_and_append() {
        let mut filter = Selection::default();
        filter.write("a*", false).unwrap();
        filter.write("!ab*", true).unwrap();
        assert!(filter.selects("ax", "m"));
        assert!(!filter.selects("abc", "m"));
        assert!(!filter.is_empty());
        filter.write("!x", false).unwrap();
        assert!(filter.is_empty());
        assert_eq!(filter.text(), "!x\n");
    }

    #[test]
    fn bad_selectors_report_position_and_change_nothing() {
        let mut filter = Selection::default();
        filter.write("keep", false).unwrap();
        let error = filter.write("good  bad:traceon", false).unwrap_err();
        assert_eq!(error.position, 6);
        assert_eq!(error.selector, "bad:traceon");
        assert!(filter.write("x:mod:", true).is_err());
        assert!(filter.write("!", true).is_err());
        assert_eq!(filter.text(), "keep\n");
    }

    #[test]
    fn selector_errors_quote_the_selector_and_its_position() {
        let error = Selection::default().write("ok x:mod:", false).unwrap_err();
        let error: &dyn core::error::Error = &error;
        assert_eq!(
            error.to_string(),
            "invalid function selector 'x:mod:' at 3: empty module name"
        );
    }
}
