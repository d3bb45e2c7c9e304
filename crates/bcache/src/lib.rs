//! Per-device block cache for boot loaders and small kernels, and a FAT
//! reader whose every disk access goes through it.
//!
//! * [`BlockDevice`] is what a loader implements per disk; the crate brings
//!   [`MemoryDevice`], `FileDevice` (`std`) and [`StripedSet`] (several
//!   devices, one cache each).
//! * [`BlockCache`] is what every design offers: partial-block reads and
//!   writes, statistics ([`CacheStats`]). [`HotkernCache`] is this crate's
//!   design.
//! * [`read_partitions`] finds a disk's MBR or GPT partitions, and
//!   [`FatVolume`] reads FAT12/16/32 files through any cache, from a whole
//!   disk or from one of those partitions, whole or at an offset.
//!
//! # What a boot loader links, and the `baselines` feature
//!
//! A loader needs a device, [`HotkernCache`], partitions and [`FatVolume`];
//! that is the default public surface, `no_std` with `default-features =
//! false`. What exists to *measure* that design is behind the `baselines`
//! feature, so a loader neither compiles it nor sees it in its API: the
//! baselines `NoCache`, `LegacyCache` (FreeBSD's loader cache before 2016)
//! and `FreeBsd2016Cache` (FreeBSD's stand/common/bcache.c after Toomas
//! Soome's 2016 redesign), `CacheKind` to choose one by name and
//! `split_budget` to share memory between devices as each design does,
//! `ModeledDevice`/`DeviceModel`/`VirtualClock` (devices with a virtual
//! clock), and `FaultyDevice`/`GARBAGE` (fault injection for tests).
//!
//! ```
//! use hotkern_bcache::{BlockCache, HotkernCache, MemoryDevice};
//! let disk = MemoryDevice::zeroed(8192, 512).unwrap();
//! let mut cache = HotkernCache::new(disk, 1 << 20);
//! let mut piece = [0u8; 512];
//! for block in 0..4096 {
//!     cache.read(block, 0, &mut piece).unwrap();
//! }
//! // Sequential 512-byte requests became a few large device operations.
//! assert!(cache.stats().device_ops < 100);
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
mod crc32;
mod device;
mod error;
mod fat;
#[cfg(feature = "baselines")]
mod faulty;
#[cfg(feature = "std")]
mod file;
#[cfg(feature = "baselines")]
mod freebsd2016;
mod hotkern;
#[cfg(feature = "std")]
pub mod image;
#[cfg(feature = "baselines")]
mod kind;
#[cfg(feature = "baselines")]
mod legacy;
mod memory;
#[cfg(feature = "baselines")]
mod modeled;
#[cfg(feature = "baselines")]
mod none;
mod partition;
mod stats;
mod striped;

pub use cache::BlockCache;
pub use device::{check_block_size, check_transfer, BlockDevice};
pub use error::{ConfigError, IoError};
pub use fat::{DirEntry, FatError, FatType, FatVolume, WalkSummary};
#[cfg(feature = "baselines")]
pub use faulty::{FaultyDevice, GARBAGE};
#[cfg(feature = "std")]
pub use file::FileDevice;
#[cfg(feature = "baselines")]
pub use freebsd2016::{FreeBsd2016Cache, FREEBSD_MIN_READAHEAD, FREEBSD_READAHEAD};
pub use hotkern::HotkernCache;
#[cfg(feature = "baselines")]
pub use kind::{split_budget, CacheKind};
#[cfg(feature = "baselines")]
pub use legacy::{LegacyCache, LEGACY_CACHE_BYTES};
pub use memory::MemoryDevice;
#[cfg(feature = "baselines")]
pub use modeled::{DeviceModel, ModeledDevice, VirtualClock};
#[cfg(feature = "baselines")]
pub use none::NoCache;
pub use partition::{
    read_partitions, Partition, PartitionError, PartitionScheme, PartitionTable, PartitionType,
    GPT_TYPE_BASIC_DATA, GPT_TYPE_EFI_SYSTEM, MBR_TYPE_PROTECTIVE,
};
pub use stats::CacheStats;
pub use striped::StripedSet;
