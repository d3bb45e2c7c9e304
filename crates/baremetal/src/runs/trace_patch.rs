//! The kernel's check of its own call-site patching (`crate::arch::text`):
//! functions patched in and out while every application processor calls
//! them in a loop, then every call that ran while its function was
//! enabled must be in the trace, and none that ran while it was disabled;
//! and what patching costs, for a handful of sites and for 1,000.
//!
//! The boot CPU patches; the other CPUs run [`worker`] from their loops,
//! interrupts on (they take the patcher's sync calls as they go). Each
//! round moves through four phases, which the patcher publishes in
//! [`PHASE`] and each worker reads before every pass over the functions,
//! counting the pass's calls under the phase it read:
//!
//! 1. *quiet*: no calls; the patcher waits until every worker has read
//!    it (so no call counted as *disabled* is still running), drains the
//!    trace and sets the round's `set_ftrace_filter`;
//! 2. *enabling*: the workers call while the sites are patched in;
//! 3. *enabled*, published after the patch's last sync: a call counted
//!    here started after every CPU serialised on the new text, so its
//!    entry jumped and it must be recorded;
//! 4. *quiet* again, waited for, so no *enabled* call is in flight;
//! 5. *disabling*: the workers call while the sites are patched out;
//! 6. *disabled* (the next round's), published after that patch's sync:
//!    these calls run NOPs and must not be recorded.
//!
//! Calls counted in phases 2 and 5 ran while the text changed under them:
//! each may or may not be recorded. So per round, CPU and function:
//! `enabled ≤ recorded ≤ enabled + transitions` for a function of the
//! round's filter, and `recorded = 0` for any other. Counts are the
//! worker CPUs' own (one writer each), sampled only at those quiescent
//! points; the trace is a tracer instance of its own with rings that keep
//! their oldest events, and a lost event fails the check.

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_trace::control::view;
use hotkern_trace::function::TracerKind;
use hotkern_trace::output::Entry;
use hotkern_trace::platform::TextError;
use hotkern_trace::site::{self, Form, SiteStatus};
use hotkern_trace::{TraceError, Tracer};

use crate::arch::clock;
use crate::arch::cpu::MAX_CPUS;
use crate::arch::smp;
use crate::arch::text;
use crate::platform::trace::{self, TRACING};
use crate::platform::Kernel;
use crate::runs::checks::Checks;

/// The 1,000 functions of the cost measurement (`build.rs` writes them).
mod sites {
    include!(concat!(env!("OUT_DIR"), "/patch_sites.rs"));
}

/// Functions the check patches.
const FUNCTIONS: usize = 8;
/// Rounds, and which functions each enables (bit `f`: `patch_check_f`).
const SELECTIONS: [u8; 8] = [0xff, 0x0f, 0xf0, 0x55, 0xaa, 0x01, 0x80, 0x3c];
const ROUNDS: usize = SELECTIONS.len();
/// The phases of a round, as [`PHASE`] counts them (`round * PHASES +
/// phase`). In the two quiet phases the workers make no call.
const DISABLED: usize = 0;
const QUIET_ON: usize = 1;
const ENABLING: usize = 2;
const ENABLED: usize = 3;
const QUIET_OFF: usize = 4;
const DISABLING: usize = 5;
const PHASES: usize = 6;
/// Workers return.
const STOP: u32 = u32::MAX;
/// Passes a worker makes in one phase at most (the rest of the phase it
/// halts), so a ring never fills: 3 × 48 passes × 8 events per round.
const CAP: u64 = 48;
/// Passes every worker makes while enabled, and while disabled, before
/// the patcher moves on.
const MIN_PASSES: u64 = 8;
/// Ring bytes per CPU of the check's tracer instance.
const BUFFER_KB: usize = 128;
/// How long the patcher waits for the workers at each point.
const WAIT_US: u64 = 5_000_000;

