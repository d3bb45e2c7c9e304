//! FreeBSD's loader block cache interface for C, backed by hotkern's cache.
//!
//! A C boot loader built around FreeBSD's stand/common/bcache.c calls
//! `bcache_init()` once, `bcache_add_dev()` from each driver's init,
//! `bcache_allocate()` when it opens a disk, `bcache_strategy()` for every
//! transfer and `bcache_free()` when it closes the disk. This library
//! exports those five functions with FreeBSD's signatures and meanings; the
//! cache behind them is [`HotkernCache`] (partial-block requests, read-ahead
//! per stream, metadata kept apart from file data) over the loader's own
//! `dv_strategy` callback. `include/bcache.h` declares them for C.
//!
//! Nothing unwinds or panics across the boundary: every pointer and size
//! is checked and bad arguments give `EINVAL`; the library allocates
//! through `bcache_hook_malloc`/`bcache_hook_free`, which the loader
//! provides (FreeBSD's loader has `malloc`/`free`), and a bug inside it
//! ends in `bcache_hook_panic`, which must not return. It is `no_std`
//! and built as a staticlib with `panic = "abort"` and the `staticlib`
//! feature, which installs those hooks as allocator and panic handler.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod device;
#[cfg(all(feature = "staticlib", not(test)))]
mod hooks;
#[cfg(test)]
mod tests;

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

use hotkern_bcache::{check_block_size, BlockCache, BlockDevice, HotkernCache};

use device::{CallbackDevice, Strategy};

/// `EIO` as FreeBSD (and Linux) number it: the device failed.
pub const EIO: c_int = 5;
/// `ENOMEM`: no memory for a cache.
pub const ENOMEM: c_int = 12;
/// `EINVAL`: a null or bad pointer, size, block or operation.
pub const EINVAL: c_int = 22;

/// Read, as FreeBSD's stand.h numbers it.
pub const F_READ: c_int = 0x0001;
/// Write.
pub const F_WRITE: c_int = 0x0002;
/// The operation bits of `rw` (above them: modifiers such as `F_NORA`).
pub const F_MASK: c_int = 0xFFFF;

/// Blocks a cache may take in all, set by `bcache_init`.
static TOTAL_BLOCKS: AtomicUsize = AtomicUsize::new(0);
/// Bytes per block, set by `bcache_init` (0 until then).
static BLOCK_SIZE: AtomicUsize = AtomicUsize::new(0);
/// Devices announced by `bcache_add_dev`.
static DEVICES: AtomicUsize = AtomicUsize::new(0);

/// FreeBSD's fallback when the share of the budget cannot be allocated.
const FALLBACK_BLOCKS: usize = 32;

/// Marks a live cache, so that a pointer that is not one (a device's
/// `dv_devdata` passed where `dv_cache` belongs) is refused.
const MAGIC: u64 = 0x6863_6163_6865_2131;

/// What `bcache_allocate` returns.
struct Handle {
    magic: u64,
    cache: HotkernCache<CallbackDevice>,
}

/// FreeBSD's `struct bcache_devdata` (stand/common/bootstrap.h).
#[repr(C)]
pub struct BcacheDevdata {
    /// The device's own strategy routine.
    pub dv_strategy: Option<Strategy>,
    /// Its first argument.
    pub dv_devdata: *mut c_void,
    /// What `bcache_allocate` returned, or null for no cache.
    pub dv_cache: *mut c_void,
}

/// `struct bcache_stats`: the counters of one cache (FreeBSD's
/// `bcachestat` command prints the same ones, summed over devices).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BcacheStats {
    /// `bcache_strategy` calls that reached the cache.
    pub requests: u64,
    /// Blocks found in the cache.
    pub hits: u64,
    /// Blocks read from the device.
    pub misses: u64,
    /// Requests sent (in part) straight to the device.
    pub bypasses: u64,
    /// Blocks read ahead.
    pub readahead: u64,
    /// Calls of `dv_strategy`.
    pub device_ops: u64,
    /// Bytes those calls moved.
    pub device_bytes: u64,
}

/// Sets the memory all caches share: `nblks` blocks of `bsize` bytes
/// (a power of two from 512 to 4096; anything else makes
/// `bcache_allocate` return null).
#[no_mangle]
pub extern "C" fn bcache_init(nblks: usize, bsize: usize) {
    TOTAL_BLOCKS.store(nblks, Ordering::Relaxed);
    BLOCK_SIZE.store(bsize, Ordering::Relaxed);
}

