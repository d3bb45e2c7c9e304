//! `-M virt`'s PCIe host bridge (QEMU's `hw/pci-host/gpex.c`) as its
//! device tree node describes it (the `pci-host-ecam-generic` binding):
//! configuration space as ECAM, the windows of `ranges`, and each
//! device's legacy pin to a GIC SPI through `interrupt-map`.
//!
//! - **`ranges`** (the PCI Bus Binding to IEEE Std 1275-1994, 2.2.1): each
//!   entry is a PCI address of three cells — `phys.hi` names the space in
//!   bits 24–25 (1 I/O, 2 32-bit memory, 3 64-bit memory) — then a CPU
//!   address in the parent's `#address-cells`, then a size in the node's
//!   `#size-cells`. No firmware runs before this kernel on `virt`, so
//!   BARs are all zero and the drivers place them in the 32-bit memory
//!   window; the I/O window is where I/O space appears in memory.
//! - **`interrupt-map`** (the Devicetree Specification v0.4, 2.4.3,
//!   "Interrupt Nexus Properties"): each entry is a child unit address (3
//!   cells) and a child interrupt (1 cell, the pin, 1 = INTA), then the
//!   parent's phandle, its unit address (its `#address-cells`) and its
//!   interrupt specifier (its `#interrupt-cells`; a GIC's is kind — 0 SPI,
//!   1 PPI — number and flags: 1 edge rising, 4 level high). A device's
//!   `(device << 11, 0, 0, pin)`, masked by `interrupt-map-mask`, is
//!   looked up; QEMU writes the swizzle `(pin - 1 + device) % 4` into the
//!   map itself, and the mask keeps the device number's low two bits, so
//!   the map's sixteen entries serve all 32 devices of bus 0.

use core::fmt;

use super::devicetree::{HostBridgeNode, InterruptParent};

/// Bytes of one bus's configuration space in ECAM (32 devices × 8
/// functions × 4 KiB).
pub const ECAM_BUS_BYTES: u64 = 1 << 20;
/// The first SPI's INTID: SPI `n` of the device tree is INTID 32 + n.
const FIRST_SPI: u32 = 32;
/// The GIC specifier's kinds and trigger flags.
const KIND_SPI: u32 = 0;
/// The flag of a level-high interrupt (1 would be edge rising).
const TRIGGER_LEVEL_HIGH: u32 = 4;
/// `ranges`' space codes (phys.hi bits 24–25).
const SPACE_IO: u32 = 1;
const SPACE_MEMORY32: u32 = 2;

/// A window of `ranges`: bus addresses `[bus, bus + size)` appear at CPU
/// addresses `[cpu, cpu + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// The CPU (physical) address of its start.
    pub cpu: u64,
    /// The PCI bus address of its start.
    pub bus: u64,
    /// Its bytes.
    pub size: u64,
}

/// Why the host bridge's node cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostError {
    /// The tree has no enabled `pci-host-ecam-generic` node with a `reg`.
    NoHost,
    /// Its ECAM is smaller than one bus.
    SmallEcam(u64),
    /// `ranges` is not whole entries of the node's cells.
    Ranges,
    /// No 32-bit memory window at the same CPU and bus address.
    NoMemoryWindow,
    /// Bus 0 of the ECAM at this address cannot be mapped.
    Ecam(u64),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::NoHost => f.write_str("no pci-host-ecam-generic node in the device tree"),
            HostError::SmallEcam(bytes) => write!(f, "ECAM of {bytes:#x} bytes, under one bus"),
            HostError::Ranges => f.write_str("the host bridge's ranges are malformed"),
            HostError::NoMemoryWindow => {
                f.write_str("no identity-mapped 32-bit memory window in ranges")
            }
            HostError::Ecam(address) => {
                write!(f, "bus 0 of the ECAM at {address:#x} cannot be mapped")
            }
        }
    }
}

impl core::error::Error for HostError {}

/// Why a device's pin has no SPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The map's cells are not what a PCI node and a GIC write (3 + 1
    /// child cells, the GIC's `#interrupt-cells` of 3), or an entry is cut.
    Malformed,
    /// No entry matches the device and pin.
    NoEntry,
    /// The entry names another controller than the GIC, or a PPI.
    NotGicSpi,
}

/// Where a pin goes: an SPI at the GIC and how it triggers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spi {
    /// The SPI's INTID (32 and up).
    pub intid: u32,
    /// Level-sensitive (PCI's INTx are), else edge.
    pub level: bool,
}

/// The host bridge as read from the tree.
///
/// ```ignore
/// let host = HostBridge::read(machine.pcie_ecam, machine.pcie, machine.gic_node)?;
/// // virtio-mem at device 1, INTA: SPI 4 of the tree.
/// assert_eq!(host.route(1, 1), Ok(Spi { intid: 36, level: true }));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct HostBridge {
    /// Bus 0's configuration space: `(start, bytes)`.
    pub ecam: (u64, u64),
    /// The 32-bit memory window, where BARs go.
    pub memory: Window,
    /// The I/O window, where PCI I/O space appears.
    pub io: Option<Window>,
    node: HostBridgeNode,
    gic: Option<InterruptParent>,
}

