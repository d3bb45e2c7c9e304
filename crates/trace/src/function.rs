//! Function tracing: call sites instrumented by `#[hotkern_trace::function]`,
//! the `function` and `function_graph` tracers, their filters and task
//! filters, `max_graph_depth`, and the function profiler.
//!
//! ```
//! use hotkern_trace::function::TracerKind;
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! #[hotkern_trace::function]
//! fn checksum(bytes: &[u8]) -> u32 {
//!     bytes.iter().map(|&b| u32::from(b)).sum()
//! }
//!
//! assert_eq!(checksum(b"ab"), 195); // no tracer wants it: the call site does nothing
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap().install().unwrap();
//! tracer.set_ftrace_filter("checksum", false).unwrap();
//! tracer.set_current_tracer(TracerKind::Function).unwrap();
//! checksum(b"cd");
//! tracer.set_current_tracer(TracerKind::Nop).unwrap();
//! assert_eq!(tracer.drain_records().len(), 1); // one `function` event
//! tracer.uninstall();
//! ```

pub(crate) mod filter;
pub(crate) mod pid;
mod profile;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

pub(crate) use filter::Selection;
pub use filter::SelectorError;
pub(crate) use pid::PidList;
pub(crate) use profile::ProfileEntry;
pub(crate) use profile::ProfileTable;

use crate::event::UNREGISTERED;
use crate::ring::local::LocalU64;

/// Deepest call nesting tracked per CPU; deeper calls are not recorded.
pub const MAX_DEPTH: usize = 128;

/// Most instrumented functions (profiling tables are sized for this).
pub const MAX_SITES: usize = 8192;

/// An instrumented function: its identity and the mask the entry tests.
/// Aligned so its address has a free low bit; `repr(C)` so the mask is at
/// offset 0, where the call site's compiled form reads it
/// ([`crate::site`]). What `#[function]` expands to; users name functions
/// by their names (`set_ftrace_filter`).
#[doc(hidden)]
#[derive(Debug)]
#[repr(C, align(8))]
pub struct FunctionSite {
    mask: AtomicU32,
    index: AtomicU32,
    module: &'static str,
    name: &'static str,
    file: &'static str,
    line: u32,
    instrumented: bool,
}

impl FunctionSite {
    /// Used by the `#[function]` attribute.
    pub const fn new(
        module: &'static str,
        name: &'static str,
        file: &'static str,
        line: u32,
    ) -> Self {
        FunctionSite {
            mask: AtomicU32::new(UNREGISTERED),
            index: AtomicU32::new(u32::MAX),
            module,
            name,
            file,
            line,
            instrumented: true,
        }
    }

    /// A symbol that is not instrumented (the `ip` of `trace_marker` and
    /// `trace_printk!` events): it appears in the symbol table only.
    pub(crate) const fn symbol(
        module: &'static str,
        name: &'static str,
        file: &'static str,
        line: u32,
    ) -> Self {
        FunctionSite {
            mask: AtomicU32::new(0),
            index: AtomicU32::new(u32::MAX),
            module,
            name,
            file,
            line,
            instrumented: false,
        }
    }

    /// The enable word: one bit per installed tracer that wants the
    /// function (the compiled call site tests it).
    pub(crate) fn enable_word(&self) -> &AtomicU32 {
        &self.mask
    }

    /// Whether a tracer wants the function (or it has not registered):
    /// the portable call site's test.
    #[doc(hidden)]
    #[inline(always)]
    pub fn is_hot(&self) -> bool {
        self.mask.load(Ordering::Relaxed) != 0
    }

    /// Whether this is an instrumented function (else only a symbol).
    pub(crate) fn is_instrumented(&self) -> bool {
        self.instrumented
    }

    /// The function's name as traces and `set_ftrace_filter` globs see it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Rust module path (what `:mod:` matches).
    pub fn module(&self) -> &'static str {
        self.module
    }

    /// Where the function is defined: source file and line.
    pub fn location(&self) -> (&'static str, u32) {
        (self.file, self.line)
    }

    /// The function's address in traces (`ip`, `func`): the site's address.
    /// Taking it registers the site, so the symbol table can name it.
    #[inline]
    pub fn address(&'static self) -> u64 {
        if self.index.load(Ordering::Relaxed) == u32::MAX {
            register(self);
        }
        self as *const FunctionSite as u64
    }

    /// The address without the registration check (hot paths, where the
    /// site is known to be registered).
    #[inline(always)]
    pub(crate) fn raw_address(&'static self) -> u64 {
        self as *const FunctionSite as u64
    }

    /// Index in the site registry (registering it if needed).
    #[inline]
    pub(crate) fn index(&'static self) -> usize {
        let index = self.index.load(Ordering::Acquire);
        if index != u32::MAX {
            return index as usize;
        }
        register(self)
    }

    pub(crate) fn set_instance(&self, slot: usize, on: bool) {
        if on {
            self.mask.fetch_or(1 << slot, Ordering::AcqRel);
        } else {
            self.mask.fetch_and(!(1 << slot), Ordering::AcqRel);
        }
    }
}

