//! The modern (virtio 1.x) PCI transport and one split virtqueue, for
//! devices that have no legacy interface (virtio-mem-pci is modern-only).
//!
//! The virtio 1.2 specification, section 4.1.4: the device lists its
//! register blocks as vendor-specific PCI capabilities (common, notify,
//! ISR and device configuration), each naming a BAR and an offset. The
//! firmware hotkern boots with (qboot on x86-64, none on arm64) assigns no
//! BARs, so [`probe`] sizes every memory BAR of the function and places it
//! in the arch's memory window (`pci::memory_window`: x86-64's PCI hole,
//! the arm64 host bridge's 32-bit window, both mapped uncached by the boot
//! page tables), 64-bit BARs with a zero upper half.
//!
//! Completion is by polling the used ring, one request at a time, as the
//! legacy virtio-blk driver does (the driver asks for no queue
//! interrupts: VIRTQ_AVAIL_F_NO_INTERRUPT). Configuration changes come as
//! an interrupt when the caller names a target ([`DeviceTarget`]), as Linux's
//! `vp_find_vqs` (drivers/virtio/virtio_pci_common.c) sets them up before
//! DRIVER_OK: MSI-X if the device has it ([`msix`]: table entry 0 aimed
//! at the target, named in `config_msix_vector`, the queue left at
//! VIRTIO_MSI_NO_VECTOR), else the legacy pin as the arch routes it
//! (`interrupts::route_pin`), whose handler reads the ISR status to
//! lower it. The handler
//! ([`interrupt::config_interrupt`]) counts changes and nothing else: the driver
//! compares [`config_interrupts`] before and after a halt. With neither
//! the transport says why ([`Transport::config_route`]) and the caller
//! polls the generation.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ptr::write_volatile;

use crate::arch::boot::{IDENTITY_MAP_END, MMIO_START};
use crate::arch::clock;
use crate::drivers::pci::Function;
use crate::drivers::virtio::queue::{
    Descriptor, RingLayout, SplitQueue, DESCRIPTOR_NEXT, DESCRIPTOR_WRITE,
};

mod interrupt;
mod msix;
mod regs;

pub use crate::arch::interrupts::DeviceTarget;
use interrupt::route_config;
pub use interrupt::{config_interrupts, ConfigRoute, NoRoute};
use regs::{capability_list, Mmio};

const CAP_VENDOR: u8 = 0x09;
const CFG_COMMON: u8 = 1;
const CFG_NOTIFY: u8 = 2;
const CFG_ISR: u8 = 3;
const CFG_DEVICE: u8 = 4;

// The common configuration's fields (virtio 1.2, 4.1.4.3).
const DEVICE_FEATURE_SELECT: u64 = 0x00;
const DEVICE_FEATURE: u64 = 0x04;
const DRIVER_FEATURE_SELECT: u64 = 0x08;
const DRIVER_FEATURE: u64 = 0x0c;
const DEVICE_STATUS: u64 = 0x14;
const CONFIG_GENERATION: u64 = 0x15;
const QUEUE_SELECT: u64 = 0x16;
const QUEUE_SIZE: u64 = 0x18;
const QUEUE_ENABLE: u64 = 0x1c;
const QUEUE_NOTIFY_OFF: u64 = 0x1e;
const QUEUE_DESC: u64 = 0x20;
const QUEUE_DRIVER: u64 = 0x28;
const QUEUE_DEVICE: u64 = 0x30;

const STATUS_ACKNOWLEDGE: u8 = 1;
const STATUS_DRIVER: u8 = 2;
const STATUS_DRIVER_OK: u8 = 4;
const STATUS_FEATURES_OK: u8 = 8;
const STATUS_FAILED: u8 = 128;

/// VIRTIO_F_VERSION_1: feature bit 32, the modern interface.
pub const FEATURE_VERSION_1: u64 = 1 << 32;

/// Descriptors the driver asks for: a request takes two.
const QUEUE_ENTRIES: u16 = 8;
/// Where the ring page keeps the request and the response.
const REQUEST_AT: usize = 1024;
const RESPONSE_AT: usize = 2048;
/// The largest request or response this queue carries.
pub const MAX_MESSAGE: usize = 1024;
/// A request the device has not answered in this long has failed.
const TIMEOUT_NS: u64 = 5_000_000_000;

