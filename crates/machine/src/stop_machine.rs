//! Stop-machine: every online vCPU leaves what it was doing and joins a
//! rendezvous; once all have arrived the targets (the CPUs being
//! reconfigured) run the given function (their dying or starting steps),
//! and no participant leaves before every target has finished, so no task
//! runs anywhere while the CPU masks change.
//!
//! Only targets wait for everyone to arrive; the others go straight to
//! waiting for the targets to finish. Two condition variables keep each
//! wake-up for the threads that need it.

use std::sync::atomic::{AtomicU64, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::cpu_id;
use parking_lot::{Condvar, Mutex};

/// The work of one stop-machine, borrowed for the duration of [`StopMachine::run`].
#[derive(Clone, Copy)]
struct Work(*const (dyn Fn(CpuId) + Sync));

// SAFETY: the pointee is `Sync`, and `run` does not return (so the borrow it
// was made from stays alive) until every target that could call it is done.
unsafe impl Send for Work {}

#[derive(Default)]
struct State {
    generation: u64,
    participants: CpuSet,
    targets: CpuSet,
    arrived: CpuSet,
    finished: CpuSet,
    work: Option<Work>,
}

/// The rendezvous; one stop-machine at a time.
#[derive(Default)]
pub(crate) struct StopMachine {
    serial: Mutex<()>,
    state: Mutex<State>,
    /// Targets wait here for every participant to arrive.
    all_arrived: Condvar,
    /// Everyone (and the controller) waits here for the targets to finish.
    all_finished: Condvar,
    /// The generation vCPUs should join; read without the lock by their loops.
    requested: AtomicU64,
    /// Stop-machines completed.
    pub(crate) completed: AtomicU64,
}

impl StopMachine {
    /// Stops every vCPU of `participants` and runs `work(cpu)` on each of
    /// `targets` (a subset) while all of them wait in the rendezvous.
    /// `kick` wakes a vCPU so it notices the request.
    pub(crate) fn run(
        &self,
        participants: CpuSet,
        targets: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        kick: impl Fn(CpuId),
    ) {
        let _one_at_a_time = self.serial.lock();
        let targets = targets.intersection(&participants);
        if participants.is_empty() {
            return;
        }
        // SAFETY: only the lifetime is erased; see `Work`.
        let erased: *const (dyn Fn(CpuId) + Sync + 'static) = unsafe {
            core::mem::transmute::<*const (dyn Fn(CpuId) + Sync + '_), _>(
                work as *const (dyn Fn(CpuId) + Sync),
            )
        };
        let generation = {
            let mut state = self.state.lock();
            state.generation += 1;
            state.participants = participants;
            state.targets = targets;
            state.arrived = CpuSet::EMPTY;
            state.finished = CpuSet::EMPTY;
            state.work = Some(Work(erased));
            state.generation
        };
        self.requested.store(generation, Ordering::SeqCst);
        for cpu in participants.iter() {
            kick(cpu);
        }
        // Done once every participant has stopped and every target has run
        // the work: none touches it again, and each participant leaves when
        // it sees the targets finished or a newer generation.
        let mut state = self.state.lock();
        while state.finished != targets || state.arrived != participants {
            self.all_finished.wait(&mut state);
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
        let cpu = cpu_id(cpu);
        let mut state = self.state.lock();
        if state.generation != requested || !state.participants.contains(cpu) {
            return false;
        }
        let (participants, targets) = (state.participants, state.targets);
        state.arrived.insert(cpu);
        if state.arrived == participants {
            self.all_arrived.notify_all();
            if targets.is_empty() {
                self.all_finished.notify_all();
            }
        }
        if targets.contains(cpu) {
            while state.arrived != participants {
                self.all_arrived.wait(&mut state);
            }
            let work = state.work;
            drop(state);
            if let Some(Work(work)) = work {
                // SAFETY: `run` keeps the borrow alive until we finish below.
                unsafe { (*work)(cpu) };
            }
            state = self.state.lock();
            state.finished.insert(cpu);
            if state.finished == targets {
                self.all_finished.notify_all();
            }
        }
        // Nobody leaves while a target still runs its part (the masks may
        // be half changed until then).
        while state.generation == requested && state.finished != targets {
            self.all_finished.wait(&mut state);
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
            let cpus: CpuSet = [0, 1, 3].map(CpuId).into_iter().collect();
            stop.run(
                cpus,
                cpus,
                &|cpu| {
                    inside.fetch_add(1, Ordering::SeqCst);
                    ran.lock().push(cpu.index());
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
    #[test]
    fn nobody_runs_while_a_target_runs_its_part() {
        let stop = Arc::new(StopMachine::default());
        let quit = Arc::new(AtomicBool::new(false));
        let early = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for cpu in 0..4 {
            let (stop, quit, early) = (Arc::clone(&stop), Arc::clone(&quit), Arc::clone(&early));
            threads.push(std::thread::spawn(move || {
                let seen = AtomicU64::new(0);
                while !quit.load(Ordering::SeqCst) {
                    if stop.poll(cpu, &seen) {
                        // Back to "normal work": every target of the
                        // stop-machine it joined must have finished.
                        let state = stop.state.lock();
                        if state.generation == seen.load(Ordering::SeqCst)
                            && state.finished != state.targets
                        {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::yield_now();
                }
            }));
        }
        let (ran, unstopped) = (AtomicU64::new(0), AtomicU64::new(0));
        for round in 0..20 {
            let target = round % 4;
            let everyone = CpuSet::range(0, 4);
            stop.run(
                everyone,
                CpuSet::single(cpu_id(target)),
                &|cpu| {
                    assert_eq!(cpu.index(), target);
                    // Every participant stopped before any target runs (a
                    // count, not an assert: a panic here would leave `run`
                    // waiting for this target forever).
                    if stop.state.lock().arrived != everyone {
                        unstopped.fetch_add(1, Ordering::SeqCst);
                    }
                    // Whether a participant waits cannot be seen, only what
                    // it does when it leaves: these yields give one that
                    // leaves without waiting time to be caught above.
                    for _ in 0..50 {
                        std::thread::yield_now();
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                },
                |_| {},
            );
        }
        quit.store(true, Ordering::SeqCst);
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 20);
        assert_eq!(
            unstopped.load(Ordering::SeqCst),
            0,
            "ran before all stopped"
        );
        assert_eq!(
            early.load(Ordering::SeqCst),
            0,
            "left before the targets finished"
        );
    }
}
