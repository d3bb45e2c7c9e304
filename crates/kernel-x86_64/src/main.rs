//! hotkern on bare metal: an x86-64 kernel that QEMU boots directly (PVH)
//! and that runs hotkern's subsystems on real page frames.
//!
//! The boot path, in order: [`boot`] (32-bit PVH entry to long mode), the
//! console ([`console`], COM1), the CPU's own descriptor tables ([`cpu`],
//! [`idt`]), the start info ([`pvh`]), the TSC ([`tsc`]), memory
//! ([`memory`]: physmem fed from the memory map, the heap on frames
//! physmem gives back, the page descriptors in that heap), the other CPUs
//! ([`cpus`]: local APIC and tick, MADT, AP start, calls, offline/online),
//! the self checks
//! ([`selftest`]), the run's trace ([`trace`]: markers in per-CPU rings
//! from the heap on, sent as a trace.dat on COM2) and the summary line
//! ([`summary`]); then QEMU exits with the status in [`qemu`].
#![no_std]
#![no_main]

extern crate alloc;

mod acpi;
mod apic;
mod arch;
mod boot;
mod checks;
mod console;
mod cpu;
mod cpus;
mod heap;
mod hotplug;
mod hotplug_lock;
mod idt;
mod kthread;
mod load;
mod memory;
mod pages;
mod panic;
mod pci;
mod pvh;
mod qemu;
mod ranges;
mod rcu;
mod sched;
mod selftest;
mod serial;
mod smp;
mod steps;
mod stop_machine;
mod summary;
mod trace;
mod trampoline;
mod tsc;
mod virtio_blk;
mod virtio_mem;
mod virtio_pci;