/// Why the transport could not be brought up or a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportError {
    /// A capability the transport needs is missing.
    MissingCapability(&'static str),
    /// A BAR does not fit the window, or names no memory BAR.
    Bar(u8),
    /// The device refused the features (FEATURES_OK did not stick).
    FeaturesRefused,
    /// The device does not offer VIRTIO_F_VERSION_1.
    NotModern,
    /// Virtqueue 0 is missing.
    NoQueue,
    /// The heap could not hold the ring.
    NoMemory,
    /// The device did not answer in time.
    Timeout,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::MissingCapability(which) => {
                write!(f, "no {which} configuration capability")
            }
            TransportError::Bar(index) => write!(f, "BAR {index} cannot be placed or used"),
            TransportError::FeaturesRefused => f.write_str("the device refused the features"),
            TransportError::NotModern => {
                f.write_str("the device does not offer VIRTIO_F_VERSION_1")
            }
            TransportError::NoQueue => f.write_str("the device has no virtqueue 0"),
            TransportError::NoMemory => f.write_str("no heap for the virtqueue"),
            TransportError::Timeout => f.write_str("the device did not answer within 5 s"),
        }
    }
}

impl core::error::Error for TransportError {}

/// A modern virtio PCI device with virtqueue 0 set up.
pub struct Transport {
    common: Mmio,
    device: Mmio,
    notify: u64,
    /// Dropped only after a reset the device finished (see `Drop`).
    queue: ManuallyDrop<SplitQueue>,
    /// Requests sent.
    pub requests: u64,
    /// How configuration changes were routed (`None`: no target was
    /// asked for).
    route: Option<Result<ConfigRoute, NoRoute>>,
}

/// A vendor capability: its type, BAR, offset, length and where it is in
/// configuration space.
#[derive(Clone, Copy)]
struct Capability {
    kind: u8,
    bar: u8,
    offset: u32,
    at: u8,
}

fn capabilities(function: Function) -> impl Iterator<Item = Capability> {
    capability_list(function)
        .filter(|&(_, header)| header as u8 == CAP_VENDOR)
        .map(move |(at, header)| Capability {
            kind: (header >> 24) as u8,
            bar: function.read(at + 4) as u8,
            offset: function.read(at + 8),
            at,
        })
}

/// Sizes and places every memory BAR of `function` that the firmware left
/// at zero or outside the uncached identity map, from `*next` up; returns
/// the BARs' addresses. Memory decoding stays off until [`probe`] turns
/// it on.
fn place_bars(
    function: Function,
    next: &mut u64,
    window_end: u64,
) -> Result<[u64; 6], TransportError> {
    // No memory decoding while the BARs hold sizing patterns.
    let command = function.read(0x04) & 0xffff;
    function.write(0x04, command & !0b10);
    let mut bases = [0u64; 6];
    let mut index = 0u8;
    while index < 6 {
        let offset = 0x10 + 4 * index;
        let low = function.read(offset);
        if low & 1 != 0 {
            index += 1;
            continue;
        }
        let wide = low & 0b110 == 0b100;
        let high_now = if wide { function.read(offset + 4) } else { 0 };
        let current = u64::from(low & !0xf) | u64::from(high_now) << 32;
        function.write(offset, 0xffff_ffff);
        if wide {
            function.write(offset + 4, 0xffff_ffff);
        }
        let low_mask = function.read(offset) & !0xf;
        let mask = u64::from(low_mask)
            | if wide {
                u64::from(function.read(offset + 4)) << 32
            } else {
                0xffff_ffff_0000_0000
            };
        let size = (!mask).wrapping_add(1);
        // An unimplemented BAR keeps no bits.
        let base = if (low_mask == 0 && !wide) || mask == 0 || size == 0 {
            0
        } else if current != 0
            && (MMIO_START..IDENTITY_MAP_END).contains(&current)
            && (MMIO_START..IDENTITY_MAP_END).contains(&(current + size - 1))
        {
            current
        } else {
            // Unassigned, or where the kernel maps nothing (a firmware
            // may put a 64-bit BAR above 4 GiB): moved into the window.
            let base = next.next_multiple_of(size);
            if base + size > window_end {
                return Err(TransportError::Bar(index));
            }
            *next = base + size;
            base
        };
        function.write(offset, base as u32 | (low & 0xf));
        if wide {
            function.write(offset + 4, (base >> 32) as u32);
        }
        bases[usize::from(index)] = base;
        index += if wide { 2 } else { 1 };
    }
    Ok(bases)
}

