//! Loading a file as a boot loader does: from the FAT volume on the
//! virtio-blk disk, through the cache design the command line names, in
//! the same small requests as `hotkern load` (and FreeBSD's loader) make.
//! The summary's `"load"` object says what came back (size, SHA-256) and
//! what it cost (guest time, the cache's bcachestat, device requests).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hotkern_bcache::{BlockDevice, CacheKind, CacheStats, FatError, FatVolume};
use hotkern_kernel::command_line::{decode_value, CommandLineError};
use sha2::{Digest, Sha256};

use crate::arch::boot::BootInfo;
use crate::arch::clock;
use crate::arch::console::println;
use crate::drivers::virtio::blk::{VirtioBlock, VirtioError};
use crate::runs::checks::Checks;
use crate::runs::json::{JsonNumber, JsonStr};

/// The loader's request size: 512 bytes, as FreeBSD's loader read files.
const REQUEST: usize = 512;
/// Cache memory. The host tool gives its caches 16 MiB; the kernel's heap
/// is smaller, and every design gets the same budget.
const BUDGET: usize = 4 << 20;

/// What the load read and what it cost.
pub struct Loaded {
    /// The file's path in the volume (a directory's, for a walk).
    pub path: String,
    /// The cache design.
    pub cache: &'static str,
    /// The file's bytes (the tree's, for a walk).
    pub bytes: u64,
    /// Files read, for a walk.
    pub files: Option<u64>,
    /// Their SHA-256.
    pub sha256: [u8; 32],
    /// Guest time from mounting to the last byte, in microseconds.
    pub micros: u64,
    /// Guest time to copy the file once, [`REQUEST`] bytes at a time, with
    /// no device and no cache: the floor any design's load stands on (under
    /// QEMU's TCG, where the guest's stores are emulated, it can exceed a
    /// fast device's transfer time). Not measured for a walk.
    pub copy_floor_micros: Option<u64>,
    /// The cache's counters.
    pub stats: CacheStats,
    /// Requests the driver sent, and nanoseconds it waited for them.
    pub device_requests: u64,
    /// Nanoseconds the driver waited for the device.
    pub device_ns: u64,
    /// The device's segment limit and queue size.
    pub max_segments: u32,
    /// Entries in the device's virtqueue.
    pub queue_size: u16,
    /// The device's block size.
    pub block_size: usize,
    /// The largest transfer, in blocks.
    pub max_transfer_blocks: u32,
}

/// Why the load failed.
#[derive(Debug)]
pub enum LoadError {
    /// The `load=`/`walk=` value is not a well-formed percent-encoded path
    /// (hotkern_kernel::command_line).
    CommandLine(CommandLineError),
    /// `cache=` names no design.
    UnknownCache(String),
    /// The disk could not be brought up.
    Device(VirtioError),
    /// The volume or the file could not be read.
    Fat(FatError),
    /// The file does not fit in the heap.
    TooLarge(u64),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::CommandLine(error) => write!(f, "the path on the command line: {error}"),
            LoadError::UnknownCache(name) => write!(
                f,
                "cache={name}: expected none, legacy, freebsd2016 or hotkern"
            ),
            LoadError::Device(error) => write!(f, "disk: {error}"),
            LoadError::Fat(error) => write!(f, "FAT: {error}"),
            LoadError::TooLarge(bytes) => {
                write!(f, "a file of {bytes} bytes does not fit the heap")
            }
        }
    }
}

impl core::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            LoadError::Device(error) => Some(error),
            _ => None,
        }
    }
}

/// The read the command line asks for: `load=PATH` (a file) or, with
/// `tree`, `walk=PATH` (every file under a directory), through `cache=`
/// with transfers of at most `max_transfer=` bytes; said on the console
/// and checked. `None` without the option.
pub fn run(info: &BootInfo, tree: bool, checks: &mut Checks) -> Option<Result<Loaded, LoadError>> {
    let (key, check) = if tree {
        ("walk", "the tree named by walk= came off the disk")
    } else {
        ("load", "the file named by load= came off the disk")
    };
    // The host percent-encodes the path, which may hold spaces and any
    // UTF-8 (`Boot Files/Kernel Image.elf`), into one word.
    let word = info.option(key)?;
    let cache = info.option("cache").unwrap_or("hotkern");
    let max_transfer = info
        .option("max_transfer")
        .and_then(|bytes| bytes.parse().ok());
    let decoded = decode_value(word);
    let path = decoded.as_deref().unwrap_or(word);
    let result = match &decoded {
        Ok(path) => read(path, cache, max_transfer, tree),
        Err(error) => Err(LoadError::CommandLine(error.clone())),
    };
    match &result {
        Ok(read) => println!(
            "hotkern: {key} {path}: {} files, {} bytes in {} us through the {cache} cache",
            read.files.unwrap_or(1),
            read.bytes,
            read.micros
        ),
        Err(error) => println!("hotkern: {key} {path}: {error}"),
    }
    checks.check(check, result.is_ok());
    Some(result)
}

