//! `bcachestat`: what a cache did and what it asked of the device.

use core::fmt;
use core::ops::Add;

/// Counters of one cache (or the sum over a striped set's members).
///
/// Hits and misses count blocks, as FreeBSD's `bcachestat` does; requests
/// count calls; device operations and bytes count what reached the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Read and write calls made on the cache.
    pub requests: u64,
    /// Requests (or their aligned middles) sent straight to the device.
    pub bypasses: u64,
    /// Blocks found in the cache.
    pub block_hits: u64,
    /// Blocks that had to come from the device.
    pub block_misses: u64,
    /// Blocks read ahead of what was asked.
    pub readahead_issued: u64,
    /// Read-ahead blocks that a later request used.
    pub readahead_consumed: u64,
    /// Operations sent to the device (reads and writes).
    pub device_ops: u64,
    /// Bytes moved by those operations.
    pub device_bytes: u64,
}

impl Add for CacheStats {
    type Output = CacheStats;
    fn add(self, other: CacheStats) -> CacheStats {
        CacheStats {
            requests: self.requests + other.requests,
            bypasses: self.bypasses + other.bypasses,
            block_hits: self.block_hits + other.block_hits,
            block_misses: self.block_misses + other.block_misses,
            readahead_issued: self.readahead_issued + other.readahead_issued,
            readahead_consumed: self.readahead_consumed + other.readahead_consumed,
            device_ops: self.device_ops + other.device_ops,
            device_bytes: self.device_bytes + other.device_bytes,
        }
    }
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, {} bypasses, {} hits, {} misses, read-ahead {} issued / {} consumed, \
             {} device ops, {} device bytes",
            self.requests,
            self.bypasses,
            self.block_hits,
            self.block_misses,
            self.readahead_issued,
            self.readahead_consumed,
            self.device_ops,
            self.device_bytes
        )
    }
}