/// Brings up `function` as a modern virtio device: BARs, capabilities,
/// features (`wanted` plus VERSION_1, of what the device offers),
/// virtqueue 0 and, with `config` given, configuration changes as MSI-X
/// interrupts to it (see [`Transport::config_route`]). Returns the
/// transport and the features accepted.
pub fn probe(
    function: Function,
    wanted: u64,
    config: Option<DeviceTarget>,
) -> Result<(Transport, u64), TransportError> {
    let (mut next, window_end) = crate::arch::pci::memory_window();
    let bars = place_bars(function, &mut next, window_end)?;
    let block = |kind: u8, name: &'static str| {
        let cap = capabilities(function)
            .find(|cap| cap.kind == kind)
            .ok_or(TransportError::MissingCapability(name))?;
        let base = *bars
            .get(usize::from(cap.bar))
            .ok_or(TransportError::Bar(cap.bar))?;
        let address = base + u64::from(cap.offset);
        // Only the uncached part of the identity map is fit for registers.
        if base == 0 || !(MMIO_START..IDENTITY_MAP_END).contains(&address) {
            return Err(TransportError::Bar(cap.bar));
        }
        Ok((cap, address))
    };
    let (_, common) = block(CFG_COMMON, "common")?;
    let (notify_cap, notify_base) = block(CFG_NOTIFY, "notify")?;
    let (_, device) = block(CFG_DEVICE, "device")?;
    let multiplier = function.read(notify_cap.at + 16);
    // Memory decoding and bus mastering; I/O decoding stays as it was.
    let command = function.read(0x04);
    function.write(0x04, (command & 0xffff) | 0b110);

    let common = Mmio(common);
    if !reset(common) {
        return Err(TransportError::Timeout);
    }
    common.write8(DEVICE_STATUS, STATUS_ACKNOWLEDGE);
    common.write8(DEVICE_STATUS, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    let mut offered = 0u64;
    for half in 0..2u32 {
        common.write32(DEVICE_FEATURE_SELECT, half);
        offered |= u64::from(common.read32(DEVICE_FEATURE)) << (32 * half);
    }
    if offered & FEATURE_VERSION_1 == 0 {
        common.write8(DEVICE_STATUS, STATUS_FAILED);
        return Err(TransportError::NotModern);
    }
    let accepted = offered & (wanted | FEATURE_VERSION_1);
    for half in 0..2u32 {
        common.write32(DRIVER_FEATURE_SELECT, half);
        common.write32(DRIVER_FEATURE, (accepted >> (32 * half)) as u32);
    }
    let status = STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK;
    common.write8(DEVICE_STATUS, status);
    if common.read8(DEVICE_STATUS) & STATUS_FEATURES_OK == 0 {
        common.write8(DEVICE_STATUS, STATUS_FAILED);
        return Err(TransportError::FeaturesRefused);
    }
    common.write16(QUEUE_SELECT, 0);
    let max = common.read16(QUEUE_SIZE);
    if max < 2 {
        common.write8(DEVICE_STATUS, STATUS_FAILED);
        return Err(TransportError::NoQueue);
    }
    let queue_size = max.min(QUEUE_ENTRIES);
    let Some(mut queue) = SplitQueue::new(queue_size, RingLayout::Compact) else {
        common.write8(DEVICE_STATUS, STATUS_FAILED);
        return Err(TransportError::NoMemory);
    };
    // Completions are polled: no interrupt for them (virtio 1.2, 2.7.7).
    queue.suppress_interrupts();
    common.write16(QUEUE_SIZE, queue_size);
    common.write64(QUEUE_DESC, queue.address());
    common.write64(QUEUE_DRIVER, queue.avail_address());
    common.write64(QUEUE_DEVICE, queue.used_address());
    let notify_off = common.read16(QUEUE_NOTIFY_OFF);
    common.write16(QUEUE_ENABLE, 1);
    // After the reset (which sets the vector to NO_VECTOR) and before
    // DRIVER_OK, after which the device may announce changes.
    let isr = block(CFG_ISR, "ISR")?.1;
    let route = config.map(|target| route_config(function, &bars, common, isr, target));
    common.write8(DEVICE_STATUS, status | STATUS_DRIVER_OK);
    Ok((
        Transport {
            common,
            device: Mmio(device),
            notify: notify_base + u64::from(notify_off) * u64::from(multiplier),
            queue: ManuallyDrop::new(queue),
            requests: 0,
            route,
        },
        accepted,
    ))
}

