//! Rewriting instructions that other CPUs may be executing: Linux's
//! `text_poke_bp`, batched as its `text_poke_bp_batch`
//! (`arch/x86/kernel/alternative.c`).
//!
//! x86 lets one CPU modify code another is running only with care (the
//! Intel SDM's "cross-modifying code"): a CPU may have fetched, even
//! decoded, the old bytes, and a multi-byte store is not seen atomically
//! by instruction fetch, so a CPU could run half an old jump and half a new
//! one. A one-byte store is atomic, and `int3` is one byte. A site is one
//! 5-byte instruction in every form; for each site of the batch:
//!
//! 1. publish where a CPU trapped there must continue (the entry's
//!    `resume` slot: the new instruction's destination), then write `int3`
//!    over its first byte; **sync**. Every CPU now either traps there or
//!    has passed it: none still runs bytes fetched before.
//! 2. write the instruction's other bytes; **sync**. No CPU can run them:
//!    each reaches the `int3` first, and the breakpoint handler
//!    ([`super::trap`]) sends it where the new instruction would.
//! 3. write the first byte; **sync**. The instruction is whole.
//! 4. clear the `resume` slots. A handler running late (its CPU trapped
//!    before step 3) finds none and runs the instruction again, now whole
//!    ([`super::Trap::Retry`]).
//!
//! "sync" is the platform's [`TextPoke::sync_cores`]: in user space
//! `membarrier`'s `SYNC_CORE`, in a kernel an IPI that runs a serialising
//! instruction on each CPU (Linux's `text_poke_sync`). The site is one
//! instruction before and after, so no CPU's next instruction is ever in
//! the middle of what is written.
//!
//! Three syncs per batch, whatever its size: enabling a thousand functions
//! costs the same three as enabling one, plus their stores.

use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::table::Entry;
use super::x86::{self, Form};
use crate::platform::{TextError, TextPoke};

/// The breakpoint instruction.
const INT3: u8 = 0xcc;

/// x86-64's page size, the granule of `unprotect`.
const PAGE: usize = 4096;

/// One instruction to replace.
struct Rewrite<'a> {
    address: usize,
    bytes: &'a [u8],
    slot: &'a AtomicUsize,
    resume: usize,
}

/// The planted bug of the torn-patch test (see [`plant_torn_patching`]).
static TORN: AtomicBool = AtomicBool::new(false);

/// Test-only: what runs on the patching CPU after each sync (see
/// [`between_steps`]); null when nothing.
static BETWEEN_STEPS: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Test-only: runs `step` on the patching thread after each of the
/// protocol's three syncs, so a test can run into the sites of the batch
/// at each step, exactly (`None` stops it).
#[doc(hidden)]
pub fn between_steps(step: Option<fn()>) {
    let step = step.map_or(core::ptr::null_mut(), |f| f as *mut ());
    BETWEEN_STEPS.store(step, Ordering::SeqCst);
}

/// Syncs the CPUs, then runs the test's step, if any.
fn sync(hook: &dyn TextPoke) {
    hook.sync_cores();
    let step = BETWEEN_STEPS.load(Ordering::SeqCst);
    if !step.is_null() {
        // SAFETY: only `between_steps` stores here, and it stores `fn()`s.
        let step: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(step) };
        step();
    }
}

/// Test-only: makes the patcher write each instruction's bytes one by one,
/// slowly, without the breakpoint and without syncing CPUs — the torn
/// write the protocol exists to prevent. Never turn it on outside the test
/// that proves the protocol's tests can see the difference.
#[doc(hidden)]
pub fn plant_torn_patching(on: bool) {
    TORN.store(on, Ordering::SeqCst);
}

