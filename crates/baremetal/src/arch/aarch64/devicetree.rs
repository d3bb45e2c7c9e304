//! What the kernel reads from `-M virt`'s device tree: RAM, the CPUs'
//! affinities, the GICv3's distributor and redistributors, the PL011,
//! PSCI's conduit, the command line, and the devices it counts.
//!
//! Read once on the boot CPU, before the heap: fixed-size lists, and
//! the command line borrowed from the tree (which stays where QEMU put it,
//! outside what physmem is given).

use core::fmt;

use crate::arch::cpu::MAX_CPUS;
use crate::arch::fdt::{Fdt, FdtError};

/// The machine as read at boot ([`set_machine`]).
static MACHINE: spin::Once<Machine> = spin::Once::new();

/// Keeps the machine the boot read, for the CPUs' discovery later.
pub fn set_machine(machine: Machine) -> &'static Machine {
    MACHINE.call_once(|| machine)
}

/// The machine the boot read.
pub fn machine() -> Result<&'static Machine, MachineError> {
    MACHINE.get().ok_or(MachineError::NoCpu)
}

/// RAM ranges kept; more are counted in [`Machine::dropped_ram`].
pub const MAX_RAM_RANGES: usize = 8;

/// How PSCI calls reach the firmware (`/psci`'s `method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    /// `HVC #0`: QEMU's own PSCI when EL2 is not emulated.
    Hypervisor,
    /// `SMC #0`: firmware at EL3.
    SecureMonitor,
}

/// The machine as the device tree describes it.
pub struct Machine {
    /// Where the tree is and its size.
    pub tree: (u64, u64),
    /// RAM `(start, end)` byte ranges.
    pub ram: [(u64, u64); MAX_RAM_RANGES],
    /// How many of `ram` are set.
    pub ram_ranges: usize,
    /// RAM ranges past [`MAX_RAM_RANGES`].
    pub dropped_ram: usize,
    /// The `/memreserve/` entries are folded into this: reserved bytes.
    pub reserved: [(u64, u64); MAX_RAM_RANGES],
    /// How many of `reserved` are set.
    pub reserved_ranges: usize,
    /// Each CPU's affinity (`MPIDR_EL1`'s Aff fields, the `reg` of its node),
    /// in tree order.
    pub cpus: [u64; MAX_CPUS],
    /// How many of `cpus` are set.
    pub cpu_count: usize,
    /// CPUs past [`MAX_CPUS`].
    pub dropped_cpus: usize,
    /// The GICv3 distributor's registers.
    pub distributor: Option<u64>,
    /// The redistributors' region: `(start, bytes)`.
    pub redistributors: Option<(u64, u64)>,
    /// The PL011's registers.
    pub uart: Option<u64>,
    /// PSCI's conduit.
    pub psci: Option<Conduit>,
    /// `/chosen/bootargs`: what `-append` gave.
    pub bootargs: &'static str,
    /// `virtio,mmio` transports.
    pub virtio_mmio: usize,
    /// Whether the architected timer is described.
    pub timer: bool,
    /// The PCIe host bridge's configuration space (ECAM): `(start, bytes)`.
    pub pcie_ecam: Option<(u64, u64)>,
    /// The PCIe host bridge's node (`pci-host-ecam-generic`), for its
    /// windows and interrupt routing ([`super::pci_host`] decodes it).
    pub pcie: Option<HostBridgeNode>,
    /// The GICv3 as an `interrupt-map` names it.
    pub gic_node: Option<InterruptParent>,
}

/// The PCIe host bridge's node as the tree gives it: properties kept raw
/// (borrowed from the tree, which stays where QEMU put it) and decoded
/// once every node is read, since the map names the GIC by a phandle.
#[derive(Clone, Copy, Debug)]
pub struct HostBridgeNode {
    /// `ranges`: PCI windows as `(child address, parent address, size)`.
    pub ranges: &'static [u8],
    /// `interrupt-map`.
    pub interrupt_map: &'static [u8],
    /// `interrupt-map-mask`.
    pub interrupt_map_mask: &'static [u8],
    /// Its own `#address-cells` (3 for PCI), `#size-cells` and
    /// `#interrupt-cells` (1: the pin).
    pub cells: (u32, u32, u32),
    /// Its parent's `#address-cells`: how `ranges` writes a CPU address.
    pub parent_address_cells: u32,
}

/// An interrupt controller an `interrupt-map` entry names: its phandle
/// and the cells of its unit address and of its interrupt specifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterruptParent {
    /// Its `phandle`.
    pub phandle: u32,
    /// Its `#address-cells`.
    pub address_cells: u32,
    /// Its `#interrupt-cells` (3 for a GIC: kind, number, flags).
    pub interrupt_cells: u32,
}

/// Why the tree cannot start this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineError {
    /// The blob is not a readable tree.
    Tree(FdtError),
    /// It describes no RAM.
    NoRam,
    /// It describes no CPU.
    NoCpu,
    /// No `arm,gic-v3` with a distributor and redistributors.
    NoGicV3,
}