/// Announces `devices` more devices, among which later caches divide the
/// memory (negative counts are ignored).
#[no_mangle]
pub extern "C" fn bcache_add_dev(devices: c_int) {
    if let Ok(devices) = usize::try_from(devices) {
        let _ = DEVICES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(devices))
        });
    }
}

/// A cache for one device: the `bcache_init` blocks divided by the device
/// count rounded up to a power of two, as FreeBSD divides them; 32 blocks
/// if that share cannot be allocated; null if neither can, or before a
/// valid `bcache_init`.
#[no_mangle]
pub extern "C" fn bcache_allocate() -> *mut c_void {
    let block_size = BLOCK_SIZE.load(Ordering::Relaxed);
    if check_block_size(block_size).is_err() {
        return core::ptr::null_mut();
    }
    let devices = DEVICES.load(Ordering::Relaxed).max(1);
    let shift = devices.next_power_of_two().trailing_zeros();
    let blocks = TOTAL_BLOCKS.load(Ordering::Relaxed) >> shift;
    let cache = HotkernCache::try_new(
        CallbackDevice::new(block_size),
        blocks.saturating_mul(block_size),
    )
    .or_else(|_| {
        HotkernCache::try_new(
            CallbackDevice::new(block_size),
            FALLBACK_BLOCKS * block_size,
        )
    });
    let Ok(cache) = cache else {
        return core::ptr::null_mut();
    };
    let layout = core::alloc::Layout::new::<Handle>();
    // SAFETY: `Handle` is not zero-sized.
    let memory = unsafe { alloc::alloc::alloc(layout) }.cast::<Handle>();
    if memory.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: `memory` is fresh, non-null and laid out for a `Handle`.
    unsafe {
        memory.write(Handle {
            magic: MAGIC,
            cache,
        })
    };
    memory.cast()
}

/// The live cache `cache` points to, or `None`.
///
/// # Safety
/// `cache` is null or points to at least a `u64`'s worth of readable memory.
unsafe fn handle<'a>(cache: *mut c_void) -> Option<&'a mut Handle> {
    let handle = cache.cast::<Handle>();
    if handle.is_null() || !handle.is_aligned() {
        return None;
    }
    // SAFETY: non-null and aligned; the caller promises it is readable.
    let handle = unsafe { &mut *handle };
    (handle.magic == MAGIC).then_some(handle)
}

/// Frees a cache from `bcache_allocate`; null is ignored, as is a pointer
/// that is not a live cache.
///
/// # Safety
/// `cache` is null or a pointer `bcache_allocate` returned that no
/// request is using.
#[no_mangle]
pub unsafe extern "C" fn bcache_free(cache: *mut c_void) {
    // SAFETY: the caller's promise.
    let Some(live) = (unsafe { handle(cache) }) else {
        return;
    };
    live.magic = 0;
    let handle = cache.cast::<Handle>();
    // SAFETY: `handle` came from `alloc` with this layout in
    // `bcache_allocate` and holds an initialised `Handle`.
    unsafe {
        core::ptr::drop_in_place(handle);
        alloc::alloc::dealloc(handle.cast(), core::alloc::Layout::new::<Handle>());
    }
}

