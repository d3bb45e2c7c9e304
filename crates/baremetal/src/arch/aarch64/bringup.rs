//! The arm64 boot until the layers above arch run on it: the entry's
//! first Rust code, what it brings up and checks, and the panic handler.

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::tick::Hz;

use crate::arch::console::{self, emergency, println};
use crate::arch::devicetree::Machine;
use crate::arch::fdt::Fdt;
use crate::arch::hardware::{self, Kernel};
use crate::arch::kthread::{self, Kthread};
use crate::arch::qemu::{exit, Exit};
use crate::arch::{
    boot, cpu, direct, exceptions, gic, heap, memory, psci, ranges, smp, tick, timer,
};

/// Where `-M virt` puts the device tree of an ELF `-kernel` (QEMU's
/// `hw/arm/boot.c`: at the start of RAM, when the image leaves room).
pub const VIRT_TREE: u64 = 0x4000_0000;

/// The device tree: at `x0` if the loader passed one there, else at the
/// start of RAM.
fn find_tree(x0: u64) -> Result<(u64, Fdt<'static>), crate::arch::fdt::FdtError> {
    let candidates = [x0, VIRT_TREE];
    let mut last = Err(crate::arch::fdt::FdtError::BadMagic(0));
    for address in candidates.into_iter().filter(|&address| address != 0) {
        // SAFETY: both candidates lie in the boot map's RAM window (x0 only
        // if the loader put a tree there; QEMU's RAM starts at 1 GiB), which
        // nothing writes before the tree is read.
        let in_window = (boot::RAM_WINDOW_START..boot::IDENTITY_MAP_END).contains(&address);
        if !in_window {
            continue;
        }
        // SAFETY: as above.
        match unsafe { Fdt::at(address) } {
            Ok(tree) => return Ok((address, tree)),
            Err(error) => last = Err(error),
        }
    }
    last
}

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the loader's `x0` and the counter at the first instruction.
#[no_mangle]
extern "C" fn kernel_main(x0: u64, first_count: u64) -> ! {
    console::init(crate::arch::pl011::VIRT_UART);
    println!("hotkern: arm64 kernel booting, x0 {x0:#x}");
    // SAFETY: the boot CPU, once, IRQs masked (the entry masked them).
    unsafe { cpu::init(CpuId(0)) };
    exceptions::load();
    let (address, tree) = match find_tree(x0) {
        Ok(found) => found,
        Err(error) => panic!("no device tree at x0 {x0:#x} or {VIRT_TREE:#x}: {error}"),
    };
    let machine = match Machine::read(address, &tree) {
        Ok(machine) => machine,
        Err(error) => panic!("{error}"),
    };
    if let Some(uart) = machine
        .uart
        .filter(|&uart| uart != crate::arch::pl011::VIRT_UART)
    {
        console::init(uart);
    }
    if let Some(conduit) = machine.psci {
        psci::set_conduit(conduit);
    }
    print_machine(&machine);
    // `crash=exception`: the crash report's own check.
    if machine.option("crash") == Some("exception") {
        // SAFETY: not safe at all on purpose: an undefined instruction,
        // which the vector table reports before QEMU exits.
        unsafe { core::arch::asm!("udf #0") };
    }
    let layout = match memory::bring_up(&machine) {
        Ok(layout) => layout,
        Err(error) => panic!("memory bring-up: {error}"),
    };
    let (heap_size, heap_used, _) = heap::usage();
    println!(
        "hotkern: physmem: {} segments, {} frames ({} MiB); heap {} KiB at frame {:#x}, {} KiB used by page descriptors and index",
        layout.managed.len(),
        layout.managed.frames(),
        (layout.managed.frames() * ranges::PAGE_SIZE) >> 20,
        heap_size >> 10,
        layout.heap.0,
        heap_used >> 10
    );
    let mut checks = Checks::default();
    check_memory(&layout, &mut checks);
    if let Some(hz) = machine.option("hz").and_then(|hz| hz.parse::<u32>().ok()) {
        match Hz::new(hz) {
            Ok(hz) => tick::set_hz(hz),
            Err(error) => println!("hotkern: hz={hz}: {error}; keeping {}", tick::hz()),
        }
    }
    let (Some(distributor), Some(redistributors)) = (machine.distributor, machine.redistributors)
    else {
        panic!("no GICv3");
    };
    let count = smp::register(machine.cpus()) as usize;
    gic::init(distributor, redistributors, &smp::affinities()[..count]);
    if let Err(error) = gic::init_cpu() {
        panic!("{error}");
    }
    hardware::install_handlers();
    check_interrupts(&mut checks);
    check_threads(&mut checks);
    tick::start_tick();
    cpu::enable_interrupts();
    check_cpus(&mut checks);
    println!(
        "hotkern: generic timer {} MHz, {} us since the first instruction",
        timer::frequency() / 1_000_000,
        timer::micros_since(first_count).unwrap_or(0)
    );
    println!(
        "hotkern: arm64 bring-up: {} checks passed, {} failed",
        checks.passed, checks.failed
    );
    exit(if checks.failed == 0 {
        Exit::Success
    } else {
        Exit::ChecksFailed
    })
}

