//! A latency detector in the spirit of ftrace's `hwlat` tracer: a thread
//! spins for `width` µs out of every `window` µs, reading the clock in a
//! tight loop; any gap between two reads (inner) or between two loop turns
//! (outer) above `threshold` µs means something took the CPU away — in a
//! kernel an SMI or NMI, in user space also preemption and interrupts. Each
//! window with such a gap records one `ftrace/hwlat` event.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::ring::RawLock;

/// `hwlat_detector/width`, `hwlat_detector/window` and `tracing_thresh`:
/// what [`Tracer::set_hwlat_config`](crate::Tracer::set_hwlat_config) takes.
///
/// ```no_run
/// use hotkern_trace::{function::TracerKind, HwlatConfig, TraceConfig, Tracer};
/// let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap().install().unwrap();
/// tracer.set_hwlat_config(HwlatConfig { width_us: 5_000, window_us: 10_000, threshold_us: 5 }).unwrap();
/// tracer.set_current_tracer(TracerKind::Hwlat).unwrap();
/// std::thread::sleep(std::time::Duration::from_millis(100));
/// tracer.set_current_tracer(TracerKind::Nop).unwrap();
/// println!("max latency {} us", tracer.hwlat_max_latency_us());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwlatConfig {
    /// Spinning time per window, µs.
    pub width_us: u64,
    /// Window length, µs.
    pub window_us: u64,
    /// Gaps above this are recorded, µs (ftrace's default 10).
    pub threshold_us: u64,
}

impl Default for HwlatConfig {
    /// ftrace's defaults: 0.5 s of every 1 s, 10 µs threshold.
    fn default() -> Self {
        HwlatConfig {
            width_us: 500_000,
            window_us: 1_000_000,
            threshold_us: 10,
        }
    }
}

impl HwlatConfig {
    /// Whether the detector may run with these settings: `0 < width <
    /// window`, so that every window gives the CPU back for a while (a
    /// width equal to the window would spin without pause).
    pub(crate) fn is_valid(&self) -> bool {
        self.width_us > 0 && self.width_us < self.window_us
    }
}

/// One window whose largest gap was above the threshold: the fields of
/// an `ftrace/hwlat` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HwlatSample {
    /// Largest gap between two clock reads, µs.
    pub(crate) duration_us: u64,
    /// Largest gap between loop turns, µs.
    pub(crate) outer_duration_us: u64,
    /// When the window's largest gap was seen, ns.
    pub(crate) timestamp_ns: u64,
    /// Number of the sample since the detector started, from 1 (gaps show
    /// samples that were lost).
    pub(crate) seqnum: u32,
    /// Gaps above the threshold in the window.
    pub(crate) count: u32,
}

/// What one window's spinning part saw, in the clock's nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowGaps {
    /// Largest gap between two back-to-back clock reads.
    pub(crate) inner_ns: u64,
    /// Largest gap between the end of one loop turn and the next.
    pub(crate) outer_ns: u64,
    /// When the largest of either was seen.
    pub(crate) at_ns: u64,
    /// Gaps of either kind above the threshold.
    pub(crate) count: u32,
}

/// Spins for `width_ns` on `now`, measuring the gaps that show something
/// took the CPU away (see the [module documentation](self)).
pub(crate) fn sample_window(now: &dyn Fn() -> u64, width_ns: u64, threshold_ns: u64) -> WindowGaps {
    let start = now();
    let mut gaps = WindowGaps {
        inner_ns: 0,
        outer_ns: 0,
        at_ns: start,
        count: 0,
    };
    let mut last = 0u64;
    loop {
        let t1 = now();
        let t2 = now();
        let inner = t2.saturating_sub(t1);
        let outer = if last == 0 {
            0
        } else {
            t1.saturating_sub(last)
        };
        last = t2;
        if inner > threshold_ns || outer > threshold_ns {
            gaps.count += 1;
        }
        if inner > gaps.inner_ns {
            gaps.inner_ns = inner;
            gaps.at_ns = t1;
        }
        if outer > gaps.outer_ns {
            gaps.outer_ns = outer;
            gaps.at_ns = t1;
        }
        if t2.saturating_sub(start) >= width_ns {
            return gaps;
        }
    }
}