/// Cell `index` of a property, if it has that many.
fn cell(bytes: &[u8], index: usize) -> Option<u32> {
    let at = index.checked_mul(4)?;
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

/// Cells `[first, first + count)` of a property as one number, big end
/// first (0 for cells it lacks, which the callers' length checks rule out).
fn number(bytes: &[u8], first: usize, count: usize) -> u64 {
    (first..first + count).fold(0, |value, index| {
        (value << 32) | u64::from(cell(bytes, index).unwrap_or(0))
    })
}

impl HostBridge {
    /// Decodes the node: its ECAM (`reg`), its windows (`ranges`); the
    /// interrupt map is checked when a pin is routed ([`Self::route`]).
    pub fn read(
        ecam: Option<(u64, u64)>,
        node: Option<HostBridgeNode>,
        gic: Option<InterruptParent>,
    ) -> Result<HostBridge, HostError> {
        let (Some(ecam), Some(node)) = (ecam, node) else {
            return Err(HostError::NoHost);
        };
        if ecam.1 < ECAM_BUS_BYTES {
            return Err(HostError::SmallEcam(ecam.1));
        }
        let (child, size) = (node.cells.0 as usize, node.cells.1 as usize);
        let parent = node.parent_address_cells as usize;
        let entry = child + parent + size;
        if child != 3 || node.ranges.len() % (4 * entry) != 0 {
            return Err(HostError::Ranges);
        }
        let (mut memory, mut io) = (None, None);
        for first in (0..node.ranges.len() / 4).step_by(entry) {
            let ranges = node.ranges;
            let window = Window {
                bus: number(ranges, first + 1, 2),
                cpu: number(ranges, first + 3, parent),
                size: number(ranges, first + 3 + parent, size),
            };
            let space = cell(ranges, first).unwrap_or(0) >> 24 & 3;
            match space {
                SPACE_IO if io.is_none() => io = Some(window),
                SPACE_MEMORY32 if memory.is_none() && window.cpu == window.bus => {
                    memory = Some(window)
                }
                _ => {}
            }
        }
        Ok(HostBridge {
            ecam,
            memory: memory.ok_or(HostError::NoMemoryWindow)?,
            io,
            node,
            gic,
        })
    }

    /// The SPI that pin `pin` (1 = INTA) of bus 0's device `device` raises,
    /// from the node's `interrupt-map`.
    pub fn route(&self, device: u8, pin: u8) -> Result<Spi, MapError> {
        let gic = self.gic.ok_or(MapError::NotGicSpi)?;
        let (child, interrupt) = (self.node.cells.0 as usize, self.node.cells.2 as usize);
        if child != 3 || interrupt != 1 || gic.interrupt_cells != 3 {
            return Err(MapError::Malformed);
        }
        let mask_bytes = self.node.interrupt_map_mask;
        let mask: [u32; 4] = match mask_bytes.len() {
            16 => core::array::from_fn(|i| cell(mask_bytes, i).unwrap_or(0)),
            0 => [u32::MAX; 4],
            _ => return Err(MapError::Malformed),
        };
        let key = [u32::from(device) << 11, 0, 0, u32::from(pin)];
        let want: [u32; 4] = core::array::from_fn(|i| key[i] & mask[i]);
        let map = self.node.interrupt_map;
        // Child address and pin, the parent's phandle, its unit address,
        // its three specifier cells.
        let length = 5 + gic.address_cells as usize + 3;
        if map.len() % (4 * length) != 0 {
            return Err(MapError::Malformed);
        }
        for first in (0..map.len() / 4).step_by(length) {
            let at = |index: usize| cell(map, first + index).unwrap_or(0);
            if (0..4).any(|i| at(i) & mask[i] != want[i]) {
                continue;
            }
            // Every entry naming the GIC is what makes the length above
            // right; QEMU's map names nothing else.
            let specifier = length - 3;
            if at(4) != gic.phandle || at(specifier) != KIND_SPI {
                return Err(MapError::NotGicSpi);
            }
            return Ok(Spi {
                intid: FIRST_SPI + at(specifier + 1),
                level: at(specifier + 2) & TRIGGER_LEVEL_HIGH != 0,
            });
        }
        Err(MapError::NoEntry)
    }
}

/// Cells of one entry of a map like `-M virt`'s: child address and pin,
/// the GIC's phandle, its two address cells, its three specifier cells.
const VIRT_ENTRY_CELLS: usize = 10;
/// The test bridge's GIC phandle.
const TEST_GIC: u32 = 0x8005;

/// An `interrupt-map` in `-M virt`'s layout, written here from the PCI
/// swizzle (devices 0–3, pins 1–4, pin `p` of device `d` on SPI
/// `3 + (p - 1 + d) % 4`), for [`reads_a_virt_bridge`].
const fn virt_map() -> [u8; 16 * VIRT_ENTRY_CELLS * 4] {
    let mut bytes = [0u8; 16 * VIRT_ENTRY_CELLS * 4];
    let mut entry = 0;
    while entry < 16 {
        let (device, pin) = (entry as u32 / 4, entry as u32 % 4 + 1);
        let cells = [
            device << 11,
            0,
            0,
            pin,
            TEST_GIC,
            0,
            0,
            KIND_SPI,
            3 + (pin - 1 + device) % 4,
            TRIGGER_LEVEL_HIGH,
        ];
        let mut index = 0;
        while index < VIRT_ENTRY_CELLS {
            let word = cells[index].to_be_bytes();
            let at = (entry * VIRT_ENTRY_CELLS + index) * 4;
            bytes[at] = word[0];
            bytes[at + 1] = word[1];
            bytes[at + 2] = word[2];
            bytes[at + 3] = word[3];
            index += 1;
        }
        entry += 1;
    }
    bytes
}

/// Big-endian bytes of 4 cells.
const fn four_cells(cells: [u32; 4]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let mut index = 0;
    while index < 16 {
        bytes[index] = cells[index / 4].to_be_bytes()[index % 4];
        index += 1;
    }
    bytes
}

static VIRT_MAP: [u8; 16 * VIRT_ENTRY_CELLS * 4] = virt_map();
static VIRT_MASK: [u8; 16] = four_cells([0x1800, 0, 0, 7]);
/// `ranges` of two entries (3 + 2 + 2 cells): I/O at bus 0 → 0x3eff_0000,
/// 64 KiB; 32-bit memory 0x1000_0000 → itself, 0x2eff_0000 bytes.
static VIRT_RANGES: [u8; 56] = {
    let io = four_cells([0x0100_0000, 0, 0, 0]);
    let io_rest = four_cells([0x3eff_0000, 0, 0x1_0000, 0x0200_0000]);
    let memory = four_cells([0, 0x1000_0000, 0, 0x1000_0000]);
    let size = four_cells([0, 0x2eff_0000, 0, 0]);
    let mut bytes = [0u8; 56];
    let mut index = 0;
    while index < 16 {
        bytes[index] = io[index];
        bytes[16 + index] = io_rest[index];
        bytes[32 + index] = memory[index];
        if index < 8 {
            bytes[48 + index] = size[index];
        }
        index += 1;
    }
    bytes
};

/// Whether the decoders read a bridge like `-M virt`'s right and refuse
/// broken ones with their typed errors: the arch check's test of this
/// module (on the target, where the tree is read), one break at a time.
pub fn reads_a_virt_bridge() -> bool {
    let node = HostBridgeNode {
        ranges: &VIRT_RANGES,
        interrupt_map: &VIRT_MAP,
        interrupt_map_mask: &VIRT_MASK,
        cells: (3, 2, 1),
        parent_address_cells: 2,
    };
    let gic = InterruptParent {
        phandle: TEST_GIC,
        address_cells: 2,
        interrupt_cells: 3,
    };
    let ecam = Some((0x40_1000_0000, 0x1000_0000));
    let Ok(host) = HostBridge::read(ecam, Some(node), Some(gic)) else {
        return false;
    };
    let spi = |device, pin| host.route(device, pin);
    let level = |intid| Ok(Spi { intid, level: true });
    let windows = host.memory
        == Window {
            cpu: 0x1000_0000,
            bus: 0x1000_0000,
            size: 0x2eff_0000,
        }
        && host.io
            == Some(Window {
                cpu: 0x3eff_0000,
                bus: 0,
                size: 0x1_0000,
            });
    // Device 1's INTA is SPI 4; device 5 shares device 1's entries (the
    // mask keeps two device bits); device 2's INTC wraps to SPI 3.
    let routes = spi(1, 1) == level(36)
        && spi(5, 1) == level(36)
        && spi(2, 3) == level(35)
        && spi(0, 4) == level(38)
        && spi(3, 2) == level(35)
        && spi(1, 5) == Err(MapError::NoEntry);
    let ranges_error = |ranges: &'static [u8]| {
        HostBridge::read(ecam, Some(HostBridgeNode { ranges, ..node }), Some(gic)).err()
    };
    let cut_map = HostBridge::read(
        ecam,
        Some(HostBridgeNode {
            interrupt_map: &VIRT_MAP[..VIRT_MAP.len() - 4],
            ..node
        }),
        Some(gic),
    )
    .map(|host| host.route(1, 1));
    let other_parent = HostBridge::read(
        ecam,
        Some(node),
        Some(InterruptParent {
            phandle: TEST_GIC + 1,
            ..gic
        }),
    )
    .map(|host| host.route(1, 1));
    let refusals = cut_map == Ok(Err(MapError::Malformed))
        && other_parent == Ok(Err(MapError::NotGicSpi))
        && HostBridge::read(Some((0, 4096)), Some(node), Some(gic)).err()
            == Some(HostError::SmallEcam(4096))
        && ranges_error(&VIRT_RANGES[..52]) == Some(HostError::Ranges)
        && ranges_error(&VIRT_RANGES[..28]) == Some(HostError::NoMemoryWindow)
        && HostBridge::read(ecam, None, Some(gic)).err() == Some(HostError::NoHost);
    windows && routes && refusals
}
