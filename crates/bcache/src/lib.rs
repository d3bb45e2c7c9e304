//! Per-device block cache for boot loaders and small kernels, and a FAT
//! reader whose every disk access goes through it.
//!
//! * [`BlockDevice`] is what a loader implements per disk; the crate brings
//!   [`MemoryDevice`], [`FileDevice`] (`std`), [`ModeledDevice`] (a virtual
//!   clock with [`DeviceModel`] presets), [`FaultyDevice`] and
//!   [`StripedSet`] (several devices, one cache each).
//! * [`BlockCache`] is what every design offers: partial-block reads and
//!   writes, statistics ([`CacheStats`]). [`HotkernCache`] is this crate's
//!   design; [`NoCache`], [`LegacyCache`] and [`FreeBsd2016Cache`] are the
//!   baselines, chosen by name through [`CacheKind`].
//! * [`FatVolume`] reads FAT12/16/32 files through any cache.
//!
//! ```
//! use hotkern_bcache::{BlockCache, CacheKind, DeviceModel, MemoryDevice, ModeledDevice};
//! let disk = ModeledDevice::new(MemoryDevice::zeroed(8192, 512).unwrap(), DeviceModel::USB_STICK);
//! let clock = disk.clock();
//! let mut cache = CacheKind::Hotkern.build(disk, 1 << 20);
//! let mut piece = [0u8; 512];
//! for block in 0..4096 {
//!     cache.read(block, 0, &mut piece).unwrap();
//! }
//! // 2 MiB in 512-byte requests cost little more than 2 MiB in 64 KiB operations.
//! let limit = DeviceModel::USB_STICK.limit_ns(2 << 20);
//! assert!(clock.now_ns() < limit * 11 / 10);
//! ```
#![no_std]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-bcache/0.1")]
#![forbid(unsafe_code)]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod cache;
mod device;
mod error;
mod fat;
mod faulty;
#[cfg(feature = "std")]
mod file;
mod freebsd2016;
mod hotkern;
#[cfg(feature = "std")]
pub mod image;
mod kind;
mod legacy;
mod memory;
mod modeled;
mod none;
mod stats;
mod striped;

pub use cache::BlockCache;
pub use device::{check_block_size, check_transfer, BlockDevice};
pub use error::{ConfigError, IoError};
pub use fat::{DirEntry, FatError, FatType, FatVolume, WalkSummary};
pub use faulty::{FaultyDevice, GARBAGE};
#[cfg(feature = "std")]
pub use file::FileDevice;
pub use freebsd2016::{FreeBsd2016Cache, FREEBSD_MIN_READAHEAD, FREEBSD_READAHEAD};
pub use hotkern::HotkernCache;
pub use kind::{split_budget, CacheKind};
pub use legacy::{LegacyCache, LEGACY_CACHE_BYTES};
pub use memory::MemoryDevice;
pub use modeled::{DeviceModel, ModeledDevice, VirtualClock};
pub use none::NoCache;
pub use stats::CacheStats;
pub use striped::StripedSet;
