//! Call sites that cost a NOP until enabled: Linux's jump labels and
//! dynamic ftrace for `#[hotkern_trace::function]` and `define_event!`.
//!
//! Every instrumented function entry and every inlined copy of an event's
//! `trace` is one 5-byte instruction that the compiler emits through
//! `asm!` with a `label` operand (the slow path, ordinary Rust code), an
//! 18-byte out-of-line load and branch, and a 24-byte record in the link
//! section `hotkern_trace_sites`, as Linux records `__jump_table` entries
//! (`include/linux/jump_label.h`) and `fentry` calls (`__mcount_loc`). At
//! the first install of a tracer every site is rewritten in place to a
//! NOP; enabling a function or an event rewrites its sites to jumps to
//! their slow paths, disabling restores the NOPs. Where text cannot be
//! written the sites stay as compiled: a jump to their load and branch,
//! which works as the sites did before this module (two jumps dearer).
//! [`status`] says which.
//!
//! A site, and its stub (in `.text.hotkern_trace_stubs`, away from the
//! function's hot path):
//!
//! ```text
//!  site       Compiled  jmp stub        E9 <stub-(site+5)>:32
//!             Nop       nopl 0(%rax,%rax)  0F 1F 44 00 00
//!             Jump      jmp slow        E9 <slow-(site+5)>:32
//!  stub       cmp dword [rip+mask], 0   83 3D <mask-(stub+7)>:32 00
//!             jne slow                  0F 85 <slow-(stub+13)>:32
//!             jmp site+5                E9 <site+5-(stub+18)>:32
//! ```
//!
//! `mask` is the descriptor's enable word (`FunctionSite` and `Event` are
//! `repr(C)` with it first): one bit per installed tracer that wants it.
//! The site is one instruction in every form, so rewriting it is Linux's
//! `text_poke_bp` exactly (`poke.rs`).
//!
//! A record (4-byte aligned, `R`etained by the linker, read between the
//! linker's `__start_hotkern_trace_sites` and `__stop_hotkern_trace_sites`):
//!
//! ```text
//!  code:i32 | target:i32 | stub:i32 | descriptor:i32 | kind:u32 | 0:u32
//! ```
//!
//! `code`, `target`, `stub` and `descriptor` are each relative to their own
//! field (as Linux's `struct jump_entry`), so the section needs no
//! relocation in a position-independent binary; `kind` says what the
//! descriptor is (1 for a function, 2 for an event; 0 for this crate's own
//! empty record, which makes the section exist in every binary).
//!
//! A function's slow path returns from the function (`#[function]` wraps
//! the body in a closure, run directly on the fast path and by
//! `function::traced` on the slow one), so the fast path is the body alone:
//! no state kept for an exit hook, no registers saved for it.
//!
//! Who writes what:
//! * the enable words: the tracers (`set_instance`); read by stubs, by slow
//!   paths (which do nothing when it is 0) and by `apply`.
//! * a site's text and its table entry's `form`: only the patcher, holding
//!   `PATCHER` (Linux's `text_mutex`).
//! * an entry's `resume`: the patcher, around a batch; read by [`trap`]
//!   from any CPU's breakpoint handler, without a lock.

mod poke;
mod table;
mod x86;

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::Ordering;

use crate::platform::{TextError, TextPoke};
use crate::ring::RawLock;
pub use table::{trap, Trap};
use table::{Descriptor, Entry};
pub use x86::Form;

/// Record kind of a `#[function]` entry site.
#[doc(hidden)]
pub const FUNCTION_SITE: u32 = 1;
/// Record kind of an event's `trace` site.
#[doc(hidden)]
pub const EVENT_SITE: u32 = 2;

/// What the call sites of this program are, once a tracer was installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteStatus {
    /// No tracer was installed yet: sites run as compiled (load and branch).
    Compiled,
    /// This target has no site table: every site is a load and a branch.
    Portable,
    /// The sites are patched in place: NOPs, jumps where enabled.
    Patched {
        /// Call sites in the table (inlined copies count one each).
        sites: usize,
    },
    /// The text cannot be patched, so the sites stay load-and-branch.
    Fallback(TextError),
}

