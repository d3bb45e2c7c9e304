//! The user-mode platform's half of a kernel thread ([`Thread`]): a real
//! OS thread. The per-CPU slots, and which thread runs when, are the
//! shared kernel's ([`hotkern_kernel::kthread::Kthreads`]).
//!
//! A kernel thread bound to a vCPU only runs when that vCPU's scheduler hands
//! it the CPU: the vCPU thread wakes it and waits until it yields, as a
//! context switch on one CPU would. So a thread of an offline vCPU cannot run,
//! whatever state it is in, and parking is a flag the scheduler honours,
//! checked under the same lock as the hand-over: a park from a thread that
//! is no vCPU (the engine's) returns only once the thread is off its vCPU.

use std::sync::Arc;
use std::thread::JoinHandle;

use hotkern_kernel::kthread::{Role, Thread};
use parking_lot::{Condvar, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Waiting for its vCPU to run it.
    Sleeping,
    /// Holding its vCPU.
    Running,
}

struct State {
    turn: Turn,
    parked: bool,
    stop: bool,
    /// The thread has started and waits for its first turn.
    ready: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// One kernel thread bound to one vCPU.
pub(crate) struct Kthread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Kthread {
    /// Spawns the OS thread; it starts parked and waits for its first turn.
    pub(crate) fn spawn(
        cpu: usize,
        role: Role,
        mut work: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Kthread> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                turn: Turn::Sleeping,
                parked: true,
                stop: false,
                ready: false,
            }),
            wake: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(format!("{}/{cpu}", role.name()))
            .spawn(move || loop {
                {
                    let mut state = theirs.state.lock();
                    if !state.ready {
                        state.ready = true;
                        theirs.wake.notify_all();
                    }
                    while state.turn != Turn::Running && !state.stop {
                        theirs.wake.wait(&mut state);
                    }
                    if state.stop {
                        return;
                    }
                }
                work();
                let mut state = theirs.state.lock();
                state.turn = Turn::Sleeping;
                theirs.wake.notify_all();
            })?;
        // As Linux's kthread_create: return once the thread runs and waits,
        // so its start-up is part of creating it, not left to run later.
        {
            let mut state = shared.state.lock();
            while !state.ready {
                shared.wake.wait(&mut state);
            }
        }
        Ok(Kthread {
            shared,
            handle: Some(handle),
        })
    }
}

impl Thread for Kthread {
    /// Gives the thread its vCPU until it yields; false if it is parked.
    /// Called only by the thread's own vCPU.
    fn run(&self) -> bool {
        let mut state = self.shared.state.lock();
        if state.parked || state.stop {
            return false;
        }
        state.turn = Turn::Running;
        self.shared.wake.notify_all();
        while state.turn == Turn::Running {
            self.shared.wake.wait(&mut state);
        }
        true
    }

    /// Parks the thread: once this returns it is not running and will not
    /// run until unparked.
    fn park(&self) {
        let mut state = self.shared.state.lock();
        state.parked = true;
        while state.turn == Turn::Running {
            self.shared.wake.wait(&mut state);
        }
    }

    /// Lets the vCPU run the thread again.
    fn unpark(&self) {
        self.shared.state.lock().parked = false;
    }

    /// Whether the thread is parked.
    fn is_parked(&self) -> bool {
        self.shared.state.lock().parked
    }

    /// Tells the thread to exit without waiting; dropping it then only
    /// joins. Lets a caller stopping many threads wait for all exits at once.
    fn request_stop(&self) {
        let mut state = self.shared.state.lock();
        state.stop = true;
        state.parked = true;
        self.shared.wake.notify_all();
    }
}

impl Kthread {
    fn stop_and_join(&mut self) {
        self.request_stop();
        if let Some(handle) = self.handle.take() {
            // The thread body cannot panic except inside `work`, whose panic
            // has already been reported on stderr by the runtime.
            let _ = handle.join();
        }
    }
}

impl Drop for Kthread {
    fn drop(&mut self) {
        // Never leak an OS thread, even on an error path.
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn runs_only_when_dispatched_and_unparked() {
        let runs = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&runs);
        let thread = Kthread::spawn(0, Role::Worker, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        assert!(!thread.run(), "a new thread starts parked");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        thread.unpark();
        assert!(thread.run());
        assert!(thread.run());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        thread.park();
        assert!(thread.is_parked());
        assert!(!thread.run());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        drop(thread);
    }
}
