//! Why a tracer operation was refused.

use core::fmt;

use crate::event::MAX_INSTANCES;
use alloc::string::String;

use crate::function::probe::ProbeError;
use crate::function::{SelectorError, MAX_DEPTH};
use crate::platform::TextError;
use crate::ring::RingError;

/// Why a tracer operation was refused. Nothing changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceError {
    /// The buffer geometry is invalid.
    Ring(RingError),
    /// `buffer_size_kb` of 0 or too large.
    BadBufferSize(usize),
    /// No event with this id (or it is a built-in that cannot be switched).
    NoSuchEvent(u16),
    /// A `set_ftrace_filter` / `set_ftrace_notrace` parse error.
    Selector(SelectorError),
    /// A task id out of range.
    BadPid(i64),
    /// All instance slots are taken.
    TooManyInstances,
    /// The operation needs an installed tracer (see
    /// [`Tracer::install`](super::Tracer::install)).
    NotInstalled,
    /// The tracer is not available in this build (hwlat without `std`).
    Unavailable(&'static str),
    /// A hwlat setting out of range (`width` must be below `window`, both > 0).
    BadHwlat,
    /// The snapshot buffer is not allocated.
    NoSnapshot,
    /// The payload is larger than a page can hold.
    TooLarge(usize),
    /// `max_graph_depth` above the deepest tracked nesting.
    BadDepth(u32),
    /// A `set_ftrace_filter` / `set_ftrace_notrace` selector that matches
    /// no function (the selector, as written).
    NoMatch(String),
    /// A malformed `set_ftrace_filter` probe command, or one naming no
    /// function or no event.
    Probe(ProbeError),
    /// The call sites could not be patched to what was set: the setting
    /// is in place, but sites it enables stay NOPs.
    Text(TextError),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Ring(e) => write!(f, "{e}"),
            TraceError::BadBufferSize(kb) => write!(f, "invalid buffer size {kb} KiB"),
            TraceError::NoSuchEvent(id) => write!(f, "no switchable event with id {id}"),
            TraceError::Selector(e) => write!(f, "{e}"),
            TraceError::BadPid(pid) => write!(f, "invalid pid {pid}"),
            TraceError::TooManyInstances => {
                write!(f, "all {MAX_INSTANCES} tracer instance slots are in use")
            }
            TraceError::NotInstalled => write!(f, "the tracer is not installed"),
            TraceError::Unavailable(what) => write!(f, "{what} is not available in this build"),
            TraceError::BadHwlat => write!(f, "hwlat needs 0 < width < window"),
            TraceError::NoSnapshot => write!(f, "the snapshot buffer is not allocated"),
            TraceError::TooLarge(n) => write!(f, "{n} bytes do not fit in one event"),
            TraceError::BadDepth(d) => write!(f, "max_graph_depth {d} exceeds {}", MAX_DEPTH),
            TraceError::NoMatch(selector) => write!(f, "no function matches '{selector}'"),
            TraceError::Probe(e) => write!(f, "{e}"),
            TraceError::Text(e) => write!(f, "call sites not patched: {e}"),
        }
    }
}

impl From<RingError> for TraceError {
    fn from(e: RingError) -> Self {
        TraceError::Ring(e)
    }
}

impl From<SelectorError> for TraceError {
    fn from(e: SelectorError) -> Self {
        TraceError::Selector(e)
    }
}

// Display already includes the wrapped ring or selector error's text, so
// `source` stays `None` and reporters do not print it twice.
impl core::error::Error for TraceError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};

    #[test]
    fn messages_name_the_value_and_the_limit() {
        let error: &dyn core::error::Error = &TraceError::BadBufferSize(0);
        assert_eq!(error.to_string(), "invalid buffer size 0 KiB");
        assert_eq!(
            TraceError::BadDepth(999).to_string(),
            alloc::format!("max_graph_depth 999 exceeds {MAX_DEPTH}")
        );
        assert_eq!(
            TraceError::BadHwlat.to_string(),
            "hwlat needs 0 < width < window"
        );
        let selector = SelectorError {
            position: 3,
            selector: String::from("x:mod:"),
            reason: "empty module name",
        };
        assert_eq!(
            TraceError::from(selector.clone()).to_string(),
            selector.to_string()
        );
    }
}
