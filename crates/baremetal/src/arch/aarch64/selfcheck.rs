//! arm64's own checks of its arch layer, below the shared runs: `hotkern
//! boot --arch aarch64` with `archcheck` on the command line runs them
//! instead of the shared boot and exits with their outcome. They look at
//! what the shared runs cannot see through the contract: that the MMU
//! itself (`AT S1E1R`) translates what the direct map wrote, block and
//! split, that the tick and an SGI arrive through the GICv3, and that a
//! kernel thread's switch comes back.

use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_cpuhp::CpuId;

use crate::arch::boot::BootInfo;
use crate::arch::console::println;
use crate::arch::kthread::{self, Kthread};
use crate::arch::qemu::{exit, Exit};
use crate::arch::{boot, cpu, direct, gic, heap, memory, ranges, tick, timer};

/// Runs every check, prints the count and ends the QEMU run.
pub fn run(info: &BootInfo) -> ! {
    let layout = match memory::bring_up(info) {
        Ok(layout) => layout,
        Err(error) => panic!("memory bring-up: {error}"),
    };
    let (heap_size, heap_used, _) = heap::usage();
    println!(
        "hotkern: physmem: {} segments, {} frames; heap {} KiB, {} KiB used",
        layout.managed.len(),
        layout.managed.frames(),
        heap_size >> 10,
        heap_used >> 10
    );
    if let Some(hz) = info.option("hz").and_then(|hz| hz.parse().ok()) {
        if let Ok(hz) = hotkern_kernel::tick::Hz::new(hz) {
            tick::set_hz(hz);
        }
    }
    let mut checks = Checks::default();
    checks.check(
        "the device tree reader refuses a bad blob with a typed error",
        crate::arch::fdt::refuses_bad_trees(),
    );
    checks.check(
        "the PCIe host bridge's ranges and interrupt-map decode as virt's, and broken ones are refused",
        crate::arch::pci_host::reads_a_virt_bridge(),
    );
    check_memory(&layout, &mut checks);
    check_interrupts(&mut checks);
    check_threads(&mut checks);
    println!(
        "hotkern: arm64 arch checks: {} passed, {} failed",
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

/// The tick comes at its rate, and an SGI sent to oneself is taken and
/// wakes a `WFI`.
fn check_interrupts(checks: &mut Checks) {
    let me = CpuId(0);
    tick::start();
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
    tick::stop();
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
            && direct::translates(boot::kernel_image().0)
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
