//! Per-CPU kernel threads (Linux's smpboot threads: `ksoftirqd/N`,
//! `kworker/N`, `rcuc/N`): which exist, which are parked, and which the
//! CPU's loop switches to, written once. What a thread *is* stays the
//! platform's, behind [`Thread`]: an OS thread handed the vCPU in the
//! user-mode machine, a stack and a register switch on bare metal.
//!
//! Who writes what: a slot of [`Kthreads`] is filled and emptied under its
//! lock by the hotplug steps (`threads:create`), and read under it by the
//! owner CPU's loop, which clones the thread's handle and lets the lock go
//! before switching to it. So no lock is held across a switch (a
//! stop-machine's dying steps may interrupt a running thread on bare
//! metal), and a thread taken out of its slot while a caller still holds
//! its handle lives until that caller is done. A slot is emptied only
//! while its CPU is offline, when its loop runs no thread.
//!
//! ```
//! use hotkern_kernel::kthread::{Kthreads, Role, Thread};
//! use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
//!
//! /// A thread that counts its turns.
//! #[derive(Default)]
//! struct Counter {
//!     parked: AtomicBool,
//!     turns: AtomicU32,
//! }
//!
//! impl Thread for Counter {
//!     fn run(&self) -> bool {
//!         let runs = !self.parked.load(Ordering::Acquire);
//!         if runs {
//!             self.turns.fetch_add(1, Ordering::Relaxed);
//!         }
//!         runs
//!     }
//!     fn park(&self) { self.parked.store(true, Ordering::Release) }
//!     fn unpark(&self) { self.parked.store(false, Ordering::Release) }
//!     fn is_parked(&self) -> bool { self.parked.load(Ordering::Acquire) }
//! }
//!
//! let threads: Kthreads<Counter> = Kthreads::new(2);
//! assert!(threads.install(1, Role::Worker, Counter::default()));
//! assert!(!threads.run_ready(1, |_| true), "it starts parked");
//! threads.unpark(1, Role::Worker);
//! // Only the roles with work run, and only unparked threads.
//! assert!(!threads.run_ready(1, |role| role == Role::Softirq));
//! assert!(threads.run_ready(1, |role| role == Role::Worker));
//! threads.park(1, Role::Worker);
//! assert!(!threads.run_ready(1, |_| true));
//! let worker = threads.get(1, Role::Worker).unwrap();
//! assert_eq!(worker.turns.load(Ordering::Relaxed), 1);
//! assert!(threads.remove(1, Role::Worker));
//! assert!(!threads.exists(1, Role::Worker));
//! ```

use alloc::boxed::Box;
use alloc::sync::Arc;

use crate::sync::Mutex;

/// What a per-CPU kernel thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `ksoftirqd/N`: runs the CPU's expired timers.
    Softirq,
    /// `kworker/N`: runs the CPU's workqueue items.
    Worker,
    /// `rcuc/N`: invokes the CPU's RCU callbacks whose grace period ended.
    RcuCallbacks,
}

impl Role {
    /// Every role; each online CPU has one thread of each.
    pub const ALL: [Role; 3] = [Role::Softirq, Role::Worker, Role::RcuCallbacks];

    /// The thread's name without the CPU number.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Softirq => "ksoftirqd",
            Role::Worker => "kworker",
            Role::RcuCallbacks => "rcuc",
        }
    }

    /// The role's place in [`Role::ALL`], for per-role slots.
    pub const fn index(self) -> usize {
        match self {
            Role::Softirq => 0,
            Role::Worker => 1,
            Role::RcuCallbacks => 2,
        }
    }
}

/// The platform's half of one kernel thread: how its CPU is handed to it,
/// and how it is held back.
pub trait Thread: Send + Sync {
    /// Switches the calling CPU to the thread for one bounded piece of its
    /// work and returns when the thread switches back; returns false,
    /// without switching, if the thread is parked. Called only by the
    /// thread's own CPU, from its loop.
    fn run(&self) -> bool;

    /// Parks the thread (Linux's `kthread_park`): once this returns, the
    /// thread is not running and [`Thread::run`] does not switch to it
    /// until [`Thread::unpark`]. A new thread starts parked.
    fn park(&self);

    /// Lets the thread's CPU switch to it again.
    fn unpark(&self);

    /// Whether the thread is parked.
    fn is_parked(&self) -> bool;

    /// Tells the thread to exit without waiting for it, so that several
    /// exit at once; the exit completes when the thread is dropped. The
    /// default does nothing, for a thread that is only a stack: an
    /// offline CPU's threads are suspended at a switch and never resume.
    fn request_stop(&self) {}
}

