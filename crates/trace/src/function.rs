//! Function tracing: call sites instrumented by `#[hotkern_trace::function]`,
//! the `function` and `function_graph` tracers, their filters and task
//! filters, `max_graph_depth`, and the function profiler.
//!
//! A jumping site's slow path ([`traced`]) calls the one tracer that wants
//! the function directly, or walks the list when several do; which, and
//! why a switch between them never cuts a call's entry from its exit, is
//! in `function/dispatch.rs`.
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

pub(crate) mod dispatch;
pub(crate) mod filter;
pub(crate) mod pid;
pub mod probe;
mod profile;

use alloc::vec::Vec;
use core::mem::MaybeUninit;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

pub(crate) use filter::Selection;
pub use filter::SelectorError;
pub(crate) use pid::PidList;
pub(crate) use profile::ProfileEntry;
pub(crate) use profile::ProfileTable;

use crate::event::{MAX_INSTANCES, UNREGISTERED};
use crate::ring::local::LocalU64;
use crate::tracer::Tracer;

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
    /// The one tracer that wants the function and the handler of its
    /// mode, called without walking the mask or testing the mode; null
    /// when none or several do (`function::dispatch`).
    direct: AtomicPtr<Tracer>,
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
            direct: AtomicPtr::new(ptr::null_mut()),
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
            direct: AtomicPtr::new(ptr::null_mut()),
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

    /// The direct word: the only tracer that wants the function with its
    /// handler, or null (`function::dispatch` decides it).
    pub(crate) fn direct_word(&self) -> &AtomicPtr<Tracer> {
        &self.direct
    }

    /// Whether a tracer wants the function (or it has not registered):
    /// the portable call site's test.
    #[doc(hidden)]
    #[inline(always)]
    pub fn is_hot(&self) -> bool {
        self.mask.load(Ordering::Relaxed) != 0
    }

    /// Index in the site registry, if registered (no registering).
    #[inline(always)]
    pub(crate) fn registered_index(&self) -> Option<usize> {
        let index = self.index.load(Ordering::Relaxed);
        (index != u32::MAX).then_some(index as usize)
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

/// The tracers a call entered, kept (not looked up again) so the exit
/// pairs with the entry whatever changed in between (`function::dispatch`);
/// dropping it is the function's exit. Built in place in the frame of
/// [`traced`]: the list's array is never initialised or moved, only the
/// entries written.
struct Exits {
    site: &'static FunctionSite,
    /// The site's direct tracer and the handler it was entered through.
    direct: Option<(&'static Tracer, dispatch::FunctionHandler)>,
    /// How many of `listed` were entered through the list, in slot order.
    count: usize,
    listed: [MaybeUninit<&'static Tracer>; MAX_INSTANCES],
}

impl Exits {
    #[inline(always)]
    fn new(site: &'static FunctionSite) -> Exits {
        Exits {
            site,
            direct: None,
            count: 0,
            listed: [const { MaybeUninit::uninit() }; MAX_INSTANCES],
        }
    }

    /// The entry: the direct tracer, or each tracer of the list
    /// (`ftrace_ops_list_func`), or nobody if the site was disabled since
    /// it jumped.
    #[cold]
    #[inline(never)]
    fn enter(&mut self) {
        let site = self.site;
        let mut mask = site.mask.load(Ordering::Relaxed);
        if mask == 0 {
            return;
        }
        if mask & UNREGISTERED != 0 {
            register(site);
            mask = site.mask.load(Ordering::Acquire);
        }
        if let Some((tracer, handler)) = dispatch::decode(site.direct.load(Ordering::Acquire)) {
            if tracer.direct_function_entry(site, handler) {
                self.direct = Some((tracer, handler));
            }
            return;
        }
        let mut bits = mask & !UNREGISTERED;
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(tracer) = crate::tracer::instance(slot) {
                if tracer.function_entry(site) {
                    self.listed[self.count].write(tracer);
                    self.count += 1;
                }
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn exit(&mut self) {
        if let Some((tracer, handler)) = self.direct {
            tracer.direct_function_exit(self.site, handler);
        }
        // The reverse of the entries, as nested calls unwind.
        for at in (0..self.count).rev() {
            // SAFETY: `enter` wrote the first `count` entries.
            unsafe { self.listed[at].assume_init() }.function_exit(self.site);
        }
    }
}

impl Drop for Exits {
    #[inline(always)]
    fn drop(&mut self) {
        if self.direct.is_some() || self.count != 0 {
            self.exit();
        }
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
    let mut exits = Exits::new(site);
    exits.enter();
    body()
}

/// Returned by [`enter`]; its drop is the function's exit.
#[cfg(feature = "internals")]
#[doc(hidden)]
#[must_use]
pub struct FunctionGuard {
    /// Boxed: the guard stays a word, as the baseline always was; only
    /// calls some tracer wants pay for it.
    _exits: Option<alloc::boxed::Box<Exits>>,
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
        return FunctionGuard { _exits: None };
    }
    enter_boxed(site)
}

#[cfg(feature = "internals")]
#[cold]
#[inline(never)]
fn enter_boxed(site: &'static FunctionSite) -> FunctionGuard {
    let mut exits = alloc::boxed::Box::new(Exits::new(site));
    exits.enter();
    FunctionGuard {
        _exits: Some(exits),
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
    dispatch::decide(site);
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
    /// Entries running on this CPU: what an uninstall waits for.
    pub(crate) doorway: dispatch::Doorway,
    pub(crate) frames: [Frame; MAX_DEPTH],
}

#[derive(Default)]
pub(crate) struct Frame {
    /// The site's address; bit 0 set if the entry was recorded (depth
    /// limit, tracing on), bit 1 if it was a `funcgraph_entry`, so the exit
    /// writes its `funcgraph_exit` even if `current_tracer` changed since.
    pub(crate) ip: LocalU64,
    pub(crate) calltime: LocalU64,
}

impl CpuCalls {
    pub(crate) fn new() -> Self {
        CpuCalls {
            depth: LocalU64::new(0),
            doorway: dispatch::Doorway::new(),
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
