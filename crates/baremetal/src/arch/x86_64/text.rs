//! Writing the kernel's own text while every CPU runs it: the x86 parts of
//! hotkern-trace's call-site patching ([`KernelText`], a
//! [`TextPoke`]), the breakpoint hook ([`on_breakpoint`]) and the
//! cross-CPU "sync every core" that Linux's `text_poke_sync` is.
//!
//! The protocol itself (Linux's `text_poke_bp`, `int3` first) is the trace
//! crate's; this module supplies what only the CPU can do:
//!
//! * **Writable text.** The boot page tables map the first 4 GiB identity,
//!   with 2 MiB pages that are all present and writable
//!   ([`crate::arch::boot`]): the kernel has no W^X, so its text is
//!   written where it runs, with plain byte stores. [`KernelText::prepare`]
//!   walks the page tables and refuses text that is not mapped writable,
//!   so a later W^X map makes patching fall back (typed), not fault. Why
//!   not toggle CR0.WP with interrupts off, or map a writable alias (Linux's
//!   `text_poke` temporary mm)? Both exist to write through a read-only
//!   mapping, which this kernel does not have; CR0.WP off would also let
//!   that CPU write any read-only page by mistake while it is off.
//! * **Sync every core.** [`KernelText::sync_cores`] posts a call to every
//!   running CPU ([`smp::post`], the one IPI call mechanism) that runs a
//!   serialising `cpuid`, then waits for them all; the patching CPU runs
//!   one itself. A CPU that is parked or not started is not waited for:
//!   it comes back through INIT-SIPI (a reset) or through an interrupt's
//!   `iretq` and [`serialize`] in [`smp::park_here`], so it never runs
//!   bytes it fetched before the patch.
//! * **Breakpoints.** The #BP handler asks [`on_breakpoint`] first: a CPU
//!   that reached a site while its first byte is `int3` continues where
//!   the site's new instruction goes (after the NOP, or at the slow path),
//!   as Linux's `poke_int3_handler` emulates it. Any other `int3` is the
//!   IDT's own business.
//!
//! Nothing here is instrumented with `#[hotkern_trace::function]`: the
//! breakpoint hook and the sync run inside the protocol, and a site in
//! them would be patched by the code that runs it.

use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_trace::platform::{TextError, TextPoke};
use hotkern_trace::site::Trap;

use crate::arch::cpu;
use crate::arch::instructions::serialize;
use crate::arch::smp::{self, Posted};

/// The size of the boot map's pages.
const LARGE_PAGE: usize = 2 << 20;
/// Page-table entry bits: present, writable, a large page.
const PRESENT: u64 = 1;
const WRITABLE: u64 = 2;
const LARGE: u64 = 1 << 7;
/// The physical-address bits of a table entry.
const ADDRESS: u64 = 0x000f_ffff_ffff_f000;
/// `EACCES`, for [`TextError::Protect`]: the text is mapped read-only.
const EACCES: i32 = 13;

/// The kernel's text section, from the linker script.
pub fn text_section() -> Range<usize> {
    extern "C" {
        static __text_start: u8;
        static __text_end: u8;
    }
    // Only the addresses of the linker symbols are taken.
    let start = core::ptr::addr_of!(__text_start) as usize;
    let end = core::ptr::addr_of!(__text_end) as usize;
    start..end
}

/// Whether `range` lies inside the kernel's text section.
fn in_text(range: &Range<usize>) -> Result<(), TextError> {
    let text = text_section();
    if range.start < text.start || range.start >= text.end {
        return Err(TextError::NotText {
            address: range.start,
        });
    }
    if range.end > text.end || range.end < range.start {
        return Err(TextError::NotText { address: text.end });
    }
    Ok(())
}

/// The boot map's entry for the 2 MiB page holding `address` (below
/// 512 GiB, where the kernel lies): present, writable and large, or why
/// not.
fn mapped_writable(address: usize) -> bool {
    let cr3: u64;
    // SAFETY: reading CR3 has no side effect.
    unsafe { core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack)) };
    let pml4 = (cr3 & ADDRESS) as *const u64;
    let address = address as u64;
    if address >= 512 << 30 {
        return false;
    }
    // SAFETY: the boot tables are in the kernel image, identity-mapped;
    // each index is below 512, inside its table's page.
    unsafe {
        let pml4e = pml4.read_volatile();
        if pml4e & PRESENT == 0 {
            return false;
        }
        let pdpt = (pml4e & ADDRESS) as *const u64;
        let pdpte = pdpt.add((address >> 30) as usize).read_volatile();
        if pdpte & PRESENT == 0 {
            return false;
        }
        let pd = (pdpte & ADDRESS) as *const u64;
        let pde = pd.add(((address >> 21) & 511) as usize).read_volatile();
        pde & (PRESENT | WRITABLE | LARGE) == PRESENT | WRITABLE | LARGE
    }
}

