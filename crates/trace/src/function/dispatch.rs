//! Who a patched function site calls: one tracer's handler directly, or
//! the list.
//!
//! ftrace 4.0 gave a function watched by a single `ftrace_ops` a trampoline
//! of its own that calls that ops' handler (arch/x86/kernel/ftrace.c,
//! `arch_ftrace_update_trampoline`); only functions several ops watch go
//! through `ftrace_ops_list_func`, which walks every ops and asks each. Here
//! the same choice is made per site, when the sites are re-patched, and the
//! direct choice names the handler of the tracer's mode too, as each
//! tracer's trampoline calls `function_trace_call` or `function_graph`'s
//! entry, never a function that asks which tracer it is:
//!
//! ```text
//!  mask (tracers wanting it)   direct word              the site's slow path
//!  0                           null                     not reached: the site is a NOP
//!  one bit                     that tracer + handler    the mode's handler, no walk, no mode test
//!  two or more bits            null                     walk the mask, ask each tracer its mode
//! ```
//!
//! The direct word is a `FunctionSite`'s second word (`AtomicPtr<Tracer>`):
//! the tracer's address with its [`FunctionHandler`] in the three low bits
//! (tracers are aligned to 8), so one load gives both and they can never
//! be seen torn. It is written only by [`decide_all`] and `decide` under
//! `DECIDING`, from the enable word and the tracer's mode
//! (`current_tracer`, the profiler), after every change of either: a
//! tracer installed or uninstalled, `current_tracer`,
//! `set_ftrace_filter`/`notrace` and its probes, the profiler switched, a site
//! registering. Whoever decides last has seen every change made before its
//! lock, so two controllers racing cannot leave a direct word naming one
//! tracer while two want the site, nor a handler of a mode left.
//!
//! A caller may read a direct word (or a mask) just before it changes and
//! call the old choice: that call goes to a tracer that wanted the site a
//! moment ago, as a caller that read the mask a moment ago always could.
//! Two things must hold however the switch and the call interleave:
//!
//! * **The exit goes through the handler the entry went through.** The
//!   guard (`Exits`) keeps the tracers it entered and the direct handler
//!   (not slots, not the word), so a call entered as `function` ends as
//!   one even if `function_graph` replaced it meanwhile, and a switch, an uninstall or a slot reused by a new tracer while
//!   the body runs cannot send the exit elsewhere or lose it. Tracers are
//!   never freed, so the pointers stay valid.
//! * **No entry into a tracer after its `uninstall` returned.** Each
//!   tracer has a [`Gate`], each of its CPUs a [`Doorway`]: an entry counts
//!   itself in the doorway, then checks the gate is open (both
//!   sequentially consistent: the Dekker pattern); uninstall closes the
//!   gate, then waits until every doorway is empty. An entry either saw the
//!   gate closed, or was counted before the close and is waited for: this
//!   is the grace period Linux gets from `synchronize_rcu_tasks` before it
//!   frees a trampoline. The exits of calls entered before stay allowed:
//!   they end pairs.
//!
//! `tests/dispatch_loom.rs` models the gate against a caller; the planted
//! [`plant_unwaited_close`] makes it fail.

use core::ptr;
use core::sync::atomic::Ordering;

use super::FunctionSite;
use crate::event::UNREGISTERED;
use crate::function::TracerKind;
use crate::ring::local::{AtomicBool, AtomicU32};
use crate::tracer::Tracer;

/// Serialises deciding direct words, so the last decision of a site saw
/// its latest mask.
static DECIDING: spin::Mutex<()> = spin::Mutex::new(());

/// Test and benchmark switch: every site goes through the list.
static LIST_ONLY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The planted bug of the gate's loom model: close without waiting.
static UNWAITED_CLOSE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The low bits of a direct word that carry the handler.
const HANDLER_BITS: usize = 7;

// The handler rides in the low bits of the tracer's address.
const _: () = assert!(core::mem::align_of::<Tracer>() > HANDLER_BITS);

/// What a tracer does at a function's entry and exit, fixed by its mode
/// when a direct word is decided (`current_tracer`, the profiler): the
/// direct call runs this mode's code and tests no mode. A call keeps the
/// handler its entry used for its exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FunctionHandler {
    /// `function`: one `function` event per call.
    Function = 1,
    /// `function` with the profiler on.
    FunctionProfiled = 2,
    /// `function_graph`: `funcgraph_entry` and `funcgraph_exit`.
    Graph = 3,
    /// `function_graph` with the profiler on.
    GraphProfiled = 4,
    /// The profiler alone (`current_tracer` is `nop` or `hwlat`).
    Profile = 5,
    /// The tracer's function probes alone (`function::probe`): fired at
    /// the entry, no exit.
    Probe = 6,
}