macro_rules! check_functions {
    ($($name:ident = $value:literal),* $(,)?) => {
        $(
            /// A function of the check (its body must not be empty, nor
            /// equal to another's).
            #[hotkern_trace::function]
            fn $name() -> u64 {
                core::hint::black_box($value)
            }
        )*
        /// The check's functions, by index.
        static CHECK_FUNCTIONS: [fn() -> u64; FUNCTIONS] = [$($name),*];
        /// Their names, as `set_ftrace_filter` and the trace see them.
        const NAMES: [&str; FUNCTIONS] = [$(stringify!($name)),*];
    };
}

check_functions!(
    patch_check_0 = 10,
    patch_check_1 = 11,
    patch_check_2 = 12,
    patch_check_3 = 13,
    patch_check_4 = 14,
    patch_check_5 = 15,
    patch_check_6 = 16,
    patch_check_7 = 17,
);

/// Passes each worker makes after each of the protocol's syncs while a
/// patch runs (the patcher waits for them there: see [`after_sync`]).
const STEP_PASSES: u64 = 2;
/// How long the patcher waits for them at each sync.
const STEP_WAIT_US: u64 = 50_000;

/// Syncs of the current patch so far, as [`after_sync`] counts them, and
/// the last one each worker made its passes after.
static STEP: AtomicU64 = AtomicU64::new(0);
static STEP_DONE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// The workers, one bit per CPU, for [`after_sync`].
static WORKERS: AtomicU32 = AtomicU32::new(0);

/// `round * PHASES + phase`, or [`STOP`].
static PHASE: AtomicU32 = AtomicU32::new(0);
/// The phase each CPU's worker read last: it has finished every call it
/// counted under an earlier one.
static SEEN: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Calls per CPU, round (one more: the disabled phase after the last),
/// phase and function; each CPU writes only its own.
type Counts = [[[AtomicU64; FUNCTIONS]; PHASES]; ROUNDS + 1];
static COUNTS: [Counts; MAX_CPUS] = [const {
    [const { [const { [const { AtomicU64::new(0) }; FUNCTIONS] }; PHASES] }; ROUNDS + 1]
}; MAX_CPUS];

/// Each application processor's loop work during the check.
fn worker(cpu: CpuId) {
    let me = cpu.index();
    let (mut step_seen, mut step_passes) = (STEP.load(Ordering::SeqCst), STEP_PASSES);
    loop {
        let phase = PHASE.load(Ordering::SeqCst);
        SEEN[me].store(phase, Ordering::SeqCst);
        if phase == STOP {
            return;
        }
        let (round, kind) = (phase as usize / PHASES, phase as usize % PHASES);
        let counts = &COUNTS[me][round.min(ROUNDS)][kind];
        // While a patch runs, a few passes after each of its syncs: into
        // the `int3`s the first two leave in the sites.
        let mut patching_done = false;
        if kind == ENABLING || kind == DISABLING {
            let step = STEP.load(Ordering::SeqCst);
            if step != step_seen {
                (step_seen, step_passes) = (step, 0);
            }
            if step_passes >= STEP_PASSES {
                STEP_DONE[me].store(step, Ordering::SeqCst);
                patching_done = true;
            } else {
                step_passes += 1;
            }
        }
        if patching_done
            || kind == QUIET_ON
            || kind == QUIET_OFF
            || counts[0].load(Ordering::Relaxed) >= CAP
        {
            // No calls in this phase, or enough: wait for the next (the
            // patcher wakes the workers; so do the tick and sync calls).
            // Interrupts are on (the loop's work runs so), so the halt
            // ends at the next interrupt.
            crate::arch::interrupts::halt();
            continue;
        }
        for (function, count) in CHECK_FUNCTIONS.iter().zip(counts) {
            core::hint::black_box(function());
            // A plain counter: only this CPU writes it.
            count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }
}

/// What the check saw and what patching cost: the summary's `trace`
/// object carries it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchReport {
    /// Rounds of patching in and out.
    pub rounds: usize,
    /// Calls made while their function was enabled (each recorded).
    pub enabled_calls: u64,
    /// Calls made while their function was disabled (none recorded).
    pub disabled_calls: u64,
    /// Calls made while their site was being patched.
    pub transition_calls: u64,
    /// Function events the check's tracer recorded.
    pub recorded: u64,
    /// Breakpoints taken at sites being patched, during the check.
    pub traps: u64,
    /// Core syncs (cross-CPU `cpuid` rounds) during the check, and CPUs
    /// one of them could not reach.
    pub syncs: u64,
    /// CPUs a sync did not reach in time.
    pub unreached: u64,
    /// Sites of the small patch, [`FUNCTIONS`].
    pub patch_sites: usize,
    /// Microseconds to patch `patch_sites` sites in.
    pub patch_us: Option<u64>,
    /// Microseconds to patch the 1,000 generated sites in, and out.
    pub patch_1000_sites_us: Option<u64>,
    /// Microseconds to patch them out again.
    pub unpatch_1000_sites_us: Option<u64>,
}

