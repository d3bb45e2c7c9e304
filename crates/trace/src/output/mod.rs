//! What the tracer shows: ftrace's `trace` text, Chrome trace-event JSON,
//! and trace-cmd's `trace.dat`.

mod format;
mod printf;
mod symbols;

pub use format::{read_int, read_str, EventDescription, FormatError, FormatField};
pub use printf::{write_raw_fields, PrintFormat};
pub use symbols::{Comms, Symbols};
