//! The C side's `dv_strategy` callback as a [`BlockDevice`].

use core::cell::Cell;
use core::ffi::{c_char, c_int, c_void};

use hotkern_bcache::{BlockDevice, IoError};

use crate::{EIO, F_READ, F_WRITE};

/// `int (*dv_strategy)(void *devdata, int rw, daddr_t blk, size_t size,
/// char *buf, size_t *rsize)`, as in FreeBSD's stand/common/bootstrap.h.
pub type Strategy = unsafe extern "C" fn(
    devdata: *mut c_void,
    rw: c_int,
    blk: i64,
    size: usize,
    buf: *mut c_char,
    rsize: *mut usize,
) -> c_int;

/// The largest transfer handed to `dv_strategy` at once, in blocks. The
/// FreeBSD interface has no such limit; this one keeps a read-ahead
/// plus a miss within what any BIOS or UEFI disk driver moves in one go.
const MAX_TRANSFER_BLOCKS: u32 = 1 << 12;

/// A failed call of `dv_strategy`: its return value (`EIO` for a short
/// transfer), the blocks it was asked for, and whether it moved fewer
/// bytes than asked while returning 0 (the disk ends inside the transfer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub code: c_int,
    pub end: u64,
    pub short: bool,
}

/// A disk reached through the callback the caller passes with each
/// request: the cache keeps the device, the callback and its argument
/// change per call (FreeBSD passes them in `struct bcache_devdata`).
///
/// FreeBSD's interface does not tell the cache how large the disk is, so
/// the device claims every block a `daddr_t` can name; a read-ahead past
/// the real end fails, and [`crate::bcache_strategy`] then reads just
/// what was asked for straight from the device.
pub(crate) struct CallbackDevice {
    block_size: usize,
    strategy: Cell<Option<Strategy>>,
    devdata: Cell<*mut c_void>,
    failure: Cell<Option<Failure>>,
}

impl CallbackDevice {
    pub fn new(block_size: usize) -> Self {
        CallbackDevice {
            block_size,
            strategy: Cell::new(None),
            devdata: Cell::new(core::ptr::null_mut()),
            failure: Cell::new(None),
        }
    }

    /// Sets the callback for the requests that follow.
    pub fn attach(&self, strategy: Strategy, devdata: *mut c_void) {
        self.strategy.set(Some(strategy));
        self.devdata.set(devdata);
        self.failure.set(None);
    }

    /// The last failed call since [`attach`](Self::attach).
    pub fn failure(&self) -> Option<Failure> {
        self.failure.get()
    }

    fn call(&self, rw: c_int, first: u64, buf: *mut c_char, len: usize) -> Result<(), IoError> {
        let end = first + (len / self.block_size) as u64;
        let fail = |code, short| {
            self.failure.set(Some(Failure { code, end, short }));
            Err(IoError::Medium { block: first })
        };
        let Some(strategy) = self.strategy.get() else {
            return fail(EIO, false);
        };
        let mut done = 0usize;
        // SAFETY: `buf` is valid for `len` bytes (a slice of the cache's
        // memory or the caller's buffer), `done` is a live local, and
        // `first` is below `i64::MAX` because block_count() is.
        let code = unsafe { strategy(self.devdata.get(), rw, first as i64, len, buf, &mut done) };
        if code != 0 {
            return fail(code, false);
        }
        if done != len {
            // A short transfer: the disk ends inside the request.
            return fail(EIO, true);
        }
        Ok(())
    }
}

impl BlockDevice for CallbackDevice {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        i64::MAX as u64
    }

    fn max_transfer_blocks(&self) -> u32 {
        MAX_TRANSFER_BLOCKS
    }

    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        hotkern_bcache::check_transfer(self, first, buf.len())?;
        self.call(F_READ, first, buf.as_mut_ptr().cast(), buf.len())
    }

    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        hotkern_bcache::check_transfer(self, first, data.len())?;
        // FreeBSD's dv_strategy takes `char *` for both directions; a
        // write callback only reads from it.
        self.call(F_WRITE, first, data.as_ptr().cast_mut().cast(), data.len())
    }
}
