//! The user-space platform (feature `std`): clocks and the thread-per-CPU
//! model, with each thread's name and stack for the tracer, and the
//! process's text for patching call sites ([`UserText`]).

mod text;
pub use text::UserText;

use super::{Clock, CpuContext, TASK_COMM_LEN};
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::ring::RawLock;

/// `CLOCK_MONOTONIC`-based nanoseconds since the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock starting near zero now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
    fn name(&self) -> &'static str {
        "mono"
    }
}

/// The CPU's time-stamp counter scaled to nanoseconds (x86-64 with an
/// invariant TSC); falls back to the monotonic clock elsewhere.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    origin: u64,
    /// Nanoseconds per tick as a 32.32 fixed-point number.
    scale: u64,
    fallback: Option<MonotonicClock>,
}

impl TscClock {
    /// Calibrates the counter against the monotonic clock for ~10 ms.
    pub fn calibrate() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let start = Instant::now();
            let t0 = read_tsc();
            while start.elapsed().as_millis() < 10 {
                core::hint::spin_loop();
            }
            let t1 = read_tsc();
            let ns = start.elapsed().as_nanos() as u64;
            let ticks = t1.saturating_sub(t0).max(1);
            let scale = ((u128::from(ns) << 32) / u128::from(ticks)) as u64;
            TscClock {
                origin: t1,
                scale,
                fallback: None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            TscClock {
                origin: 0,
                scale: 0,
                fallback: Some(MonotonicClock::new()),
            }
        }
    }
}

impl TscClock {
    /// Whether this clock reads the time-stamp counter (not the
    /// monotonic fallback).
    pub(crate) fn is_counter(&self) -> bool {
        self.fallback.is_none()
    }

    /// The counter in ns, without the fallback test: only for clocks
    /// where [`TscClock::is_counter`] holds.
    #[inline(always)]
    pub(crate) fn counter_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            let ticks = read_tsc().wrapping_sub(self.origin);
            ((u128::from(ticks) * u128::from(self.scale)) >> 32) as u64
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.now_ns()
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_tsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

impl Clock for TscClock {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        if let Some(fallback) = &self.fallback {
            return fallback.now_ns();
        }
        #[cfg(target_arch = "x86_64")]
        {
            let ticks = read_tsc().wrapping_sub(self.origin);
            ((u128::from(ticks) * u128::from(self.scale)) >> 32) as u64
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            0
        }
    }
    fn name(&self) -> &'static str {
        "x86-tsc"
    }
    fn as_tsc(&self) -> Option<TscClock> {
        Some(*self)
    }
}

const UNBOUND: usize = usize::MAX;

std::thread_local! {
    /// (model id, CPU, task id) of this thread.
    static THREAD_CPU: Cell<(usize, usize, i32)> = const { Cell::new((0, UNBOUND, 0)) };
    static THREAD_PID: Cell<i32> = const { Cell::new(0) };
    /// The thread's name as `task->comm`, set when it takes a CPU; all
    /// zero while unknown.
    static THREAD_COMM: Cell<[u8; TASK_COMM_LEN]> = const { Cell::new([0; TASK_COMM_LEN]) };
    static RELEASE: SlotRelease = const { SlotRelease(Cell::new(None)) };
}