/// Halts until `condition` holds for every worker, or the wait times out.
fn wait_for(workers: &[CpuId], condition: impl Fn(usize) -> bool) -> bool {
    let deadline = clock::nanos().saturating_add(WAIT_US * 1000);
    smp::halt_until(
        &|| workers.iter().all(|cpu| condition(cpu.index())),
        deadline,
    )
}

/// Drains the tracer: function events of the check's functions, by CPU.
fn drain(tracer: &Tracer) -> [[u64; FUNCTIONS]; MAX_CPUS] {
    let mut counts = [[0; FUNCTIONS]; MAX_CPUS];
    let pages = view::drain_pages(tracer);
    let data = view::trace_data_from_pages(tracer, &pages);
    let function = tracer.event_id("ftrace", "function");
    for entry in &data.entries {
        let Entry::Event(record) = entry else {
            continue;
        };
        if Some(record.event_id()) != function {
            continue;
        }
        let Some(address) = record.payload.get(8..16) else {
            continue;
        };
        let address = u64::from_le_bytes(address.try_into().unwrap_or_default());
        let name = data.symbols.lookup(address).map(|(name, _)| name);
        if let Some(index) = NAMES.iter().position(|&n| Some(n) == name) {
            if let Some(row) = counts.get_mut(record.cpu as usize) {
                row[index] += 1;
            }
        }
    }
    counts
}

/// Whether the text of a site really holds its form's instruction (a jump
/// to its slow path, or the 5-byte NOP), not only the table's record.
fn text_holds(site: &site::SiteInfo) -> bool {
    // SAFETY: the site table's addresses are 5-byte instructions in the
    // kernel's text, mapped and readable.
    let bytes: [u8; 5] = core::array::from_fn(|i| unsafe {
        core::ptr::read_volatile((site.address + i) as *const u8)
    });
    match site.form {
        Form::Nop => bytes == [0x0f, 0x1f, 0x44, 0x00, 0x00],
        Form::Jump => {
            let rel = i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
            bytes[0] == 0xe9
                && (site.address + 5).wrapping_add(rel as isize as usize) == site.target
        }
        Form::Compiled => false,
    }
}

/// Sites of functions named by `wanted` in form `form`, text included.
fn sites_in(form: Form, wanted: impl Fn(&str) -> bool) -> usize {
    site::sites()
        .iter()
        .filter(|s| wanted(s.name) && s.form == form && text_holds(s))
        .count()
}

/// The forms of every call site now, in table order.
fn forms() -> Vec<Form> {
    site::sites().iter().map(|s| s.form).collect()
}