impl FunctionHandler {
    /// The handler of `tracer`'s mode now, or `None` if it traces no
    /// function.
    pub(crate) fn of(tracer: &Tracer) -> Option<FunctionHandler> {
        let profile = tracer.function_profile_enabled();
        Some(match (tracer.current_tracer(), profile) {
            (TracerKind::Function, false) => FunctionHandler::Function,
            (TracerKind::Function, true) => FunctionHandler::FunctionProfiled,
            (TracerKind::FunctionGraph, false) => FunctionHandler::Graph,
            (TracerKind::FunctionGraph, true) => FunctionHandler::GraphProfiled,
            (TracerKind::Nop | TracerKind::Hwlat, true) => FunctionHandler::Profile,
            (TracerKind::Nop | TracerKind::Hwlat, false) => return None,
        })
    }

    /// The handler of `tracer` for `site`: its mode's if only the mode
    /// watches the function, the probes' if only probes do, `None` (the
    /// list) if both or neither.
    fn for_site(tracer: &Tracer, site: &FunctionSite) -> Option<FunctionHandler> {
        use crate::tracer::{PROBED, TRACED};
        match tracer.site_flags(site) {
            TRACED => FunctionHandler::of(tracer),
            PROBED => Some(FunctionHandler::Probe),
            _ => None,
        }
    }

    /// What the entry records: the tracer it runs as.
    #[inline(always)]
    pub(crate) fn kind(self) -> TracerKind {
        match self {
            FunctionHandler::Function | FunctionHandler::FunctionProfiled => TracerKind::Function,
            FunctionHandler::Graph | FunctionHandler::GraphProfiled => TracerKind::FunctionGraph,
            FunctionHandler::Profile | FunctionHandler::Probe => TracerKind::Nop,
        }
    }

    /// The name tests see (`direct_handler`).
    #[cfg(feature = "internals")]
    fn name(self) -> &'static str {
        match self {
            FunctionHandler::Function => "function",
            FunctionHandler::FunctionProfiled => "function+profile",
            FunctionHandler::Graph => "function_graph",
            FunctionHandler::GraphProfiled => "function_graph+profile",
            FunctionHandler::Profile => "profile",
            FunctionHandler::Probe => "probe",
        }
    }

    #[inline(always)]
    fn from_bits(bits: usize) -> FunctionHandler {
        match bits {
            1 => FunctionHandler::Function,
            2 => FunctionHandler::FunctionProfiled,
            3 => FunctionHandler::Graph,
            4 => FunctionHandler::GraphProfiled,
            6 => FunctionHandler::Probe,
            _ => FunctionHandler::Profile,
        }
    }
}

/// The direct word naming `tracer` and `handler` (a handler's number,
/// 1 to 7): the address with the number in its low bits. Event sites'
/// direct words use it too (`event::direct`).
pub(crate) fn tag(tracer: &'static Tracer, handler: usize) -> *mut Tracer {
    debug_assert!(handler != 0 && handler <= HANDLER_BITS);
    let pointer = tracer as *const Tracer as *mut Tracer;
    pointer.map_addr(|address| address | handler)
}

/// The tracer and handler number a direct word names, if it names one.
#[inline(always)]
pub(crate) fn untag(word: *mut Tracer) -> Option<(&'static Tracer, usize)> {
    if word.is_null() {
        return None;
    }
    let tracer = word.map_addr(|address| address & !HANDLER_BITS);
    // SAFETY: direct words hold installed tracers (`tag`), which are
    // leaked: the pointer stays valid after an uninstall too.
    Some((unsafe { &*tracer }, word.addr() & HANDLER_BITS))
}

/// The tracer and function handler a direct word names, if it names one.
#[inline(always)]
pub(crate) fn decode(word: *mut Tracer) -> Option<(&'static Tracer, FunctionHandler)> {
    untag(word).map(|(tracer, bits)| (tracer, FunctionHandler::from_bits(bits)))
}

/// Whether every site goes through the list (`set_list_only`).
pub(crate) fn list_only() -> bool {
    LIST_ONLY.load(Ordering::Relaxed)
}

/// Sets a site's direct word from its enable word and the mode of the
/// one tracer it names (caller holds `DECIDING`).
fn decide_locked(site: &FunctionSite) {
    let mask = site.enable_word().load(Ordering::Acquire) & !UNREGISTERED;
    let direct = if mask.count_ones() == 1 && !LIST_ONLY.load(Ordering::Relaxed) {
        crate::tracer::instance(mask.trailing_zeros() as usize)
            .and_then(|tracer| {
                Some(tag(
                    tracer,
                    FunctionHandler::for_site(tracer, site)? as usize,
                ))
            })
            .unwrap_or(ptr::null_mut())
    } else {
        ptr::null_mut()
    };
    site.direct_word().store(direct, Ordering::Release);
}

/// Re-decides one site (after it registered and got its bits).
pub(crate) fn decide(site: &FunctionSite) {
    let _deciding = DECIDING.lock();
    decide_locked(site);
}

/// Re-decides every registered site: call after changing enable words.
pub(crate) fn decide_all() {
    // Listed before the lock: listing may register sites, which decides.
    let sites = super::sites();
    let _deciding = DECIDING.lock();
    for site in sites {
        decide_locked(site);
    }
}