/// Reads `path` through the `cache` design, with transfers of at most
/// `max_transfer` bytes if given (a device profile's limit): the file, or
/// with `tree` every file of the tree under the directory `path`, depth
/// first in on-disk order, as a loader reads its modules (`bytes` and
/// `files` are then the tree's, `sha256` is over the files' contents in
/// that order, and the hashing is not timed).
fn read(
    path: &str,
    cache: &str,
    max_transfer: Option<usize>,
    tree: bool,
) -> Result<Loaded, LoadError> {
    let kind = CacheKind::from_name(cache).ok_or_else(|| LoadError::UnknownCache(cache.into()))?;
    let mut device = VirtioBlock::probe().map_err(LoadError::Device)?;
    if let Some(bytes) = max_transfer {
        device.limit_transfer(bytes);
    }
    let (max_segments, queue_size) = (device.max_segments(), device.queue_size());
    let (block_size, max_transfer_blocks) = (device.block_size(), device.max_transfer_blocks());
    let (got, stats, micros) = {
        // Built before the clock starts, as a loader sets its cache up
        // once at start-up (and as `hotkern load` times it).
        let mut cache = kind.build(&mut device, BUDGET);
        let started = clock::nanos();
        let mut volume = FatVolume::mount(&mut *cache).map_err(LoadError::Fat)?;
        // Each branch stops the clock where reading ends: the hashing
        // (and the file's copy floor) are not timed.
        let (got, read_ns) = if tree {
            let mut hasher = Sha256::new();
            let mut hashing = 0;
            let summary = volume
                .walk(path, REQUEST, |_, data| {
                    let before = clock::nanos();
                    hasher.update(data);
                    hashing += clock::nanos() - before;
                })
                .map_err(LoadError::Fat)?;
            let got = Got {
                bytes: summary.bytes,
                files: Some(summary.files),
                sha256: hasher.finalize().into(),
                copy_floor_micros: None,
            };
            (got, clock::nanos() - started - hashing)
        } else {
            let entry = volume.lookup(path).map_err(LoadError::Fat)?;
            let mut data = Vec::new();
            data.try_reserve_exact(entry.size as usize)
                .map_err(|_| LoadError::TooLarge(u64::from(entry.size)))?;
            volume
                .read_entry(&entry, REQUEST, &mut data)
                .map_err(LoadError::Fat)?;
            let read_ns = clock::nanos() - started;
            let got = Got {
                bytes: data.len() as u64,
                files: None,
                sha256: Sha256::digest(&data).into(),
                copy_floor_micros: Some(copy_floor_micros(&data)),
            };
            (got, read_ns)
        };
        (got, cache.stats(), read_ns / 1000)
    };
    Ok(Loaded {
        path: path.into(),
        cache: kind.name(),
        bytes: got.bytes,
        files: got.files,
        sha256: got.sha256,
        micros,
        copy_floor_micros: got.copy_floor_micros,
        stats,
        device_requests: device.requests,
        device_ns: device.device_ns,
        max_segments,
        queue_size,
        block_size,
        max_transfer_blocks,
    })
}

/// What a read brought back, before its costs are added.
struct Got {
    bytes: u64,
    files: Option<u64>,
    sha256: [u8; 32],
    copy_floor_micros: Option<u64>,
}

/// Copies `data` once into a buffer of [`REQUEST`] bytes, a request at a
/// time, as `read_entry` hands each request's bytes over; microseconds.
fn copy_floor_micros(data: &[u8]) -> u64 {
    let mut scratch = [0u8; REQUEST];
    let started = clock::nanos();
    for chunk in data.chunks(REQUEST) {
        scratch[..chunk.len()].copy_from_slice(core::hint::black_box(chunk));
        core::hint::black_box(&mut scratch);
    }
    (clock::nanos() - started) / 1000
}

/// Microseconds as JSON seconds (`null` for none).
struct Seconds(Option<u64>);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(micros) => write!(f, "{}.{:06}", micros / 1_000_000, micros % 1_000_000),
            None => f.write_str("null"),
        }
    }
}

/// The summary's `"load"` (and `"walk"`) value: an object, `{"error": ...}`, or `null`
/// when no load was asked for.
pub struct LoadJson<'a>(pub Option<&'a Result<Loaded, LoadError>>);

impl fmt::Display for LoadJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("null"),
            Some(Err(error)) => {
                let text = alloc::format!("{error}");
                write!(f, "{{\"error\":{}}}", JsonStr(&text))
            }
            Some(Ok(loaded)) => {
                write!(
                    f,
                    "{{\"path\":{},\"cache\":\"{}\",\"bytes\":{},\"files\":{},\"sha256\":\"",
                    JsonStr(&loaded.path),
                    loaded.cache,
                    loaded.bytes,
                    JsonNumber(loaded.files)
                )?;
                for byte in loaded.sha256 {
                    write!(f, "{byte:02x}")?;
                }
                let s = &loaded.stats;
                write!(
                    f,
                    "\",\"seconds\":{},\"copy_floor_seconds\":{},\"device_requests\":{},\"device_ns\":{},\
                     \"max_segments\":{},\"queue_size\":{},\"block_size\":{},\
                     \"max_transfer_blocks\":{},\"stats\":{{\"requests\":{},\
                     \"bypasses\":{},\"block_hits\":{},\"block_misses\":{},\
                     \"readahead_issued\":{},\"readahead_consumed\":{},\"device_ops\":{},\
                     \"device_bytes\":{}}}}}",
                    Seconds(Some(loaded.micros)),
                    Seconds(loaded.copy_floor_micros),
                    loaded.device_requests,
                    loaded.device_ns,
                    loaded.max_segments,
                    loaded.queue_size,
                    loaded.block_size,
                    loaded.max_transfer_blocks,
                    s.requests,
                    s.bypasses,
                    s.block_hits,
                    s.block_misses,
                    s.readahead_issued,
                    s.readahead_consumed,
                    s.device_ops,
                    s.device_bytes,
                )
            }
        }
    }
}