/// Runs the check and the measurement; `None` where sites are not
/// patched (a skip says why) or no other CPU runs.
pub fn run(checks: &mut Checks) -> Option<PatchReport> {
    const NAME: &str = "trace: every call made while its function was patched in was recorded, none while patched out, with every CPU calling through the sites";
    if !matches!(site::status(), SiteStatus::Patched { .. }) {
        checks.skip(NAME, "call sites are not patched here");
        return None;
    }
    let workers: Vec<CpuId> = smp::application_processors()
        .filter(|&cpu| smp::is_running(cpu))
        .collect();
    if workers.is_empty() {
        checks.skip(NAME, "no other CPU runs");
        return None;
    }
    let tracer = match TRACING.instance(BUFFER_KB, hotkern_trace::ring::Mode::ProducerConsumer) {
        Ok(tracer) => tracer,
        Err(error) => {
            crate::arch::console::println!(
                "hotkern: no tracer instance for the patch check: {error}"
            );
            checks.check(NAME, false);
            return None;
        }
    };
    refusals(tracer, checks);
    let traps = site::traps();
    let (syncs, unreached) = text::syncs();
    let mut report = PatchReport {
        rounds: ROUNDS,
        ..PatchReport::default()
    };
    let recorded = rounds(tracer, &workers);
    let ok = recorded.is_some_and(|recorded| judge(tracer, &workers, &recorded, &mut report));
    report.traps = site::traps() - traps;
    report.syncs = text::syncs().0 - syncs;
    report.unreached = text::syncs().1 - unreached;
    checks.check(NAME, ok && report.unreached == 0);
    measure_1000(tracer, &mut report, checks);
    tracer.uninstall();
    crate::arch::console::println!(
        "hotkern: trace patching: {} sites in {} µs; 1,000 sites in {} µs, out in {} µs ({} CPUs online); {} breakpoints taken at sites during the check",
        report.patch_sites,
        report.patch_us.unwrap_or(0),
        report.patch_1000_sites_us.unwrap_or(0),
        report.unpatch_1000_sites_us.unwrap_or(0),
        smp::online(),
        report.traps
    );
    Some(report)
}

/// A filter that matches nothing and a range outside the text are
/// refused, and change no site.
fn refusals(tracer: &Tracer, checks: &mut Checks) {
    let before = forms();
    let refused = tracer.set_ftrace_filter("no_such_function_hotkern*", false);
    checks.check(
        "trace: a set_ftrace_filter glob that matches no function is refused (NoMatch) and patches nothing",
        matches!(refused, Err(TraceError::NoMatch(_))) && forms() == before,
    );
    let heap = alloc::boxed::Box::new([0u8; 16]);
    let address = heap.as_ptr() as usize;
    let sites = site::sites();
    let inside = sites
        .first()
        .zip(sites.last())
        .map(|(first, last)| first.address..last.address + 5);
    checks.check(
        "trace: patching text outside the kernel's text section is refused (NotText), inside it allowed",
        matches!(
            text::check_range(address..address + 5),
            Err(TextError::NotText { .. })
        ) && inside.is_some_and(|range| text::check_range(range).is_ok())
            && forms() == before,
    );
}

/// What the patcher runs after each of the protocol's three syncs
/// (hotkern-trace's `between_steps` hook): lets every worker make
/// [`STEP_PASSES`] passes over the functions, so they run into sites that
/// hold an `int3` (after the first two) or the whole new instruction.
fn after_sync() {
    let step = STEP.fetch_add(1, Ordering::SeqCst) + 1;
    let workers = WORKERS.load(Ordering::SeqCst);
    let each = |f: &dyn Fn(usize) -> bool| (0..MAX_CPUS).filter(|c| workers & (1 << c) != 0).all(f);
    each(&|cpu| {
        smp::wake(CpuId(cpu as u32));
        true
    });
    let deadline = clock::nanos().saturating_add(STEP_WAIT_US * 1000);
    // A worker that does not come in time only makes the check weaker
    // (fewer calls into the breakpoints), not wrong.
    smp::halt_until(
        &|| each(&|cpu| STEP_DONE[cpu].load(Ordering::SeqCst) == step),
        deadline,
    );
}

/// Publishes a phase and wakes the workers that halt for it.
fn publish(phase: u32, workers: &[CpuId]) {
    PHASE.store(phase, Ordering::SeqCst);
    for &cpu in workers {
        smp::wake(cpu);
    }
}

