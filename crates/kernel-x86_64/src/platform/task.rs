//! What a run queue holds on this kernel: the shared scheduler's task
//! ([`hotkern_kernel::tasks::Task`]) carrying its body, a closure the boot
//! scenario makes (its workload is the scenario's, `runs/`), so that the
//! platform runs slices without knowing what they do. A type of its own,
//! below the scheduler and the shared mechanisms alike: the limbo of
//! [`crate::platform::subsystems`] keeps tasks no CPU could take.

use alloc::boxed::Box;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::tasks::TaskStatus;

/// What a task's slices run: called once per slice on the CPU given, with
/// interrupts off, until it returns [`TaskStatus::Done`].
pub type Body = Box<dyn FnMut(CpuId) -> TaskStatus + Send>;

/// A task: its number in the scheduler's ledger and its body.
pub type Task = hotkern_kernel::tasks::Task<Body>;
