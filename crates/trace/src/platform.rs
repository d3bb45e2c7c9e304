//! What the tracer needs from the platform: a clock, the identity of the
//! running CPU and task, and a way to rewrite its call sites in the text
//! ([`TextPoke`]).
//!
//! A kernel implements [`Clock`] and [`CpuContext`] with its own clock source
//! and per-CPU data. In user space (feature `std`) [`MonotonicClock`],
//! [`TscClock`] and [`ThreadCpus`] provide them: each thread that traces
//! claims a CPU slot of its own (the thread-per-CPU model), so every CPU's
//! ring buffer still has exactly one writer.
//!
//! A kernel's platform, in miniature: one CPU, a clock it steps itself.
//!
//! ```
//! use std::sync::Arc;
//! use hotkern_trace::platform::{CpuContext, ManualClock};
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! struct BootCpu;
//! // SAFETY: only CPU 0 exists and only this thread writes it.
//! unsafe impl CpuContext for BootCpu {
//!     fn current_cpu(&self) -> Option<usize> { Some(0) }
//!     fn cpus(&self) -> usize { 1 }
//!     fn current_pid(&self) -> i32 { 1 }
//!     fn comm(&self, pid: i32) -> Option<String> { (pid == 1).then(|| "init".into()) }
//! }
//!
//! let clock = Arc::new(ManualClock::new(1_000));
//! let tracer = Tracer::new(TraceConfig::small(), clock.clone(), &BootCpu).unwrap();
//! tracer.write_marker("booted").unwrap();
//! clock.advance(500);
//! tracer.write_marker("ready").unwrap();
//! let times: Vec<u64> = tracer.drain_records().iter().map(|r| r.timestamp_ns).collect();
//! assert_eq!(times, [1_000, 1_500]);
//! ```

/// A time source in nanoseconds. It must never go backwards on one CPU.
pub trait Clock: Send + Sync {
    /// The current time, in nanoseconds since some fixed origin.
    fn now_ns(&self) -> u64;
    /// The name shown in ftrace's `trace_clock` file (e.g. `mono`, `x86-tsc`).
    fn name(&self) -> &'static str;

    /// The clock as a [`TscClock`], so the tracer can call it directly
    /// (inlined) instead of through the trait object.
    #[cfg(feature = "std")]
    #[doc(hidden)]
    fn as_tsc(&self) -> Option<TscClock> {
        None
    }
}

/// Bytes of a task name buffer, as the kernel's `task->comm` (15 bytes of
/// name and a NUL).
pub const TASK_COMM_LEN: usize = 16;

/// Who is running: the current CPU and task.
///
/// # Safety
/// `current_cpu` must name a CPU that no other thread is writing at the same
/// time: the ring buffer lets one writer per CPU reserve without locks (code
/// that interrupts that writer on the same CPU is fine: it nests).
pub unsafe trait CpuContext: Send + Sync {
    /// The CPU the caller runs on, below `cpus()`, or `None` if it has none
    /// (such callers are not traced).
    fn current_cpu(&self) -> Option<usize>;
    /// How many CPUs there are.
    fn cpus(&self) -> usize;
    /// The current task's id (ftrace's `common_pid`).
    fn current_pid(&self) -> i32;
    /// The name of task `pid`, if known (ftrace's saved cmdlines).
    fn comm(&self, pid: i32) -> Option<alloc::string::String>;

    /// The current task's name as the kernel keeps it in `task->comm`: at
    /// most 15 bytes, NUL-padded. Filters compare it with `COMM`; it must not
    /// allocate. The default knows no name (`COMM == ".."` never matches,
    /// `COMM != ".."` always does).
    fn current_comm(&self) -> Option<[u8; TASK_COMM_LEN]> {
        None
    }

    /// Writes the return addresses of the calling thread's stack into
    /// `frames`, innermost first, and returns how many it wrote (at most
    /// `frames.len()`). The `stacktrace` trigger records them as an
    /// `ftrace/kernel_stack` event.
    ///
    /// `tracer_frame` is an address on the stack inside the tracer's own
    /// frames (stacks grow down): the frames inward of it, and the frame that
    /// holds it, are the tracer's and are left out, so the first address is
    /// a return address into the code that hit the event. The default cannot
    /// unwind and writes nothing; a kernel walks its frame pointers or ORC
    /// tables here.
    ///
    /// ```
    /// use hotkern_trace::platform::CpuContext;
    ///
    /// struct OneCpu;
    /// // SAFETY: the example only ever traces from one thread.
    /// unsafe impl CpuContext for OneCpu {
    ///     fn current_cpu(&self) -> Option<usize> { Some(0) }
    ///     fn cpus(&self) -> usize { 1 }
    ///     fn current_pid(&self) -> i32 { 1 }
    ///     fn comm(&self, _pid: i32) -> Option<String> { None }
    ///     fn stack_trace(&self, _tracer_frame: usize, frames: &mut [u64]) -> usize {
    ///         // A platform without an unwinder may still name the caller.
    ///         let Some(first) = frames.first_mut() else { return 0 };
    ///         *first = 0xffff_ffff_8100_0000;
    ///         1
    ///     }
    /// }
    ///
    /// let mut frames = [0u64; 8];
    /// assert_eq!(OneCpu.stack_trace(0, &mut frames), 1);
    /// assert_eq!(OneCpu.current_comm(), None);
    /// ```
    fn stack_trace(&self, tracer_frame: usize, frames: &mut [u64]) -> usize {
        let _ = (tracer_frame, frames);
        0
    }

    /// The current CPU and task id together (one lookup on the hot path
    /// where the platform can do it).
    #[inline]
    fn current(&self) -> Option<(usize, i32)> {
        Some((self.current_cpu()?, self.current_pid()))
    }

    /// The context as the user-space [`ThreadCpus`] model, so the tracer can
    /// call it directly (inlined) instead of through the trait object.
    #[cfg(feature = "std")]
    #[doc(hidden)]
    fn as_thread_cpus(&self) -> Option<&'static ThreadCpus> {
        None
    }
}

/// A clock that a test drives by hand.
///
/// ```
/// use hotkern_trace::platform::{Clock, ManualClock};
/// let clock = ManualClock::new(5);
/// clock.advance(10);
/// assert_eq!(clock.now_ns(), 15);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(core::sync::atomic::AtomicU64);

impl ManualClock {
    /// Starts at `ns`.
    pub const fn new(ns: u64) -> Self {
        ManualClock(core::sync::atomic::AtomicU64::new(ns))
    }
    /// Moves time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, core::sync::atomic::Ordering::Relaxed);
    }
    /// Jumps to `ns`; unlike [`advance`](Self::advance) it may go back.
    pub fn set(&self, ns: u64) {
        self.0.store(ns, core::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(core::sync::atomic::Ordering::Relaxed)
    }
    fn name(&self) -> &'static str {
        "manual"
    }
}

mod text;
pub use text::{TextError, TextPoke};

#[cfg(feature = "std")]
pub use self::user::{spawn, MonotonicClock, ThreadCpus, TscClock, UserText};

#[cfg(feature = "std")]
mod user;