/// One kernel thread per CPU: a slot per CPU, each empty or holding a
/// thread (Linux's per-CPU `task_struct *` of an smpboot thread).
pub struct PerCpuThread<T>(Box<[Mutex<Option<Arc<T>>>]>);

impl<T: Thread> PerCpuThread<T> {
    /// Empty slots for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Self {
        PerCpuThread((0..cpus).map(|_| Mutex::new(None)).collect())
    }

    /// `cpu`'s thread, if it has one. The handle keeps the thread alive
    /// even if it is removed meanwhile.
    pub fn get(&self, cpu: usize) -> Option<Arc<T>> {
        self.0.get(cpu)?.lock().clone()
    }

    /// Whether `cpu` has a thread, without taking a handle to it (the
    /// CPU loop asks at every idle entry).
    pub fn exists(&self, cpu: usize) -> bool {
        self.0.get(cpu).is_some_and(|slot| slot.lock().is_some())
    }

    /// Gives `cpu` the thread `thread`, parked; false (and `thread` is
    /// dropped) if it has one or there is no such CPU.
    pub fn install(&self, cpu: usize, thread: T) -> bool {
        let Some(slot) = self.0.get(cpu) else {
            return false;
        };
        thread.park();
        let mut slot = slot.lock();
        if slot.is_some() {
            drop(slot);
            drop(thread);
            return false;
        }
        *slot = Some(Arc::new(thread));
        true
    }

    /// Takes `cpu`'s thread out and drops it (waiting for it to exit, once
    /// the last handle to it is gone); false if it had none. Only while
    /// `cpu` is offline.
    pub fn remove(&self, cpu: usize) -> bool {
        // Taken out under the lock, dropped after it is released: dropping
        // may wait for the thread to exit.
        let thread = self.0.get(cpu).and_then(|slot| slot.lock().take());
        thread.is_some()
    }
}

/// Each CPU's kernel threads, a [`PerCpuThread`] per [`Role`]: what the
/// `threads:create` and `threads:unpark` hotplug steps make, park and
/// destroy, and what each CPU's loop switches to.
pub struct Kthreads<T>([PerCpuThread<T>; 3]);

impl<T: Thread> Kthreads<T> {
    /// No threads, for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Self {
        Kthreads(core::array::from_fn(|_| PerCpuThread::new(cpus)))
    }

    /// The threads playing `role`.
    pub fn role(&self, role: Role) -> &PerCpuThread<T> {
        &self.0[role.index()]
    }

    /// `cpu`'s thread `role`, if it exists.
    pub fn get(&self, cpu: usize, role: Role) -> Option<Arc<T>> {
        self.role(role).get(cpu)
    }

    /// Whether `cpu` has its thread `role`.
    pub fn exists(&self, cpu: usize, role: Role) -> bool {
        self.role(role).exists(cpu)
    }

    /// Gives `cpu` its thread `role`, parked; false if it has one.
    pub fn install(&self, cpu: usize, role: Role, thread: T) -> bool {
        self.role(role).install(cpu, thread)
    }

    /// Parks `cpu`'s thread `role`, if it exists.
    pub fn park(&self, cpu: usize, role: Role) {
        if let Some(thread) = self.get(cpu, role) {
            thread.park();
        }
    }

    /// Unparks `cpu`'s thread `role`, if it exists.
    pub fn unpark(&self, cpu: usize, role: Role) {
        if let Some(thread) = self.get(cpu, role) {
            thread.unpark();
        }
    }

    /// Tells `cpu`'s thread `role` to exit without waiting; false if it
    /// does not exist.
    pub fn request_stop(&self, cpu: usize, role: Role) -> bool {
        self.get(cpu, role)
            .map(|thread| thread.request_stop())
            .is_some()
    }

    /// Destroys `cpu`'s thread `role`; false if it does not exist. Only
    /// while `cpu` is offline.
    pub fn remove(&self, cpu: usize, role: Role) -> bool {
        self.role(role).remove(cpu)
    }

    /// Switches, in [`Role::ALL`] order, to each of `cpu`'s unparked
    /// threads whose role `has_work` names, for one piece of work each;
    /// returns whether any ran. Which roles have work is decided for all
    /// before any runs, as one look at the CPU (a thread's work may give
    /// another role work, which waits for the next turn). Called by `cpu`
    /// itself, from its loop.
    pub fn run_ready(&self, cpu: usize, has_work: impl Fn(Role) -> bool) -> bool {
        let wanted = Role::ALL.map(&has_work);
        let mut ran = false;
        for (role, wanted) in Role::ALL.into_iter().zip(wanted) {
            if wanted {
                if let Some(thread) = self.get(cpu, role) {
                    ran |= thread.run();
                }
            }
        }
        ran
    }
}

#[cfg(test)]
pub(crate) mod tests;
