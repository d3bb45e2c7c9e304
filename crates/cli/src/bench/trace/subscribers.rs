//! The mainstream `tracing` peers: the crate's subscribers as users set
//! them up, on the call sites `tracing-bare` uses.
//!
//! * `tracing-fmt`: `tracing-subscriber`'s `fmt` subscriber (registry,
//!   level filter, the default formatter with its RFC 3339 wall-clock
//!   timestamp), spans shown on entry and exit (`FmtSpan::ACTIVE`, so a
//!   pair writes two lines as function_graph records two entries),
//!   writing to `io::sink`: every line formatted, none written, a floor
//!   under what a file or terminal would cost.
//! * `tracing-chrome`: the `tracing-chrome` layer on the registry, writing
//!   a Chrome trace file; each event or span transition is timestamped
//!   (`Instant`), its fields copied into a JSON map (`include_args`, so
//!   the three integers are kept as hotkern keeps them) and sent over a
//!   channel to a writer thread that serialises it. The file goes to a
//!   scratch directory, removed afterwards.
//!
//! Each is installed for the measuring thread only (`with_default`), as
//! the global default is `tracing-bare`'s; that costs one thread-local
//! look-up per event, a few ns of their hundreds.

use tracing_chrome::ChromeLayerBuilder;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;

use super::tools::Scratch;

/// The `fmt` peer's name in the report.
pub const FMT: &str = "tracing-fmt";

/// The Chrome-trace peer's name in the report.
pub const CHROME: &str = "tracing-chrome";

/// Runs the cases (`event/enabled`, `function_graph/pair`) through the
/// `tracing` subscriber the calling thread sees, ns each: the benchmark's
/// own call sites, so that every peer runs the same code.
pub type Cases = fn(Counts) -> Result<[(&'static str, f64); 2], String>;

/// Calls of each case: fewer than hotkern's, as each costs hundreds of ns.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Events of `event/enabled`.
    pub enabled_ops: u64,
    /// Calls of `function_graph/pair`.
    pub pair_ops: u64,
}

/// `tracing-fmt`'s `event/enabled` and `function_graph/pair`, ns each.
pub fn fmt(counts: Counts, cases: Cases) -> Result<[(&'static str, f64); 2], String> {
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_span_events(FmtSpan::ACTIVE)
        .finish();
    tracing::subscriber::with_default(subscriber, || cases(counts))
}

/// `tracing-chrome`'s `event/enabled` and `function_graph/pair`, ns each.
pub fn chrome(counts: Counts, cases: Cases) -> Result<[(&'static str, f64); 2], String> {
    let scratch = Scratch::new(CHROME)?;
    let (layer, guard) = ChromeLayerBuilder::new()
        .file(scratch.path().join("trace.json"))
        .include_args(true)
        .build();
    let subscriber = tracing_subscriber::registry().with(layer);
    let figures = tracing::subscriber::with_default(subscriber, || cases(counts));
    // Outside the timing: the writer thread drains the channel and closes
    // the file before the scratch directory goes.
    drop(guard);
    figures
}
