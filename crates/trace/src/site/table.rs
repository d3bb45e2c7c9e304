//! The site table: the records the linker gathered in
//! `hotkern_trace_sites`, decoded once into entries sorted by address, and
//! the breakpoint handler's lookup in them ([`trap`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use super::x86::{self, Form};
use super::{SiteKind, EVENT_SITE, FUNCTION_SITE};
use crate::event::Event;
use crate::function::FunctionSite;
use crate::platform::TextError;

/// Whether this target has a site table (x86-64 ELF: Linux, bare metal).
pub(crate) const PRESENT: bool = cfg!(all(
    target_arch = "x86_64",
    any(target_os = "linux", target_os = "none")
));

/// One record, as `__site!` lays it out (see the module documentation).
#[repr(C)]
struct Record {
    code: i32,
    target: i32,
    stub: i32,
    descriptor: i32,
    kind: u32,
    reserved: u32,
}

// The crate's own record, of kind 0: the section exists in every binary
// that links this crate, so the linker defines its start and stop symbols
// even where no site was compiled.
#[cfg(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none")))]
core::arch::global_asm!(
    ".pushsection hotkern_trace_sites, \"aR\", @progbits",
    ".balign 4",
    ".long 0, 0, 0, 0, 0, 0",
    ".popsection",
);

#[cfg(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none")))]
extern "C" {
    static __start_hotkern_trace_sites: [Record; 0];
    static __stop_hotkern_trace_sites: [Record; 0];
}

#[cfg(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none")))]
fn records() -> &'static [Record] {
    let start = (&raw const __start_hotkern_trace_sites).cast::<Record>();
    let stop = (&raw const __stop_hotkern_trace_sites).cast::<Record>();
    let len = (stop as usize - start as usize) / core::mem::size_of::<Record>();
    // SAFETY: the linker defines the two symbols around the section, which
    // holds only 24-byte, 4-aligned records (every input section's size is a
    // multiple of 24, so of 4, and its alignment 4, so none is padded); it
    // is read-only and lives as long as the program.
    unsafe { core::slice::from_raw_parts(start, len) }
}

#[cfg(not(all(target_arch = "x86_64", any(target_os = "linux", target_os = "none"))))]
fn records() -> &'static [Record] {
    &[]
}

/// The absolute address a relative field points at.
fn absolute(field: &i32) -> usize {
    (field as *const i32 as usize).wrapping_add(*field as isize as usize)
}

/// What a site belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Descriptor {
    Function(&'static FunctionSite),
    Event(&'static Event),
}

impl Descriptor {
    /// The enable word the compiled site tests.
    pub(crate) fn mask(self) -> &'static AtomicU32 {
        match self {
            Descriptor::Function(site) => site.enable_word(),
            Descriptor::Event(event) => event.enable_word(),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Descriptor::Function(site) => site.name(),
            Descriptor::Event(event) => event.name(),
        }
    }

    pub(crate) fn kind(self) -> SiteKind {
        match self {
            Descriptor::Function(_) => SiteKind::Function,
            Descriptor::Event(_) => SiteKind::Event,
        }
    }
}

/// One site, decoded.
pub(crate) struct Entry {
    /// The site's first byte.
    pub(crate) code: usize,
    /// Its slow path.
    pub(crate) target: usize,
    /// Its out-of-line load and branch.
    pub(crate) stub: usize,
    pub(crate) descriptor: Descriptor,
    /// [`Form::code`]; written by the patcher only, under its lock.
    form: AtomicU8,
    /// Where a CPU trapped on the site's breakpoint continues while a batch
    /// rewrites it; 0 otherwise.
    pub(super) resume: AtomicUsize,
}

impl Entry {
    pub(crate) fn form(&self) -> Form {
        Form::from_code(self.form.load(Ordering::Acquire))
    }

    pub(super) fn set_form(&self, form: Form) {
        self.form.store(form.code(), Ordering::Release);
    }

    /// The site in `form`.
    pub(super) fn bytes(&self, form: Form) -> [u8; x86::LEN] {
        x86::bytes(form, self.code, self.target, self.stub)
    }

    /// Its out-of-line load and branch, as compiled.
    fn stub_bytes(&self) -> [u8; x86::STUB_LEN] {
        let word = self.descriptor.mask() as *const AtomicU32 as usize;
        x86::stub(self.stub, self.code, self.target, word)
    }
}

