//! A device that keeps a virtual clock: every operation costs a fixed
//! latency plus its bytes divided by the bandwidth.
//!
//! The clock makes device time deterministic, so a benchmark or a test can
//! say how long a load *would* take on a USB stick or a remote virtual CD
//! without owning one, and compare designs on the same figures.
//!
//! | preset      | block  | latency/op | bandwidth | largest transfer |
//! |-------------|--------|------------|-----------|------------------|
//! | `usb-stick` | 512 B  | 1.5 ms     | 20 MB/s   | 64 KiB           |
//! | `ipmi-cd`   | 2048 B | 5 ms       | 4 MB/s    | 64 KiB           |
//! | `hdd`       | 512 B  | 2 ms       | 150 MB/s  | 64 KiB           |
//! | `nvme`      | 4096 B | 25 µs      | 2 GB/s    | 256 KiB          |
//!
//! Each constant below says why its figures were chosen.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::device::BlockDevice;
use crate::error::IoError;

/// The figures of one kind of device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceModel {
    /// Preset name, e.g. `usb-stick`.
    pub name: &'static str,
    /// Bytes per block of such a device.
    pub block_size: usize,
    /// Fixed cost of every operation, in nanoseconds.
    pub latency_ns: u64,
    /// Transfer rate in bytes per second.
    pub bytes_per_second: u64,
    /// Largest transfer one operation may carry, in bytes.
    pub max_transfer_bytes: usize,
}

impl DeviceModel {
    /// A USB 2.0 memory stick read through BIOS INT 13h: 1.5 ms per
    /// operation (bulk-only transport command, status and firmware
    /// polling), 20 MB/s, 64 KiB per operation (the EDD limit of 127-128
    /// sectors most BIOSes keep). With these figures a 270 MB file read one
    /// cluster at a time takes ~15 minutes and read at the full transfer
    /// size ~20 s — the two figures Toomas Soome reported for a USB stick
    /// when redesigning FreeBSD's loader cache in 2016.
    pub const USB_STICK: DeviceModel = DeviceModel {
        name: "usb-stick",
        block_size: 512,
        latency_ns: 1_500_000,
        bytes_per_second: 20_000_000,
        max_transfer_bytes: 64 << 10,
    };

    /// A CD image mounted as virtual media over a BMC's remote console
    /// (IPMI/KVM-over-IP): 2048-byte sectors, 5 ms per operation (every SCSI
    /// command crosses the LAN to the BMC and back), 4 MB/s, 64 KiB per
    /// operation (32 sectors, what the emulated USB CD drive accepts). A
    /// ~20 MB kernel then loads in ~7 s with read-ahead, as a tester of
    /// FreeBSD's 2016 loader cache redesign reported for an emulated USB
    /// CD-ROM over IPMI (27 s before it).
    pub const IPMI_CD: DeviceModel = DeviceModel {
        name: "ipmi-cd",
        block_size: 2048,
        latency_ns: 5_000_000,
        bytes_per_second: 4_000_000,
        max_transfer_bytes: 64 << 10,
    };

    /// A 7200 rpm SATA disk through the BIOS: 2 ms per operation (between
    /// ~0.2 ms for a command served from the drive's track buffer and ~8 ms
    /// for a seek plus half a rotation; a loader alternates FAT, directory
    /// and data reads), 150 MB/s, 64 KiB per operation (EDD limit).
    pub const HDD: DeviceModel = DeviceModel {
        name: "hdd",
        block_size: 512,
        latency_ns: 2_000_000,
        bytes_per_second: 150_000_000,
        max_transfer_bytes: 64 << 10,
    };

    /// An NVMe SSD with 4 KiB sectors through UEFI Block I/O: 25 µs per
    /// operation (firmware driver plus one queue-depth-1 command), 2 GB/s,
    /// 256 KiB per operation (a common maximum data transfer size).
    pub const NVME: DeviceModel = DeviceModel {
        name: "nvme",
        block_size: 4096,
        latency_ns: 25_000,
        bytes_per_second: 2_000_000_000,
        max_transfer_bytes: 256 << 10,
    };

