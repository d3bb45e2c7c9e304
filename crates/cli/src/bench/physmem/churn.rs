//! The churn cases: hotkern lookups on one thread, alone or while another
//! thread plugs and unplugs without pause.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem};

use crate::bench::measure::{wall_and_cpu_time, Elapsed};

/// Lookups done inside one read guard.
const CHURN_BATCH: usize = 1024;

/// What one churn run measured.
pub(super) struct ChurnRun {
    /// The lookups' wall-clock time and the looking-up thread's CPU time.
    pub(super) time: Elapsed,
    pub(super) checksum: u64,
    pub(super) writes: u64,
}

/// Lookups on this thread, batched under short read guards; with `busy`,
/// another thread plugs and unplugs a 64-page segment meanwhile. Fails
/// when this thread's CPU clock cannot be read.
pub(super) fn churn(
    mem: Arc<Physmem<BasicPage>>,
    pfns: &[Pfn],
    busy: bool,
) -> Result<ChurnRun, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = busy.then(|| {
        let (mem, stop, writes) = (mem.clone(), stop.clone(), writes.clone());
        thread::spawn(move || {
            // Beyond the looked-up range, so the checksum is unaffected.
            let base = Pfn(1 << 20);
            while !stop.load(Ordering::Relaxed) {
                if mem.plug(base, PageCount(64)).is_ok() && mem.unplug(base, PageCount(64)).is_ok()
                {
                    writes.fetch_add(2, Ordering::Relaxed);
                }
            }
        })
    });
    if busy {
        // Let the writer get going before the clock starts.
        while writes.load(Ordering::Relaxed) < 4 {
            thread::yield_now();
        }
    }
    let measured = wall_and_cpu_time(|| {
        let mut sum = 0u64;
        for chunk in pfns.chunks(CHURN_BATCH) {
            let guard = mem.read();
            for &pfn in chunk {
                sum = sum.wrapping_add(
                    guard
                        .find(black_box(pfn))
                        .map_or(0, |found| found.offset.0 + 1),
                );
            }
        }
        sum
    });
    stop.store(true, Ordering::Relaxed);
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    // A clock failure ends the run only now, with the writer stopped.
    let (elapsed, sum) = measured?;
    Ok(ChurnRun {
        time: elapsed,
        checksum: sum,
        writes: writes.load(Ordering::Relaxed),
    })
}
