//! What the firmware or loader tells the kernel at entry, in one form for
//! every architecture: the command line, the memory map and where the
//! firmware's tables are. x86-64 fills it from the PVH start info
//! (`arch::x86_64::pvh`), aarch64 from the device tree; the layers above
//! read only this.

use crate::arch::console::println;

/// Memory-map entries kept; the rest are counted in
/// [`BootInfo::regions_dropped`].
pub const MAX_REGIONS: usize = 64;

/// Command-line bytes kept.
pub const MAX_COMMAND_LINE: usize = 256;

/// What a memory-map region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Usable RAM: physmem's to manage.
    Ram,
    /// Reserved by the firmware or the machine.
    Reserved,
    /// The firmware's tables (ACPI tables, a device tree blob).
    FirmwareTables,
    /// Memory the firmware keeps across sleep (ACPI NVS; x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    FirmwareStorage,
    /// Anything else the map names.
    Other,
}

impl RegionKind {
    /// The kind's name on the console.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Ram => "RAM",
            RegionKind::Reserved => "reserved",
            RegionKind::FirmwareTables => "ACPI",
            RegionKind::FirmwareStorage => "ACPI NVS",
            RegionKind::Other => "other",
        }
    }
}

/// A physical memory region from the loader's map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// What it holds.
    pub kind: RegionKind,
}

impl Region {
    const EMPTY: Region = Region {
        start: 0,
        end: 0,
        kind: RegionKind::Other,
    };
}

/// What the kernel keeps of the boot protocol's information, copied out
/// before any memory is handed out so the loader's pages need not be kept.
///
/// ```ignore
/// let mut info = BootInfo::new("start info", 1, rsdp);
/// info.push_region(Region { start: 0, end: 640 << 10, kind: RegionKind::Ram });
/// info.set_command_line(b"hz=250 engine=none");
/// assert_eq!(info.option("hz"), Some("250"));
/// ```
pub struct BootInfo {
    /// The boot protocol, for the console ("start info", "device tree").
    pub protocol: &'static str,
    /// The protocol's version.
    pub version: u32,
    /// The firmware tables' physical address: the ACPI RSDP on x86-64,
    /// the device tree blob on aarch64; 0 if none.
    pub firmware_tables: u64,
    regions: [Region; MAX_REGIONS],
    region_count: usize,
    /// Map entries beyond [`MAX_REGIONS`], ignored.
    pub regions_dropped: usize,
    command_line: [u8; MAX_COMMAND_LINE],
    command_line_len: usize,
}

impl BootInfo {
    /// An empty map and command line.
    pub const fn new(protocol: &'static str, version: u32, firmware_tables: u64) -> BootInfo {
        BootInfo {
            protocol,
            version,
            firmware_tables,
            regions: [Region::EMPTY; MAX_REGIONS],
            region_count: 0,
            regions_dropped: 0,
            command_line: [0; MAX_COMMAND_LINE],
            command_line_len: 0,
        }
    }

    /// Appends a region; past [`MAX_REGIONS`] it is counted as dropped.
    pub fn push_region(&mut self, region: Region) {
        match self.regions.get_mut(self.region_count) {
            Some(slot) => {
                *slot = region;
                self.region_count += 1;
            }
            None => self.regions_dropped += 1,
        }
    }

    /// Appends one command-line byte; false once [`MAX_COMMAND_LINE`]
    /// bytes are kept (the rest is cut).
    pub fn push_command_line_byte(&mut self, byte: u8) -> bool {
        match self.command_line.get_mut(self.command_line_len) {
            Some(slot) => {
                *slot = byte;
                self.command_line_len += 1;
                true
            }
            None => false,
        }
    }

    /// The memory map, in the loader's order.
    pub fn regions(&self) -> &[Region] {
        &self.regions[..self.region_count]
    }

    /// The kernel command line (QEMU's `-append`), cut at
    /// [`MAX_COMMAND_LINE`] bytes; empty if it is not UTF-8.
    pub fn cmdline(&self) -> &str {
        core::str::from_utf8(&self.command_line[..self.command_line_len]).unwrap_or("")
    }

    /// The value of `key=value` on the command line.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.cmdline().split_ascii_whitespace().find_map(|word| {
            word.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('='))
        })
    }

    /// Prints the protocol, the command line, the firmware tables and the
    /// memory map; `tables` names the firmware tables ("ACPI RSDP").
    pub fn print(&self, tables: &str) {
        println!(
            "hotkern: {} v{}, command line {:?}, {tables} at {:#x}, {} memory map entries",
            self.protocol,
            self.version,
            self.cmdline(),
            self.firmware_tables,
            self.regions().len()
        );
        for region in self.regions() {
            println!(
                "hotkern:   [{:#014x}, {:#014x}) {}",
                region.start,
                region.end,
                region.kind.name()
            );
        }
    }
}
