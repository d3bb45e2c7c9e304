//! The tracer's side of the hwlat detector (see [`crate::hwlat`]): its
//! settings, starting and stopping it with `current_tracer`, and recording
//! its samples as `ftrace/hwlat` events.

use super::{instance, TraceError, Tracer};
use crate::event::format;
use crate::hwlat::{HwlatConfig, HwlatSample};

impl Tracer {
    /// The detector's settings.
    pub fn hwlat_config(&self) -> HwlatConfig {
        self.hwlat.config()
    }

    /// Changes the settings (applies from the next start). Refused unless
    /// `0 < width < window`.
    pub fn set_hwlat_config(&self, config: HwlatConfig) -> Result<(), TraceError> {
        if !config.is_valid() {
            return Err(TraceError::BadHwlat);
        }
        self.hwlat.set_config(config);
        Ok(())
    }

    /// The largest gap seen so far (`tracing_max_latency`), µs.
    pub fn hwlat_max_latency_us(&self) -> u64 {
        self.hwlat.max_latency_us()
    }

    /// Starts the detector thread; it needs the installed (`'static`)
    /// tracer to write to.
    pub(super) fn start_hwlat(&self) -> Result<(), TraceError> {
        let slot = self.slot().ok_or(TraceError::NotInstalled)?;
        let tracer = instance(slot).ok_or(TraceError::NotInstalled)?;
        self.hwlat
            .start(
                move || tracer.now_ns(),
                move |sample| {
                    tracer.record_hwlat(sample);
                },
            )
            .map_err(|_| TraceError::Unavailable("a thread for hwlat"))
    }

    /// Stops the detector thread, if it runs.
    pub(super) fn stop_hwlat(&self) {
        self.hwlat.stop();
    }

    /// Records a sample as `ftrace/hwlat`; whether it was recorded.
    fn record_hwlat(&self, sample: &HwlatSample) -> bool {
        if !self.tracing_on() {
            return false;
        }
        let Some(current) = self.current() else {
            return false;
        };
        let now = self.clock_now();
        self.write_at(current, now, format::HWLAT_ID, 56, |p| {
            p[8..16].copy_from_slice(&sample.duration_us.to_ne_bytes());
            p[16..24].copy_from_slice(&sample.outer_duration_us.to_ne_bytes());
            p[24..32].copy_from_slice(&0u64.to_ne_bytes());
            p[32..40].copy_from_slice(&sample.timestamp_ns.to_ne_bytes());
            p[40..44].copy_from_slice(&0u32.to_ne_bytes());
            p[44..48].copy_from_slice(&sample.seqnum.to_ne_bytes());
            p[48..52].copy_from_slice(&sample.count.to_ne_bytes());
            p[52..56].fill(0);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::TracerKind;
    use crate::TraceConfig;
    use alloc::vec::Vec;
    use std::time::Duration;

    #[test]
    fn bad_settings_are_refused_and_keep_the_old_ones() {
        let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
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
            // "Below the window": equal leaves no time off the CPU.
            HwlatConfig {
                width_us: 10,
                window_us: 10,
                threshold_us: 1,
            },
        ] {
            assert_eq!(tracer.set_hwlat_config(bad), Err(TraceError::BadHwlat));
        }
        assert_eq!(tracer.hwlat_config(), before);
    }

    #[test]
    fn the_detector_records_samples_while_running() {
        let tracer = Tracer::with_threads(TraceConfig::small(), 2)
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
        tracer.set_current_tracer(TracerKind::Hwlat).unwrap();
        // The detector measures real time, so it cannot be driven by a
        // fake clock or a handshake: wait until it has recorded a few
        // samples (a busy machine may not run it for a while), with a cap
        // that is generous because it only guards against a hang.
        const WANTED: usize = 3;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let seen = tracer
                .peek_records()
                .iter()
                .filter(|r| r.event_id == format::HWLAT_ID)
                .count();
            if seen >= WANTED {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "only {seen} hwlat samples in 60 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        tracer.set_current_tracer(TracerKind::Nop).unwrap();
        let samples: Vec<_> = tracer
            .drain_records()
            .into_iter()
            .filter(|r| r.event_id == format::HWLAT_ID)
            .collect();
        assert!(samples.len() >= WANTED);
        let seq: Vec<u64> = samples.iter().map(|r| r.unsigned(44, 4)).collect();
        assert_eq!(seq[0], 1);
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
        tracer.uninstall();
    }
}
