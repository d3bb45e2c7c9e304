//! [`Tracer`]: one trace instance — per-CPU buffers (live and snapshot),
//! the event switches, the function tracers and their filters. The methods
//! here are what ftrace's control files do; the tracefs-style text layer is
//! built on them.
//!
//! ```
//! use std::sync::Arc;
//! use hotkern_trace::platform::{MonotonicClock, ThreadCpus};
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! let tracer = Tracer::new(TraceConfig::small(), Arc::new(MonotonicClock::new()), ThreadCpus::new(2)).unwrap();
//! tracer.write_marker("hello").unwrap();
//! let records = tracer.drain_records();
//! assert_eq!(records.len(), 1);
//! assert_eq!(records[0].string(16), "hello\n");
//! ```

mod buffers;
mod error;
mod events;
mod functions;
#[cfg(feature = "std")]
mod hwlat;
mod probes;
pub mod record;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU8, Ordering};

use buffers::{pages_for, Buffers};
pub use error::TraceError;
pub use events::EventHook;
pub(crate) use events::{ENABLED, HOOKED};
use functions::FunctionFilters;
pub(crate) use probes::{PROBED, TRACED};
pub use record::Record;

use crate::event::{self, format, MAX_EVENT_IDS, MAX_INSTANCES};
use crate::function::{self, CpuCalls, PidList, ProfileTable, TracerKind};
use crate::platform::{Clock, CpuContext};
use crate::ring::{self, Mode, RawLock, RingBuffer};

type Mutex<T> = lock_api::Mutex<RawLock, T>;

/// How a tracer is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceConfig {
    /// Data bytes per CPU in KiB (`buffer_size_kb`).
    pub buffer_kb: usize,
    /// What a full buffer does.
    pub mode: Mode,
}

impl Default for TraceConfig {
    /// ftrace's default: 1408 KiB per CPU, overwrite.
    fn default() -> Self {
        TraceConfig {
            buffer_kb: 1408,
            mode: Mode::Overwrite,
        }
    }
}

impl TraceConfig {
    /// 64 KiB per CPU, overwrite: tests and demos.
    pub fn small() -> Self {
        TraceConfig {
            buffer_kb: 64,
            mode: Mode::Overwrite,
        }
    }
}

/// Trace options (`options/<name>`) kept by the tracer itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOption {
    /// `function-fork`: children of `set_ftrace_pid` tasks join the list.
    FunctionFork,
    /// `event-fork`: children of `set_event_pid` tasks join the list.
    EventFork,
}

impl TraceOption {
    fn bit(self) -> u32 {
        match self {
            TraceOption::FunctionFork => 1,
            TraceOption::EventFork => 2,
        }
    }
}

/// A trace instance. See the [crate documentation](crate).
// Aligned to 8 so a direct word carries the handler in the address's low
// bits (`function::dispatch`).
#[repr(align(8))]
pub struct Tracer {
    clock: Arc<dyn Clock>,
    context: &'static dyn CpuContext,
    /// The clock and context again when they are the user-space ones, so
    /// the hot paths call them directly (no indirect call, inlined).
    #[cfg(feature = "std")]
    fast_clock: Option<crate::platform::TscClock>,
    #[cfg(feature = "std")]
    fast_context: Option<&'static crate::platform::ThreadCpus>,
    cpus: usize,
    on: AtomicBool,
    kind: AtomicU32,
    live: AtomicPtr<RingBuffer>,
    spare: AtomicPtr<RingBuffer>,
    buffers: Mutex<Buffers>,
    /// Per event id: [`events::ENABLED`] | [`events::HOOKED`]. A fixed-size
    /// array, so indexing it with a registered id needs no length load.
    event_state: Box<[AtomicU8; MAX_EVENT_IDS]>,
    hooks: Box<[AtomicPtr<events::HookBox>]>,
    /// Boxed for stable addresses: writers hold raw pointers to hooks.
    #[allow(clippy::vec_box)]
    hook_store: Mutex<Vec<Box<events::HookBox>>>,
    function_filters: Mutex<FunctionFilters>,
    /// Function probes (`set_ftrace_filter` commands).
    probes: Mutex<Vec<function::probe::Probe>>,
    /// Per function (by site index): [`TRACED`] | [`PROBED`], what this
    /// tracer's watch of it is made of (`function::dispatch` reads it).
    site_flags: Box<[AtomicU8]>,
    ftrace_pids: PidList,
    event_pids: PidList,
    options: AtomicU32,
    max_depth: AtomicU32,
    profile_on: AtomicBool,
    profiles: AtomicPtr<Vec<ProfileTable>>,
    calls: Box<[CpuCalls]>,
    /// Open while installed; closed and waited for by `uninstall`.
    gate: function::dispatch::Gate,
    slot: AtomicU32,
    #[cfg(feature = "std")]
    hwlat: crate::hwlat::Detector,
}

