//! Hotkern's internal decisions, checked against its private state: how
//! read-ahead windows are tuned, which hits count, where runs are placed.

use super::*;
use crate::MemoryDevice;

fn cache() -> HotkernCache<MemoryDevice> {
    HotkernCache::new(MemoryDevice::zeroed(4096, 512).unwrap(), 1 << 20)
}

#[test]
fn a_new_stream_starts_at_the_initial_window() {
    let mut c = cache();
    assert_eq!(c.tune(0), 32);
}

#[test]
fn window_doubles_when_consumed_and_halves_when_mostly_wasted() {
    let mut c = cache();
    c.streams[0] = Stream {
        active: true,
        window: 32,
        ra_start: 100,
        ra_end: 132,
        consumed: 32,
        ..Stream::default()
    };
    assert_eq!(c.tune(0), 64);
    c.streams[0].consumed = 15;
    assert_eq!(c.tune(0), 32);
    c.streams[0].consumed = 20;
    assert_eq!(c.tune(0), 32, "more than half used: unchanged");
    c.streams[0].consumed = 16;
    assert_eq!(c.tune(0), 32, "exactly half used: unchanged");
    c.streams[0].window = c.io_cap;
    c.streams[0].consumed = 32;
    assert_eq!(c.tune(0), c.io_cap, "never above the per-I/O cap");
    c.streams[0].window = 1;
    c.streams[0].consumed = 0;
    assert_eq!(c.tune(0), 1, "never below one block");
}

#[test]
fn only_hits_inside_the_streams_last_window_count_as_consumed() {
    let mut c = cache();
    c.streams[1] = Stream {
        active: true,
        window: 32,
        ra_start: 100,
        ra_end: 132,
        ..Stream::default()
    };
    // Read-ahead blocks just outside the window (another window's, or
    // another stream's) and at both of its ends.
    for (slot, block) in [99u64, 100, 131, 132].into_iter().enumerate() {
        c.slots[slot] = Slot {
            block,
            readahead: true,
        };
        c.hit(slot, 1);
        assert!(!c.slots[slot].readahead, "a read-ahead block is used once");
    }
    assert_eq!(c.streams[1].consumed, 2, "blocks 100 and 131");
    assert_eq!(c.stats.readahead_consumed, 4);
    assert_eq!(c.stats.block_hits, 4);
    // A second hit on a used block counts nothing more.
    c.hit(1, 1);
    assert_eq!((c.streams[1].consumed, c.stats.readahead_consumed), (2, 4));
}

#[test]
fn a_run_that_fits_before_the_rings_end_goes_there() {
    let mut c = cache();
    let Ring { start, len, .. } = c.rings[STREAM_RING];
    c.rings[STREAM_RING].head = len - 4;
    assert_eq!(c.allocate(STREAM_RING, 4), start + len - 4);
    assert_eq!(
        c.rings[STREAM_RING].head, 0,
        "full: the next run starts over"
    );
    c.rings[STREAM_RING].head = len - 4;
    assert_eq!(c.allocate(STREAM_RING, 5), start, "too long: wraps");
    assert_eq!(c.rings[STREAM_RING].head, 5);
}

#[test]
fn read_ahead_is_capped_at_the_device_transfer() {
    let device = MemoryDevice::zeroed(8192, 512)
        .unwrap()
        .with_max_transfer(16)
        .unwrap();
    let mut c = HotkernCache::new(device, 1 << 20);
    let mut buf = [0u8; 512];
    for block in 0..1000 {
        c.read(block, 0, &mut buf).unwrap();
    }
    let stats = c.stats();
    assert!(stats.device_bytes <= 1016 * 512, "{stats}");
    assert!(stats.device_ops >= 1000 / 16, "{stats}");
}

/// Where a run goes: read-ahead runs, and runs too long for the reuse
/// ring, to the stream ring; any other run (metadata), up to the reuse
/// ring's whole length, to the reuse ring.
#[test]
fn runs_go_to_the_reuse_ring_unless_read_ahead_or_too_long() {
    // 8 slots: a reuse ring of 2 (slots 6 and 7), a stream ring of 6, and
    // at most 6 / 2 = 3 blocks a device operation.
    let mut c = HotkernCache::new(MemoryDevice::zeroed(4096, 512).unwrap(), 8 * 512);
    assert_eq!((c.rings[REUSE_RING].start, c.rings[REUSE_RING].len), (6, 2));
    assert_eq!(c.io_cap, 3);
    let slot = |c: &HotkernCache<MemoryDevice>, block: u64| c.index[&block];
    c.read(100, 0, &mut [0u8; 512]).unwrap();
    assert!(slot(&c, 100) >= 6, "one block, no read-ahead: reuse ring");
    // Far from block 100: a new stream, so no read-ahead.
    c.read(200, 0, &mut [0u8; 2 * 512]).unwrap();
    assert!(
        slot(&c, 200) >= 6 && slot(&c, 201) >= 6,
        "as long as the reuse ring"
    );
    c.read(300, 0, &mut [0u8; 3 * 512]).unwrap();
    assert!((300..303).all(|b| slot(&c, b) < 6), "longer: stream ring");
    // Continues the stream at 300: one block missed and 2 read ahead.
    c.read(303, 0, &mut [0u8; 512]).unwrap();
    assert_eq!(c.stats.readahead_issued, 2);
    assert!(
        (303..306).all(|b| slot(&c, b) < 6),
        "read-ahead: stream ring"
    );
}

/// A sequential miss as long as the largest transfer leaves no room for
/// read-ahead and issues none; the stream's last read-ahead, and how much
/// of it was used, still decide the next window.
#[test]
fn a_miss_with_no_room_for_read_ahead_keeps_the_last_window_as_evidence() {
    let device = MemoryDevice::zeroed(4096, 512)
        .unwrap()
        .with_max_transfer(128)
        .unwrap();
    let mut c = HotkernCache::new(device, 1 << 20);
    assert_eq!(c.io_cap, 128);
    let last = Stream {
        active: true,
        last: 1009,
        next: 1010,
        window: 32,
        ra_start: 1002,
        ra_end: 1034,
        consumed: 8,
        used: 1,
    };
    c.streams[0] = last;
    c.read(1034, 0, &mut vec![0u8; 128 * 512]).unwrap();
    assert_eq!(c.stats.readahead_issued, 0);
    let s = c.streams[0];
    assert_eq!((s.ra_start, s.ra_end, s.consumed), (1002, 1034, 8));
    assert_eq!(s.window, 16, "8 of 32 used: halved");
}
