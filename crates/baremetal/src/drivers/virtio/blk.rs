//! A virtio-blk driver over the legacy PCI interface (virtio 0.9.5, which
//! QEMU's transitional `virtio-blk-pci` offers): one virtqueue, one request
//! at a time, completion by polling the used ring. It is bcache's
//! [`BlockDevice`], so every cache design reads through it.
//!
//! The queue is the shared [`SplitQueue`] in the layout the legacy
//! interface fixes (the used ring on its own page). The kernel's identity
//! map makes a heap address its physical address, so buffers go to the
//! device as they are, split at page boundaries into at most `seg_max`
//! segments. The device writes the status byte last, before the used
//! index the queue waits for.

use core::fmt;
use core::ptr::read_volatile;

use hotkern_bcache::{check_transfer, BlockDevice, IoError};

use crate::arch::clock;
use crate::arch::pci::{io_read16, io_read32, io_write16, io_write32, io_write8};
use crate::drivers::pci;
use crate::drivers::virtio::queue::{
    Descriptor, RingLayout, SplitQueue, DESCRIPTOR_NEXT, DESCRIPTOR_WRITE,
};

/// Red Hat's virtio vendor id and the transitional block device's id.
const VENDOR: u16 = 0x1af4;
const DEVICE_BLOCK: u16 = 0x1001;

// Legacy registers, as offsets in the I/O BAR.
const DEVICE_FEATURES: u16 = 0x00;
const GUEST_FEATURES: u16 = 0x04;
const QUEUE_ADDRESS: u16 = 0x08;
const QUEUE_SIZE: u16 = 0x0c;
const QUEUE_SELECT: u16 = 0x0e;
const QUEUE_NOTIFY: u16 = 0x10;
const STATUS: u16 = 0x12;
/// The block device's configuration (without MSI-X).
const CONFIG: u16 = 0x14;

const STATUS_ACKNOWLEDGE: u8 = 1;
const STATUS_DRIVER: u8 = 2;
const STATUS_DRIVER_OK: u8 = 4;

const FEATURE_SEG_MAX: u32 = 1 << 2;
const FEATURE_READ_ONLY: u32 = 1 << 5;
const FEATURE_BLOCK_SIZE: u32 = 1 << 6;

const REQUEST_IN: u32 = 0;
const REQUEST_OUT: u32 = 1;

const PAGE: usize = 4096;
/// A request that takes longer than this is a failed device.
const TIMEOUT_US: u64 = 10_000_000;

/// Why the device could not be brought up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtioError {
    /// No virtio-blk function on bus 0.
    NotFound,
    /// BAR0 is not an I/O BAR (a modern-only device).
    NoLegacyInterface,
    /// The queue is missing or too small for a request.
    Queue(u16),
    /// The heap could not hold the queue.
    NoMemory,
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirtioError::NotFound => f.write_str("no virtio-blk device on PCI bus 0"),
            VirtioError::NoLegacyInterface => {
                f.write_str("the virtio-blk device offers no legacy I/O interface")
            }
            VirtioError::Queue(size) => write!(f, "virtqueue 0 has {size} entries"),
            VirtioError::NoMemory => f.write_str("no heap for the virtqueue"),
        }
    }
}

impl core::error::Error for VirtioError {}

#[repr(C)]
struct RequestHeader {
    kind: u32,
    reserved: u32,
    sector: u64,
}

/// The legacy registers at an I/O BAR.
#[derive(Clone, Copy)]
struct Registers(u16);

impl Registers {
    fn read16(self, offset: u16) -> u16 {
        // SAFETY: the port is one of the device's own legacy registers (its
        // BAR0 plus an offset the legacy interface defines); reading it has
        // no side effect but the register's.
        unsafe { io_read16(self.0 + offset) }
    }

    fn read32(self, offset: u16) -> u32 {
        // SAFETY: as `read16`.
        unsafe { io_read32(self.0 + offset) }
    }

    fn write8(self, offset: u16, value: u8) {
        // SAFETY: as `read16`; the driver owns the device.
        unsafe { io_write8(self.0 + offset, value) }
    }

    fn write16(self, offset: u16, value: u16) {
        // SAFETY: as `write8`.
        unsafe { io_write16(self.0 + offset, value) }
    }

    fn write32(self, offset: u16, value: u32) {
        // SAFETY: as `write8`.
        unsafe { io_write32(self.0 + offset, value) }
    }
}

/// The device, its queue and its limits.
pub struct VirtioBlock {
    port: u16,
    queue: SplitQueue,
    block_size: usize,
    blocks: u64,
    max_segments: u32,
    /// A cap on transfers (a device profile's), in blocks.
    transfer_cap: Option<u32>,
    read_only: bool,
    /// Requests sent and nanoseconds spent waiting for them.
    pub requests: u64,
    /// Nanoseconds from notify to completion, summed.
    pub device_ns: u64,
}

