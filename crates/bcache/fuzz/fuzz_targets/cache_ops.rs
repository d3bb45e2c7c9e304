//! Any sequence of reads and writes, on every cache design, returns exactly
//! what a plain byte array would.
#![no_main]

use hotkern_bcache::{BlockCache, CacheKind, MemoryDevice};
use libfuzzer_sys::fuzz_target;

const BLOCKS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&setup, ops)) = data.split_first() else {
        return;
    };
    let block_size = if setup & 1 == 0 { 512 } else { 4096 };
    let kind = CacheKind::ALL[usize::from(setup >> 1) % 4];
    let budget = (usize::from(setup >> 3) + 1) * block_size;
    let total = BLOCKS * block_size;
    let mut model: Vec<u8> = (0..total).map(|i| (i * 31 + i / 512) as u8).collect();
    let disk = MemoryDevice::new(model.clone(), block_size)
        .and_then(|d| d.with_max_transfer(1 + u32::from(setup % 7)))
        .expect("valid geometry");
    let mut cache = kind.build(disk, budget);
    for (step, op) in ops.chunks_exact(6).enumerate() {
        let at = (usize::from(u16::from_le_bytes([op[1], op[2]])) * 7) % total;
        let len =
            (usize::from(u16::from_le_bytes([op[3], op[4]])) % (3 * block_size)).min(total - at);
        let (block, offset) = ((at / block_size) as u64, at % block_size);
        if op[0] % 4 == 0 {
            let bytes: Vec<u8> = (0..len).map(|i| op[5].wrapping_add(i as u8)).collect();
            cache
                .write(block, offset, &bytes)
                .expect("write inside the device");
            model[at..at + len].copy_from_slice(&bytes);
        } else {
            let mut buf = vec![0u8; len];
            cache
                .read(block, offset, &mut buf)
                .expect("read inside the device");
            assert!(
                buf == model[at..at + len],
                "{kind}: step {step} read wrong bytes"
            );
        }
    }
});