/// FreeBSD's `bcache_strategy()`: reads (`rw & F_MASK == F_READ`) or
/// writes (`F_WRITE`) `size` bytes at block `blk` through the cache in
/// `devdata->dv_cache` (straight through `dv_strategy` when it is null),
/// and stores the bytes moved in `*rsize` (if not null). Returns 0, the
/// nonzero value `dv_strategy` returned (`EIO` for a short transfer), or
/// `EINVAL` for a null `devdata`, `dv_strategy` or `buf`, a negative
/// `blk`, an unknown operation or a `dv_cache` that is not a live cache.
/// On error the cache holds nothing of the failed transfer.
///
/// # Safety
/// `devdata` is null or points to a `BcacheDevdata`; `buf` is null or
/// valid for `size` bytes; `rsize` is null or writable; `dv_strategy`
/// does not call back into this cache.
#[no_mangle]
pub unsafe extern "C" fn bcache_strategy(
    devdata: *mut c_void,
    rw: c_int,
    blk: i64,
    size: usize,
    buf: *mut c_char,
    rsize: *mut usize,
) -> c_int {
    let devdata = devdata.cast::<BcacheDevdata>();
    if devdata.is_null() || !devdata.is_aligned() {
        return EINVAL;
    }
    // SAFETY: the caller's promise for a non-null `devdata`.
    let devdata = unsafe { &*devdata };
    let Some(strategy) = devdata.dv_strategy else {
        return EINVAL;
    };
    let operation = rw & F_MASK;
    if blk < 0 || (size > 0 && buf.is_null()) || (operation != F_READ && operation != F_WRITE) {
        return EINVAL;
    }
    if devdata.dv_cache.is_null() {
        // SAFETY: the caller's promises, passed on as FreeBSD does.
        return unsafe { strategy(devdata.dv_devdata, operation, blk, size, buf, rsize) };
    }
    // SAFETY: a non-null `dv_cache` is a cache pointer, the caller says.
    let Some(handle) = (unsafe { handle(devdata.dv_cache) }) else {
        return EINVAL;
    };
    let block_size = handle.cache.block_size();
    let past_end = (blk as u64).checked_add(size.div_ceil(block_size) as u64);
    if past_end.is_none_or(|end| end > handle.cache.device().block_count()) {
        return EINVAL;
    }
    let mut moved = 0;
    let code = if size == 0 {
        0
    } else {
        // SAFETY: `buf` is non-null and valid for `size` bytes.
        let buf = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        transfer(
            handle,
            strategy,
            devdata.dv_devdata,
            operation,
            blk,
            buf,
            &mut moved,
        )
    };
    if !rsize.is_null() {
        // SAFETY: the caller's promise for a non-null `rsize`.
        unsafe { rsize.write(moved) };
    }
    code
}

/// A checked request through the cache.
fn transfer(
    handle: &mut Handle,
    strategy: Strategy,
    devdata: *mut c_void,
    operation: c_int,
    blk: i64,
    buf: &mut [u8],
    moved: &mut usize,
) -> c_int {
    let cache = &mut handle.cache;
    cache.device().attach(strategy, devdata);
    let block = blk as u64;
    let result = if operation == F_READ {
        cache.read(block, 0, buf)
    } else {
        cache.write(block, 0, buf)
    };
    if result.is_ok() {
        *moved = buf.len();
        return 0;
    }
    let Some(failure) = cache.device().failure() else {
        return EINVAL;
    };
    let end = block + buf.len().div_ceil(cache.block_size()) as u64;
    if operation == F_READ && (failure.short || failure.end > end) {
        // The disk ended inside the failed transfer, or that transfer went
        // past the request: read-ahead over the end of a disk whose size
        // the cache does not know. Read just the request from the device,
        // as FreeBSD's bypass does: it moves what the disk has.
        let mut got = 0usize;
        let len = buf.len();
        // SAFETY: `buf` is valid for `len` bytes and `got` is a live local.
        let code =
            unsafe { strategy(devdata, F_READ, blk, len, buf.as_mut_ptr().cast(), &mut got) };
        *moved = if code == 0 { got.min(len) } else { 0 };
        return code;
    }
    failure.code
}

/// Copies the counters of `cache` to `*out`: 0, or `EINVAL` for a null
/// `out` or a `cache` that is not a live cache.
///
/// # Safety
/// `cache` is null or a pointer `bcache_allocate` returned; `out` is null
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn bcache_get_stats(cache: *mut c_void, out: *mut BcacheStats) -> c_int {
    // SAFETY: the caller's promise.
    let Some(handle) = (unsafe { handle(cache) }) else {
        return EINVAL;
    };
    if out.is_null() || !out.is_aligned() {
        return EINVAL;
    }
    let stats = handle.cache.stats();
    let copy = BcacheStats {
        requests: stats.requests,
        hits: stats.block_hits,
        misses: stats.block_misses,
        bypasses: stats.bypasses,
        readahead: stats.readahead_issued,
        device_ops: stats.device_ops,
        device_bytes: stats.device_bytes,
    };
    // SAFETY: non-null, aligned and writable, the caller says.
    unsafe { out.write(copy) };
    0
}