/// The bring-up's checks, counted (the runs' `Checks` lives above arch).
#[derive(Default)]
struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            println!("hotkern: CHECK FAILED: {what}");
        }
    }
}

/// A kernel thread runs its body each time it is switched to and comes
/// back to the caller's stack.
fn check_threads(checks: &mut Checks) {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let thread = Kthread::new("selftest/0", CpuId(0), |_| {
        RUNS.fetch_add(1, Ordering::Relaxed);
    });
    let before = kthread::switches_on(CpuId(0));
    cpu::without_interrupts(|| {
        thread.switch_to();
        thread.switch_to();
    });
    checks.check(
        "kthread: two switches run the body twice and come back",
        RUNS.load(Ordering::Relaxed) == 2 && kthread::switches_on(CpuId(0)) == before + 2,
    );
}

/// Answers a cross-CPU call with the callee's affinity.
fn own_affinity(_: u64) -> u64 {
    cpu::affinity()
}

/// Every CPU the tree lists starts through PSCI and the shared kernel's
/// handshake, answers calls from its own affinity, and goes offline and
/// back both ways (powered off, then parked idle), with PSCI confirming the
/// power-off.
fn check_cpus(checks: &mut Checks) {
    let started = timer::now();
    let all: CpuSet = smp::application_processors().collect();
    let start = Kernel::start_cpus(all);
    println!(
        "hotkern: {} of {} CPUs online in {} us ({start:?})",
        smp::online(),
        smp::cpu_count(),
        timer::micros_since(started).unwrap_or(0)
    );
    checks.check(
        "SMP: every CPU the device tree lists came online through PSCI CPU_ON",
        start.is_ok() && smp::online() == smp::cpu_count(),
    );
    let answered = smp::application_processors()
        .all(|cpu| smp::call(cpu, own_affinity, 0) == Ok(smp::affinity(cpu)));
    checks.check(
        "SMP: each CPU answers a call with its own affinity",
        answered,
    );
    let Some(last) = smp::application_processors().last() else {
        return;
    };
    for park in [smp::Park::PowerOff, smp::Park::Idle] {
        smp::set_park(park);
        let started = timer::now();
        let stopped = Kernel::stop_cpus(CpuSet::single(last));
        let off_us = timer::micros_since(started).unwrap_or(0);
        // The CPU reported dead before its CPU_OFF: give it a moment.
        let asked = timer::nanos();
        let state = core::iter::repeat_with(|| psci::affinity_info(smp::affinity(last)))
            .take_while(|_| timer::nanos() - asked < 50_000_000)
            .find(|state| *state != Ok(psci::AffinityState::On));
        let powered_off = state == Some(Ok(psci::AffinityState::Off));
        let started = timer::now();
        let restarted = Kernel::start_cpus(CpuSet::single(last));
        let on_us = timer::micros_since(started).unwrap_or(0);
        println!(
            "hotkern: cpu {} {park:?}: offline in {off_us} us (PSCI says {state:?}), online in {on_us} us",
            last.0
        );
        checks.check(
            match park {
                smp::Park::PowerOff => {
                    "SMP: a CPU goes offline powered off (AFFINITY_INFO says off) and comes back"
                }
                smp::Park::Idle => {
                    "SMP: a CPU goes offline parked idle (still on) and a wake-up brings it back"
                }
            },
            stopped.is_ok()
                && restarted.is_ok()
                && powered_off == (park == smp::Park::PowerOff)
                && smp::call(last, own_affinity, 0) == Ok(smp::affinity(last)),
        );
    }
    smp::set_park(smp::Park::PowerOff);
    println!(
        "hotkern: starts: {:?} (cold, from an idle park)",
        smp::starts()
    );
}