impl VirtioBlock {
    /// Finds the device and brings it up.
    pub fn probe() -> Result<VirtioBlock, VirtioError> {
        let function = pci::find(VENDOR, DEVICE_BLOCK).ok_or(VirtioError::NotFound)?;
        // Ports from 0xc000 up are PCI I/O space on QEMU's i440fx, and
        // inside the 64 KiB I/O window of virt's host bridge; nothing else
        // of the kernel's lives there.
        let port = function
            .io_bar(0, 0xc000)
            .ok_or(VirtioError::NoLegacyInterface)?;
        function.enable_io_and_dma();
        let registers = Registers(port);
        registers.write8(STATUS, 0);
        registers.write8(STATUS, STATUS_ACKNOWLEDGE);
        registers.write8(STATUS, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
        let offered = registers.read32(DEVICE_FEATURES);
        let accepted = offered & (FEATURE_SEG_MAX | FEATURE_READ_ONLY | FEATURE_BLOCK_SIZE);
        registers.write32(GUEST_FEATURES, accepted);
        registers.write16(QUEUE_SELECT, 0);
        let queue_size = registers.read16(QUEUE_SIZE);
        if queue_size < 3 {
            return Err(VirtioError::Queue(queue_size));
        }
        let queue = SplitQueue::new(queue_size, RingLayout::Legacy).ok_or(VirtioError::NoMemory)?;
        let config = |offset: u16| registers.read32(CONFIG + offset);
        let blocks_of_512 = u64::from(config(0)) | u64::from(config(4)) << 32;
        let seg_max = if accepted & FEATURE_SEG_MAX != 0 {
            config(12).max(1)
        } else {
            1
        };
        let block_size = if accepted & FEATURE_BLOCK_SIZE != 0 {
            config(20) as usize
        } else {
            512
        };
        let block_size = if block_size.is_power_of_two() && (512..=4096).contains(&block_size) {
            block_size
        } else {
            512
        };
        registers.write32(QUEUE_ADDRESS, (queue.address() / PAGE as u64) as u32);
        registers.write8(
            STATUS,
            STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_DRIVER_OK,
        );
        Ok(VirtioBlock {
            port,
            queue,
            block_size,
            blocks: blocks_of_512 * 512 / block_size as u64,
            // A request takes two descriptors besides its data segments.
            max_segments: seg_max.min(u32::from(queue_size) - 2),
            transfer_cap: None,
            read_only: accepted & FEATURE_READ_ONLY != 0,
            requests: 0,
            device_ns: 0,
        })
    }

    /// The device's segment limit (`seg_max`, bounded by the queue).
    pub fn max_segments(&self) -> u32 {
        self.max_segments
    }

    /// Entries in the virtqueue.
    pub fn queue_size(&self) -> u16 {
        self.queue.size()
    }

    /// Caps transfers at `bytes` (at least one block), as a slower device
    /// whose profile QEMU emulates would: its largest transfer.
    pub fn limit_transfer(&mut self, bytes: usize) {
        self.transfer_cap = Some((bytes / self.block_size).max(1) as u32);
    }

    /// Sends one request over `buffer` (written by the device for reads)
    /// and waits for it.
    fn request(
        &mut self,
        kind: u32,
        first: u64,
        buffer: *mut u8,
        len: usize,
    ) -> Result<(), IoError> {
        let header = RequestHeader {
            kind,
            reserved: 0,
            sector: first * (self.block_size as u64 / 512),
        };
        let mut status: u8 = 0xff;
        let data_flags = if kind == REQUEST_IN {
            DESCRIPTOR_WRITE
        } else {
            0
        };
        let mut index = 0u16;
        let queue = &mut self.queue;
        let mut chain = |address: u64, len: u32, flags: u16, last: bool| {
            let next = index + 1;
            // `index` stays below 2 + max_segments <= queue size.
            queue.set(
                index,
                Descriptor {
                    address,
                    len,
                    flags: if last { flags } else { flags | DESCRIPTOR_NEXT },
                    next: if last { 0 } else { next },
                },
            );
            index = next;
        };
        chain(&header as *const RequestHeader as u64, 16, 0, false);
        let mut at = buffer as u64;
        let end = at + len as u64;
        while at < end {
            let page_end = (at / PAGE as u64 + 1) * PAGE as u64;
            let piece = page_end.min(end) - at;
            chain(at, piece as u32, data_flags, false);
            at += piece;
        }
        chain(&mut status as *mut u8 as u64, 1, DESCRIPTOR_WRITE, true);
        self.queue.publish();
        let started = clock::nanos();
        Registers(self.port).write16(QUEUE_NOTIFY, 0);
        if self.queue.wait_used(started + TIMEOUT_US * 1000).is_none() {
            return Err(IoError::Medium { block: first });
        }
        self.requests += 1;
        self.device_ns += clock::nanos() - started;
        // SAFETY: the device wrote the status before the used index, which
        // `wait_used` read (acquire).
        if unsafe { read_volatile(&status) } != 0 {
            return Err(IoError::Medium { block: first });
        }
        Ok(())
    }
}

impl Drop for VirtioBlock {
    fn drop(&mut self) {
        // Resetting the device stops it using the ring before the queue,
        // dropped after this, frees it.
        Registers(self.port).write8(STATUS, 0);
    }
}

impl BlockDevice for VirtioBlock {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn max_transfer_blocks(&self) -> u32 {
        // Each segment is at most a page; a buffer not page-aligned needs
        // one segment more than its pages.
        let pages = self.max_segments.saturating_sub(1).max(1);
        let device = (pages as usize * PAGE / self.block_size).max(1) as u32;
        self.transfer_cap.map_or(device, |cap| cap.min(device))
    }

    #[hotkern_trace::function]
    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        check_transfer(self, first, buf.len())?;
        self.request(REQUEST_IN, first, buf.as_mut_ptr(), buf.len())
    }

    #[hotkern_trace::function]
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        check_transfer(self, first, data.len())?;
        if self.read_only {
            return Err(IoError::ReadOnly);
        }
        self.request(REQUEST_OUT, first, data.as_ptr() as *mut u8, data.len())
    }
}