/// Gives a thread's CPU slot back when the thread exits.
struct SlotRelease(Cell<Option<(&'static ThreadCpus, usize)>>);

impl Drop for SlotRelease {
    fn drop(&mut self) {
        if let Some((cpus, cpu)) = self.0.take() {
            cpus.owners[cpu].store(false, Ordering::Release);
        }
    }
}

static NEXT_MODEL: AtomicU64 = AtomicU64::new(1);

/// The thread-per-CPU model: up to `cpus` threads trace at once, each
/// owning one CPU slot from its first traced event (or [`ThreadCpus::bind`])
/// until it exits. Threads beyond that are not traced.
#[derive(Debug)]
pub struct ThreadCpus {
    id: usize,
    owners: Vec<AtomicBool>,
}

impl ThreadCpus {
    /// A model with `cpus` CPU slots (at least one), shared for the
    /// program's life.
    pub fn new(cpus: usize) -> &'static ThreadCpus {
        let owners = (0..cpus.max(1)).map(|_| AtomicBool::new(false)).collect();
        alloc::boxed::Box::leak(alloc::boxed::Box::new(ThreadCpus {
            id: NEXT_MODEL.fetch_add(1, Ordering::Relaxed) as usize,
            owners,
        }))
    }

    /// Claims `cpu` for the calling thread; false if another live thread
    /// owns it or `cpu` is out of range. A thread owns one CPU at a time.
    pub fn bind(&'static self, cpu: usize) -> bool {
        self.release_current();
        let Some(owner) = self.owners.get(cpu) else {
            return false;
        };
        if owner
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.adopt(cpu);
        true
    }

    /// Gives up the calling thread's CPU, if it has one in this model.
    pub(crate) fn release_current(&'static self) {
        let (model, cpu, _) = THREAD_CPU.with(Cell::get);
        if model == self.id && cpu != UNBOUND {
            self.owners[cpu].store(false, Ordering::Release);
            THREAD_CPU.with(|c| c.set((0, UNBOUND, 0)));
            RELEASE.with(|r| r.0.set(None));
        }
    }

    fn adopt(&'static self, cpu: usize) {
        let pid = current_tid();
        THREAD_CPU.with(|c| c.set((self.id, cpu, pid)));
        RELEASE.with(|r| r.0.set(Some((self, cpu))));
        let thread = std::thread::current();
        let mut comm = [0; TASK_COMM_LEN];
        if let Some(name) = thread.name() {
            // Cut to 15 bytes like the kernel's `set_task_comm`.
            let len = name.len().min(TASK_COMM_LEN - 1);
            comm[..len].copy_from_slice(&name.as_bytes()[..len]);
        }
        THREAD_COMM.with(|c| c.set(comm));
        let name = thread
            .name()
            .map_or_else(|| "<...>".to_string(), ToString::to_string);
        COMMS.lock().insert(pid, name);
    }

    #[cold]
    fn claim(&'static self) -> Option<usize> {
        for (cpu, owner) in self.owners.iter().enumerate() {
            if owner
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.release_other_model();
                self.adopt(cpu);
                return Some(cpu);
            }
        }
        None
    }

    fn release_other_model(&self) {
        if let Some((other, cpu)) = RELEASE.with(|r| r.0.take()) {
            other.owners[cpu].store(false, Ordering::Release);
        }
    }
}

/// Thread names by task id, for `comm` lookups of other threads (the
/// `saved_cmdlines` of this platform).
static COMMS: lock_api::Mutex<RawLock, BTreeMap<i32, String>> =
    lock_api::Mutex::new(BTreeMap::new());

/// The calling thread's kernel thread id (cached).
pub(crate) fn current_tid() -> i32 {
    let cached = THREAD_PID.with(Cell::get);
    if cached != 0 {
        return cached;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    THREAD_PID.with(|c| c.set(tid));
    tid
}

/// The calling thread's name as `task->comm`, if it has taken a CPU and
/// has a name (unnamed threads have none).
pub(crate) fn thread_comm() -> Option<[u8; TASK_COMM_LEN]> {
    let comm = THREAD_COMM.with(Cell::get);
    (comm[0] != 0).then_some(comm)
}

/// Return addresses of the calling thread's stack, outward of the frame
/// that holds `tracer_frame` (see [`CpuContext::stack_trace`]).
///
/// The unwinder reports each frame's canonical frame address (CFA: the
/// stack pointer of its caller at the call), so frames whose CFA is at or
/// below `tracer_frame` lie inward of it, and the first frame with a
/// higher CFA is the one that holds it.
pub(crate) fn capture_stack(tracer_frame: usize, frames: &mut [u64]) -> usize {
    let mut count = 0;
    let mut inside_tracer = true;
    let mut each = |frame: &backtrace::Frame| {
        if inside_tracer {
            if frame.sp() as usize > tracer_frame {
                inside_tracer = false;
            }
            return true;
        }
        let ip = frame.ip() as u64;
        // The outermost frame (a thread's entry) reports no return
        // address; 0 also ends a stack trace for ftrace's readers.
        if ip == 0 {
            return false;
        }
        let Some(slot) = frames.get_mut(count) else {
            return false;
        };
        *slot = ip;
        count += 1;
        true
    };
    #[cfg(target_os = "linux")]
    // SAFETY: the unwinder on Linux (`_Unwind_Backtrace`) is thread-safe;
    // only `backtrace`'s process-wide lock is skipped, which a signal
    // handler interrupting its own thread inside that lock would wait on
    // forever.
    unsafe {
        backtrace::trace_unsynchronized(&mut each);
    }
    #[cfg(not(target_os = "linux"))]
    backtrace::trace(&mut each);
    count
}

// SAFETY: a CPU slot is owned by one live thread at a time (claimed with
// compare-and-exchange, released when the thread exits or rebinds).
unsafe impl CpuContext for ThreadCpus {
    #[inline(always)]
    fn current(&self) -> Option<(usize, i32)> {
        let (model, cpu, pid) = THREAD_CPU.with(Cell::get);
        // Model ids start at 1 and an unbound thread's model is 0, so a
        // matching model means a bound CPU: one compare on the hot path.
        if model == self.id {
            debug_assert_ne!(cpu, UNBOUND);
            return Some((cpu, pid));
        }
        Some((self.current_cpu()?, current_tid()))
    }
    #[inline]
    fn current_cpu(&self) -> Option<usize> {
        let (model, cpu, _) = THREAD_CPU.with(Cell::get);
        if model == self.id && cpu != UNBOUND {
            return Some(cpu);
        }
        // SAFETY: a ThreadCpus only exists leaked (`new` is its only
        // constructor), so extending the borrow to 'static is sound.
        let this: &'static ThreadCpus = unsafe { &*(self as *const ThreadCpus) };
        this.claim()
    }
    fn cpus(&self) -> usize {
        self.owners.len()
    }
    #[inline]
    fn current_pid(&self) -> i32 {
        current_tid()
    }
    fn comm(&self, pid: i32) -> Option<String> {
        COMMS.lock().get(&pid).cloned()
    }
    fn current_comm(&self) -> Option<[u8; TASK_COMM_LEN]> {
        thread_comm()
    }
    fn stack_trace(&self, tracer_frame: usize, frames: &mut [u64]) -> usize {
        capture_stack(tracer_frame, frames)
    }
    fn as_thread_cpus(&self) -> Option<&'static ThreadCpus> {
        // SAFETY: a ThreadCpus only exists leaked (see `current_cpu`).
        Some(unsafe { &*(self as *const ThreadCpus) })
    }
}

