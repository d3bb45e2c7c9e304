//! Random read/write sequences on every cache, checked byte for byte
//! against a plain copy of what the device must hold.

mod common;

use common::{pattern, SharedDisk};
use hotkern_bcache::{BlockCache, CacheKind, StripedSet};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Read { at: u64, len: usize },
    Write { at: u64, len: usize, seed: u64 },
}

fn ops(device_bytes: u64, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..device_bytes, 0..max_len).prop_map(|(at, len)| Op::Read { at, len }),
        // Sequential-looking runs matter for read-ahead: bias reads to 512 bytes.
        3 => (0..device_bytes / 512).prop_map(|b| Op::Read { at: b * 512, len: 512 }),
        1 => (0..device_bytes, 0..max_len, any::<u64>())
            .prop_map(|(at, len, seed)| Op::Write { at, len, seed }),
    ];
    prop::collection::vec(op, 1..120)
}

/// Runs `ops` on `cache`, checking every read against `model`; returns the
/// number of mismatching reads (always expected to be zero).
fn run(cache: &mut dyn BlockCache, model: &mut [u8], ops: &[Op]) -> usize {
    let bs = cache.block_size() as u64;
    let total = model.len() as u64;
    let mut mismatches = 0;
    for op in ops {
        match *op {
            Op::Read { at, len } => {
                let len = len.min((total - at) as usize);
                let mut buf = vec![0u8; len];
                cache
                    .read(at / bs, (at % bs) as usize, &mut buf)
                    .expect("read inside the device");
                if buf[..] != model[at as usize..at as usize + len] {
                    mismatches += 1;
                }
            }
            Op::Write { at, len, seed } => {
                let len = len.min((total - at) as usize);
                let data = pattern(len, seed);
                // Offsets beyond one block are allowed and normalised.
                let block = at / bs / 2;
                let offset = (at - block * bs) as usize;
                cache
                    .write(block, offset, &data)
                    .expect("write inside the device");
                model[at as usize..at as usize + len].copy_from_slice(&data);
            }
        }
    }
    mismatches
}

fn check_kind(kind: CacheKind, block_size: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let disk = SharedDisk::new(96, block_size, 8, 7);
    let mut model = disk.snapshot();
    // A budget of 24 blocks forces evictions and wrap-arounds.
    let mut cache = kind.build(disk.clone(), 24 * block_size);
    let mismatches = run(&mut *cache, &mut model, ops);
    prop_assert_eq!(mismatches, 0, "{} served stale or wrong data", kind);
    prop_assert!(disk.snapshot() == model, "{} left the device wrong", kind);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_cache_matches_the_device_512(ops in ops(96 * 512, 6000)) {
        for kind in CacheKind::ALL {
            check_kind(kind, 512, &ops)?;
        }
    }

    #[test]
    fn every_cache_matches_the_device_4096(ops in ops(96 * 4096, 40000)) {
        for kind in CacheKind::ALL {
            check_kind(kind, 4096, &ops)?;
        }
    }

    #[test]
    fn striped_sets_match_their_members(ops in ops(3 * 96 * 512, 9000), stripe in 1u64..12) {
        for kind in CacheKind::ALL {
            let disks: Vec<SharedDisk> =
                (0..3).map(|i| SharedDisk::new(96, 512, 8, 11 + i)).collect();
            let members = kind.build_set(disks.clone(), 3 * 24 * 512).unwrap();
            let mut set = StripedSet::new(members, stripe).unwrap();
            let usable = set.block_count() as usize * 512;
            // The model: logical bytes gathered from the members' stripes.
            let gather = |disks: &[SharedDisk]| -> Vec<u8> {
                (0..usable / 512)
                    .flat_map(|b| {
                        let s = b as u64 / stripe;
                        let member = (s % 3) as usize;
                        let mb = (s / 3) * stripe + b as u64 % stripe;
                        let bytes = disks[member].snapshot();
                        bytes[mb as usize * 512..(mb as usize + 1) * 512].to_vec()
                    })
                    .collect()
            };
            let mut model = gather(&disks);
            let clipped: Vec<Op> = ops
                .iter()
                .filter(|op| match op {
                    Op::Read { at, .. } | Op::Write { at, .. } => (*at as usize) < usable,
                })
                .cloned()
                .collect();
            let mismatches = run(&mut set, &mut model, &clipped);
            prop_assert_eq!(mismatches, 0, "striped {} served wrong data", kind);
            prop_assert!(gather(&disks) == model, "striped {} left members wrong", kind);
        }
    }
}

#[test]
fn requests_outside_the_device_are_refused_and_change_nothing() {
    for kind in CacheKind::ALL {
        let disk = SharedDisk::new(16, 512, 8, 3);
        let before = disk.snapshot();
        let mut cache = kind.build(disk.clone(), 8 * 512);
        let mut buf = [0u8; 600];
        assert!(cache.read(15, 0, &mut buf).is_err(), "{kind}");
        assert!(
            cache.read(u64::MAX, usize::MAX, &mut buf).is_err(),
            "{kind}"
        );
        assert!(cache.write(16, 0, &[1]).is_err(), "{kind}");
        assert!(cache.write(0, 16 * 512 - 1, &[1, 2]).is_err(), "{kind}");
        assert_eq!(cache.stats().device_ops, 0, "{kind} touched the device");
        assert!(disk.snapshot() == before);
        // The last byte is reachable, and an empty request at the end is fine.
        cache.read(0, 16 * 512 - 1, &mut buf[..1]).unwrap();
        assert_eq!(buf[0], before[16 * 512 - 1]);
        cache.read(16, 0, &mut []).unwrap();
    }
}
