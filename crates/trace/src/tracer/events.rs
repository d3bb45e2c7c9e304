//! Event switches (`events/<sys>/<event>/enable`, `set_event`), hooks for
//! filters and triggers, `set_event_pid`, and the recording path of events
//! defined with `define_event!`.

use alloc::boxed::Box;
use core::sync::atomic::Ordering;

use super::{TraceError, Tracer};
use crate::event::{self, EventFormat};

/// The event is recorded.
pub(crate) const ENABLED: u8 = 1;
/// The event has a hook (filter / triggers) that runs when it is hit.
pub(crate) const HOOKED: u8 = 2;

/// Biggest payload built on the stack for a hooked event; larger ones are
/// built on the heap.
const STACK_PAYLOAD: usize = 512;

/// Runs when a hooked event is hit: a filter, triggers, a histogram.
///
/// The payload is the event exactly as it would be recorded (common header
/// included), built before anything is written, so a filter costs no
/// buffer space when it rejects.
pub trait EventHook: Send + Sync {
    /// Decides whether the (enabled) event is recorded. Called even when
    /// the event is not enabled (`enabled == false`, ftrace's soft-disabled
    /// event with triggers) or tracing is off; its answer is then ignored.
    fn before(&self, tracer: &Tracer, cpu: usize, payload: &[u8], enabled: bool) -> bool;

    /// Called after the decision, with whether the event was recorded.
    fn after(&self, _tracer: &Tracer, _cpu: usize, _payload: &[u8], _recorded: bool) {}
}

pub(crate) struct HookBox(pub(crate) Box<dyn EventHook>);

impl Tracer {
    /// Every event a user can switch (registered `define_event!` events),
    /// plus the built-in `ftrace/*` formats, for `available_events` and the
    /// `format` files.
    pub(crate) fn event_formats(&self) -> alloc::vec::Vec<EventFormat> {
        event::all_formats()
    }

    /// The id of `system:name`.
    pub fn event_id(&self, system: &str, name: &str) -> Option<u16> {
        event::all_formats()
            .into_iter()
            .find(|f| f.system == system && f.name == name)
            .map(|f| f.id)
    }

