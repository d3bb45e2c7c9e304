//! Byte ranges from firmware memory maps turned into frames:
//! `PfnRange::inside_bytes` must never hand out a byte outside the range,
//! `PfnRange::covering_bytes` must never leave a byte of it out, and both
//! must be the tightest such ranges.

use hotkern_physmem::{PfnRange, PhysAddr, PAGE_SIZE};
use proptest::prelude::*;

/// Bases and lengths below 2^52 (physmem's limit) with a bias to page
/// edges, where rounding goes wrong.
fn byte_range() -> impl Strategy<Value = (u64, u64)> {
    let near_edge = (
        0u64..1 << 40,
        prop_oneof![Just(0u64), Just(1), Just(PAGE_SIZE - 1)],
    )
        .prop_map(|(page, delta)| page * PAGE_SIZE + delta);
    let value = prop_oneof![0u64..1 << 52, near_edge];
    let length = prop_oneof![0u64..4 * PAGE_SIZE, 0u64..1 << 40];
    (value, length)
}

proptest! {
    #[test]
    fn inside_holds_only_bytes_of_the_range((base, length) in byte_range()) {
        let end = base + length;
        match PfnRange::inside_bytes(PhysAddr(base), length) {
            Some(range) => {
                prop_assert!(range.start < range.end);
                prop_assert!(range.start.phys_addr().0 >= base);
                prop_assert!(range.end.phys_addr().0 <= end);
                // Tightest: one more page on either side leaves the range.
                prop_assert!(range.start.phys_addr().0 < base + PAGE_SIZE);
                prop_assert!(range.end.phys_addr().0 + PAGE_SIZE > end);
            }
            // No page-aligned page fits in [base, end).
            None => prop_assert!(base.div_ceil(PAGE_SIZE) * PAGE_SIZE + PAGE_SIZE > end),
        }
    }

    #[test]
    fn covering_holds_every_byte_of_the_range((base, length) in byte_range()) {
        let end = base + length;
        match PfnRange::covering_bytes(PhysAddr(base), length) {
            Some(range) => {
                prop_assert!(range.start < range.end);
                prop_assert!(range.start.phys_addr().0 <= base);
                prop_assert!(range.end.phys_addr().0 >= end);
                // Tightest: the first and last page each hold a byte of it.
                prop_assert!(range.start.phys_addr().0 + PAGE_SIZE > base);
                prop_assert!(range.end.phys_addr().0 - PAGE_SIZE < end);
            }
            None => prop_assert_eq!(length, 0),
        }
    }

    #[test]
    fn inside_is_within_covering((base, length) in byte_range()) {
        if let Some(inside) = PfnRange::inside_bytes(PhysAddr(base), length) {
            let covering = PfnRange::covering_bytes(PhysAddr(base), length).unwrap();
            prop_assert!(covering.start <= inside.start && inside.end <= covering.end);
            prop_assert!(inside.pages() <= covering.pages());
        }
    }
}

#[test]
fn overflowing_ranges_are_refused() {
    assert_eq!(PfnRange::inside_bytes(PhysAddr(u64::MAX - 10), 20), None);
    assert_eq!(PfnRange::covering_bytes(PhysAddr(u64::MAX), 2), None);
    assert_eq!(PfnRange::covering_bytes(PhysAddr(0x1000), 0), None);
}
