//! The arch layer: everything only one kind of CPU and its QEMU machine
//! do, behind one contract. Each architecture is a module of its own
//! (`x86_64`, `aarch64`), selected by `cfg(target_arch)`, and the layers
//! above (drivers, platform, runs, `main.rs`) name only the contract
//! below, so that a second architecture costs its own module and nothing
//! above it.
//!
//! It uses nothing above it: where it must call up — the tick, a
//! device's interrupt, a secondary CPU's first Rust code — the layer
//! above hands it a function at boot. The one call the other way, the
//! entry into the shared `kernel_main(BootInfo)` in `main.rs`, goes by
//! symbol (`extern "Rust"`), not by path.
//!
//! # Shared by every architecture (here, one definition)
//!
//! | name | what it is |
//! |---|---|
//! | [`boot_info`]`::{BootInfo, Region, RegionKind}` | what the loader says: command line (`option`, `cmdline`), memory map, `firmware_tables` |
//! | [`console`]`::{init, print, println!, emergency, send_trace}` | the locked console over the arch's UART, the fault path's unlocked write, the trace's raw channel |
//! | [`heap`] | the kernel heap over frames taken from physmem |
//! | [`ranges`]`::{FrameRanges, PAGE_SIZE}` | page-frame range sets |
//! | [`exit_code`]`::Exit` | why the kernel stops (QEMU's exit status) |
//! | [`frames`]`::{KernelPage, PHYSMEM, Layout, FRAME_LIMIT}` | physmem's page descriptor and instance, what `memory::bring_up` reports |
//! | [`cpu_states`]`::{Park, SmpError}` | how an offline CPU parks; why an operation on another CPU failed |
//! | [`capabilities`]`::Capabilities` | what an architecture can do yet |
//! | [`processors`] | the CPU table, stacks, parking, cross-CPU mailboxes and doorbell under each `smp` (over its [`processors::Signals`]) |
//! | [`bring_up`] | boot RAM → physmem → heap → descriptors under each `memory::bring_up` (given a [`bring_up::Plan`]) |
//! | [`threads`] | kernel threads under each `kthread` (over its switch and [`threads::SwitchFrame`]) |
//! | [`direct_map`] | the direct map of hot-plugged RAM under each `memory` (over its [`direct_map::PageTables`]) |
//! | [`boot_stack`] | the boot stack's size, guard, high water; the kernel image's bounds |
//!
//! # What each architecture provides (the contract)
//!
//! | name | what it does | x86-64 | aarch64 (expected) |
//! |---|---|---|---|
//! | `NAME`, `CAPABILITIES` | the arch's name; which optional runs it supports | `"x86_64"`, all | `"aarch64"`, all but text patching |
//! | entry → `kernel_main(BootInfo) -> !` | first code: console, boot CPU's per-CPU block and exception table, `BootInfo`, then the shared boot | PVH 32-bit entry, long mode, `pvh_main` | `_start` at EL1, MMU on, FDT parsed |
//! | `boot::{BootInfo, BOOT_STACK_BYTES, stack_high_water, stack_overflowed, started_at, MMIO_START, IDENTITY_MAP_END}` | the boot stack's use; the clock at the first instruction; the device window and the end of the direct map | TSC at entry; 3–4 GiB uncached | CNTVCT at entry; virt's device window |
//! | `clock::{calibrate, now, nanos, micros_since, NAME, REFERENCE, TRACE_CLOCK}` | the free-running counter: raw units, ns, µs; its rate | TSC against the PIT | CNTVCT, rate from CNTFRQ |
//! | `tick::{start_on_boot_cpu, start, stop, set_tick_handler, hz, set_hz, sched_ticks, ticks, TIMER_NAME}` | the periodic tick per CPU; what it runs is the platform's handler | local APIC timer | generic timer (CNTV) PPI |
//! | `cpu::{MAX_CPUS, init_secondary, current, current_id, activity, enter_activity, hypervisor}` | the per-CPU block and the running CPU's number | `%gs` block, GDT, TSS | TPIDR_EL1 block |
//! | `interrupts::{init, enable, disable, without_interrupts, wait_for_interrupt, halt, halt_forever, set_crash_handler, breakpoint, breakpoints, set_device_handler, end_of_interrupt, DeviceTarget, device_target, route_pin, mask_pin, unmask_pin, PinRoute, PinError}` | exception table, masking, waiting, the crash hook, the breakpoint check; one device interrupt to the calling CPU, as an MSI message (`DeviceTarget::message`) or the device's legacy pin (`route_pin`, then `PinRoute::number` to mask and unmask) | IDT, `sti; hlt; cli`, `int3`, LAPIC EOI, MSI to 0xFEE0_0000, PIIX3 and I/O APIC | VBAR_EL1, `msr daifclr; wfi`, `brk`, GICv3 (no MSI: no ITS; the pin by the FDT's `interrupt-map` to an SPI the distributor routes by affinity; the GIC dispatcher ends it) |
//! | `smp::{BOOT_CPU, discover, firmware_check, DiscoveryError, cpu_count, cpus, application_processors, online, hardware_id, own_hardware_id, kick, kick_again, KICK_AGAIN_AFTER_US, TIMEOUT_US, park_here, is_parked_idle, set_park, park, Park, SmpError, starts, LIVES, RUNG, ring, wake, is_running, halt_until, enable_interrupts, call, post, finish, Posted}` | CPUs from the firmware, start/stop one CPU, parking, wake-ups, cross-CPU calls through mailboxes | MADT, INIT-SIPI-SIPI into a trampoline, IPIs | FDT `/cpus`, PSCI CPU_ON / CPU_OFF, SGIs |
//! | `kthread::{Kthread, switches, switches_on}` | kernel threads: spawn and switch | callee-saved registers and `%rsp` | x19–x30 and `sp` |
//! | `memory::{bring_up, MemoryError, MapError, PHYSMEM, KernelPage, Layout, map_range, unmap_range, unmap_large, prepare_map, is_mapped, huge_pages, directories_made, flush_tlb}` | boot memory → physmem, heap, direct map | 4-level page tables, 2 MiB pages | translation tables, 2 MiB blocks |
//! | `serial::{ConsoleUart, console, console_programmed, send_trace}` | the console UART and the trace channel | COM1 / COM2 16550 | PL011 |
//! | `qemu::{exit, Exit}` | ends the QEMU run with a status | `isa-debug-exit` port | semihosting `SYS_EXIT` or PSCI SYSTEM_OFF |
//! | `pci::{config_read, config_write, memory_window, io_read16, io_read32, io_write8, io_write16, io_write32}` | bus 0 configuration space, where BARs go, PCI I/O space | ports 0xCF8/0xCFC, the PCI hole 0xE000_0000–0xFE00_0000, `in`/`out` | the FDT host bridge's ECAM (bus 0 mapped Device-nGnRE), its 32-bit window, loads and stores in its I/O window |
//! | `text::{install, set_breakpoints_work, syncs, check_range}` | rewriting the kernel's call sites | `int3`-then-bytes with a sync per CPU | none at first: `install` does nothing, `check_range` refuses, and `CAPABILITIES.text_patching` is false so the runs skip |
//!
//! The signatures are x86-64's (`arch/x86_64/*.rs`); the layers above
//! use nothing else, which a build for aarch64 against a module of the
//! names above with empty bodies showed. `kernel_main` is defined in
//! `main.rs` with `#[no_mangle]`.
//!
//! A run the architecture cannot do yet is skipped because
//! [`Capabilities`](capabilities::Capabilities) says so, and the summary
//! names it (`"skipped_runs"`), never silently.

pub mod boot_info;
pub mod boot_stack;
pub mod bring_up;
pub mod capabilities;
pub mod console;
pub mod cpu_states;
pub mod direct_map;
pub mod exit_code;
pub mod frames;
pub mod heap;
pub mod processors;
pub mod ranges;
pub mod threads;

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64::*;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64::*;