    /// Every preset, in the order benchmarks report them.
    pub const PRESETS: [DeviceModel; 4] = [
        DeviceModel::USB_STICK,
        DeviceModel::IPMI_CD,
        DeviceModel::HDD,
        DeviceModel::NVME,
    ];

    /// The preset called `name`, if any.
    ///
    /// ```
    /// use hotkern_bcache::DeviceModel;
    /// assert_eq!(DeviceModel::preset("nvme").unwrap().block_size, 4096);
    /// assert!(DeviceModel::preset("floppy").is_none());
    /// ```
    pub fn preset(name: &str) -> Option<DeviceModel> {
        Self::PRESETS.into_iter().find(|m| m.name == name)
    }

    /// Nanoseconds one operation moving `bytes` costs.
    pub fn cost_ns(&self, bytes: u64) -> u64 {
        self.latency_ns + self.transfer_ns(bytes)
    }

    fn transfer_ns(&self, bytes: u64) -> u64 {
        let ns = u128::from(bytes) * 1_000_000_000 / u128::from(self.bytes_per_second.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The physical limit for reading `bytes` on this device: the bytes at
    /// full bandwidth plus the fewest operations the largest transfer
    /// allows, each paying the latency once.
    ///
    /// ```
    /// use hotkern_bcache::DeviceModel;
    /// let usb = DeviceModel::USB_STICK;
    /// // 1 MiB: 16 operations of 64 KiB.
    /// assert_eq!(usb.limit_ns(1 << 20), 16 * 1_500_000 + (1u64 << 20) * 1_000_000_000 / 20_000_000);
    /// ```
    pub fn limit_ns(&self, bytes: u64) -> u64 {
        let ops = bytes.div_ceil(self.max_transfer_bytes.max(1) as u64);
        self.transfer_ns(bytes) + ops * self.latency_ns
    }
}

/// A shared handle on a virtual clock, in nanoseconds.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nanoseconds elapsed.
    pub fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Moves the clock forward.
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

/// A device wrapped in a [`DeviceModel`]: transfers go to the inner device
/// and advance a [`VirtualClock`] by what they would cost on the real one.
///
/// ```
/// use hotkern_bcache::{BlockDevice, DeviceModel, MemoryDevice, ModeledDevice};
/// let inner = MemoryDevice::zeroed(1024, 512).unwrap();
/// let mut usb = ModeledDevice::new(inner, DeviceModel::USB_STICK);
/// let clock = usb.clock();
/// usb.read_blocks(0, &mut [0u8; 512]).unwrap();
/// assert_eq!(clock.now_ns(), DeviceModel::USB_STICK.cost_ns(512));
/// assert_eq!(usb.max_transfer_blocks(), 128);
/// ```
#[derive(Debug)]
pub struct ModeledDevice<D> {
    inner: D,
    model: DeviceModel,
    clock: VirtualClock,
}

impl<D: BlockDevice> ModeledDevice<D> {
    /// Wraps `inner` with a fresh clock.
    pub fn new(inner: D, model: DeviceModel) -> Self {
        ModeledDevice {
            inner,
            model,
            clock: VirtualClock::new(),
        }
    }

    /// A handle on this device's clock (clone it before handing the device
    /// to a cache).
    pub fn clock(&self) -> VirtualClock {
        self.clock.clone()
    }

    /// The model in use.
    pub fn model(&self) -> DeviceModel {
        self.model
    }

    /// The wrapped device.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

impl<D: BlockDevice> BlockDevice for ModeledDevice<D> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn max_transfer_blocks(&self) -> u32 {
        let modeled = (self.model.max_transfer_bytes / self.inner.block_size()).max(1);
        (modeled as u32).min(self.inner.max_transfer_blocks())
    }

    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        crate::device::check_transfer(self, first, buf.len())?;
        self.clock.advance(self.model.cost_ns(buf.len() as u64));
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        crate::device::check_transfer(self, first, data.len())?;
        self.clock.advance(self.model.cost_ns(data.len() as u64));
        self.inner.write_blocks(first, data)
    }
}