impl fmt::Display for MachineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineError::Tree(error) => write!(f, "device tree: {error}"),
            MachineError::NoRam => f.write_str("device tree: no memory node"),
            MachineError::NoCpu => f.write_str("device tree: no cpu node"),
            MachineError::NoGicV3 => {
                f.write_str("device tree: no GICv3 (start QEMU with gic-version=3)")
            }
        }
    }
}

impl core::error::Error for MachineError {}

impl Machine {
    /// Reads the machine from the checked tree `tree` at `address`.
    pub fn read(address: u64, tree: &Fdt<'static>) -> Result<Machine, MachineError> {
        let mut machine = Machine {
            tree: (address, tree.total_size() as u64),
            ram: [(0, 0); MAX_RAM_RANGES],
            ram_ranges: 0,
            dropped_ram: 0,
            reserved: [(0, 0); MAX_RAM_RANGES],
            reserved_ranges: 0,
            cpus: [0; MAX_CPUS],
            cpu_count: 0,
            dropped_cpus: 0,
            distributor: None,
            redistributors: None,
            uart: None,
            psci: None,
            bootargs: "",
            virtio_mmio: 0,
            timer: false,
            pcie_ecam: None,
            pcie: None,
            gic_node: None,
        };
        for (start, size) in tree.reservations() {
            if machine.reserved_ranges < MAX_RAM_RANGES {
                machine.reserved[machine.reserved_ranges] = (start, start.saturating_add(size));
                machine.reserved_ranges += 1;
            }
        }
        tree.walk(|node| {
            if !node.enabled() {
                return;
            }
            if node.device_type == Some("memory") {
                for (start, size) in node.reg().filter(|&(_, size)| size != 0) {
                    if machine.ram_ranges < MAX_RAM_RANGES {
                        machine.ram[machine.ram_ranges] = (start, start.saturating_add(size));
                        machine.ram_ranges += 1;
                    } else {
                        machine.dropped_ram += 1;
                    }
                }
            } else if node.device_type == Some("cpu") && node.parent == "cpus" {
                if let Some((affinity, _)) = node.reg().next() {
                    if machine.cpu_count < MAX_CPUS {
                        machine.cpus[machine.cpu_count] = affinity;
                        machine.cpu_count += 1;
                    } else {
                        machine.dropped_cpus += 1;
                    }
                }
            } else if node.is_compatible("arm,gic-v3") {
                let mut reg = node.reg();
                machine.distributor = reg.next().map(|(start, _)| start);
                machine.redistributors = reg.next();
                machine.gic_node = node.phandle.map(|phandle| InterruptParent {
                    phandle,
                    address_cells: node.cells_for_children().0,
                    interrupt_cells: node.interrupt_cells,
                });
            } else if node.is_compatible("arm,pl011") && machine.uart.is_none() {
                machine.uart = node.reg().next().map(|(start, _)| start);
            } else if node.name == "psci" || node.is_compatible("arm,psci-0.2") {
                machine.psci = match node.method {
                    Some("hvc") => Some(Conduit::Hypervisor),
                    Some("smc") => Some(Conduit::SecureMonitor),
                    _ => machine.psci,
                };
            } else if node.name == "chosen" {
                machine.bootargs = node.bootargs.unwrap_or("");
            } else if node.is_compatible("virtio,mmio") {
                machine.virtio_mmio += 1;
            } else if node.is_compatible("arm,armv8-timer") {
                machine.timer = true;
            } else if node.is_compatible("pci-host-ecam-generic") {
                machine.pcie_ecam = node.reg().next();
                let (address_cells, size_cells) = node.cells_for_children();
                machine.pcie = Some(HostBridgeNode {
                    ranges: node.ranges,
                    interrupt_map: node.interrupt_map,
                    interrupt_map_mask: node.interrupt_map_mask,
                    cells: (address_cells, size_cells, node.interrupt_cells),
                    parent_address_cells: node.address_cells,
                });
            }
        })
        .map_err(MachineError::Tree)?;
        // QEMU lists the CPUs in reverse: number them by affinity, the
        // boot CPU (the lowest, `CPU_ON`'s target 0) first.
        machine.cpus[..machine.cpu_count].sort_unstable();
        if machine.ram_ranges == 0 {
            return Err(MachineError::NoRam);
        }
        if machine.cpu_count == 0 {
            return Err(MachineError::NoCpu);
        }
        if machine.distributor.is_none() || machine.redistributors.is_none() {
            return Err(MachineError::NoGicV3);
        }
        Ok(machine)
    }

    /// The RAM ranges.
    pub fn ram(&self) -> &[(u64, u64)] {
        &self.ram[..self.ram_ranges]
    }

    /// The CPUs' affinities, lowest first.
    pub fn cpus(&self) -> &[u64] {
        &self.cpus[..self.cpu_count]
    }
}
