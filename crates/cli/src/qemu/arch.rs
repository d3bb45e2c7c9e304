//! Which architecture the kernel is built for and booted as: the one
//! place that knows each one's QEMU binary, machine, firmware, Rust target
//! and how the kernel ends QEMU with a status.

use std::fmt;

/// An architecture the bare-metal kernel (crates/baremetal) runs on:
/// `hotkern boot --arch aarch64` builds the kernel for
/// `aarch64-unknown-none-softfloat` and boots it on `qemu-system-aarch64
/// -M virt,gic-version=3` (the tests in `qemu.rs` and `kernel.rs` spell
/// out each command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Architecture {
    /// x86-64: QEMU's PC (`q35` is not needed) started through PVH.
    #[default]
    #[value(name = "x86_64", alias = "x86-64")]
    X86_64,
    /// aarch64: QEMU's `virt` board with a GICv3, started at the ELF's
    /// entry in EL1, secondary CPUs through PSCI.
    #[value(name = "aarch64", alias = "arm64")]
    Aarch64,
}

impl Architecture {
    /// The QEMU binary that emulates it.
    pub const fn qemu(self) -> &'static str {
        match self {
            Architecture::X86_64 => "qemu-system-x86_64",
            Architecture::Aarch64 => "qemu-system-aarch64",
        }
    }

    /// The Debian package that has that binary.
    pub const fn package(self) -> &'static str {
        match self {
            Architecture::X86_64 => "qemu-system-x86",
            Architecture::Aarch64 => "qemu-system-arm",
        }
    }

    /// The Rust target the kernel is built for: no operating system, soft
    /// float on both, so that neither exceptions nor thread switches have
    /// floating-point state to save.
    pub const fn kernel_target(self) -> &'static str {
        match self {
            Architecture::X86_64 => "x86_64-unknown-none",
            Architecture::Aarch64 => "aarch64-unknown-none-softfloat",
        }
    }

    /// The machine and CPU, before any device.
    pub const fn machine_args(self) -> &'static [&'static str] {
        match self {
            // QEMU's default PC; the CPU is TCG's default or `-cpu host`.
            Architecture::X86_64 => &[],
            // GICv3 for system-register SGIs and redistributors; a
            // Cortex-A72 is an ARMv8.0 core, the common denominator of
            // the big.LITTLE boards Bolt was measured on.
            Architecture::Aarch64 => &["-M", "virt,gic-version=3", "-cpu", "cortex-a72"],
        }
    }

    /// The device through which the kernel ends QEMU with a status.
    ///
    /// x86-64: `isa-debug-exit`, which turns the kernel's write of `v`
    /// into the status `(v << 1) | 1`. aarch64: Arm semihosting's
    /// `SYS_EXIT_EXTENDED`, to which the kernel passes that same
    /// `(v << 1) | 1`, so [`super::Outcome::from_status`] reads both.
    pub const fn exit_args(self) -> &'static [&'static str] {
        match self {
            Architecture::X86_64 => &["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"],
            Architecture::Aarch64 => &["-semihosting-config", "enable=on,target=native"],
        }
    }

    /// Whether it boots through a firmware image of its own (`-bios`):
    /// qboot on x86-64; `virt` jumps straight to the kernel.
    pub const fn has_firmware(self) -> bool {
        matches!(self, Architecture::X86_64)
    }

    /// Debian's name for it, as in `linux-image-arm64` and `apt-get
    /// download busybox-static:arm64`.
    ///
    /// ```ignore
    /// assert_eq!(Architecture::Aarch64.debian_name(), "arm64");
    /// ```
    pub const fn debian_name(self) -> &'static str {
        match self {
            Architecture::X86_64 => "amd64",
            Architecture::Aarch64 => "arm64",
        }
    }

    /// The ELF header's `e_machine` of its executables (`EM_X86_64`,
    /// `EM_AARCH64` in the System V ABI's list), so that a busybox built
    /// for another architecture is not put into its initramfs.
    pub const fn elf_machine(self) -> u16 {
        match self {
            Architecture::X86_64 => 62,
            Architecture::Aarch64 => 183,
        }
    }

    /// The device Linux names the serial port QEMU's `-serial stdio` is
    /// wired to: the PC's 16550 COM1, `virt`'s PL011 UART.
    pub const fn linux_console(self) -> &'static str {
        match self {
            Architecture::X86_64 => "ttyS0",
            Architecture::Aarch64 => "ttyAMA0",
        }
    }

    /// The name `--arch` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Architecture::X86_64 => "x86_64",
            Architecture::Aarch64 => "aarch64",
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