/// The rounds of the module documentation; the recorded counts of each
/// round's window, or `None` if the workers did not keep up.
fn rounds(tracer: &Tracer, workers: &[CpuId]) -> Option<Vec<[[u64; FUNCTIONS]; MAX_CPUS]>> {
    let phase = |round: usize, kind: usize| (round * PHASES + kind) as u32;
    let passes =
        |cpu: usize, round: usize, kind: usize| COUNTS[cpu][round][kind][0].load(Ordering::Relaxed);
    PHASE.store(phase(0, DISABLED), Ordering::SeqCst);
    WORKERS.store(
        workers.iter().fold(0, |bits, cpu| bits | 1 << cpu.index()),
        Ordering::SeqCst,
    );
    Kernel::set_loop_work(Some(worker));
    hotkern_trace::internals::site::between_steps(Some(after_sync));
    let mut recorded = Vec::new();
    let mut ok = true;
    for (round, &selection) in SELECTIONS.iter().enumerate() {
        // Quiet: every call counted as disabled has returned.
        let quiet = phase(round, QUIET_ON);
        publish(quiet, workers);
        ok &= wait_for(workers, |cpu| SEEN[cpu].load(Ordering::SeqCst) == quiet);
        let window = drain(tracer);
        if round > 0 {
            recorded.push(window);
        } else if window != [[0; FUNCTIONS]; MAX_CPUS] {
            ok = false;
        }
        let filter: Vec<&str> = (0..FUNCTIONS)
            .filter(|f| selection & (1 << f) != 0)
            .map(|f| NAMES[f])
            .collect();
        ok &= tracer.set_ftrace_filter(&filter.join(" "), false).is_ok();
        // The workers call while the sites are patched in.
        publish(phase(round, ENABLING), workers);
        ok &= tracer.set_current_tracer(TracerKind::Function).is_ok();
        ok &= sites_in(Form::Jump, |name| filter.contains(&name)) == filter.len();
        publish(phase(round, ENABLED), workers);
        ok &= wait_for(workers, |cpu| passes(cpu, round, ENABLED) >= MIN_PASSES);
        // Quiet: every call counted as enabled has returned (recorded).
        let quiet = phase(round, QUIET_OFF);
        publish(quiet, workers);
        ok &= wait_for(workers, |cpu| SEEN[cpu].load(Ordering::SeqCst) == quiet);
        publish(phase(round, DISABLING), workers);
        ok &= tracer.set_current_tracer(TracerKind::Nop).is_ok();
        ok &= sites_in(Form::Nop, |name| NAMES.contains(&name)) == FUNCTIONS;
        publish(phase(round + 1, DISABLED), workers);
        ok &= wait_for(workers, |cpu| {
            passes(cpu, round + 1, DISABLED) >= MIN_PASSES
        });
        if !ok {
            break;
        }
    }
    hotkern_trace::internals::site::between_steps(None);
    publish(STOP, workers);
    ok &= wait_for(workers, |cpu| SEEN[cpu].load(Ordering::SeqCst) == STOP);
    Kernel::set_loop_work(None);
    recorded.push(drain(tracer));
    (ok && recorded.len() == ROUNDS).then_some(recorded)
}

/// Checks each round's window against the calls counted in it.
fn judge(
    tracer: &Tracer,
    workers: &[CpuId],
    recorded: &[[[u64; FUNCTIONS]; MAX_CPUS]],
    report: &mut PatchReport,
) -> bool {
    let mut ok = (0..tracer.cpus()).all(|cpu| tracer.lost(cpu) == 0);
    for (round, window) in recorded.iter().enumerate() {
        for (cpu, row) in window.iter().enumerate() {
            let worker = workers.iter().any(|w| w.index() == cpu);
            for (function, &seen) in row.iter().enumerate() {
                report.recorded += seen;
                if !worker {
                    ok &= seen == 0;
                    continue;
                }
                let count = |round: usize, kind: usize| {
                    COUNTS[cpu][round][kind][function].load(Ordering::Relaxed)
                };
                let enabled = count(round, ENABLED);
                let transitions = count(round, ENABLING) + count(round, DISABLING);
                let disabled = count(round + 1, DISABLED);
                let selected = SELECTIONS[round] & (1 << function) != 0;
                if selected {
                    report.enabled_calls += enabled;
                    report.transition_calls += transitions;
                    report.disabled_calls += disabled;
                } else {
                    report.disabled_calls += enabled + transitions + disabled;
                }
                let fits = if selected {
                    enabled >= MIN_PASSES && enabled <= seen && seen <= enabled + transitions
                } else {
                    seen == 0
                };
                if !fits {
                    crate::arch::console::println!(
                        "hotkern: patch check: round {round} cpu {cpu} {}: {seen} recorded, {enabled} calls enabled, {transitions} while patching, {disabled} disabled (selected: {selected})",
                        NAMES[function]
                    );
                }
                ok &= fits;
            }
        }
    }
    ok
}

