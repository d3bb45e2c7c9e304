//! Time from the TSC, calibrated against the PIT.
//!
//! The PC's 8254 counts at 1.193182 MHz whatever the CPU. The kernel starts
//! channel 2 counting down (its gate is bit 0 of port 0x61), then reads the
//! counter together with the TSC at the start and about 10 ms later; the
//! two differences give the TSC's rate. Each reading keeps the best of a few
//! tries, the one whose two TSC reads around the counter read were closest:
//! on a loaded host the vCPU can be descheduled at any moment, and waiting
//! for the count to expire (the classic way) then overshoots by the whole
//! time slice. Linux's `quick_pit_calibrate` guards its reads the same way.
//! Under QEMU's TCG the TSC runs at the host's rate and the PIT in real
//! time, so the figure is the host's TSC frequency.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::arch::instructions::{inb, outb, rdtsc};

/// The PIT's input clock.
const PIT_HZ: u64 = 1_193_182;
/// PIT ticks between the two readings: 10 ms.
const PIT_TICKS: u64 = 11_932;
/// Port 0x61: bit 0 gates channel 2, bit 1 drives the speaker.
const PORT_B: u16 = 0x61;
const PIT_CHANNEL2: u16 = 0x42;
const PIT_COMMAND: u16 = 0x43;
/// Tries per reading; the tightest one is kept.
const TRIES: usize = 5;
/// Measurements before giving up (each fails only if the vCPU was away for
/// most of 55 ms, or the PIT does not count).
const ATTEMPTS: usize = 4;
/// Polls of the counter before giving up on a PIT that does not count.
const MAX_POLLS: u32 = 10_000_000;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);

/// One reading: the PIT count and the TSC half-way through reading it, and
/// how many TSC ticks the read took (its uncertainty).
#[derive(Clone, Copy)]
struct Reading {
    count: u16,
    tsc: u64,
    window: u64,
}

/// Latches and reads channel 2's count, between two TSC reads.
///
/// # Safety
/// Channel 2 is programmed and used by nobody else.
unsafe fn read_once() -> Reading {
    let before = rdtsc();
    // SAFETY: the latch command and the two data reads touch only channel 2
    // (caller's contract).
    let count = unsafe {
        outb(PIT_COMMAND, 0b1000_0000);
        let low = inb(PIT_CHANNEL2);
        let high = inb(PIT_CHANNEL2);
        u16::from_le_bytes([low, high])
    };
    let after = rdtsc();
    Reading {
        count,
        tsc: before + (after - before) / 2,
        window: after - before,
    }
}

/// The tightest of [`TRIES`] readings.
///
/// # Safety
/// As [`read_once`].
unsafe fn read_best() -> Reading {
    // SAFETY: forwarded contract.
    let mut best = unsafe { read_once() };
    for _ in 1..TRIES {
        // SAFETY: forwarded contract.
        let reading = unsafe { read_once() };
        if reading.window < best.window {
            best = reading;
        }
    }
    best
}

/// Measures the TSC's frequency; returns it in Hz, or `None` if the PIT did
/// not count in [`ATTEMPTS`] tries (then [`micros_since`] reports nothing).
pub fn calibrate() -> Option<u64> {
    let hz = (0..ATTEMPTS).find_map(|_| measure())?;
    TSC_HZ.store(hz, Ordering::Relaxed);
    Some(hz)
}

/// One measurement, or `None` if the count did not move as it should.
fn measure() -> Option<u64> {
    // SAFETY: ports 0x42, 0x43 and 0x61 are the PC's PIT channel 2 and its
    // gate; the kernel uses channel 2 only here, and restores port 0x61.
    let (start, end, wrapped) = unsafe {
        let saved = inb(PORT_B);
        // Gate on, speaker off.
        outb(PORT_B, (saved & !0x02) | 0x01);
        // Channel 2, low byte then high byte, mode 0, binary, from 0xffff:
        // 55 ms before the count passes zero, far more than the 10 ms
        // measured unless the vCPU is away most of that time.
        outb(PIT_COMMAND, 0b1011_0000);
        outb(PIT_CHANNEL2, 0xff);
        outb(PIT_CHANNEL2, 0xff);
        let start = read_best();
        let mut polls = 0;
        while u64::from(start.count.wrapping_sub(read_once().count)) < PIT_TICKS
            && polls < MAX_POLLS
        {
            polls += 1;
        }
        let end = read_best();
        // In mode 0 the output rises when the count passes zero and stays
        // up: then the count wrapped and the difference means nothing.
        let wrapped = inb(PORT_B) & 0x20 != 0;
        outb(PORT_B, saved);
        (start, end, wrapped)
    };
    let ticks = u64::from(start.count.wrapping_sub(end.count));
    if wrapped || ticks < PIT_TICKS || end.tsc <= start.tsc {
        return None;
    }
    Some((u128::from(end.tsc - start.tsc) * u128::from(PIT_HZ) / u128::from(ticks)) as u64)
}

/// Microseconds from TSC value `since` to now, once calibrated.
pub fn micros_since(since: u64) -> Option<u64> {
    let hz = TSC_HZ.load(Ordering::Relaxed);
    (hz != 0).then(|| {
        let ticks = u128::from(rdtsc().saturating_sub(since));
        (ticks * 1_000_000 / u128::from(hz)) as u64
    })
}

/// The current TSC value (for [`micros_since`]).
pub fn now() -> u64 {
    rdtsc()
}

/// Nanoseconds since the TSC was zero (the tracer's clock), or the raw
/// count before calibration (it then still never goes backwards).
pub fn nanos() -> u64 {
    let hz = TSC_HZ.load(Ordering::Relaxed);
    let ticks = rdtsc();
    if hz == 0 {
        return ticks;
    }
    (u128::from(ticks) * 1_000_000_000 / u128::from(hz)) as u64
}