/// The detector a tracer owns: its settings, its thread while it runs,
/// and the largest gap seen (`tracing_max_latency`).
#[derive(Debug, Default)]
pub(crate) struct Detector {
    state: lock_api::Mutex<RawLock, DetectorState>,
    /// Shared with the thread, which raises it without taking `state`.
    max_latency_us: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct DetectorState {
    config: HwlatConfig,
    running: Option<Running>,
}

/// The detector thread and the flag that asks it to stop.
#[derive(Debug)]
struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Detector {
    pub(crate) fn config(&self) -> HwlatConfig {
        self.state.lock().config
    }

    /// Takes effect at the next start; the caller has checked
    /// [`HwlatConfig::is_valid`].
    pub(crate) fn set_config(&self, config: HwlatConfig) {
        self.state.lock().config = config;
    }

    pub(crate) fn max_latency_us(&self) -> u64 {
        self.max_latency_us.load(Ordering::Relaxed)
    }

    /// Starts the thread unless it runs already. It reads the trace clock
    /// through `now` and hands each window over the threshold to `record`.
    pub(crate) fn start(
        &self,
        now: impl Fn() -> u64 + Send + 'static,
        record: impl Fn(&HwlatSample) + Send + 'static,
    ) -> std::io::Result<()> {
        let mut state = self.state.lock();
        if state.running.is_some() {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let config = state.config;
        let max = Arc::clone(&self.max_latency_us);
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("hwlatd".into())
            .spawn(move || run(config, &flag, &max, &now, &record))?;
        state.running = Some(Running { stop, thread });
        Ok(())
    }

    /// Stops the thread and waits for it, if it runs.
    pub(crate) fn stop(&self) {
        // Taken out first: the join must not hold the lock.
        let running = self.state.lock().running.take();
        if let Some(Running { stop, thread }) = running {
            stop.store(true, Ordering::Release);
            // The thread itself may stop the detector (a trigger on the
            // hwlat event switching `current_tracer`); it cannot join itself.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn run(
    config: HwlatConfig,
    stop: &AtomicBool,
    max: &AtomicU64,
    now: &dyn Fn() -> u64,
    record: &dyn Fn(&HwlatSample),
) {
    let mut seqnum = 0u32;
    let threshold_ns = config.threshold_us * 1000;
    while !stop.load(Ordering::Acquire) {
        let gaps = sample_window(now, config.width_us * 1000, threshold_ns);
        if gaps.inner_ns > threshold_ns || gaps.outer_ns > threshold_ns {
            seqnum += 1;
            let sample = HwlatSample {
                duration_us: gaps.inner_ns / 1000,
                outer_duration_us: gaps.outer_ns / 1000,
                timestamp_ns: gaps.at_ns,
                seqnum,
                count: gaps.count,
            };
            max.fetch_max(gaps.inner_ns.max(gaps.outer_ns) / 1000, Ordering::Relaxed);
            record(&sample);
        }
        // Sleep the rest of the window in slices, to stop promptly.
        let mut rest = Duration::from_micros(config.window_us - config.width_us);
        while !rest.is_zero() && !stop.load(Ordering::Acquire) {
            let slice = rest.min(Duration::from_millis(10));
            std::thread::sleep(slice);
            rest -= slice;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn a_stolen_interval_is_found_with_its_size() {
        // A fake clock: 100 ns per read, and one 50 µs jump on the 40th read.
        let reads = Cell::new(0u64);
        let time = Cell::new(0u64);
        let now = || {
            reads.set(reads.get() + 1);
            let step = if reads.get() == 40 { 50_000 } else { 100 };
            time.set(time.get() + step);
            time.get()
        };
        let gaps = sample_window(&now, 20_000_000, 10_000);
        let (inner, outer) = (gaps.inner_ns, gaps.outer_ns);
        assert_eq!(inner.max(outer), 50_000, "inner {inner} outer {outer}");
        assert_eq!(gaps.count, 1);
        assert!(gaps.at_ns > 0);
    }

    #[test]
    fn width_must_be_below_window() {
        let config = HwlatConfig::default();
        assert!(config.is_valid());
        assert!(!HwlatConfig {
            width_us: 10,
            window_us: 10,
            threshold_us: 1,
        }
        .is_valid());
    }
}
