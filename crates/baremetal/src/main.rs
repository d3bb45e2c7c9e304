//! hotkern on bare metal: an x86-64 kernel that QEMU boots directly (PVH)
//! and that runs hotkern's subsystems on real page frames.
//!
//! Four layers, each using only those below it: [`arch`] (what only the
//! CPU and QEMU's PC do), [`drivers`] (PCI and virtio), [`platform`] (this
//! kernel as the shared core's platform) and [`runs`] (what a boot does
//! and reports). This file is the entry, the panic handler and the order
//! of the runs; QEMU exits with the status in [`arch::qemu`].
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
// Until the layers above arch are architecture-neutral, arm64 runs its own
// bring-up (`arch::aarch64::bringup`) and builds none of them.
#[cfg(target_arch = "x86_64")]
mod drivers;
#[cfg(target_arch = "x86_64")]
mod platform;
#[cfg(target_arch = "x86_64")]
mod runs;

#[cfg(target_arch = "x86_64")]
use core::panic::PanicInfo;

#[cfg(target_arch = "x86_64")]
use arch::console::{emergency, println};
#[cfg(target_arch = "x86_64")]
use arch::qemu::{exit, Exit};
#[cfg(target_arch = "x86_64")]
use arch::{apic, boot, console, cpu, heap, idt, instructions, memory, pvh, ranges, smp, tsc};
#[cfg(target_arch = "x86_64")]
use platform::trace::{trace_marker, TRACING};
#[cfg(target_arch = "x86_64")]
use platform::Kernel;
#[cfg(target_arch = "x86_64")]
use runs::checks::Checks;
#[cfg(target_arch = "x86_64")]
use runs::{cpus, early, hotplug, load, selftest, summary, trace_bench, trace_patch, vmem};