/// Sends every site, function and event, through the list (`true`) or
/// lets sites one tracer watches call it directly (`false`, the default);
/// re-decides every site.
/// What `bench trace` measures as `hotkern-list`, and what the tests
/// compare direct calls with.
///
/// ```
/// hotkern_trace::internals::dispatch::set_list_only(true);
/// hotkern_trace::internals::dispatch::set_list_only(false);
/// ```
#[cfg(feature = "internals")]
pub fn set_list_only(on: bool) {
    LIST_ONLY.store(on, Ordering::Relaxed);
    decide_all();
    crate::event::direct::decide_all();
}

/// Whether the function `name` calls one tracer directly now (tests).
///
/// ```
/// assert!(!hotkern_trace::internals::dispatch::is_direct("no_such_function"));
/// ```
#[cfg(feature = "internals")]
pub fn is_direct(name: &str) -> bool {
    super::sites()
        .iter()
        .any(|site| site.name() == name && !site.direct_word().load(Ordering::Acquire).is_null())
}

/// The handler the function `name` calls directly now, by its mode's
/// name (`"function"`, `"function_graph+profile"`, `"profile"`...), or
/// `None` if it goes through the list or is not traced (tests).
///
/// ```
/// assert_eq!(hotkern_trace::internals::dispatch::direct_handler("no_such_function"), None);
/// ```
#[cfg(feature = "internals")]
pub fn direct_handler(name: &str) -> Option<&'static str> {
    super::sites()
        .iter()
        .filter(|site| site.name() == name)
        .find_map(|site| decode(site.direct_word().load(Ordering::Acquire)))
        .map(|(_, handler)| handler.name())
}

/// Test-only: the planted bug the gate's loom model must catch — closing
/// a gate does not wait for entries counted in its doorways.
///
/// ```
/// hotkern_trace::internals::dispatch::plant_unwaited_close(false);
/// ```
#[cfg(feature = "internals")]
pub fn plant_unwaited_close(on: bool) {
    UNWAITED_CLOSE.store(on, Ordering::Relaxed);
}

/// A tracer's gate: open while it is installed.
///
/// ```
/// use hotkern_trace::internals::dispatch::{Doorway, Gate};
/// let (gate, doorway) = (Gate::new(), Doorway::new());
/// gate.open();
/// assert!(gate.pass(&doorway).is_some());
/// gate.close(core::iter::once(&doorway));
/// assert!(gate.pass(&doorway).is_none());
/// ```
#[derive(Debug)]
pub struct Gate {
    open: AtomicBool,
}

/// One CPU's count of entries between their check of the gate and their
/// end (nested entries, from handlers interrupting one, count twice).
#[derive(Debug)]
pub struct Doorway {
    inside: AtomicU32,
}

/// An entry counted in a doorway; dropping it ends the entry.
#[must_use]
#[derive(Debug)]
pub struct Passage<'a> {
    doorway: &'a Doorway,
}

impl Gate {
    /// A closed gate.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Gate {
        Gate {
            open: AtomicBool::new(false),
        }
    }

    /// Opens the gate (the tracer was installed).
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Enters through `doorway` if the gate is open.
    #[inline(always)]
    pub fn pass<'a>(&self, doorway: &'a Doorway) -> Option<Passage<'a>> {
        // Counted before the check, both sequentially consistent: `close`
        // stores then loads in the other order, so one of the two sees the
        // other (a locked `xadd` on x86, no separate fence).
        doorway.inside.fetch_add(1, Ordering::SeqCst);
        seq_cst_fence_for_loom();
        if self.open.load(Ordering::SeqCst) {
            Some(Passage { doorway })
        } else {
            doorway.inside.fetch_sub(1, Ordering::Release);
            None
        }
    }

    /// Closes the gate, then waits until no entry that may have seen it
    /// open is still running. Must not run on a CPU inside one of the
    /// doorways (it would wait for itself).
    pub fn close<'a>(&self, doorways: impl IntoIterator<Item = &'a Doorway>) {
        self.open.store(false, Ordering::SeqCst);
        seq_cst_fence_for_loom();
        if UNWAITED_CLOSE.load(Ordering::Relaxed) {
            return;
        }
        for doorway in doorways {
            while doorway.inside.load(Ordering::SeqCst) != 0 {
                #[cfg(loom)]
                loom::thread::yield_now();
                #[cfg(not(loom))]
                core::hint::spin_loop();
            }
        }
    }
}

/// Loom models sequentially consistent loads and stores as acquire and
/// release only (its documented limitation), which would let both sides of
/// the gate miss each other; a `SeqCst` fence, which it does model, gives
/// it the C++ guarantee the code relies on. Nothing outside loom.
#[inline(always)]
fn seq_cst_fence_for_loom() {
    #[cfg(loom)]
    crate::ring::local::fence(Ordering::SeqCst);
}

impl Doorway {
    /// An empty doorway.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Doorway {
        Doorway {
            inside: AtomicU32::new(0),
        }
    }
}

impl Drop for Passage<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.doorway.inside.fetch_sub(1, Ordering::Release);
    }
}
