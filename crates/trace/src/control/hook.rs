//! The hook a control interface installs on an event with a filter or
//! triggers: the filter decides whether the event is recorded, the
//! triggers act on the tracer.

use alloc::sync::Arc;

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

/// What triggers may do, on a real tracer.
pub(crate) struct TracerActions<'t> {
    pub(crate) tracer: &'t Tracer,
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
        let _ = self.tracer.write_marker(&stack_text());
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
        platform_comm()
    }
}

/// The current task's name, from the platform.
///
/// The tracer does not hand its [`CpuContext`](crate::platform::CpuContext)
/// to hooks, so this asks the user-space platform directly: its task names
/// are per thread, whichever `ThreadCpus` model the thread is bound in.
/// Without `std` no name is known.
fn platform_comm() -> Option<[u8; TASK_COMM_LEN]> {
    #[cfg(feature = "std")]
    return crate::platform::thread_comm();
    #[cfg(not(feature = "std"))]
    None
}

impl ControlHook {
    fn fire(&self, tracer: &Tracer, cpu: usize, payload: &[u8], phase: FirePhase) {
        // A writer nested on this CPU (an interrupt, a signal handler) may
        // hit the event while the set is held: it skips the triggers rather
        // than deadlock.
        if let Some(mut triggers) = self.triggers.try_lock() {
            if triggers.has_phase(phase) {
                let mut actions = TracerActions { tracer };
                triggers.fire_phase(payload, cpu as u32, &mut actions, phase);
            }
        }
    }
}

impl EventHook for ControlHook {
    fn before(&self, tracer: &Tracer, cpu: usize, payload: &[u8], _enabled: bool) -> bool {
        self.fire(tracer, cpu, payload, FirePhase::BeforeRecord);
        self.filter.as_ref().is_none_or(|filter| {
            let comm = if filter.uses_comm() {
                platform_comm()
            } else {
                None
            };
            filter.matches_task(payload, cpu as u32, comm.as_ref().map(|c| &c[..]))
        })
    }

    fn after(&self, tracer: &Tracer, cpu: usize, payload: &[u8], _recorded: bool) {
        self.fire(tracer, cpu, payload, FirePhase::AfterRecord);
    }
}

/// The caller's stack in ftrace's `<stack trace>` / ` => function` form,
/// innermost first, without the tracer's own frames. Without `std` there is
/// no unwinder, and only the heading is written.
#[cfg_attr(not(feature = "std"), allow(unused_mut))]
fn stack_text() -> alloc::string::String {
    let mut text = alloc::string::String::from("<stack trace>\n");
    #[cfg(feature = "std")]
    {
        let trace = alloc::format!("{}", std::backtrace::Backtrace::force_capture());
        let mut frames = 0;
        for line in trace.lines() {
            // Frames print as "  12: path::to::function"; the "at file:line"
            // lines that follow are skipped.
            let Some((number, name)) = line.trim_start().split_once(": ") else {
                continue;
            };
            if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let internal = [
                "std::",
                "core::",
                "alloc::",
                "hotkern_trace::",
                "<alloc::",
                "__rust",
            ]
            .iter()
            .any(|prefix| name.starts_with(prefix));
            if internal || name.starts_with('<') && name.contains("hotkern_trace") {
                continue;
            }
            text.push_str(" => ");
            text.push_str(name);
            text.push('\n');
            frames += 1;
            if frames == 16 {
                break;
            }
        }
    }
    text
}