/// [`serialize`] as a cross-CPU call.
fn serialize_call(_: u64) -> u64 {
    serialize();
    0
}

/// Syncs so far, and CPUs a sync could not reach in time (each a CPU that
/// did not answer [`smp::TIMEOUT_US`]: it may run stale text).
static SYNCS: AtomicU64 = AtomicU64::new(0);
static UNREACHED: AtomicU64 = AtomicU64::new(0);

/// How many core syncs ran, and how many CPUs one of them could not reach.
pub fn syncs() -> (u64, u64) {
    (
        SYNCS.load(Ordering::Relaxed),
        UNREACHED.load(Ordering::Relaxed),
    )
}

/// Whether breakpoints may be used: the nested KVM this project is
/// developed on cannot deliver a guest's own `int3` (see
/// [`crate::runs::early::check_breakpoint`]), so under KVM the sites stay
/// as compiled.
static BREAKPOINTS_WORK: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

/// Says whether this machine delivers a guest's `int3` (false under KVM);
/// before the first tracer is installed.
pub fn set_breakpoints_work(work: bool) {
    BREAKPOINTS_WORK.store(work, Ordering::Relaxed);
}

/// The kernel text as hotkern-trace's [`TextPoke`]: see the module
/// documentation.
pub struct KernelText;

// SAFETY: pokes are byte stores through the identity map, which x86's
// instruction fetch snoops; `sync_cores` returns only after every running
// CPU executed `cpuid` (or, for one that does not answer, counts it in
// UNREACHED), and a CPU that is not running serialises before it runs
// kernel text again; the IDT's #BP handler asks `on_breakpoint`, which
// routes a site's `int3` to `hotkern_trace::site::trap`.
unsafe impl TextPoke for KernelText {
    fn prepare(&self, sites: Range<usize>) -> Result<(), TextError> {
        if !BREAKPOINTS_WORK.load(Ordering::Relaxed) {
            return Err(TextError::NoBreakpoints);
        }
        in_text(&sites)?;
        let first = sites.start & !(LARGE_PAGE - 1);
        for page in (first..sites.end).step_by(LARGE_PAGE) {
            if !mapped_writable(page) {
                return Err(TextError::Protect { errno: EACCES });
            }
        }
        Ok(())
    }

    unsafe fn unprotect(&self, range: Range<usize>) -> Result<(), TextError> {
        // Already writable (checked in `prepare`); a range outside the
        // text is refused before anything is written.
        in_text(&range)
    }

    unsafe fn protect(&self, range: Range<usize>) -> Result<(), TextError> {
        in_text(&range)
    }

    fn sync_cores(&self) {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        let me = cpu::current_id();
        let mut posted: [Option<Posted>; cpu::MAX_CPUS] = [const { None }; cpu::MAX_CPUS];
        // Posted to all first, then waited for: the CPUs serialise in
        // parallel, one round trip rather than one per CPU.
        for target in smp::cpus().filter(|&c| Some(c) != me && smp::is_running(c)) {
            // A CPU that went offline since the filter is not waited
            // for (WrongState): it serialises when it comes back.
            if let Ok(call) = smp::post(target, serialize_call, 0) {
                posted[target.index()] = Some(call);
            }
        }
        for call in posted.into_iter().flatten() {
            if smp::finish(call).is_err() {
                UNREACHED.fetch_add(1, Ordering::Relaxed);
            }
        }
        serialize();
    }
}

/// The #BP handler's question: was this `int3` (the trapped instruction
/// pointer `rip`, just past it) a call site being patched? Returns where
/// the CPU continues if so (Linux's `poke_int3_handler`).
pub fn on_breakpoint(rip: u64) -> Option<u64> {
    match hotkern_trace::site::trap((rip as usize).wrapping_sub(1)) {
        Trap::Resume(at) | Trap::Retry(at) => Some(at as u64),
        Trap::NotOurs => None,
    }
}

/// Installs [`KernelText`] as the tracer's text patcher: called before
/// the first tracer is installed, so the first install rewrites every
/// call site to a NOP.
pub fn install() {
    static TEXT: KernelText = KernelText;
    if let Err(status) = hotkern_trace::site::set_text_poke(&TEXT) {
        crate::arch::console::println!("hotkern: text patcher not installed: sites are {status}");
    }
}

/// Whether `range` may be patched: exposed for the kernel's check that a
/// range outside the text is refused before anything is written.
pub fn check_range(range: Range<usize>) -> Result<(), TextError> {
    KernelText.prepare(range)
}