static TABLE: spin::Once<&'static [Entry]> = spin::Once::new();

/// Every site, by address (decoded on first use).
pub(crate) fn entries() -> &'static [Entry] {
    TABLE.call_once(|| {
        let mut entries: Vec<Entry> = records().iter().filter_map(decode).collect();
        entries.sort_unstable_by_key(|e| e.code);
        Box::leak(entries.into_boxed_slice())
    })
}

fn decode(record: &'static Record) -> Option<Entry> {
    let descriptor = absolute(&record.descriptor);
    let descriptor = match record.kind {
        // SAFETY: only `__site!` writes records of these kinds, with the
        // `sym` of a `static` of the type its kind names (`__function_entry!`
        // gives a `FunctionSite`, `__event_site!` an `Event`); statics live
        // as long as the program.
        FUNCTION_SITE => Descriptor::Function(unsafe { &*(descriptor as *const FunctionSite) }),
        // SAFETY: as above.
        EVENT_SITE => Descriptor::Event(unsafe { &*(descriptor as *const Event) }),
        _ => return None,
    };
    Some(Entry {
        code: absolute(&record.code),
        target: absolute(&record.target),
        stub: absolute(&record.stub),
        descriptor,
        form: AtomicU8::new(Form::Compiled.code()),
        resume: AtomicUsize::new(0),
    })
}

/// The bytes every site and stub spans, for the platform's check.
pub(crate) fn span(entries: &[Entry]) -> Option<Range<usize>> {
    let start = entries.iter().map(|e| e.code.min(e.stub)).min()?;
    let end = entries
        .iter()
        .map(|e| (e.code + x86::LEN).max(e.stub + x86::STUB_LEN))
        .max()?;
    Some(start..end)
}

/// `N` bytes of text at `address`.
///
/// # Safety
/// They lie in mapped text.
unsafe fn read<const N: usize>(address: usize) -> [u8; N] {
    // SAFETY: the caller's; reading code has no side effect.
    core::array::from_fn(|i| unsafe { core::ptr::read_volatile((address + i) as *const u8) })
}

/// Checks that every site and its stub hold the bytes its record says
/// were compiled: a record that does not describe its text is never
/// written through.
pub(crate) fn verify(entries: &[Entry]) -> Result<(), TextError> {
    for entry in entries {
        // SAFETY: the platform's `prepare` checked that every site and
        // stub lies in mapped executable text (`span`); sites are only
        // written under the patcher's lock, which the caller holds.
        let (site, stub) = unsafe { (read(entry.code), read(entry.stub)) };
        if site != entry.bytes(Form::Compiled) || stub != entry.stub_bytes() {
            return Err(TextError::Unexpected {
                address: entry.code,
            });
        }
    }
    Ok(())
}

/// What a breakpoint handler does with a trap at `address` (the `int3`
/// byte's address: the trapped instruction pointer minus one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trap {
    /// A site being patched: continue at this address (where the new
    /// instruction goes; the bytes in between must not run).
    Resume(usize),
    /// A site that was being patched and is whole again (the handler ran
    /// after the batch ended): run the instruction again, from this address.
    Retry(usize),
    /// Not a site's breakpoint: the platform's own business.
    NotOurs,
}

/// Where a CPU that hit a breakpoint at `address` continues. Async-signal
/// safe: no lock, no allocation (Linux's `poke_int3_handler`).
pub fn trap(address: usize) -> Trap {
    let Some(entries) = TABLE.get() else {
        return Trap::NotOurs;
    };
    let Ok(at) = entries.binary_search_by_key(&address, |e| e.code) else {
        return Trap::NotOurs;
    };
    TRAPS.fetch_add(1, Ordering::Relaxed);
    match entries[at].resume.load(Ordering::Acquire) {
        0 => Trap::Retry(address),
        resume => Trap::Resume(resume),
    }
}

/// Breakpoints at sites handled so far (tests check that their threads
/// did run into sites being patched).
static TRAPS: AtomicU64 = AtomicU64::new(0);

/// How many breakpoints at call sites [`trap`] has handled.
pub fn traps() -> u64 {
    TRAPS.load(Ordering::Relaxed)
}