/// The tick comes at its rate, and an SGI sent to oneself is taken and
/// wakes a `WFI`.
fn check_interrupts(checks: &mut Checks) {
    let me = CpuId(0);
    tick::start_tick();
    let before = tick::ticks(me);
    let started = timer::nanos();
    let span_ns = 100_000_000;
    // Spinning, not `WFI`: a tick that never comes fails the check
    // instead of hanging the boot.
    cpu::enable_interrupts();
    while timer::nanos() - started < span_ns {
        core::hint::spin_loop();
    }
    cpu::disable_interrupts();
    let ticks = tick::ticks(me) - before;
    let expected = tick::hz() * span_ns / 1_000_000_000;
    println!(
        "hotkern: GICv3: {ticks} ticks in 100 ms at {} Hz",
        tick::hz()
    );
    checks.check(
        "tick: the virtual timer's PPI 27 comes, never faster than HZ",
        // A vCPU the loaded host keeps away misses ticks (x86-64's check
        // asks only that each CPU ticks); none may come early.
        ticks > 0 && ticks * 4 <= expected * 5 + 4,
    );
    tick::stop_tick();
    let (_, wakeups) = gic::taken(me);
    gic::send_sgi(me, gic::WAKE_SGI);
    cpu::enable_interrupts();
    let started = timer::nanos();
    while gic::taken(me).1 == wakeups && timer::nanos() - started < 10_000_000 {
        core::hint::spin_loop();
    }
    cpu::disable_interrupts();
    checks.check(
        "SGI: a wake-up sent to oneself is taken",
        gic::taken(me).1 == wakeups + 1,
    );
}

/// The heap works, physmem holds what the tree gave less the heap, and the
/// direct map's layering reaches the MMU: a whole GiB above the boot map
/// becomes one block, an unmap splits it, and the hardware's own
/// translation (`AT`) agrees at each step.
fn check_memory(layout: &memory::Layout, checks: &mut Checks) {
    let boxed = alloc::boxed::Box::new([0x5au8; 4096]);
    checks.check(
        "heap: a 4 KiB allocation reads back",
        boxed.iter().all(|&byte| byte == 0x5a),
    );
    checks.check(
        "physmem: the managed frames are the loaded ones less the heap",
        layout.managed.frames() + (layout.heap.1 - layout.heap.0) == layout.loaded.frames(),
    );
    checks.check(
        "boot map: RAM and the kernel translate, the PL011 too",
        direct::translates(layout.heap.0 * ranges::PAGE_SIZE)
            && direct::translates(kernel_main as *const () as u64)
            && direct::translates(crate::arch::pl011::VIRT_UART),
    );
    let gib = boot::IDENTITY_MAP_END.next_multiple_of(1 << 30);
    let middle = gib + (256 << 20);
    let mapped = direct::map_range(gib, gib + (1 << 30)).is_ok();
    checks.check(
        "direct map: a whole GiB maps as one block the MMU translates",
        mapped && direct::huge_pages() == 1 && direct::translates(middle),
    );
    let split = direct::unmap_large(middle).is_ok();
    checks.check(
        "direct map: unmapping 2 MiB of it splits the block; only that 2 MiB stops translating",
        split
            && direct::huge_pages() == 0
            && !direct::translates(middle)
            && !direct::is_mapped(middle)
            && direct::translates(middle + (2 << 20))
            && direct::is_mapped(gib),
    );
    let cleared = direct::unmap_range(gib, gib + (1 << 30)).is_ok();
    checks.check(
        "direct map: unmapping the rest leaves nothing translated",
        cleared && !direct::translates(gib) && !direct::is_mapped(gib + (1 << 29)),
    );
    checks.check(
        "direct map: a range inside the boot map is refused",
        direct::map_range(0x4000_0000, 0x4020_0000) == Err(direct::MapError::Outside(0x4000_0000)),
    );
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

/// Prints the panic's message and where it came from, then ends the QEMU
/// run with [`Exit::Panic`].
#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    let cpu = cpu::current_id().map_or(-1, |cpu| i64::from(cpu.0));
    match info.location() {
        Some(location) => emergency(format_args!(
            "\nhotkern: panic on cpu {cpu} at {}:{}:{}: {}\n",
            location.file(),
            location.line(),
            location.column(),
            info.message()
        )),
        None => emergency(format_args!(
            "\nhotkern: panic on cpu {cpu}: {}\n",
            info.message()
        )),
    }
    exit(Exit::Panic)
}