use checks::Checks;
use hotkern_kernel::tick::Hz;
use qemu::{exit, Exit};

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the physical address of the PVH start info.
#[no_mangle]
extern "C" fn kernel_main(start_info: u32) -> ! {
    console::init();
    println!("hotkern: x86-64 kernel booting, PVH start info at {start_info:#x}");
    // SAFETY: the boot CPU, once, interrupts off (the PVH entry state).
    unsafe { cpu::init(0) };
    idt::init();
    idt::load();
    arch::mask_legacy_pic();
    // SAFETY: the address came from %ebx at the PVH entry, and nothing has
    // allocated memory yet.
    let info = match unsafe { pvh::StartInfo::read(u64::from(start_info)) } {
        Ok(info) => info,
        Err(error) => panic!("PVH start info: {error}"),
    };
    println!(
        "hotkern: start info v{}, command line {:?}, ACPI RSDP at {:#x}, {} memory map entries",
        info.version,
        info.cmdline(),
        info.rsdp,
        info.regions().len()
    );
    for region in info.regions() {
        println!(
            "hotkern:   [{:#014x}, {:#014x}) {}",
            region.start,
            region.end,
            match region.kind {
                pvh::E820_RAM => "RAM",
                2 => "reserved",
                3 => "ACPI",
                4 => "ACPI NVS",
                _ => "other",
            }
        );
    }
    let tsc_hz = tsc::calibrate();
    match tsc_hz {
        Some(hz) => println!("hotkern: TSC {} MHz (against the PIT)", hz / 1_000_000),
        None => println!("hotkern: TSC not calibrated (the PIT did not answer)"),
    }
    let crash = info.option("crash");
    if let Some(kind) = crash {
        crash_on_request(kind);
    }

    let hypervisor = arch::hypervisor();
    let hypervisor_name = hypervisor
        .as_ref()
        .and_then(|signature| core::str::from_utf8(signature).ok())
        .map(|name| name.trim_end_matches('\0'));
    println!("hotkern: hypervisor {}", hypervisor_name.unwrap_or("none"));

    let mut checks = Checks::new();
    // The nested KVM of the machines hotkern is developed on (PVM) cannot
    // deliver a guest's own int3 (an "emulation failure" stops QEMU).
    if hypervisor_name == Some("KVMKVMKVM") {
        checks.skip("a breakpoint goes through the IDT and returns", "under KVM");
    } else {
        arch::breakpoint();
        checks.check(
            "a breakpoint goes through the IDT and returns",
            idt::breakpoints() == 1,
        );
    }
    // The tick's rate times grace periods and timers, as Linux's CONFIG_HZ.
    if let Some(hz) = info.option("hz") {
        match hz
            .parse()
            .map_err(|_| 0)
            .and_then(|hz| Hz::new(hz).map_err(|e| e.0))
        {
            Ok(hz) => {
                apic::set_hz(hz);
                rcu::set_hz(hz);
            }
            Err(_) => println!("hotkern: hz={hz}: expected 100, 250, 300 or 1000; using 1000"),
        }
    }
    // Without a calibrated TSC the waits assume 2 GHz: only their length
    // is off, not their outcome.
    let wait_hz = tsc_hz.unwrap_or(2_000_000_000);
    let mut smp_report = cpus::bring_up(info.rsdp, wait_hz, &mut checks);
    println!(
        "hotkern: {} of {} CPUs online; local APIC timer {} MHz, tick {} Hz",
        smp::online(),
        smp_report.found,
        smp_report.apic_timer_hz / 1_000_000,
        apic::hz()
    );
    let layout = match memory::bring_up(&info) {
        Ok(layout) => layout,
        Err(error) => panic!("memory bring-up: {error}"),
    };
    if trace::init() {
        let [physload_us, heap_us, init_us] = layout.micros;
        // Before the heap there was no tracer: the phases are told after.
        for (phase, us) in [
            ("physload", physload_us),
            ("heap", heap_us),
            ("init_pages", init_us),
        ] {
            trace_marker!("{phase} took {} us", us.unwrap_or(0));
        }
        for cpu in 1..smp::cpu_count() {
            trace_marker!(
                "cpu {cpu} started at boot in {} us",
                smp_report.start_us[cpu as usize]
            );
        }
    }
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
    let started = tsc::now();
    checks.restart_clock();
    selftest::run(&layout, &mut checks);
    if crash == Some("check") {
        checks.check("a check that fails on request (crash=check)", false);
    }
    let checks_us = tsc::micros_since(started);
    trace_marker!("checks took {} us", checks_us.unwrap_or(0));
    cpus::exercise(&mut smp_report, wait_hz, &mut checks);
    cpus::check_ticks(wait_hz, &mut checks);
    // engine=none skips the hotplug run (a disk benchmark boots many
    // times and measures only the load).
    // differential=SEED runs the shared differential scenario instead of
    // the timed cases, for `hotkern boot --differential` to compare.
    let differential = info
        .option("differential")
        .and_then(|seed| seed.parse::<u64>().ok())
        .and_then(|seed| hotplug::run_differential(seed, wait_hz, &mut checks));
    let hotplug = if info.option("engine") == Some("none") || info.option("differential").is_some()
    {
        None
    } else {
        let engines = match hotplug::engines(info.option("engine")) {
            Ok(engines) => engines,
            Err(other) => {
                println!(
                    "hotkern: engine={other}: expected classic, bolt, both or none; running both"
                );
                hotplug::engines(None).unwrap_or_default()
            }
        };
        // The hotplug run's own kernel functions are traced by the
        // function tracer, as ftrace's `function` tracer would show them.
        trace::function_tracing(true);
        let run = hotplug::run(wait_hz, engines, &mut checks);
        trace::function_tracing(false);
        run
    };
    let loaded = load::run(&info, false, &mut checks);
    let walked = load::run(&info, true, &mut checks);
    let vmem = virtio_mem::run(info.option("vmem"), &mut checks);
    trace_marker!("trace ends: {} checks passed", checks.passed());
    let trace = trace::ship();
    summary::print(
        &layout,
        &checks,
        &summary::Figures {
            cmdline: info.cmdline(),
            cpus: smp::online(),
            smp: &smp_report,
            hypervisor: hypervisor_name,
            tsc_hz,
            boot_tsc: boot::boot_tsc(),
            checks_us,
            trace,
            hotplug: hotplug.as_ref(),
            differential: differential.as_ref(),
            load: loaded.as_ref(),
            walk: walked.as_ref(),
            vmem: vmem.as_ref(),
        },
    );
    exit(if checks.failed() == 0 {
        Exit::Success
    } else {
        Exit::ChecksFailed
    })
}

/// Fails on purpose, as `crash=KIND` on the command line asks, so that
/// `hotkern boot` can test how it reports each way a run ends
/// (`crash=check` fails a check at the end instead).
fn crash_on_request(kind: &str) {
    match kind {
        "page-fault" => {
            println!("hotkern: crashing on request: {kind}");
            // 1 TiB: canonical, but outside the identity map (the only PML4
            // entry covers the first 512 GiB).
            let unmapped = 0x100_0000_0000_u64 as *const u64;
            // SAFETY: not sound on purpose: the read faults, and the page
            // fault handler ends the run before anything uses the value.
            let value = unsafe { core::ptr::read_volatile(unmapped) };
            println!("hotkern: read {value:#x} from an unmapped address");
        }
        "panic" => panic!("crash requested on the command line"),
        "hang" => {
            println!("hotkern: hanging on request");
            arch::halt_forever()
        }
        "check" => {}
        other => println!("hotkern: unknown crash kind {other:?}, ignored"),
    }
}