const _: () = assert!(core::mem::offset_of!(FunctionSite, mask) == 0);

/// Returned by [`enter`]; its drop is the function's exit.
#[doc(hidden)]
#[must_use]
pub struct FunctionGuard {
    site: &'static FunctionSite,
    entered: u32,
}

impl FunctionGuard {
    /// The guard of a call no tracer entered (its drop does nothing).
    const fn idle(site: &'static FunctionSite) -> FunctionGuard {
        FunctionGuard { site, entered: 0 }
    }
}

/// A `#[function]`'s body as its expansion passes it: checked to be an
/// `FnOnce` returning the function's type `R` (so the closure's return
/// type is the function's, not inferred).
#[doc(hidden)]
#[inline(always)]
pub fn body<R, F: FnOnce() -> R>(body: F) -> F {
    body
}

/// A `#[function]`'s body run between the entry and exit hooks: where its
/// call site jumps (`__function_call!`).
#[doc(hidden)]
#[cold]
#[inline(never)]
pub fn traced<R>(site: &'static FunctionSite, body: impl FnOnce() -> R) -> R {
    let _guard = enter_patched(site);
    body()
}

/// The entry hook behind a call site that jumped: the site is patched to
/// a jump, or compiled and its word was set.
#[cold]
#[inline(never)]
fn enter_patched(site: &'static FunctionSite) -> FunctionGuard {
    let mask = site.mask.load(Ordering::Relaxed);
    if mask == 0 {
        // Disabled since the site jumped: the call is not traced.
        return FunctionGuard::idle(site);
    }
    enter_slow(site, mask)
}

/// The portable entry hook: one load and a branch (what the attribute
/// expanded to before call sites were patched; `bench trace` measures it
/// as `hotkern-branch`). A baseline: with the `internals` feature only.
#[cfg(feature = "internals")]
#[inline(always)]
#[doc(hidden)]
pub fn enter(site: &'static FunctionSite) -> FunctionGuard {
    let mask = site.mask.load(Ordering::Relaxed);
    if mask == 0 {
        return FunctionGuard { site, entered: 0 };
    }
    enter_slow(site, mask)
}

#[cold]
#[inline(never)]
fn enter_slow(site: &'static FunctionSite, mut mask: u32) -> FunctionGuard {
    if mask & UNREGISTERED != 0 {
        register(site);
        mask = site.mask.load(Ordering::Acquire);
    }
    let mut entered = 0;
    let mut bits = mask & !UNREGISTERED;
    while bits != 0 {
        let slot = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        if let Some(tracer) = crate::tracer::instance(slot) {
            if tracer.function_entry(site) {
                entered |= 1 << slot;
            }
        }
    }
    FunctionGuard { site, entered }
}

impl Drop for FunctionGuard {
    #[inline(always)]
    fn drop(&mut self) {
        if self.entered != 0 {
            exit_slow(self.site, self.entered);
        }
    }
}

#[cold]
#[inline(never)]
fn exit_slow(site: &'static FunctionSite, entered: u32) {
    let mut bits = entered;
    while bits != 0 {
        let slot = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        if let Some(tracer) = crate::tracer::instance(slot) {
            tracer.function_exit(site);
        }
    }
}

static SITES: spin::Mutex<Vec<&'static FunctionSite>> = spin::Mutex::new(Vec::new());

/// Registers a site (idempotent): it gets an index and each installed
/// tracer decides whether it wants it.
///
/// Every caller sets the tracers' bits itself, even when another thread
/// took the index first: returning early would let a thread whose first
/// call races the registering thread's see no bits yet and skip tracing
/// that call, silently. Setting the bits twice is harmless.
pub(crate) fn register(site: &'static FunctionSite) -> usize {
    let index = {
        let mut sites = SITES.lock();
        let index = site.index.load(Ordering::Acquire);
        if index != u32::MAX {
            index as usize
        } else if sites.len() >= MAX_SITES {
            site.mask.store(0, Ordering::Release);
            return usize::MAX;
        } else {
            let index = sites.len();
            sites.push(site);
            site.index.store(index as u32, Ordering::Release);
            index
        }
    };
    if site.instrumented {
        crate::tracer::for_each_instance(|slot, tracer| {
            site.set_instance(slot, tracer.function_wants(site));
        });
    }
    site.mask.fetch_and(!UNREGISTERED, Ordering::AcqRel);
    index
}