    fn switchable(&self, id: u16) -> Result<&'static event::Event, TraceError> {
        event::by_id(id).ok_or(TraceError::NoSuchEvent(id))
    }

    /// Whether event `id` is enabled (`enable` file).
    pub fn event_enabled(&self, id: u16) -> bool {
        self.event_state
            .get(usize::from(id))
            .is_some_and(|s| s.load(Ordering::Relaxed) & ENABLED != 0)
    }

    /// Enables or disables event `id`.
    pub fn set_event_enabled(&self, id: u16, on: bool) -> Result<(), TraceError> {
        let event = self.switchable(id)?;
        let state = &self.event_state[usize::from(id)];
        if on {
            state.fetch_or(ENABLED, Ordering::AcqRel);
        } else {
            state.fetch_and(!ENABLED, Ordering::AcqRel);
        }
        self.refresh_event_mask(event)
    }

    /// Installs (or with `None` removes) the hook of event `id`. A replaced
    /// hook is kept until the tracer is dropped: a writer may be running it.
    pub(crate) fn set_event_hook(
        &self,
        id: u16,
        hook: Option<Box<dyn EventHook>>,
    ) -> Result<(), TraceError> {
        let event = self.switchable(id)?;
        let index = usize::from(id);
        let state = &self.event_state[index];
        match hook {
            Some(hook) => {
                let boxed = Box::new(HookBox(hook));
                let pointer = &*boxed as *const HookBox as *mut HookBox;
                self.hook_store.lock().push(boxed);
                self.hooks[index].store(pointer, Ordering::Release);
                state.fetch_or(HOOKED, Ordering::AcqRel);
            }
            None => {
                state.fetch_and(!HOOKED, Ordering::AcqRel);
                self.hooks[index].store(core::ptr::null_mut(), Ordering::Release);
            }
        }
        self.refresh_event_mask(event)
    }

    /// `set_event_pid`: when not empty, only these tasks' events are recorded.
    pub(crate) fn event_pids(&self) -> &crate::function::PidList {
        &self.event_pids
    }

    /// Sets this tracer's bit in the event's enable word, then patches
    /// the call sites to match.
    fn refresh_event_mask(&self, event: &'static event::Event) -> Result<(), TraceError> {
        self.set_event_bit(event);
        crate::site::apply().map_err(TraceError::Text)
    }

    fn set_event_bit(&self, event: &'static event::Event) {
        if let Some(slot) = self.slot() {
            event.set_instance(slot, self.event_state_of(event) != 0);
        }
        event::direct::decide(event);
    }

    /// This tracer's [`ENABLED`] | [`HOOKED`] bits for `event`.
    pub(crate) fn event_state_of(&self, event: &'static event::Event) -> u8 {
        self.event_state[usize::from(event.id())].load(Ordering::Acquire)
    }

    /// [`Tracer::refresh_event_mask`] for every event, one patch batch.
    pub(crate) fn refresh_event_masks(&self) -> Result<(), TraceError> {
        for event in event::registered() {
            self.set_event_bit(event);
        }
        crate::site::apply().map_err(TraceError::Text)
    }

    /// The direct handler of an event this tracer only records (enabled,
    /// no hook, no other tracer): what [`Tracer::record_event`] does once
    /// it found that state, without looking it up.
    #[inline(always)]
    pub(crate) fn record_event_direct(&self, id: u16, size: usize, fill: impl Fn(&mut [u8])) {
        // The clock first, as in `record_event`.
        let now = self.clock_now();
        let Some(current) = self.current() else {
            return;
        };
        if self.event_pids.is_active() && !self.event_pids.contains(current.1) {
            return;
        }
        if self.tracing_on() {
            self.write_at(current, now, id, size, fill);
        }
    }

    /// The direct handler of an event whose only consumer is this
    /// tracer's hook (triggers on an event that is not enabled). Inlined,
    /// so the hook runs one frame below the event's `emit`, as it does
    /// through [`Tracer::record_event`] (what a `stacktrace` trigger
    /// relies on to leave the tracer's frames out).
    #[inline(always)]
    pub(crate) fn hook_event_direct(&self, id: u16, size: usize, fill: &dyn Fn(&mut [u8])) {
        let Some(current) = self.current() else {
            return;
        };
        if self.event_pids.is_active() && !self.event_pids.contains(current.1) {
            return;
        }
        self.record_hooked(id, size, current, HOOKED, fill);
    }

    /// Records event `id` (called by `Event::emit` for installed tracers).
    #[inline(always)]
    pub(crate) fn record_event(&self, id: u16, size: usize, fill: impl Fn(&mut [u8])) {
        // The clock first: on x86 `rdtsc` is a long microcoded instruction,
        // and started before the checks below it overlaps them instead of
        // stalling the reservation that depends on it (~3 ns per event).
        // The event's mask said this tracer wants it, so it is rarely wasted.
        let now = self.clock_now();
        let Some(state) = self.event_state.get(usize::from(id)) else {
            return;
        };
        let state = state.load(Ordering::Relaxed);
        if state == 0 {
            return;
        }
        let Some(current) = self.current() else {
            return;
        };
        if self.event_pids.is_active() && !self.event_pids.contains(current.1) {
            return;
        }
        if state & HOOKED == 0 {
            if self.tracing_on() {
                self.write_at(current, now, id, size, fill);
            }
            return;
        }
        self.record_hooked(id, size, current, state, &fill);
    }

    #[cold]
    fn record_hooked(
        &self,
        id: u16,
        size: usize,
        (cpu, pid): (usize, i32),
        state: u8,
        fill: &dyn Fn(&mut [u8]),
    ) {
        let hook = self.hooks[usize::from(id)].load(Ordering::Acquire);
        // SAFETY: hooks are kept alive in `hook_store` for the tracer's life.
        // Null when the hook was removed since `state` was read: the event
        // is then recorded as one without a hook, not dropped.
        let hook = (!hook.is_null()).then(|| unsafe { &(*hook).0 });
        let mut stack = [0u8; STACK_PAYLOAD];
        let mut heap = alloc::vec::Vec::new();
        let payload: &mut [u8] = if size <= STACK_PAYLOAD {
            &mut stack[..size]
        } else {
            heap.resize(size, 0);
            &mut heap[..]
        };
        payload[..2].copy_from_slice(&id.to_ne_bytes());
        payload[4..8].copy_from_slice(&pid.to_ne_bytes());
        fill(payload);
        let enabled = state & ENABLED != 0;
        let accept = hook.is_none_or(|hook| hook.before(self, cpu, payload, enabled));
        let recorded = enabled && accept && self.write_payload(payload);
        if let Some(hook) = hook {
            hook.after(self, cpu, payload, recorded);
        }
    }
}