// SAFETY: the raw pointers point into rings and hooks the tracer owns and
// never frees while it lives; everything else is atomic or locked.
unsafe impl Send for Tracer {}
// SAFETY: as above.
unsafe impl Sync for Tracer {}

impl core::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tracer")
            .field("cpus", &self.cpus)
            .field("tracing_on", &self.tracing_on())
            .field("current_tracer", &self.current_tracer())
            .field("buffer_size_kb", &self.buffer_size_kb())
            .finish()
    }
}

const NOT_INSTALLED: u32 = u32::MAX;

static INSTANCES: [AtomicPtr<Tracer>; MAX_INSTANCES] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_INSTANCES];
static INSTALLED: AtomicU32 = AtomicU32::new(0);

/// The installed tracer in `slot`.
#[inline]
pub(crate) fn instance(slot: usize) -> Option<&'static Tracer> {
    let tracer = INSTANCES.get(slot)?.load(Ordering::Acquire);
    // SAFETY: installed tracers are leaked, so the pointer stays valid.
    (!tracer.is_null()).then(|| unsafe { &*tracer })
}

/// Bit mask of installed slots (what `trace_printk!` tests).
#[inline(always)]
pub(crate) fn installed_mask() -> u32 {
    INSTALLED.load(Ordering::Relaxed)
}