/// Resets the device: writes 0 to the status and waits (at most
/// [`TIMEOUT_NS`]) until it reads 0, which says the reset is complete.
fn reset(common: Mmio) -> bool {
    common.write8(DEVICE_STATUS, 0);
    let limit = clock::nanos() + TIMEOUT_NS;
    while common.read8(DEVICE_STATUS) != 0 {
        if clock::nanos() > limit {
            return false;
        }
        core::hint::spin_loop();
    }
    true
}

impl Transport {
    /// The device configuration's 64-bit field at `offset`, read as two
    /// 32-bit halves inside one configuration generation.
    pub fn config64(&self, offset: u64) -> u64 {
        loop {
            let before = self.common.read8(CONFIG_GENERATION);
            let value = u64::from(self.device.read32(offset))
                | u64::from(self.device.read32(offset + 4)) << 32;
            if self.common.read8(CONFIG_GENERATION) == before {
                return value;
            }
        }
    }

    /// The configuration generation, which the device bumps on every
    /// change it makes to its configuration.
    pub fn generation(&self) -> u8 {
        self.common.read8(CONFIG_GENERATION)
    }

    /// How the device announces configuration changes as interrupts
    /// ([`config_interrupts`] counts them), or why it cannot;
    /// `None` if [`probe`] was given no target.
    pub fn config_route(&self) -> Option<Result<ConfigRoute, NoRoute>> {
        self.route
    }

    /// Sends `request` (device-readable) and waits for the device to write
    /// `response`; returns the bytes it wrote.
    pub fn request(
        &mut self,
        request: &[u8],
        response: &mut [u8],
    ) -> Result<usize, TransportError> {
        let (request_len, response_len) = (
            request.len().min(MAX_MESSAGE),
            response.len().min(MAX_MESSAGE),
        );
        let (Some(request_at), Some(response_at)) = (
            self.queue.spare(REQUEST_AT, MAX_MESSAGE),
            self.queue.spare(RESPONSE_AT, MAX_MESSAGE),
        ) else {
            return Err(TransportError::NoMemory);
        };
        // SAFETY: both buffers lie in the queue's page, past its rings;
        // the device reads the request and writes the response only
        // between the notify and the used index moving, and this driver
        // has one request in flight at a time.
        unsafe {
            core::ptr::copy_nonoverlapping(request.as_ptr(), request_at, request_len);
            core::ptr::write_bytes(response_at, 0, response_len);
        }
        self.queue.set(
            0,
            Descriptor {
                address: request_at as u64,
                len: request_len as u32,
                flags: DESCRIPTOR_NEXT,
                next: 1,
            },
        );
        self.queue.set(
            1,
            Descriptor {
                address: response_at as u64,
                len: response_len as u32,
                flags: DESCRIPTOR_WRITE,
                next: 0,
            },
        );
        self.queue.publish();
        // SAFETY: the notify address `probe` computed from the notify
        // capability, in the uncached identity map.
        unsafe { write_volatile(self.notify as *mut u16, 0) };
        let written = self
            .queue
            .wait_used(clock::nanos() + TIMEOUT_NS)
            .ok_or(TransportError::Timeout)?;
        self.requests += 1;
        let written = (written as usize).min(response_len);
        // SAFETY: the device wrote the response before the used index,
        // which `wait_used` read (acquire).
        unsafe { core::ptr::copy_nonoverlapping(response_at, response.as_mut_ptr(), written) };
        Ok(written)
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        // No more interrupts from a device about to be reset.
        if let Some(Ok(ConfigRoute::Intx(intx))) = self.route {
            crate::arch::interrupts::mask_pin(intx.number());
        }
        // A reset stops the device using the ring before it is freed.
        if !reset(self.common) {
            // The device may still use the ring: leave it allocated.
            return;
        }
        // SAFETY: dropped once, here, and the device is reset.
        unsafe { ManuallyDrop::drop(&mut self.queue) };
    }
}