impl fmt::Display for SiteStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SiteStatus::Compiled => write!(f, "call sites as compiled (load and branch)"),
            SiteStatus::Portable => {
                write!(
                    f,
                    "call sites load and branch (no site table on this target)"
                )
            }
            SiteStatus::Patched { sites } => {
                write!(
                    f,
                    "{sites} call sites patched in place (NOPs until enabled)"
                )
            }
            SiteStatus::Fallback(why) => write!(f, "call sites load and branch: {why}"),
        }
    }
}

/// Which kind of descriptor a site belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// A `#[hotkern_trace::function]` entry.
    Function,
    /// A `define_event!` event's `trace`.
    Event,
}

/// One call site, as [`sites`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteInfo {
    /// The site's first byte in the text.
    pub address: usize,
    /// Where its jump goes: the slow path.
    pub target: usize,
    /// The function's or the event's name.
    pub name: &'static str,
    /// Function or event.
    pub kind: SiteKind,
    /// What the site's text is now.
    pub form: Form,
}

/// The patcher: the platform hook and what it decided (Linux's
/// `text_mutex` guards the same).
struct Patcher {
    hook: Option<&'static dyn TextPoke>,
    status: SiteStatus,
}

static PATCHER: lock_api::Mutex<RawLock, Patcher> = lock_api::Mutex::const_new(
    <RawLock as lock_api::RawMutex>::INIT,
    Patcher {
        hook: None,
        status: SiteStatus::Compiled,
    },
);

/// What the call sites are: see [`SiteStatus`].
pub fn status() -> SiteStatus {
    PATCHER.lock().status
}

/// Every call site in the program's site table, by address.
pub fn sites() -> Vec<SiteInfo> {
    table::entries()
        .iter()
        .map(|e| SiteInfo {
            address: e.code,
            target: e.target,
            name: e.descriptor.name(),
            kind: e.descriptor.kind(),
            form: e.form(),
        })
        .collect()
}

/// Registers the platform's text patcher (a kernel's); user space has
/// [`UserText`](crate::platform::UserText) by default. Only before the
/// first tracer is installed: afterwards the sites are what they are, and
/// the status is returned as the error.
pub fn set_text_poke(hook: &'static dyn TextPoke) -> Result<(), SiteStatus> {
    let mut patcher = PATCHER.lock();
    if patcher.status != SiteStatus::Compiled {
        return Err(patcher.status);
    }
    patcher.hook = Some(hook);
    Ok(())
}

/// Whether this target has a site table, so that every instrumented
/// function and event of the program is known before it runs.
pub(crate) fn has_table() -> bool {
    table::PRESENT
}

/// Registers every descriptor of the table (functions and events), so
/// listings name sites that never ran; idempotent.
pub(crate) fn ensure_registered() {
    static REGISTERED: spin::Once<()> = spin::Once::new();
    REGISTERED.call_once(|| {
        for entry in table::entries() {
            match entry.descriptor {
                Descriptor::Function(site) => {
                    crate::function::register(site);
                }
                Descriptor::Event(event) => {
                    crate::event::register(event);
                }
            }
        }
    });
}

/// Decides, at the first install, whether sites are patched: with the
/// platform hook (or, with `std`, [`UserText`](crate::platform::UserText))
/// if it can write the text, else they stay as compiled. Then patches them
/// to what the enable words say.
pub(crate) fn activate() {
    ensure_registered();
    let mut patcher = PATCHER.lock();
    if patcher.status != SiteStatus::Compiled {
        return;
    }
    let entries = table::entries();
    if !table::PRESENT {
        patcher.status = SiteStatus::Portable;
        return;
    }
    #[cfg(feature = "std")]
    if patcher.hook.is_none() {
        patcher.hook = Some(&crate::platform::UserText);
    }
    let Some(hook) = patcher.hook else {
        patcher.status = SiteStatus::Fallback(TextError::NoPatcher);
        return;
    };
    let prepared = match table::span(entries) {
        None => Ok(()),
        Some(span) => hook.prepare(span).and_then(|()| table::verify(entries)),
    };
    patcher.status = match prepared {
        Ok(()) => SiteStatus::Patched {
            sites: entries.len(),
        },
        Err(why) => SiteStatus::Fallback(why),
    };
    if let Err(why) = apply_locked(&patcher, entries) {
        // Nothing was written when the first batch fails: `poke::run`
        // makes the text writable before it writes a byte.
        patcher.status = SiteStatus::Fallback(why);
    }
}