/// Every registered site, by index: every function of the site table,
/// and functions that registered on their first call.
pub(crate) fn sites() -> Vec<&'static FunctionSite> {
    crate::site::ensure_registered();
    SITES.lock().clone()
}

/// The site at `address` (a traced `ip`).
#[cfg(any(test, feature = "internals"))]
pub(crate) fn site_at(address: u64) -> Option<&'static FunctionSite> {
    crate::site::ensure_registered();
    SITES
        .lock()
        .iter()
        .copied()
        .find(|s| *s as *const FunctionSite as u64 == address)
}

/// The kallsyms-like symbol table of instrumented functions: (address, name),
/// sorted by address.
pub(crate) fn symbols() -> Vec<(u64, &'static str)> {
    let mut table: Vec<(u64, &'static str)> = sites()
        .into_iter()
        .map(|s| (s as *const FunctionSite as u64, s.name))
        .collect();
    table.sort_unstable();
    table
}

/// What the tracer runs (`current_tracer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TracerKind {
    /// No function tracing: only enabled events, markers and
    /// `trace_printk` are recorded.
    #[default]
    Nop,
    /// One `function` event per call.
    Function,
    /// `funcgraph_entry` / `funcgraph_exit` pairs with durations.
    FunctionGraph,
    /// The hardware-latency detector (see [`Tracer::set_hwlat_config`](crate::Tracer::set_hwlat_config); `std` only).
    Hwlat,
}

impl TracerKind {
    /// All tracers, as `available_tracers` lists them.
    pub(crate) const ALL: [TracerKind; 4] = [
        TracerKind::Hwlat,
        TracerKind::FunctionGraph,
        TracerKind::Function,
        TracerKind::Nop,
    ];

    /// The name ftrace uses in `current_tracer` and `available_tracers`.
    pub fn name(self) -> &'static str {
        match self {
            TracerKind::Nop => "nop",
            TracerKind::Function => "function",
            TracerKind::FunctionGraph => "function_graph",
            TracerKind::Hwlat => "hwlat",
        }
    }

    /// The tracer ftrace calls `name`, if it is one of [`TracerKind::ALL`].
    pub(crate) fn from_name(name: &str) -> Option<TracerKind> {
        TracerKind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub(crate) fn code(self) -> u32 {
        match self {
            TracerKind::Nop => 0,
            TracerKind::Function => 1,
            TracerKind::FunctionGraph => 2,
            TracerKind::Hwlat => 3,
        }
    }

    #[inline]
    pub(crate) fn from_code(code: u32) -> TracerKind {
        match code {
            1 => TracerKind::Function,
            2 => TracerKind::FunctionGraph,
            3 => TracerKind::Hwlat,
            _ => TracerKind::Nop,
        }
    }
}

/// One CPU's shadow stack of open calls (aligned: CPUs never share a line).
///
/// Invariant behind `LocalU64` (non-locked read-modify-writes): only the
/// owning CPU's entry and exit hooks (and hooks of handlers nesting on it)
/// modify `depth` and `frames`; the CPU comes from `Tracer::current`, whose
/// contract gives it one thread at a time (handed over with release/acquire
/// by the platform). No other thread writes or even reads them.
#[repr(align(128))]
pub(crate) struct CpuCalls {
    pub(crate) depth: LocalU64,
    pub(crate) frames: [Frame; MAX_DEPTH],
}

#[derive(Default)]
pub(crate) struct Frame {
    /// The site's address; bit 0 set if the entry was recorded (depth
    /// limit, tracing on), so the exit is recorded too.
    pub(crate) ip: LocalU64,
    pub(crate) calltime: LocalU64,
}

impl CpuCalls {
    pub(crate) fn new() -> Self {
        CpuCalls {
            depth: LocalU64::new(0),
            frames: core::array::from_fn(|_| Frame::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracer_names_round_trip() {
        for kind in TracerKind::ALL {
            assert_eq!(TracerKind::from_name(kind.name()), Some(kind));
            assert_eq!(TracerKind::from_code(kind.code()), kind);
        }
        assert_eq!(TracerKind::from_name("blk"), None);
    }
}
