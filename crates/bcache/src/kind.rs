//! Choosing a cache design by name, and splitting a memory budget between
//! the caches of several devices.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use crate::cache::BlockCache;
use crate::device::BlockDevice;
use crate::error::ConfigError;
use crate::freebsd2016::FreeBsd2016Cache;
use crate::hotkern::HotkernCache;
use crate::legacy::LegacyCache;
use crate::none::NoCache;

/// The cache designs, all behind [`BlockCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheKind {
    /// No cache.
    None,
    /// FreeBSD before 2016: one global 16 KiB LRU cache.
    Legacy,
    /// FreeBSD's loader cache as of 2016 (Toomas Soome's redesign):
    /// per-device direct-mapped cache with read-ahead.
    FreeBsd2016,
    /// This crate's design.
    Hotkern,
}

impl CacheKind {
    /// Every design, baselines first.
    pub const ALL: [CacheKind; 4] = [
        CacheKind::None,
        CacheKind::Legacy,
        CacheKind::FreeBsd2016,
        CacheKind::Hotkern,
    ];

    /// The design's name as benchmarks and the CLI spell it.
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::None => "none",
            CacheKind::Legacy => "legacy",
            CacheKind::FreeBsd2016 => "freebsd2016",
            CacheKind::Hotkern => "hotkern",
        }
    }

    /// The design called `name`.
    ///
    /// ```
    /// use hotkern_bcache::CacheKind;
    /// assert_eq!(CacheKind::from_name("freebsd2016"), Some(CacheKind::FreeBsd2016));
    /// assert_eq!(CacheKind::from_name("lru"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<CacheKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A cache of this design in front of `device`, using `budget_bytes`
    /// (`legacy` ignores it: its size was fixed at 16 KiB).
    pub fn build<'a, D: BlockDevice + 'a>(
        self,
        device: D,
        budget_bytes: usize,
    ) -> Box<dyn BlockCache + 'a> {
        match self {
            CacheKind::None => Box::new(NoCache::new(device)),
            CacheKind::Legacy => Box::new(LegacyCache::new(device)),
            CacheKind::FreeBsd2016 => Box::new(FreeBsd2016Cache::new(device, budget_bytes)),
            CacheKind::Hotkern => Box::new(HotkernCache::new(device, budget_bytes)),
        }
    }

    /// One cache per device, the total budget split between them as the
    /// design splits it; `legacy` units share their one global cache.
    pub fn build_set<'a, D: BlockDevice + 'a>(
        self,
        devices: Vec<D>,
        total_budget_bytes: usize,
    ) -> Result<Vec<Box<dyn BlockCache + 'a>>, ConfigError> {
        if devices.is_empty() {
            return Err(ConfigError::NoMembers);
        }
        let each = split_budget(self, total_budget_bytes, devices.len());
        let mut caches: Vec<Box<dyn BlockCache + 'a>> = Vec::with_capacity(devices.len());
        if self == CacheKind::Legacy {
            let mut devices = devices.into_iter();
            let Some(first_device) = devices.next() else {
                return Err(ConfigError::NoMembers);
            };
            let first = LegacyCache::new(first_device);
            let mut others = Vec::new();
            for device in devices {
                others.push(first.sharing(device)?);
            }
            caches.push(Box::new(first));
            for other in others {
                caches.push(Box::new(other));
            }
            return Ok(caches);
        }
        for device in devices {
            caches.push(self.build(device, each));
        }
        Ok(caches)
    }
}

impl fmt::Display for CacheKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The share of `total` bytes each of `devices` caches gets: FreeBSD 2016
/// divides by the device count rounded up to a power of two; hotkern
/// divides evenly.
///
/// ```
/// use hotkern_bcache::{split_budget, CacheKind};
/// assert_eq!(split_budget(CacheKind::FreeBsd2016, 16 << 20, 3), 4 << 20);
/// assert_eq!(split_budget(CacheKind::Hotkern, 15 << 20, 3), 5 << 20);
/// ```
pub fn split_budget(kind: CacheKind, total: usize, devices: usize) -> usize {
    let devices = devices.max(1);
    match kind {
        CacheKind::FreeBsd2016 => total / devices.next_power_of_two(),
        _ => total / devices,
    }
}