/// Spawns a thread whose task id is announced to `on_fork(parent, child)`
/// before it runs `f`, so pid filters can follow children
/// (`options/function-fork`, `options/event-fork`).
pub fn spawn<F, T>(on_fork: impl Fn(i32, i32) + Send + 'static, f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let parent = current_tid();
    std::thread::spawn(move || {
        on_fork(parent, current_tid());
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_cpus_and_give_them_back() {
        let cpus = ThreadCpus::new(2);
        let first = std::thread::spawn(move || cpus.current_cpu())
            .join()
            .unwrap();
        assert!(first.is_some());
        // The thread exited: both slots are free again.
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let h1 = s.spawn(|| {
                let cpu = cpus.current_cpu();
                barrier.wait();
                cpu
            });
            let h2 = s.spawn(|| {
                let cpu = cpus.current_cpu();
                barrier.wait();
                cpu
            });
            (h1.join().unwrap(), h2.join().unwrap())
        });
        assert!(a.is_some() && b.is_some());
        assert_ne!(a, b);
    }

    #[test]
    fn a_third_thread_gets_no_cpu_while_two_hold_them() {
        let cpus = ThreadCpus::new(1);
        assert!(cpus.bind(0));
        let other = std::thread::spawn(move || (cpus.current_cpu(), cpus.bind(0)))
            .join()
            .unwrap();
        assert_eq!(other, (None, false));
        assert!(!cpus.bind(7));
        // `bind(7)` failed after releasing: rebinding works.
        assert!(cpus.bind(0));
        assert_eq!(cpus.current_cpu(), Some(0));
        cpus.release_current();
    }

    #[test]
    fn clocks_move_forward() {
        let mono = MonotonicClock::new();
        let tsc = TscClock::calibrate();
        let (m0, t0) = (mono.now_ns(), tsc.now_ns());
        // These clocks read real time, so only real time passing can test
        // them; a sleep lasts at least what it asks for, so the lower
        // bounds below hold however loaded the machine is.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (m1, t1) = (mono.now_ns(), tsc.now_ns());
        assert!(m1 >= m0 + 2_000_000);
        assert!(t1 > t0 + 1_000_000, "tsc moved {}", t1 - t0);
    }

    #[test]
    fn spawn_reports_parent_and_child() {
        let (tx, rx) = std::sync::mpsc::channel();
        let me = current_tid();
        spawn(move |p, c| tx.send((p, c)).unwrap(), current_tid)
            .join()
            .unwrap();
        let (parent, child) = rx.recv().unwrap();
        assert_eq!(parent, me);
        assert_ne!(child, me);
    }
}
