//! What one cpuhp case measured on the machine ([`Samples`]) and the
//! tasks that keep its vCPUs busy while it is measured ([`Load`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{Direction, Machine, Report as OpReport, TaskStatus};

use crate::statistics::median;

/// What one case measured.
pub(super) struct Samples {
    pub(super) latency_ns: Vec<u64>,
    /// What the engine's stages did not account for of each repetition's
    /// latency ([`OpReport::path_nanos`]).
    pub(super) unaccounted_ns: Vec<u64>,
    /// Time the deferred callbacks of each repetition took (on the worker).
    pub(super) deferred_ns: Vec<u64>,
    /// Per step (or engine stage) on the critical path, nanoseconds of each
    /// repetition.
    pub(super) stages: BTreeMap<&'static str, Vec<u64>>,
    /// Per deferred step, nanoseconds of each repetition.
    pub(super) deferred_stages: BTreeMap<&'static str, Vec<u64>>,
    /// The stages timed inside another (every step is).
    pub(super) nested: Vec<&'static str>,
}

impl Samples {
    pub(super) fn new() -> Self {
        Samples {
            latency_ns: Vec::new(),
            unaccounted_ns: Vec::new(),
            deferred_ns: Vec::new(),
            stages: BTreeMap::new(),
            deferred_stages: BTreeMap::new(),
            nested: Vec::new(),
        }
    }

    /// Records one operation; call after its deferred work has finished,
    /// so that the engine's step times show the deferred callbacks.
    pub(super) fn record(&mut self, latency: Duration, report: &OpReport, machine: &Machine) {
        let latency = latency.as_nanos() as u64;
        self.latency_ns.push(latency);
        self.unaccounted_ns
            .push(latency.saturating_sub(report.path_nanos()));
        for stage in &report.stages {
            self.stages.entry(stage.name).or_default().push(stage.nanos);
            if stage.nested && !self.nested.contains(&stage.name) {
                self.nested.push(stage.name);
            }
        }
        let mut deferred = 0;
        if report.deferred > 0 {
            for (name, time) in machine.step_times() {
                let (nanos, was_deferred) = match report.direction {
                    Direction::Down => (time.teardown_nanos, time.teardown_deferred),
                    Direction::Up => (time.startup_nanos, time.startup_deferred),
                };
                if let (Some(nanos), true) = (nanos, was_deferred) {
                    deferred += nanos;
                    self.deferred_stages.entry(name).or_default().push(nanos);
                }
            }
        }
        self.deferred_ns.push(deferred);
    }

    pub(super) fn stages_us(&self) -> BTreeMap<&'static str, f64> {
        self.stages
            .iter()
            .map(|(name, nanos)| (*name, median(nanos) / 1e3))
            .collect()
    }

    pub(super) fn deferred_stages_us(&self) -> BTreeMap<&'static str, f64> {
        self.deferred_stages
            .iter()
            .map(|(name, nanos)| (*name, median(nanos) / 1e3))
            .collect()
    }
}

/// Tasks that keep every online vCPU busy with short slices of real work
/// (hashing, a page from the CPU's cache, now and then a work item) until
/// told to stop.
pub(super) struct Load {
    running: Arc<AtomicBool>,
}

impl Load {
    pub(super) fn start(machine: &Machine, tasks: usize) -> Load {
        let running = Arc::new(AtomicBool::new(true));
        for n in 0..tasks {
            let running = Arc::clone(&running);
            let mut slice = 0u64;
            machine.submit(move |ctx| {
                let mut hash = n as u64 ^ slice;
                for i in 0..2_000u64 {
                    hash = (hash ^ i).wrapping_mul(0x100_0000_01b3);
                }
                std::hint::black_box(hash);
                if let Some(page) = ctx.alloc_page() {
                    ctx.free_page(page);
                }
                slice += 1;
                if slice % 64 == 0 {
                    ctx.queue_work(|_| {});
                }
                if running.load(Ordering::Relaxed) {
                    TaskStatus::Again
                } else {
                    TaskStatus::Done
                }
            });
        }
        Load { running }
    }

    /// Stops the load and waits for its tasks to finish.
    pub(super) fn stop(self, machine: &Machine) {
        self.running.store(false, Ordering::Relaxed);
        machine.wait_idle(Duration::from_secs(30));
    }
}
