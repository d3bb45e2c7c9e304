//! The arm64 entry's first Rust code: the console, the boot CPU's block
//! and vector table, the device tree read into the contract's
//! [`BootInfo`], the GICv3's distributor and this CPU's interface, then
//! the shared boot (`kernel_main` in `main.rs`).

use hotkern_cpuhp::CpuId;

use crate::arch::boot::BootInfo;
use crate::arch::boot_info::{Region, RegionKind};
use crate::arch::console::{self, println};
use crate::arch::devicetree::{self, Machine};
use crate::arch::fdt::{Fdt, FdtError};
use crate::arch::{boot, cpu, gic, interrupts, pci, psci, selfcheck};

/// Where `-M virt` puts the device tree of an ELF `-kernel` (QEMU's
/// `hw/arm/boot.c`: at the start of RAM, when the image leaves room; `x0`
/// is 0 then, as it only carries the tree for a Linux image).
pub const VIRT_TREE: u64 = 0x4000_0000;

/// The device tree: at `x0` if the loader passed one there, else at the
/// start of RAM.
fn find_tree(x0: u64) -> Result<(u64, Fdt<'static>), FdtError> {
    let mut last = Err(FdtError::BadMagic(0));
    for address in [x0, VIRT_TREE] {
        // Only inside the boot map's RAM, which nothing wrote yet.
        if !(boot::RAM_WINDOW_START..boot::IDENTITY_MAP_END).contains(&address) {
            continue;
        }
        // SAFETY: the address is mapped write-back RAM (checked above), and
        // the reader checks every length against the header it reads.
        match unsafe { Fdt::at(address) } {
            Ok(tree) => return Ok((address, tree)),
            Err(error) => last = Err(error),
        }
    }
    last
}

/// The contract's boot information from the machine: its RAM, the tree
/// and its reservations as firmware tables and reserved regions, and
/// `-append`'s text.
fn boot_info(machine: &Machine) -> BootInfo {
    let mut info = BootInfo::new("device tree", 17, machine.tree.0);
    for &(start, end) in machine.ram() {
        info.push_region(Region {
            start,
            end,
            kind: RegionKind::Ram,
        });
    }
    info.push_region(Region {
        start: machine.tree.0,
        end: machine.tree.0 + machine.tree.1,
        kind: RegionKind::FirmwareTables,
    });
    for &(start, end) in &machine.reserved[..machine.reserved_ranges] {
        info.push_region(Region {
            start,
            end,
            kind: RegionKind::Reserved,
        });
    }
    for byte in machine.bootargs.bytes() {
        if !info.push_command_line_byte(byte) {
            break;
        }
    }
    info
}

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the loader's `x0` and the counter at the first instruction.
#[no_mangle]
extern "C" fn arm64_main(x0: u64, _first_count: u64) -> ! {
    extern "Rust" {
        fn kernel_main(info: BootInfo) -> !;
    }
    console::init();
    println!("hotkern: {} kernel booting, x0 {x0:#x}", crate::arch::NAME);
    // SAFETY: the boot CPU, once, IRQs masked (the entry masked them).
    unsafe { cpu::init(CpuId(0)) };
    interrupts::init();
    let (address, tree) = match find_tree(x0) {
        Ok(found) => found,
        Err(error) => panic!("no device tree at x0 {x0:#x} or {VIRT_TREE:#x}: {error}"),
    };
    let machine = match Machine::read(address, &tree) {
        Ok(machine) => devicetree::set_machine(machine),
        Err(error) => panic!("{error}"),
    };
    if let Some(conduit) = machine.psci {
        psci::set_conduit(conduit);
    }
    print_machine(machine);
    let (Some(distributor), Some(redistributors)) = (machine.distributor, machine.redistributors)
    else {
        panic!("no GICv3 in the device tree");
    };
    gic::init(distributor, redistributors);
    // The PCI devices' bus: its ECAM mapped before the drivers probe; a
    // machine without one boots on, its bus reading as empty.
    match pci::init(machine) {
        Ok(host) => println!(
            "hotkern: PCIe ECAM {:#x}, 32-bit memory window {:#x} ({:#x} bytes), I/O window {:x?}",
            host.ecam.0, host.memory.cpu, host.memory.size, host.io
        ),
        Err(error) => println!("hotkern: no PCI devices: {error}"),
    }
    crate::arch::smp::register(machine.cpus());
    if let Err(error) = gic::init_cpu() {
        panic!("{error}");
    }
    let info = boot_info(machine);
    info.print("device tree");
    // `crash=exception`: the crash report's own check, before anything
    // else can go wrong.
    if info.option("crash") == Some("exception") {
        // SAFETY: not safe on purpose: an undefined instruction, which the
        // vector table reports before QEMU exits with `Exit::Exception`.
        unsafe { core::arch::asm!("udf #0") };
    }
    if info
        .cmdline()
        .split_ascii_whitespace()
        .any(|word| word == "archcheck")
    {
        selfcheck::run(&info);
    }
    // SAFETY: `kernel_main` is the shared boot in `main.rs`, with this
    // signature; called once, on the boot CPU, IRQs masked.
    unsafe { kernel_main(info) }
}

/// The machine as the device tree told it, on the console.
fn print_machine(machine: &Machine) {
    println!(
        "hotkern: device tree at {:#x} ({} bytes), bootargs \"{}\"",
        machine.tree.0, machine.tree.1, machine.bootargs
    );
    for &(start, end) in machine.ram() {
        println!(
            "hotkern: RAM [{start:#x}, {end:#x}) {} MiB",
            (end - start) >> 20
        );
    }
    let hex = |value: Option<u64>| value.unwrap_or(0);
    let (redistributors, redistributor_bytes) = machine.redistributors.unwrap_or((0, 0));
    let (ecam, ecam_bytes) = machine.pcie_ecam.unwrap_or((0, 0));
    println!(
        "hotkern: {} CPUs (affinities {:x?}), GICv3 distributor {:#x}, redistributors {redistributors:#x} ({redistributor_bytes:#x} bytes), PL011 {:#x}, PSCI {:?}, {} virtio-mmio, PCIe ECAM {ecam:#x} ({ecam_bytes:#x} bytes)",
        machine.cpu_count,
        machine.cpus(),
        hex(machine.distributor),
        hex(machine.uart),
        machine.psci,
        machine.virtio_mmio,
    );
}