/// Rewrites each site of `batch` to its form. The caller holds the
/// patcher's lock. On an error nothing was written, unless it came from
/// restoring the protection afterwards.
pub(super) fn run(hook: &dyn TextPoke, batch: &[(&Entry, Form)]) -> Result<(), TextError> {
    let new: Vec<[u8; x86::LEN]> = batch.iter().map(|(e, form)| e.bytes(*form)).collect();
    let rewrites: Vec<Rewrite> = batch
        .iter()
        .zip(&new)
        .map(|((entry, form), bytes)| Rewrite {
            address: entry.code,
            bytes,
            slot: &entry.resume,
            resume: x86::resume(*form, entry.code, entry.target, entry.stub),
        })
        .collect();
    let pages = pages(&rewrites);
    for (done, range) in pages.iter().enumerate() {
        // SAFETY: the ranges cover sites of the table, which `prepare`
        // checked lie in the program's text.
        if let Err(error) = unsafe { hook.unprotect(range.clone()) } {
            for range in &pages[..done] {
                // SAFETY: made writable just above. Best effort: the
                // error reported is the first one.
                let _ = unsafe { hook.protect(range.clone()) };
            }
            return Err(error);
        }
    }
    if TORN.load(Ordering::SeqCst) {
        write_torn(hook, &rewrites);
    } else {
        write_with_breakpoints(hook, &rewrites);
    }
    for (entry, form) in batch {
        entry.set_form(*form);
    }
    let mut result = Ok(());
    for range in pages {
        // SAFETY: made writable above.
        if let Err(error) = unsafe { hook.protect(range) } {
            result = result.and(Err(error));
        }
    }
    result
}

/// The protocol of the module documentation.
fn write_with_breakpoints(hook: &dyn TextPoke, rewrites: &[Rewrite]) {
    for rewrite in rewrites {
        rewrite.slot.store(rewrite.resume, Ordering::SeqCst);
    }
    // The slots before any `int3`: a CPU that traps finds its slot set.
    fence(Ordering::SeqCst);
    for rewrite in rewrites {
        // SAFETY: writable (`run`), a site's instruction boundary, and the
        // resume slot that covers a CPU trapping on it is published.
        unsafe { hook.poke(rewrite.address, &[INT3]) };
    }
    sync(hook);
    for rewrite in rewrites {
        // SAFETY: behind the `int3` that every CPU now meets first.
        unsafe { hook.poke(rewrite.address + 1, &rewrite.bytes[1..]) };
    }
    sync(hook);
    for rewrite in rewrites {
        // SAFETY: the rest of the instruction is in place on every CPU.
        unsafe { hook.poke(rewrite.address, &rewrite.bytes[..1]) };
    }
    sync(hook);
    fence(Ordering::SeqCst);
    for rewrite in rewrites {
        rewrite.slot.store(0, Ordering::SeqCst);
    }
}

/// The planted bug: each byte stored in turn, a pause between stores, no
/// breakpoint and no sync, so CPUs run half-written instructions.
fn write_torn(hook: &dyn TextPoke, rewrites: &[Rewrite]) {
    for rewrite in rewrites {
        for (i, byte) in rewrite.bytes.iter().enumerate() {
            // SAFETY: writable (`run`); that other CPUs may run the torn
            // instruction is the point of this test-only mode.
            unsafe { hook.poke(rewrite.address + i, core::slice::from_ref(byte)) };
            for _ in 0..20_000 {
                core::hint::spin_loop();
            }
        }
    }
}

/// The pages the rewrites touch, merged into runs.
fn pages(rewrites: &[Rewrite]) -> Vec<Range<usize>> {
    let mut pages: Vec<Range<usize>> = rewrites
        .iter()
        .map(|r| {
            let end = r.address + r.bytes.len();
            r.address & !(PAGE - 1)..end.next_multiple_of(PAGE)
        })
        .collect();
    pages.sort_unstable_by_key(|r| r.start);
    let mut runs: Vec<Range<usize>> = Vec::new();
    for range in pages {
        match runs.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => runs.push(range),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_merge_into_runs() {
        let slot = AtomicUsize::new(0);
        let at = |address: usize, len: usize| Rewrite {
            address,
            bytes: &[0u8; 5][..len],
            slot: &slot,
            resume: 0,
        };
        let rewrites = [
            at(0x5000 + 10, 5),
            at(0x1ffe, 5),
            at(0x1100, 5),
            at(0x9000, 5),
        ];
        assert_eq!(
            pages(&rewrites),
            [0x1000..0x3000, 0x5000..0x6000, 0x9000..0xa000]
        );
    }
}