/// Times patching the check's functions in, and the 1,000 generated
/// sites in and out, and checks that each of those went to a jump and
/// back to a NOP. The workers are stopped: the other CPUs idle, and each
/// sync still interrupts every one of them.
fn measure_1000(tracer: &Tracer, report: &mut PatchReport, checks: &mut Checks) {
    core::hint::black_box(&sites::PATCH_SITES);
    let generated = |form: Form| sites_in(form, |name| name.starts_with("patch_site_"));
    // The check's functions first: a few sites, as one `set_ftrace_filter`
    // of a handful of functions costs.
    let mut ok = tracer.set_ftrace_filter(&NAMES.join(" "), false).is_ok();
    let started = clock::now();
    ok &= tracer.set_current_tracer(TracerKind::Function).is_ok();
    report.patch_us = clock::micros_since(started);
    report.patch_sites = NAMES.len();
    ok &= tracer.set_current_tracer(TracerKind::Nop).is_ok();
    ok &= tracer.set_ftrace_filter("patch_site_*", false).is_ok();
    let started = clock::now();
    ok &= tracer.set_current_tracer(TracerKind::Function).is_ok();
    report.patch_1000_sites_us = clock::micros_since(started);
    ok &= generated(Form::Jump) == sites::PATCH_SITES.len();
    let started = clock::now();
    ok &= tracer.set_current_tracer(TracerKind::Nop).is_ok();
    report.unpatch_1000_sites_us = clock::micros_since(started);
    ok &= generated(Form::Nop) == sites::PATCH_SITES.len();
    checks.check(
        "trace: set_ftrace_filter patches 8 sites in and out, and 1,000 generated sites in (jumps) and out (NOPs)",
        ok,
    );
}

/// The summary's `"trace"` value: the trace.dat shipped and the patching
/// figures (`patch_us` and the others of [`PatchReport`]), or `null`
/// without a trace.
pub struct TraceJson(pub Option<trace::Shipped>, pub Option<PatchReport>);

impl fmt::Display for TraceJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(s) = self.0 else {
            return f.write_str("null");
        };
        write!(
            f,
            "{{{s},\"sites\":{}",
            crate::runs::json::JsonStr(&alloc::format!("{}", site::status()))
        )?;
        let (filter, patched) = TRACING.function_filter();
        write!(f, ",\"function_sites_patched\":{patched}")?;
        if let Some((filter, outcome)) = filter {
            write!(
                f,
                ",\"function_filter\":{},\"function_filter_error\":",
                crate::runs::json::JsonStr(&filter)
            )?;
            match outcome {
                Ok(()) => f.write_str("null")?,
                Err(error) => write!(f, "{}", crate::runs::json::JsonStr(&error))?,
            }
        }
        if let Some(p) = self.1 {
            write!(
                f,
                ",\"patch_rounds\":{},\"patch_enabled_calls\":{},\"patch_disabled_calls\":{},\"patch_transition_calls\":{},\"patch_recorded\":{},\"patch_traps\":{},\"patch_syncs\":{},\"patch_unreached\":{},\"patch_sites\":{},\"patch_us\":{},\"patch_1000_sites_us\":{},\"unpatch_1000_sites_us\":{}",
                p.rounds,
                p.enabled_calls,
                p.disabled_calls,
                p.transition_calls,
                p.recorded,
                p.traps,
                p.syncs,
                p.unreached,
                p.patch_sites,
                crate::runs::json::JsonNumber(p.patch_us),
                crate::runs::json::JsonNumber(p.patch_1000_sites_us),
                crate::runs::json::JsonNumber(p.unpatch_1000_sites_us),
            )?;
        }
        f.write_str("}")
    }
}