/// Calls `each(slot, tracer)` for every installed tracer.
pub(crate) fn for_each_instance(mut each: impl FnMut(usize, &'static Tracer)) {
    for slot in 0..MAX_INSTANCES {
        if let Some(tracer) = instance(slot) {
            each(slot, tracer);
        }
    }
}

impl Tracer {
    /// A tracer with one ring per CPU of `context`. Tracing is on, the
    /// current tracer is `nop`, no event is enabled.
    pub fn new(
        config: TraceConfig,
        clock: Arc<dyn Clock>,
        context: &'static dyn CpuContext,
    ) -> Result<Tracer, TraceError> {
        let cpus = context.cpus();
        let pages = pages_for(config.buffer_kb)?;
        let live = Box::new(RingBuffer::new(cpus, pages, config.mode)?);
        let mut owned = Vec::new();
        let live_ptr = &*live as *const RingBuffer as *mut RingBuffer;
        owned.push(live);
        Ok(Tracer {
            #[cfg(feature = "std")]
            fast_clock: clock.as_tsc().filter(crate::platform::TscClock::is_counter),
            #[cfg(feature = "std")]
            fast_context: context.as_thread_cpus(),
            clock,
            context,
            cpus,
            on: AtomicBool::new(true),
            kind: AtomicU32::new(TracerKind::Nop.code()),
            live: AtomicPtr::new(live_ptr),
            spare: AtomicPtr::new(ptr::null_mut()),
            buffers: Mutex::new(Buffers::new(owned)),
            event_state: Box::new([const { AtomicU8::new(0) }; MAX_EVENT_IDS]),
            hooks: (0..MAX_EVENT_IDS)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            hook_store: Mutex::new(Vec::new()),
            function_filters: Mutex::new(FunctionFilters::default()),
            probes: Mutex::new(Vec::new()),
            site_flags: (0..function::MAX_SITES).map(|_| AtomicU8::new(0)).collect(),
            ftrace_pids: PidList::new(),
            event_pids: PidList::new(),
            options: AtomicU32::new(0),
            max_depth: AtomicU32::new(0),
            profile_on: AtomicBool::new(false),
            profiles: AtomicPtr::new(ptr::null_mut()),
            calls: (0..cpus).map(|_| CpuCalls::new()).collect(),
            gate: function::dispatch::Gate::new(),
            slot: AtomicU32::new(NOT_INSTALLED),
            #[cfg(feature = "std")]
            hwlat: crate::hwlat::Detector::default(),
        })
    }

    /// A tracer on the user-space platform: [`ThreadCpus`](crate::platform::ThreadCpus)
    /// with `cpus` slots and the monotonic clock.
    #[cfg(feature = "std")]
    pub fn with_threads(config: TraceConfig, cpus: usize) -> Result<Tracer, TraceError> {
        Tracer::new(
            config,
            Arc::new(crate::platform::MonotonicClock::new()),
            crate::platform::ThreadCpus::new(cpus),
        )
    }

    /// Makes the tracer reachable from static call sites (events,
    /// `#[function]`, `trace_printk!`). The tracer lives for the rest of the
    /// program (a writer may hold it at any time); [`Tracer::uninstall`]
    /// detaches it and frees its slot.
    ///
    /// The first install decides whether call sites are patched in place
    /// ([`crate::site::status`]) and makes them NOPs if so.
    pub fn install(self) -> Result<&'static Tracer, TraceError> {
        crate::site::activate();
        let tracer: &'static Tracer = Box::leak(Box::new(self));
        let pointer = tracer as *const Tracer as *mut Tracer;
        for (slot, cell) in INSTANCES.iter().enumerate() {
            if cell
                .compare_exchange(
                    ptr::null_mut(),
                    pointer,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                tracer.slot.store(slot as u32, Ordering::Release);
                tracer.gate.open();
                INSTALLED.fetch_or(1 << slot, Ordering::AcqRel);
                let patched = tracer
                    .refresh_event_masks()
                    .and_then(|()| tracer.refresh_function_masks());
                if let Err(error) = patched {
                    tracer.uninstall();
                    return Err(error);
                }
                return Ok(tracer);
            }
        }
        Err(TraceError::TooManyInstances)
    }

    /// Detaches an installed tracer from every call site and frees its slot.
    /// Its data stays readable. Sites only it wanted become NOPs again; if
    /// the text cannot be written any more they keep jumping, to slow paths
    /// that find no tracer and return.
    ///
    /// When it returns no function entry into this tracer runs or will
    /// run; calls entered before still end through it (their exits are
    /// recorded), so no pair is cut. Not from a function entry hook.
    pub fn uninstall(&'static self) {
        let Some(slot) = self.slot() else {
            return;
        };
        #[cfg(feature = "std")]
        self.stop_hwlat();
        INSTALLED.fetch_and(!(1 << slot), Ordering::AcqRel);
        for event in event::registered() {
            event.set_instance(slot, false);
        }
        for site in function::sites() {
            site.set_instance(slot, false);
        }
        INSTANCES[slot].store(ptr::null_mut(), Ordering::Release);
        function::dispatch::decide_all();
        event::direct::decide_all();
        let _ = crate::site::apply();
        // Callers that read a direct word or the slot before the stores
        // above may still be on their way in: close and wait for them.
        self.gate
            .close(self.calls.iter().map(|calls| &calls.doorway));
        self.slot.store(NOT_INSTALLED, Ordering::Release);
    }

    /// Calls entered and not yet exited, over every CPU (tests check that
    /// every entry got its exit).
    #[doc(hidden)]
    pub fn open_calls(&self) -> u64 {
        self.calls.iter().map(|calls| calls.depth.load()).sum()
    }

    /// The instance slot, if installed.
    pub(crate) fn slot(&self) -> Option<usize> {
        let slot = self.slot.load(Ordering::Acquire);
        (slot != NOT_INSTALLED).then_some(slot as usize)
    }

    /// Number of CPUs (one buffer each).
    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// The platform the tracer asks for the current CPU, task, task name
    /// and call stack.
    pub(crate) fn context(&self) -> &'static dyn CpuContext {
        self.context
    }

    /// The clock's name (`trace_clock`).
    pub(crate) fn clock_name(&self) -> &'static str {
        self.clock.name()
    }

    /// The current time on the trace clock.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The name of task `pid`, if the platform knows it.
    pub(crate) fn comm(&self, pid: i32) -> Option<alloc::string::String> {
        if pid == 0 {
            return Some("<idle>".into());
        }
        self.context.comm(pid)
    }

    /// The trace clock, read on the hot paths.
    #[inline(always)]
    pub(crate) fn clock_now(&self) -> u64 {
        #[cfg(feature = "std")]
        if let Some(tsc) = &self.fast_clock {
            // `fast_clock` only holds a real counter (see `new`), so the
            // fallback test inside `now_ns` is skipped.
            return tsc.counter_ns();
        }
        self.clock.now_ns()
    }

    /// The current CPU and task, read on the hot paths.
    #[inline(always)]
    pub(crate) fn current(&self) -> Option<(usize, i32)> {
        #[cfg(feature = "std")]
        if let Some(threads) = self.fast_context {
            return threads.current();
        }
        self.context.current()
    }

    /// `tracing_on`.
    #[inline(always)]
    pub fn tracing_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Sets `tracing_on`. Events still reach their hooks (triggers) while
    /// off, as in ftrace, but nothing is recorded.
    pub fn set_tracing_on(&self, on: bool) {
        self.on.store(on, Ordering::Release);
    }

    #[inline(always)]
    fn live_ring(&self) -> &RingBuffer {
        // SAFETY: rings are owned by `buffers` and never freed while the
        // tracer lives.
        unsafe { &*self.live.load(Ordering::Acquire) }
    }

    fn spare_ring(&self) -> Option<&RingBuffer> {
        let spare = self.spare.load(Ordering::Acquire);
        // SAFETY: as in `live_ring`.
        (!spare.is_null()).then(|| unsafe { &*spare })
    }

    /// Records one event on the current CPU at `now`: writes the common
    /// header, then `fill` writes the rest of the `size`-byte payload.
    /// Returns whether it was recorded.
    #[inline(always)]
    pub(crate) fn write_at(
        &self,
        (cpu, pid): (usize, i32),
        now: u64,
        id: u16,
        size: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let ring = self.live_ring();
        // SAFETY: `cpu` comes from the platform's `current_cpu`, whose
        // contract makes this thread its only (non-nested) writer.
        let Ok(mut reservation) = (unsafe { ring.reserve(cpu, now, size) }) else {
            return false;
        };
        // A writer nested on another one runs in "interrupt" context: a
        // signal handler in user space. ftrace shows it as `h`.
        let flags = if reservation.nested() {
            format::FLAG_HARDIRQ
        } else {
            0
        };
        let payload = reservation.payload_mut();
        payload[..format::COMMON_HEADER_SIZE].copy_from_slice(&common_header(id, flags, pid));
        fill(payload);
        reservation.commit();
        true
    }

    /// Records an already encoded payload (common header included) on the
    /// current CPU, if tracing is on. Used for events whose payload was
    /// built before deciding to record it (filters, triggers).
    pub(crate) fn write_payload(&self, payload: &[u8]) -> bool {
        if !self.tracing_on() || payload.len() < format::COMMON_HEADER_SIZE {
            return false;
        }
        let Some((cpu, _)) = self.current() else {
            return false;
        };
        let now = self.clock_now();
        let ring = self.live_ring();
        // SAFETY: as in `write_at`.
        unsafe { ring.write(cpu, now, payload) }.is_ok()
    }

    /// Writes `text` to the buffer as `trace_marker` does: an `ftrace/print`
    /// event, a newline added if missing. Returns the bytes taken from
    /// `text` (longer text is cut to fit one event).
    pub fn write_marker(&self, text: &str) -> Result<usize, TraceError> {
        let limit = ring::page::MAX_PAYLOAD - 16 - 2;
        let mut taken = text.len().min(limit);
        while !text.is_char_boundary(taken) {
            taken -= 1;
        }
        let body = &text.as_bytes()[..taken];
        let newline = !body.ends_with(b"\n");
        let size = 16 + body.len() + usize::from(newline) + 1;
        if !self.tracing_on() {
            return Ok(taken);
        }
        let Some(current) = self.current() else {
            return Ok(taken);
        };
        let ip = crate::marker::MARKER_SYMBOL.address();
        let now = self.clock_now();
        self.write_at(current, now, format::PRINT_ID, size, |payload| {
            payload[8..16].copy_from_slice(&ip.to_ne_bytes());
            payload[16..16 + body.len()].copy_from_slice(body);
            let mut at = 16 + body.len();
            if newline {
                payload[at] = b'\n';
                at += 1;
            }
            payload[at..].fill(0);
        });
        Ok(taken)
    }
}

/// ftrace's common header (`common_type`, `common_flags`,
/// `common_preempt_count` = 0, `common_pid`, each in native byte order),
/// built as one word so the hot paths store it at once.
#[inline(always)]
fn common_header(id: u16, flags: u8, pid: i32) -> [u8; format::COMMON_HEADER_SIZE] {
    let (id, flags, pid) = (u64::from(id), u64::from(flags), u64::from(pid as u32));
    #[cfg(target_endian = "little")]
    {
        (id | flags << 16 | pid << 32).to_le_bytes()
    }
    #[cfg(target_endian = "big")]
    {
        (id << 48 | flags << 40 | pid).to_be_bytes()
    }
}

#[cfg(all(test, feature = "std"))]
mod tests;