/// Rewrites every site whose form is not what its enable word wants
/// (jump if any tracer wants it, else NOP), in one batch. Does nothing
/// while the sites are not patched. Call after changing enable words: when
/// it returns, every site of a word that is non-zero jumps, every other is
/// a NOP, on every CPU.
pub(crate) fn apply() -> Result<(), TextError> {
    let patcher = PATCHER.lock();
    apply_locked(&patcher, table::entries())
}

fn apply_locked(patcher: &Patcher, entries: &'static [Entry]) -> Result<(), TextError> {
    let (SiteStatus::Patched { .. }, Some(hook)) = (patcher.status, patcher.hook) else {
        return Ok(());
    };
    let batch: Vec<(&Entry, Form)> = entries
        .iter()
        .filter_map(|entry| {
            let wanted = if entry.descriptor.mask().load(Ordering::Acquire) != 0 {
                Form::Jump
            } else {
                Form::Nop
            };
            (entry.form() != wanted).then_some((entry, wanted))
        })
        .collect();
    if batch.is_empty() {
        return Ok(());
    }
    poke::run(hook, &batch)
}

/// Test-only: the planted bug the torn-patch test must catch.
#[doc(hidden)]
pub use poke::{between_steps, plant_torn_patching};
/// Breakpoints at call sites handled so far (tests).
#[doc(hidden)]
pub use table::traps;

/// The call site of a descriptor (`#[function]`'s and `define_event!`'s
/// expansions; see the [module documentation](self)). `$descriptor` names
/// a `static` whose first field is its `AtomicU32` enable word. Only this
/// crate's macros may use it: the site table trusts each record's kind.
#[cfg(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __site {
    ($descriptor:ident, $kind:expr, $slow:block) => {
        // SAFETY: the site jumps to the stub, which reads the descriptor's
        // enable word (offset 0, `repr(C)`) and jumps to the slow path when
        // it is not 0, back past the site otherwise; patched, the site does
        // nothing or jumps to the slow path. None writes memory or the
        // stack (flags are clobbered), and each ends where the asm ends or
        // in the slow path, which is what `label` allows.
        unsafe {
            ::core::arch::asm!(
                "2:",
                ".byte 0xe9",
                ".long 3f - . - 4",
                ".pushsection .text.hotkern_trace_stubs, \"ax\", @progbits",
                "3:",
                ".byte 0x83, 0x3d",
                ".long {descriptor} - . - 5",
                ".byte 0x00",
                ".byte 0x0f, 0x85",
                ".long {slow} - . - 4",
                ".byte 0xe9",
                ".long 2b + 5 - . - 4",
                ".popsection",
                ".pushsection hotkern_trace_sites, \"aR\", @progbits",
                ".balign 4",
                ".long 2b - .",
                ".long {slow} - .",
                ".long 3b - .",
                ".long {descriptor} - .",
                ".long {kind}",
                ".long 0",
                ".popsection",
                descriptor = sym $descriptor,
                kind = const $kind,
                slow = label $slow,
                options(readonly, nostack),
            )
        }
    };
}

/// Without a site table: the portable load and branch.
#[cfg(not(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none"))))]
#[doc(hidden)]
#[macro_export]
macro_rules! __site {
    ($descriptor:ident, $kind:expr, $slow:block) => {
        if $descriptor.is_hot() $slow
    };
}

/// A `#[function]`'s body behind its call site: `$body` (an `FnOnce`
/// closure of the body) runs directly, or through the entry and exit hooks
/// when the site jumps, and its value is the function's.
#[doc(hidden)]
#[macro_export]
macro_rules! __function_call {
    ($site:ident, $body:ident) => {{
        $crate::__site!($site, $crate::site::FUNCTION_SITE, {
            // (Unreachable past `traced` in a function returning `!`.)
            #[allow(unreachable_code)]
            return $crate::function::traced(&$site, $body);
        });
        $body()
    }};
}

/// An event's call site; `$slow` records it.
#[doc(hidden)]
#[macro_export]
macro_rules! __event_site {
    ($event:ident, $slow:block) => {
        $crate::__site!($event, $crate::site::EVENT_SITE, $slow)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn statuses_say_what_the_sites_are() {
        assert_eq!(
            SiteStatus::Patched { sites: 3 }.to_string(),
            "3 call sites patched in place (NOPs until enabled)"
        );
        assert_eq!(
            SiteStatus::Fallback(TextError::Protect { errno: 13 }).to_string(),
            "call sites load and branch: text cannot be made writable (mprotect: errno 13)"
        );
    }
}
