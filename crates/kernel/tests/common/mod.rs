//! CPUs that are threads, for the rendezvous's tests: std's threads, or
//! loom's under `--cfg loom`. Each thread holds its own [`Cpu`], which
//! says which CPU it is; they share one [`Bells`].
#![allow(dead_code)]

#[cfg(loom)]
use loom::sync::{
    atomic::{AtomicU64, Ordering::SeqCst},
    Arc, Condvar, Mutex,
};
#[cfg(not(loom))]
use std::sync::{
    atomic::{AtomicU64, Ordering::SeqCst},
    Arc, Condvar, Mutex,
};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::platform::Cpus;

/// A lock and condvar per CPU, one for the threads that are no CPU, and
/// a clock that stands still until someone waits for a deadline: then it
/// jumps there (in a model, time passes only while threads wait).
pub struct Bells {
    cpus: Vec<(Mutex<()>, Condvar)>,
    threads: (Mutex<()>, Condvar),
    clock: AtomicU64,
}

impl Bells {
    /// Bells for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Arc<Bells> {
        Arc::new(Bells {
            cpus: (0..cpus)
                .map(|_| (Mutex::new(()), Condvar::new()))
                .collect(),
            threads: (Mutex::new(()), Condvar::new()),
            clock: AtomicU64::new(0),
        })
    }
}

/// One thread's view: CPU `me`, or no CPU.
#[derive(Clone)]
pub struct Cpu {
    pub me: Option<CpuId>,
    pub bells: Arc<Bells>,
}

impl Cpu {
    fn bell(&self, cpu: Option<CpuId>) -> &(Mutex<()>, Condvar) {
        cpu.map_or(&self.bells.threads, |cpu| &self.bells.cpus[cpu.index()])
    }

    fn ring(&self, cpu: Option<CpuId>) {
        let (lock, wake) = self.bell(cpu);
        // Taken so the wake cannot fall between a waiter's check and its
        // sleep.
        let _held = lock.lock().unwrap();
        wake.notify_all();
    }
}

impl Cpus for Cpu {
    fn current(&self) -> Option<CpuId> {
        self.me
    }

    fn wake(&self, cpu: CpuId) {
        self.ring(Some(cpu));
    }

    fn wake_threads(&self) {
        self.ring(None);
    }

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        let (lock, wake) = self.bell(self.me);
        let mut held = lock.lock().unwrap();
        while !condition() {
            held = wake.wait(held).unwrap();
        }
    }

    fn now_ns(&self) -> u64 {
        self.bells.clock.load(SeqCst)
    }

    /// The deadline comes at once: the clock jumps to it, and the caller
    /// yields, so that a driver that waits again lets the others run.
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        if condition() {
            return true;
        }
        self.bells.clock.fetch_max(deadline_ns, SeqCst);
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        std::thread::yield_now();
        condition()
    }
}

/// Loom's checker as the models run it: every interleaving with up to
/// three preemptions.
#[cfg(loom)]
pub fn checker() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}
