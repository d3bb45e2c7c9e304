//! A latency detector in the spirit of ftrace's `hwlat` tracer: a thread
//! spins for `width` µs out of every `window` µs, reading the clock in a
//! tight loop; any gap between two reads (inner) or between two loop turns
//! (outer) above `threshold` µs means something took the CPU away — in a
//! kernel an SMI or NMI, in user space also preemption and interrupts. Each
//! window with such a gap records one `ftrace/hwlat` event.
//!
//! ```no_run
//! use hotkern_trace::{function::TracerKind, hwlat::HwlatConfig, TraceConfig, Tracer};
//! let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap().install().unwrap();
//! tracer.set_hwlat_config(HwlatConfig { width_us: 5_000, window_us: 10_000, threshold_us: 5 }).unwrap();
//! tracer.set_current_tracer(TracerKind::Hwlat).unwrap();
//! std::thread::sleep(std::time::Duration::from_millis(100));
//! tracer.set_current_tracer(TracerKind::Nop).unwrap();
//! println!("max latency {} us", tracer.hwlat_max_latency_us());
//! ```

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::tracer::{TraceError, Tracer};

/// `hwlat_detector/width`, `hwlat_detector/window` and `tracing_thresh`.
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

/// One recorded window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwlatSample {
    /// Largest gap between two clock reads, µs.
    pub duration_us: u64,
    /// Largest gap between loop turns, µs.
    pub outer_duration_us: u64,
    /// When the window's largest gap was seen, ns.
    pub timestamp_ns: u64,
    /// Sample number.
    pub seqnum: u32,
    /// Gaps above the threshold in the window.
    pub count: u32,
}

#[derive(Debug, Default)]
pub(crate) struct HwlatState {
    config: HwlatConfig,
    running: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    max_latency_us: Arc<AtomicU64>,
}

impl Tracer {
    /// The detector's settings.
    pub fn hwlat_config(&self) -> HwlatConfig {
        self.hwlat.lock().map(|s| s.config).unwrap_or_default()
    }

    /// Changes the settings (applies from the next start).
    pub fn set_hwlat_config(&self, config: HwlatConfig) -> Result<(), TraceError> {
        if config.width_us == 0 || config.window_us == 0 || config.width_us > config.window_us {
            return Err(TraceError::BadHwlat);
        }
        let mut state = self.hwlat.lock().map_err(|_| TraceError::BadHwlat)?;
        state.config = config;
        Ok(())
    }

    /// The largest gap seen so far (`tracing_max_latency`), µs.
    pub fn hwlat_max_latency_us(&self) -> u64 {
        self.hwlat
            .lock()
            .map(|s| s.max_latency_us.load(Ordering::Relaxed))
            .unwrap_or(0)
    }
}

pub(crate) fn start(tracer: &'static Tracer) -> Result<(), TraceError> {
    let mut state = tracer.hwlat.lock().map_err(|_| TraceError::BadHwlat)?;
    if state.running.is_some() {
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let config = state.config;
    let max = Arc::clone(&state.max_latency_us);
    let flag = Arc::clone(&stop);
    let handle = std::thread::Builder::new()
        .name("hwlatd".into())
        .spawn(move || run(tracer, config, &flag, &max))
        .map_err(|_| TraceError::Unavailable("a thread for hwlat"))?;
    state.running = Some((stop, handle));
    Ok(())
}

pub(crate) fn stop(tracer: &Tracer) {
    let running = tracer.hwlat.lock().ok().and_then(|mut s| s.running.take());
    if let Some((flag, handle)) = running {
        flag.store(true, Ordering::Release);
        if handle.thread().id() != std::thread::current().id() {
            let _ = handle.join();
        }
    }
}

/// Measures one window's spinning part.
pub fn sample_window(
    now: &dyn Fn() -> u64,
    width_ns: u64,
    threshold_ns: u64,
) -> (u64, u64, u64, u32) {
    let start = now();
    let (mut inner_max, mut outer_max, mut at, mut count) = (0u64, 0u64, start, 0u32);
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
            count += 1;
        }
        if inner > inner_max {
            inner_max = inner;
            at = t1;
        }
        if outer > outer_max {
            outer_max = outer;
            at = t1;
        }
        if t2.saturating_sub(start) >= width_ns {
            return (inner_max, outer_max, at, count);
        }
    }
}

fn run(tracer: &'static Tracer, config: HwlatConfig, stop: &AtomicBool, max: &AtomicU64) {
    let mut seqnum = 0u32;
    let threshold_ns = config.threshold_us * 1000;
    while !stop.load(Ordering::Acquire) {
        let now = || tracer.now_ns();
        let (inner, outer, at, count) = sample_window(&now, config.width_us * 1000, threshold_ns);
        if inner > threshold_ns || outer > threshold_ns {
            seqnum += 1;
            let sample = HwlatSample {
                duration_us: inner / 1000,
                outer_duration_us: outer / 1000,
                timestamp_ns: at,
                seqnum,
                count,
            };
            max.fetch_max(inner.max(outer) / 1000, Ordering::Relaxed);
            tracer.record_hwlat(&sample);
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
        let (inner, outer, at, count) = sample_window(&now, 20_000_000, 10_000);
        assert_eq!(inner.max(outer), 50_000, "inner {inner} outer {outer}");
        assert_eq!(count, 1);
        assert!(at > 0);
    }

    #[test]
    fn bad_settings_are_refused_and_keep_the_old_ones() {
        let tracer = Tracer::with_threads(crate::TraceConfig::small(), 1).unwrap();
        let before = tracer.hwlat_config();
        for bad in [
            HwlatConfig {
                width_us: 0,
                ..before
            },
            HwlatConfig {
                window_us: 0,
                ..before
            },
            HwlatConfig {
                width_us: 10,
                window_us: 5,
                threshold_us: 1,
            },
        ] {
            assert_eq!(tracer.set_hwlat_config(bad), Err(TraceError::BadHwlat));
        }
        assert_eq!(tracer.hwlat_config(), before);
    }

    #[test]
    fn the_detector_records_samples_while_running() {
        let tracer = Tracer::with_threads(crate::TraceConfig::small(), 2)
            .unwrap()
            .install()
            .unwrap();
        // A zero-ish threshold makes every window report.
        tracer
            .set_hwlat_config(HwlatConfig {
                width_us: 2_000,
                window_us: 4_000,
                threshold_us: 0,
            })
            .unwrap();
        assert_eq!(
            tracer.set_hwlat_config(HwlatConfig {
                width_us: 5,
                window_us: 1,
                threshold_us: 0
            }),
            Err(TraceError::BadHwlat)
        );
        tracer
            .set_current_tracer(crate::function::TracerKind::Hwlat)
            .unwrap();
        std::thread::sleep(Duration::from_millis(40));
        tracer
            .set_current_tracer(crate::function::TracerKind::Nop)
            .unwrap();
        let samples: alloc::vec::Vec<_> = tracer
            .drain_records()
            .into_iter()
            .filter(|r| r.event_id == crate::event::format::HWLAT_ID)
            .collect();
        assert!(!samples.is_empty());
        let seq: alloc::vec::Vec<u64> = samples.iter().map(|r| r.unsigned(44, 4)).collect();
        assert_eq!(seq[0], 1);
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
        tracer.uninstall();
    }
}
