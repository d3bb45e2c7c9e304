//! Stop-machine: every online vCPU leaves what it was doing and meets the
//! others; once all have arrived each runs the given function (the dying or
//! starting work of the CPUs being reconfigured), and none leaves before all
//! have finished, so no task runs anywhere while the CPU masks change.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::cpumask::CpuMask;

/// The work of one stop-machine, borrowed for the duration of [`StopMachine::run`].
#[derive(Clone, Copy)]
struct Work(*const (dyn Fn(usize) + Sync));

// SAFETY: the pointee is `Sync`, and `run` does not return (so the borrow it
// was made from stays alive) until every vCPU that could call it has left.
unsafe impl Send for Work {}

#[derive(Default)]
struct State {
    generation: u64,
    participants: CpuMask,
    arrived: CpuMask,
    finished: CpuMask,
    work: Option<Work>,
}

/// The rendezvous; one stop-machine at a time.
#[derive(Default)]
pub(crate) struct StopMachine {
    serial: Mutex<()>,
    state: Mutex<State>,
    changed: Condvar,
    /// The generation vCPUs should join; read without the lock by their loops.
    requested: AtomicU64,
    /// Stop-machines completed.
    pub(crate) completed: AtomicU64,
}

impl StopMachine {
    /// Runs `work(cpu)` on every vCPU of `participants` while all of them
    /// wait in the rendezvous. `kick` wakes a vCPU so it notices the request.
    pub(crate) fn run(
        &self,
        participants: CpuMask,
        work: &(dyn Fn(usize) + Sync),
        kick: impl Fn(usize),
    ) {
        let _one_at_a_time = self.serial.lock();
        if participants.is_empty() {
            return;
        }
        // SAFETY: only the lifetime is erased; see `Work`.
        let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
            core::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), _>(
                work as *const (dyn Fn(usize) + Sync),
            )
        };
        let generation = {
            let mut state = self.state.lock();
            state.generation += 1;
            state.participants = participants;
            state.arrived = CpuMask::EMPTY;
            state.finished = CpuMask::EMPTY;
            state.work = Some(Work(erased));
            state.generation
        };
        self.requested.store(generation, Ordering::SeqCst);
        for cpu in participants.iter() {
            kick(cpu);
        }
        // Done once every participant has run the work: none touches it
        // again, and each leaves when it sees all finished or a newer
        // generation, so there is no separate round to wait for leavers.
        let mut state = self.state.lock();
        while state.finished != participants {
            self.changed.wait(&mut state);
        }
        state.work = None;
        drop(state);
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Called by vCPU `cpu` from its scheduler loop: joins a pending
    /// stop-machine it belongs to. `seen` is the last generation it joined.
    /// Returns whether it took part.
    pub(crate) fn poll(&self, cpu: usize, seen: &AtomicU64) -> bool {
        let requested = self.requested.load(Ordering::SeqCst);
        if requested == seen.load(Ordering::Relaxed) {
            return false;
        }
        seen.store(requested, Ordering::Relaxed);
        let mut state = self.state.lock();
        if state.generation != requested || !state.participants.contains(cpu) {
            return false;
        }
        let participants = state.participants;
        state.arrived = state.arrived.with(cpu);
        self.changed.notify_all();
        while state.arrived != participants {
            self.changed.wait(&mut state);
        }
        let work = state.work;
        drop(state);
        if let Some(Work(work)) = work {
            // SAFETY: `run` keeps the borrow alive until we leave below.
            unsafe { (*work)(cpu) };
        }
        let mut state = self.state.lock();
        state.finished = state.finished.with(cpu);
        self.changed.notify_all();
        // Nobody leaves while another still runs its part (the masks may be
        // half changed until then).
        while state.generation == requested && state.finished != participants {
            self.changed.wait(&mut state);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn every_participant_runs_the_work_while_all_are_stopped() {
        let stop = Arc::new(StopMachine::default());
        let quit = Arc::new(AtomicBool::new(false));
        let inside = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for cpu in 0..4 {
            let (stop, quit) = (Arc::clone(&stop), Arc::clone(&quit));
            threads.push(std::thread::spawn(move || {
                let seen = AtomicU64::new(0);
                let mut joined = 0;
                while !quit.load(Ordering::SeqCst) {
                    if stop.poll(cpu, &seen) {
                        joined += 1;
                    }
                    std::thread::yield_now();
                }
                joined
            }));
        }
        let ran = Mutex::new(Vec::new());
        for _ in 0..5 {
            stop.run(
                CpuMask::from_bits(0b1011),
                &|cpu| {
                    inside.fetch_add(1, Ordering::SeqCst);
                    ran.lock().push(cpu);
                },
                |_| {},
            );
        }
        quit.store(true, Ordering::SeqCst);
        let joined: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(joined, [5, 5, 0, 5]);
        assert_eq!(inside.load(Ordering::SeqCst), 15);
        let mut ran = ran.into_inner();
        ran.sort_unstable();
        assert_eq!(ran, [[0; 5], [1; 5], [3; 5]].concat());
        assert_eq!(stop.completed.load(Ordering::SeqCst), 5);
    }
}
