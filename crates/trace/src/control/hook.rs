//! The hook a control interface installs on an event with a filter or
//! triggers: the filter decides whether the event is recorded, the
//! triggers act on the tracer.

use alloc::sync::Arc;

use crate::event::format;
use crate::filter::Filter;
use crate::platform::TASK_COMM_LEN;
use crate::ring::RawLock;
use crate::trigger::{FirePhase, TriggerActions, TriggerSet};
use crate::{EventHook, Tracer};

pub(crate) type SharedTriggers = Arc<lock_api::Mutex<RawLock, TriggerSet>>;

/// Filter and triggers of one event. A new hook is installed whenever the
/// filter changes (the filter itself is immutable, so evaluating it takes
/// no lock); the trigger set is shared between versions.
pub(crate) struct ControlHook {
    pub(crate) filter: Option<Filter>,
    pub(crate) triggers: SharedTriggers,
}

/// What triggers may do, on a real tracer, for one hit of an event.
pub(crate) struct TracerActions<'t> {
    pub(crate) tracer: &'t Tracer,
    /// The payload of the event that fired the triggers.
    pub(crate) payload: &'t [u8],
}

impl TriggerActions for TracerActions<'_> {
    fn tracing_on(&self) -> bool {
        self.tracer.tracing_on()
    }

    fn set_tracing_on(&mut self, on: bool) {
        self.tracer.set_tracing_on(on);
    }

    fn snapshot(&mut self) {
        let _ = self.tracer.snapshot_swap();
    }

    fn stacktrace(&mut self, _cpu: u32) {
        let mut frames = [0u64; STACK_FRAMES];
        let count = self
            .tracer
            .context()
            .stack_trace(tracer_frame(self.payload), &mut frames);
        let mut event = [0u8; format::KERNEL_STACK_CALLER_OFFSET + 8 * (STACK_FRAMES + 1)];
        if let Some(header) = kernel_stack_payload(self.payload, &frames[..count], &mut event) {
            let _ = self.tracer.write_payload(header);
        }
    }

    fn event_enabled(&self, system: &str, event: &str) -> bool {
        self.tracer
            .event_id(system, event)
            .is_some_and(|id| self.tracer.event_enabled(id))
    }

    fn set_event_enabled(&mut self, system: &str, event: &str, enabled: bool) {
        if let Some(id) = self.tracer.event_id(system, event) {
            let _ = self.tracer.set_event_enabled(id, enabled);
        }
    }

    fn current_comm(&self) -> Option<[u8; TASK_COMM_LEN]> {
        self.tracer.context().current_comm()
    }
}

/// Most return addresses one `stacktrace` records.
const STACK_FRAMES: usize = 32;

/// Encodes an `ftrace/kernel_stack` event holding `frames` into `out`, with
/// the common header (flags, preempt count, pid) of the event that fired
/// the trigger; returns the encoded bytes, or `None` if `trigger` has no
/// common header or `out` is too small.
///
/// `size` counts the frames, and `ULONG_MAX` (ftrace's end marker) follows
/// the last one: trace-cmd reads addresses up to the marker or the end of
/// the record as it sees it, which is rounded up. A short stack still fills
/// the `caller[8]` the format declares, so that readers going by the
/// format (trace-cmd without plugins) stay inside the event.
fn kernel_stack_payload<'o>(trigger: &[u8], frames: &[u64], out: &'o mut [u8]) -> Option<&'o [u8]> {
    let header = trigger.get(..format::COMMON_HEADER_SIZE)?;
    let slots = (frames.len() + 1).max(format::KERNEL_STACK_ENTRIES);
    let len = format::KERNEL_STACK_CALLER_OFFSET + 8 * slots;
    let out = out.get_mut(..len)?;
    out[..format::COMMON_HEADER_SIZE].copy_from_slice(header);
    out[..2].copy_from_slice(&format::KERNEL_STACK_ID.to_ne_bytes());
    out[8..12].copy_from_slice(&(frames.len() as i32).to_ne_bytes());
    out[12..16].fill(0);
    let callers = frames.iter().copied().chain(core::iter::repeat(u64::MAX));
    for (slot, frame) in out[16..].chunks_exact_mut(8).zip(callers) {
        slot.copy_from_slice(&frame.to_ne_bytes());
    }
    Some(out)
}

/// An address inside the tracer's own stack frames, for
/// [`CpuContext::stack_trace`](crate::platform::CpuContext::stack_trace).
///
/// The tracer builds a hooked event's payload in the frame of its dispatch
/// function, which called this hook: when the payload lies on the stack
/// just above this frame, that frame and everything inward of it is the
/// tracer's. Otherwise (a payload on the heap) only the frames from here
/// inward are known to be.
#[inline(never)]
fn tracer_frame(payload: &[u8]) -> usize {
    let marker = 0u8;
    let here = core::hint::black_box(core::ptr::addr_of!(marker)) as usize;
    let at = payload.as_ptr() as usize;
    if at > here && at - here < 64 * 1024 {
        at
    } else {
        here
    }
}

impl ControlHook {
    fn fire(&self, tracer: &Tracer, cpu: usize, payload: &[u8], phase: FirePhase) {
        // A writer nested on this CPU (an interrupt, a signal handler) may
        // hit the event while the set is held: it skips the triggers rather
        // than deadlock.
        if let Some(mut triggers) = self.triggers.try_lock() {
            if triggers.has_phase(phase) {
                let mut actions = TracerActions { tracer, payload };
                triggers.fire_phase(payload, cpu as u32, &mut actions, phase);
            }
        }
    }
}

impl EventHook for ControlHook {
    fn before(&self, tracer: &Tracer, cpu: usize, payload: &[u8], _enabled: bool) -> bool {
        self.fire(tracer, cpu, payload, FirePhase::BeforeRecord);
        self.filter.as_ref().is_none_or(|filter| {
            filter.matches_looking_up(payload, cpu as u32, || tracer.context().current_comm())
        })
    }

    fn after(&self, tracer: &Tracer, cpu: usize, payload: &[u8], _recorded: bool) {
        self.fire(tracer, cpu, payload, FirePhase::AfterRecord);
    }
}
