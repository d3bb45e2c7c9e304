//! The kernel's tracepoints, defined where their mechanisms are shared:
//! every platform fires them, and [`Tracing::start`](super::Tracing::start)
//! turns them all on.
//!
//! ```
//! use hotkern_kernel::kernel_trace::events::cpuhp_callback;
//! // Costs a NOP (or one load) until a tracer enables the event.
//! cpuhp_callback::trace(1, 42, 1);
//! ```

use hotkern_trace::event::Event;

hotkern_trace::define_event! {
    /// An application processor ran a cross-CPU call (on its own ring).
    pub cpu_call in hotkern {
        cpu: u32,
        apic_id: u32,
    }
    print "cpu=%u apic_id=%u", cpu, apic_id
}

hotkern_trace::define_event! {
    /// A hotplug step's callback ran (Linux's `cpuhp_enter` shows the same).
    pub cpuhp_callback in hotkern {
        cpu: u32,
        step: u32,
        up: u32,
    }
    print "cpu=%u step=%u up=%u", cpu, step, up
}

hotkern_trace::define_event! {
    /// A task moved off a dying CPU (Linux's `sched_migrate_task`).
    pub sched_migrate_task in hotkern {
        task: u64,
        from: u32,
    }
    print "task=%llu from=%u", task, from
}

/// Every tracepoint above, by name, as the run trace enables them.
pub static ALL: [(&str, &Event); 3] = [
    ("cpu_call", &cpu_call::EVENT),
    ("cpuhp_callback", &cpuhp_callback::EVENT),
    ("sched_migrate_task", &sched_migrate_task::EVENT),
];
