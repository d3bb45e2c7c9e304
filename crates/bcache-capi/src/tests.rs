//! The interface called from Rust as C would call it, over a disk in
//! memory (the C test, tests/c/t_bcache.c, does the same from C).

use core::ffi::{c_char, c_int, c_void};

use crate::*;

const BLOCKS: usize = 4096;

unsafe extern "C" fn memory_strategy(
    devdata: *mut c_void,
    rw: c_int,
    blk: i64,
    size: usize,
    buf: *mut c_char,
    rsize: *mut usize,
) -> c_int {
    // SAFETY: the tests pass a `Vec<u8>` as devdata and valid buffers.
    let disk = unsafe { &mut *devdata.cast::<Vec<u8>>() };
    let at = blk as usize * 512;
    if at >= disk.len() {
        return EIO;
    }
    let n = size.min(disk.len() - at);
    // SAFETY: `buf` holds `size` bytes, `n` of them moved.
    unsafe {
        if rw & F_MASK == F_READ {
            core::ptr::copy_nonoverlapping(disk[at..].as_ptr(), buf.cast(), n);
        } else {
            core::ptr::copy_nonoverlapping(buf.cast(), disk[at..].as_mut_ptr(), n);
        }
        if !rsize.is_null() {
            *rsize = n;
        }
    }
    0
}

#[test]
fn reads_writes_and_refusals_through_the_c_interface() {
    let mut disk: Vec<u8> = (0..BLOCKS * 512).map(|i| (i * 7 + i / 512) as u8).collect();
    let original = disk.clone();
    bcache_init(256, 512);
    bcache_add_dev(1);
    let cache = bcache_allocate();
    assert!(!cache.is_null());
    let mut devdata = BcacheDevdata {
        dv_strategy: Some(memory_strategy),
        dv_devdata: (&mut disk as *mut Vec<u8>).cast(),
        dv_cache: cache,
    };
    let dd: *mut c_void = (&mut devdata as *mut BcacheDevdata).cast();
    let mut buf = vec![0u8; 5000];
    let mut moved = 0usize;
    for (blk, size) in [
        (0i64, 1usize),
        (3, 5000),
        (100, 512),
        (BLOCKS as i64 - 2, 1024),
    ] {
        // SAFETY: valid devdata, buffer and rsize.
        let code =
            unsafe { bcache_strategy(dd, F_READ, blk, size, buf.as_mut_ptr().cast(), &mut moved) };
        assert_eq!((code, moved), (0, size));
        let at = blk as usize * 512;
        assert_eq!(buf[..size], original[at..at + size]);
    }
    // Past the end: what the disk has, then EIO.
    // SAFETY: as above.
    let code = unsafe {
        bcache_strategy(
            dd,
            F_READ,
            BLOCKS as i64 - 1,
            1024,
            buf.as_mut_ptr().cast(),
            &mut moved,
        )
    };
    assert_eq!((code, moved), (0, 512));
    // SAFETY: as above.
    let code = unsafe {
        bcache_strategy(
            dd,
            F_READ,
            BLOCKS as i64,
            512,
            buf.as_mut_ptr().cast(),
            &mut moved,
        )
    };
    assert_eq!(code, EIO);
    // SAFETY: as above; null pointers are what is being refused.
    unsafe {
        assert_eq!(
            bcache_strategy(
                core::ptr::null_mut(),
                F_READ,
                0,
                1,
                buf.as_mut_ptr().cast(),
                &mut moved
            ),
            EINVAL
        );
        assert_eq!(
            bcache_strategy(dd, F_READ, -5, 1, buf.as_mut_ptr().cast(), &mut moved),
            EINVAL
        );
        assert_eq!(
            bcache_strategy(dd, 7, 0, 1, buf.as_mut_ptr().cast(), &mut moved),
            EINVAL
        );
        assert_eq!(
            bcache_strategy(dd, F_READ, 0, 1, core::ptr::null_mut(), &mut moved),
            EINVAL
        );
    }
    let mut patch = [0xABu8; 300];
    // SAFETY: as above.
    let code =
        unsafe { bcache_strategy(dd, F_WRITE, 10, 300, patch.as_mut_ptr().cast(), &mut moved) };
    assert_eq!(code, 0);
    // SAFETY: as above.
    let code = unsafe { bcache_strategy(dd, F_READ, 10, 512, buf.as_mut_ptr().cast(), &mut moved) };
    assert_eq!(code, 0);
    assert_eq!(buf[..300], [0xAB; 300]);
    assert_eq!(buf[300..512], original[10 * 512 + 300..11 * 512]);
    let mut stats = BcacheStats::default();
    // SAFETY: a live cache and a writable out.
    assert_eq!(unsafe { bcache_get_stats(cache, &mut stats) }, 0);
    assert!(stats.requests >= 7 && stats.device_ops > 0);
    // SAFETY: the cache is no longer used.
    unsafe { bcache_free(cache) };
    bcache_init(256, 1000);
    assert!(bcache_allocate().is_null());
}
