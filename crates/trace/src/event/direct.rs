//! Who an event site calls: its one consumer directly, or the list.
//!
//! Linux's tracepoints call their probe through a static call when a
//! tracepoint has exactly one probe, and through the probe array
//! (`__DO_TRACE` walking `tp->funcs`) when it has several
//! (kernel/tracepoint.c, `tracepoint_update_call`, since 5.10). An event
//! here has a consumer per installed tracer that wants it, and a tracer
//! has two kinds: the recording (`enable`) and the hook (a filter or
//! triggers, `set_event_hook`). The choice, made under one lock whenever
//! any of them changes, is the event's direct word (`Event`'s second
//! word, a tracer's address with the handler in its low bits, as
//! `function::dispatch` tags it):
//!
//! ```text
//!  consumers                                   direct word           emit
//!  none                                        null                  not reached: the site is a NOP
//!  one tracer, enabled, no hook                tracer + Record       write the event, no state test
//!  one tracer, hooked, not enabled (triggers)  tracer + Hook         run the hook, no state test
//!  two tracers, or enabled and hooked          null                  walk the mask, test each state
//! ```
//!
//! A caller may read the word just before it changes and call the old
//! choice once, as a caller that read the enable state a moment earlier
//! always could. What must hold, and `tests/direct_events.rs` checks
//! under contention: whoever disables a consumer has re-decided the word
//! before the call returns, so a call that starts after that (that
//! happens after it, in the memory model's sense) never reaches the
//! consumer; and a switch between direct and list neither loses a record
//! nor writes one twice.

use core::ptr;
use core::sync::atomic::Ordering;

use super::{Event, UNREGISTERED};
use crate::function::dispatch::{list_only, tag, untag};
use crate::tracer::Tracer;

/// Serialises deciding events' direct words, so the last decision of an
/// event saw its latest mask and states.
static DECIDING: spin::Mutex<()> = spin::Mutex::new(());

/// What an event's only consumer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventHandler {
    /// The tracer records the event (enabled, no filter or trigger).
    Record = 1,
    /// The tracer runs the event's hook only (triggers on an event that is
    /// not enabled: ftrace's soft-disabled event).
    Hook = 2,
}

impl EventHandler {
    /// The handler for a tracer whose state of the event is `state`
    /// (`ENABLED` | `HOOKED` bits), or `None` when it has two consumers or
    /// none.
    fn for_state(state: u8) -> Option<EventHandler> {
        use crate::tracer::{ENABLED, HOOKED};
        match state {
            ENABLED => Some(EventHandler::Record),
            HOOKED => Some(EventHandler::Hook),
            _ => None,
        }
    }

    /// The name tests see (`event_handler`).
    #[cfg(feature = "internals")]
    fn name(self) -> &'static str {
        match self {
            EventHandler::Record => "record",
            EventHandler::Hook => "hook",
        }
    }
}

/// The tracer and handler an event's direct word names, if it names one.
#[inline(always)]
pub(crate) fn decode(word: *mut Tracer) -> Option<(&'static Tracer, EventHandler)> {
    untag(word).map(|(tracer, bits)| {
        let handler = if bits == EventHandler::Hook as usize {
            EventHandler::Hook
        } else {
            EventHandler::Record
        };
        (tracer, handler)
    })
}

/// Sets an event's direct word (caller holds `DECIDING`).
fn decide_locked(event: &'static Event) {
    let mask = event.enable_word().load(Ordering::Acquire) & !UNREGISTERED;
    let direct = if mask.count_ones() == 1 && !list_only() {
        crate::tracer::instance(mask.trailing_zeros() as usize)
            .and_then(|tracer| {
                let handler = EventHandler::for_state(tracer.event_state_of(event))?;
                Some(tag(tracer, handler as usize))
            })
            .unwrap_or(ptr::null_mut())
    } else {
        ptr::null_mut()
    };
    event.direct_word().store(direct, Ordering::Release);
}

/// Re-decides one event: call after changing its mask or a tracer's
/// state of it.
pub(crate) fn decide(event: &'static Event) {
    let _deciding = DECIDING.lock();
    decide_locked(event);
}

/// Re-decides every registered event (install, uninstall, the list-only
/// switch).
pub(crate) fn decide_all() {
    // Listed before the lock: listing may register events.
    let events = super::registered();
    let _deciding = DECIDING.lock();
    for event in events {
        decide_locked(event);
    }
}

/// The handler event `system:name` calls directly now (`"record"` or
/// `"hook"`), or `None` if it goes through the list or nobody wants it
/// (tests).
///
/// ```
/// assert_eq!(hotkern_trace::internals::dispatch::event_handler("no", "such_event"), None);
/// ```
#[cfg(feature = "internals")]
pub fn event_handler(system: &str, name: &str) -> Option<&'static str> {
    super::registered()
        .into_iter()
        .filter(|event| event.system() == system && event.name() == name)
        .find_map(|event| decode(event.direct_word().load(Ordering::Acquire)))
        .map(|(_, handler)| handler.name())
}
