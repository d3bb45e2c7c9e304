//! Stop-machine on the machine: the rendezvous is the shared kernel's
//! ([`hotkern_kernel::stop_machine`]); what stays here is how the machine
//! gathers its vCPUs. The controller (the hotplug engine's thread, no
//! vCPU) rings each member's doorbell; a vCPU's scheduler loop calls
//! [`StopMachine::poll`] every turn, which joins when it finds itself
//! requested. Waiting is on the doorbells ([`crate::signal::Doorbells`]).

use std::convert::Infallible;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::stop_machine::Rendezvous;

use crate::signal::Doorbells;

/// The machine's stop-machine; one at a time.
#[derive(Default)]
pub(crate) struct StopMachine {
    rendezvous: Rendezvous,
}

impl StopMachine {
    /// Stops every vCPU of `participants` and runs `work(cpu)` on each of
    /// `targets` (a subset) while all of them wait in the rendezvous.
    pub(crate) fn run(
        &self,
        bells: &Doorbells,
        participants: CpuSet,
        targets: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) {
        let ring_each = |others: CpuSet| {
            for cpu in others.iter() {
                bells.ring(cpu.index());
            }
            Ok::<(), Infallible>(())
        };
        if let Err(never) = self
            .rendezvous
            .run(bells, participants, targets, work, ring_each)
        {
            match never {}
        }
    }

    /// Called by a vCPU from its scheduler loop: joins a pending
    /// stop-machine it belongs to. Returns whether it took part.
    pub(crate) fn poll(&self, bells: &Doorbells) -> bool {
        self.rendezvous.join(bells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::set_current_cpu;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn every_participant_runs_the_work_while_all_are_stopped() {
        let stop = Arc::new(StopMachine::default());
        let bells = Arc::new(Doorbells::new(4));
        let quit = Arc::new(AtomicBool::new(false));
        let inside = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for cpu in 0..4 {
            let (stop, bells, quit) = (Arc::clone(&stop), Arc::clone(&bells), Arc::clone(&quit));
            threads.push(std::thread::spawn(move || {
                set_current_cpu(Some(cpu));
                let mut joined = 0;
                while !quit.load(Ordering::SeqCst) {
                    if stop.poll(&bells) {
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
            stop.run(&bells, cpus, cpus, &|cpu| {
                inside.fetch_add(1, Ordering::SeqCst);
                ran.lock().push(cpu.index());
            });
        }
        quit.store(true, Ordering::SeqCst);
        let joined: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(joined, [5, 5, 0, 5]);
        assert_eq!(inside.load(Ordering::SeqCst), 15);
        let mut ran = ran.into_inner();
        ran.sort_unstable();
        assert_eq!(ran, [[0; 5], [1; 5], [3; 5]].concat());
        assert_eq!(stop.rendezvous.completed(), 5);
    }
}