// The shared kernel's locks must spin here: nothing can sleep before the
// scheduler runs, and interrupts take them. The `spin` feature asks for
// that; this stops the build if the crate was built with any other kind.
const _: () = assert!(
    matches!(
        hotkern_kernel::sync::LOCKS,
        hotkern_kernel::sync::LockKind::Spin
    ),
    "hotkern-kernel must use spinlocks in the bare-metal kernel"
);

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the physical address of the PVH start info.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
extern "C" fn kernel_main(start_info: u32) -> ! {
    console::init();
    println!("hotkern: x86-64 kernel booting, PVH start info at {start_info:#x}");
    // SAFETY: the boot CPU, once, interrupts off (the PVH entry state).
    unsafe { cpu::init(smp::BOOT_CPU) };
    idt::init();
    idt::load();
    // A fatal exception writes the trace's crash dump before QEMU exits.
    idt::set_crash_handler(|| TRACING.on_crash());
    instructions::mask_legacy_pic();
    // SAFETY: the address came from %ebx at the PVH entry, and nothing has
    // allocated memory yet.
    let info = match unsafe { pvh::StartInfo::read(u64::from(start_info)) } {
        Ok(info) => info,
        Err(error) => panic!("PVH start info: {error}"),
    };
    early::print_start_info(&info);
    let tsc_hz = tsc::calibrate();
    match tsc_hz {
        Some(hz) => println!("hotkern: TSC {} MHz (against the PIT)", hz / 1_000_000),
        None => println!("hotkern: TSC not calibrated (the PIT did not answer)"),
    }
    let crash = info.option("crash");

    let hypervisor = instructions::hypervisor();
    let hypervisor_name = early::hypervisor_name(&hypervisor);
    println!("hotkern: hypervisor {}", hypervisor_name.unwrap_or("none"));

    let mut checks = Checks::new();
    early::check_breakpoint(hypervisor_name, &mut checks);
    // The tick's rate times grace periods and timers, as Linux's CONFIG_HZ.
    if let Some(hz) = info.option("hz") {
        early::set_hz(hz);
    }
    // Without a calibrated TSC the waits assume 2 GHz: only their length
    // is off, not their outcome.
    let wait_hz = tsc_hz.unwrap_or(2_000_000_000);
    // What a tick runs is the platform's; set before the first tick.
    apic::set_tick_handler(Kernel::tick);
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
    // Before the first tracer: its install rewrites every call site of
    // `#[hotkern_trace::function]` and the events to a NOP.
    arch::text::set_breakpoints_work(hypervisor_name != Some("KVMKVMKVM"));
    arch::text::install();
    let traced = match TRACING.start() {
        Ok(_) => {
            println!("hotkern: trace: {}", hotkern_trace::site::status());
            true
        }
        Err(error) => {
            println!("hotkern: no trace: {error}");
            false
        }
    };
    if traced {
        let [physload_us, heap_us, init_us] = layout.micros;
        // Before the heap there was no tracer: the phases are told after.
        for (phase, us) in [
            ("physload", physload_us),
            ("heap", heap_us),
            ("init_pages", init_us),
        ] {
            trace_marker!("{phase} took {} us", us.unwrap_or(0));
        }
        for cpu in smp::application_processors() {
            trace_marker!(
                "cpu {} started at boot in {} us",
                cpu.0,
                smp_report.start_us[cpu.index()]
            );
        }
    }
    // `hotkern boot --trace-functions`: set_ftrace_filter for the run.
    if let Some(word) = info.option("trace_functions") {
        let filter = hotkern_kernel::command_line::decode_value(word)
            .map_err(|error| alloc::format!("{error}"));
        match filter.and_then(|filter| TRACING.set_function_filter(&filter).map(|()| filter)) {
            Ok(filter) => println!("hotkern: set_ftrace_filter {filter}"),
            Err(error) => println!("hotkern: trace_functions={word}: {error}; no function traced"),
        }
    }
    // Crashes on request come once the tracer runs, so that the crash dump
    // has the boot's events, ending with the request's own marker.
    if let Some(kind) = crash {
        early::crash_on_request(kind);
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
    // Every CPU online: the sites are patched while all of them run.
    let patch = trace_patch::run(&mut checks);
    // tracebench=N: a traced function's cost per call, off and on.
    let tracebench = trace_bench::run(info.option("tracebench"), tsc_hz, &mut checks);
    // engine=none skips the hotplug run (a disk benchmark boots many
    // times and measures only the load).
    // differential=SEED runs the shared differential scenario instead of
    // the timed cases, for `hotkern boot --differential` to compare.
    let differential = info
        .option("differential")
        .and_then(|seed| seed.parse::<u64>().ok())
        .and_then(|seed| hotplug::differential::run(seed, wait_hz, &mut checks));
    let hotplug = if info.option("engine") == Some("none") || info.option("differential").is_some()
    {
        None
    } else {
        let engines = match hotplug::engines(info.option("engine")) {
            Ok(engines) => engines,
            Err(other) => {
                println!(
                    "hotkern: engine={other}: expected classic, bolt, bolt-nostop, both, all or none; running all"
                );
                hotplug::engines(None).unwrap_or_default()
            }
        };
        // The hotplug run's own kernel functions are traced by the
        // function tracer, as ftrace's `function` tracer would show them.
        TRACING.function_tracing(true);
        let run = hotplug::run(wait_hz, engines, &mut checks);
        TRACING.function_tracing(false);
        run
    };
    let loaded = load::run(&info, false, &mut checks);
    let walked = load::run(&info, true, &mut checks);
    let vmem = vmem::run(info.option("vmem"), info.option("vmem_fill"), &mut checks);
    let stack_used = boot::stack_high_water();
    println!(
        "hotkern: boot stack: at most {} of {} KiB used",
        stack_used.div_ceil(1024),
        boot::BOOT_STACK_BYTES >> 10
    );
    checks.check(
        "boot stack: never grew past its bottom into the guard band above the page tables",
        !boot::stack_overflowed() && stack_used < boot::BOOT_STACK_BYTES,
    );
    trace_marker!("trace ends: {} checks passed", checks.passed());
    let trace = TRACING.ship();
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
            patch,
            tracebench: tracebench.as_ref(),
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

/// Prints the panic's message and where it came from, writes the trace's
/// crash dump (`TRACING.on_crash()`), then ends the QEMU run with
/// [`Exit::Panic`].
#[cfg(target_arch = "x86_64")]
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
    TRACING.on_crash();
    exit(Exit::Panic)
}
