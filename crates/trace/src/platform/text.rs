//! The platform hook that rewrites the tracer's own call sites: make text
//! writable, poke bytes, make every CPU see them.
//!
//! hotkern-trace owns the patching protocol (Linux's `text_poke_bp`,
//! `arch/x86/kernel/alternative.c`, in [`crate::site`]); a platform owns
//! only the three things that protocol cannot do portably. In user space
//! [`UserText`](super::UserText) (feature `std`) does them with `mprotect`,
//! plain stores and `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`;
//! a kernel would use its own mapping of the text and an IPI to every CPU.
//!
//! A platform that cannot write its text says why from
//! [`TextPoke::prepare`], and the sites stay as compiled (one load and a
//! branch each), which [`crate::site::status`] reports.

use core::fmt;
use core::ops::Range;

/// What [`crate::site`] needs to patch call sites in place.
///
/// The protocol calls, for one batch of sites: [`unprotect`] on the pages
/// that hold them, [`poke`] several times with [`sync_cores`] between
/// rounds, then [`protect`]. It never calls two of these at once (it holds
/// its own lock, Linux's `text_mutex`).
///
/// [`unprotect`]: TextPoke::unprotect
/// [`poke`]: TextPoke::poke
/// [`sync_cores`]: TextPoke::sync_cores
/// [`protect`]: TextPoke::protect
///
/// # Safety
/// An implementation must make [`poke`](TextPoke::poke)'s stores reach the
/// instruction fetch of every CPU by the end of the next
/// [`sync_cores`](TextPoke::sync_cores), and must route a breakpoint
/// (`int3`) trap taken at a call site to [`crate::site::trap`], resuming the
/// trapped CPU where that says: between the protocol's first and last
/// round, a CPU that reaches a site being patched executes that `int3`.
pub unsafe trait TextPoke: Send + Sync {
    /// Checks, once, before any site is patched, that the text in `sites`
    /// (every call site lies in it) can be written and its CPUs
    /// synchronised, and installs the breakpoint handler. An error leaves
    /// every site as compiled.
    fn prepare(&self, sites: Range<usize>) -> Result<(), TextError>;

    /// Makes the bytes in `range` writable, still executable.
    ///
    /// # Safety
    /// `range` holds call sites reported in [`prepare`](TextPoke::prepare)'s
    /// range.
    unsafe fn unprotect(&self, range: Range<usize>) -> Result<(), TextError>;

    /// Makes the bytes in `range` read-only and executable again.
    ///
    /// # Safety
    /// `range` was given to [`unprotect`](TextPoke::unprotect).
    unsafe fn protect(&self, range: Range<usize>) -> Result<(), TextError>;

    /// Stores `bytes` at `address`, one byte store each, in order.
    ///
    /// # Safety
    /// The bytes are writable ([`unprotect`](TextPoke::unprotect)) and
    /// belong to a call site; the caller keeps every CPU's view of the
    /// instructions there valid (the protocol in [`crate::site`]).
    unsafe fn poke(&self, address: usize, bytes: &[u8]) {
        for (i, &byte) in bytes.iter().enumerate() {
            // SAFETY: the caller made the byte writable and owns the site.
            unsafe { core::ptr::write_volatile((address + i) as *mut u8, byte) };
        }
    }

    /// Serialises every CPU that may run the text, so none executes
    /// instructions fetched before the last [`poke`](TextPoke::poke) (Linux's
    /// `text_poke_sync`: `sync_core` on each CPU).
    fn sync_cores(&self);
}

/// Why call sites cannot be patched; they stay load-and-branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TextError {
    /// No platform hook: a kernel that has not registered one with
    /// [`crate::site::set_text_poke`].
    NoPatcher,
    /// Patching was turned off (`HOTKERN_TRACE_PATCH=0` in user space).
    Disabled,
    /// A call site lies outside the program's executable mappings.
    NotText {
        /// The site's address.
        address: usize,
    },
    /// A call site's bytes are not what the site table says was compiled.
    Unexpected {
        /// The site's address.
        address: usize,
    },
    /// The text could not be made writable (or read-only again).
    Protect {
        /// The OS error number (`EACCES`: a W^X policy).
        errno: i32,
    },
    /// The CPUs cannot be synchronised (`membarrier` `SYNC_CORE` refused).
    SyncCores {
        /// The OS error number.
        errno: i32,
    },
    /// This machine cannot take a breakpoint at a call site (a kernel under
    /// a hypervisor that does not deliver a guest's own `int3`).
    NoBreakpoints,
    /// The breakpoint (`SIGTRAP`) handler could not be installed.
    TrapHandler {
        /// The OS error number.
        errno: i32,
    },
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextError::NoPatcher => write!(f, "the platform has no text patcher"),
            TextError::Disabled => write!(f, "patching turned off (HOTKERN_TRACE_PATCH=0)"),
            TextError::NotText { address } => {
                write!(f, "call site {address:#x} is not in executable text")
            }
            TextError::Unexpected { address } => {
                write!(f, "call site {address:#x} does not hold the compiled bytes")
            }
            TextError::Protect { errno } => {
                write!(f, "text cannot be made writable (mprotect: errno {errno})")
            }
            TextError::SyncCores { errno } => write!(
                f,
                "CPUs cannot be synchronised (membarrier SYNC_CORE: errno {errno})"
            ),
            TextError::NoBreakpoints => {
                write!(f, "breakpoints cannot be taken at call sites here")
            }
            TextError::TrapHandler { errno } => {
                write!(f, "no SIGTRAP handler (sigaction: errno {errno})")
            }
        }
    }
}

impl core::error::Error for TextError {}
