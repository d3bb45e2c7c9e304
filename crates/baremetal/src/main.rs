//! hotkern on bare metal: a kernel that QEMU boots directly (x86-64: PVH)
//! and that runs hotkern's subsystems on real page frames.
//!
//! Four layers, each using only those below it: [`arch`] (what only the
//! CPU and its QEMU machine do, behind one contract for every
//! architecture), [`drivers`] (PCI and virtio), [`platform`] (this
//! kernel as the shared core's platform) and [`runs`] (what a boot does
//! and reports). This file is the shared boot sequence every
//! architecture's entry calls ([`kernel_main`]), the order of the runs
//! and the panic handler; QEMU exits with an [`arch::exit_code::Exit`].
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
mod drivers;
mod platform;
mod runs;

use core::panic::PanicInfo;

use arch::boot::BootInfo;
use arch::console::{emergency, println};
use arch::qemu::{exit, Exit};
use arch::{boot, clock, cpu, heap, interrupts, memory, ranges, smp, tick};
use platform::trace::{trace_marker, TRACING};
use platform::Kernel;
use runs::checks::Checks;
use runs::skipped::{Run, SkippedRuns};
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

/// The shared boot sequence: called once by the architecture's entry
/// (x86-64's `pvh_main`), on the boot CPU with its per-CPU block and
/// exception table set up and interrupts off, with what the loader said.
#[no_mangle]
fn kernel_main(info: BootInfo) -> ! {
    // A fatal exception writes the trace's crash dump before QEMU exits.
    interrupts::set_crash_handler(|| TRACING.on_crash());
    let clock_hz = clock::calibrate();
    match clock_hz {
        Some(hz) => println!(
            "hotkern: {} {} MHz (against {})",
            clock::NAME,
            hz / 1_000_000,
            clock::REFERENCE
        ),
        None => println!(
            "hotkern: {} not calibrated ({} did not answer)",
            clock::NAME,
            clock::REFERENCE
        ),
    }
    let crash = info.option("crash");

    let hypervisor = cpu::hypervisor();
    let hypervisor_name = early::hypervisor_name(&hypervisor);
    println!("hotkern: hypervisor {}", hypervisor_name.unwrap_or("none"));

    // What this architecture cannot do yet is said once, here, and in
    // the summary.
    let skipped = SkippedRuns::of(arch::CAPABILITIES);
    let mut checks = Checks::new();
    early::check_breakpoint(hypervisor_name, &mut checks);
    // The tick's rate times grace periods and timers, as Linux's CONFIG_HZ.
    if let Some(hz) = info.option("hz") {
        early::set_hz(hz);
    }
    // Without a calibrated clock the waits assume 2 GHz: only their
    // length is off, not their outcome.
    let wait_hz = clock_hz.unwrap_or(2_000_000_000);
    // What a tick runs is the platform's; set before the first tick.
    tick::set_tick_handler(Kernel::tick);
    let mut smp_report = cpus::bring_up(&info, wait_hz, &mut checks);
    println!(
        "hotkern: {} of {} CPUs online; {} {} MHz, tick {} Hz",
        smp::online(),
        smp_report.found,
        tick::TIMER_NAME,
        smp_report.apic_timer_hz / 1_000_000,
        tick::hz()
    );
    let layout = match memory::bring_up(&info) {
        Ok(layout) => layout,
        Err(error) => panic!("memory bring-up: {error}"),
    };
    // Before the first tracer: its install rewrites every call site of
    // `#[hotkern_trace::function]` and the events to a NOP.
    arch::text::set_breakpoints_work(hypervisor_name != Some("KVMKVMKVM"));
    if !skipped.contains(Run::TracePatch) {
        arch::text::install();
    }
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
    let started = clock::now();
    checks.restart_clock();
    selftest::run(&layout, &mut checks);
    if crash == Some("check") {
        checks.check("a check that fails on request (crash=check)", false);
    }
    let checks_us = clock::micros_since(started);
    trace_marker!("checks took {} us", checks_us.unwrap_or(0));
    cpus::exercise(&mut smp_report, wait_hz, &mut checks);
    cpus::check_ticks(wait_hz, &mut checks);
    // Every CPU online: the sites are patched while all of them run.
    let patch = skipped.unless(Run::TracePatch, || trace_patch::run(&mut checks));
    // tracebench=N: a traced function's cost per call, off and on.
    let tracebench = trace_bench::run(info.option("tracebench"), clock_hz, &mut checks);
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
    let loaded = skipped.unless(Run::Load, || load::run(&info, false, &mut checks));
    let walked = skipped.unless(Run::Load, || load::run(&info, true, &mut checks));
    let vmem = skipped.unless(Run::Vmem, || {
        let readers = info.option("vmem_readers") != Some("off");
        vmem::run(
            info.option("vmem"),
            info.option("vmem_fill"),
            readers,
            &mut checks,
        )
    });
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
            tsc_hz: clock_hz,
            boot_tsc: boot::started_at(),
            checks_us,
            trace,
            patch,
            tracebench: tracebench.as_ref(),
            hotplug: hotplug.as_ref(),
            differential: differential.as_ref(),
            load: loaded.as_ref(),
            walk: walked.as_ref(),
            vmem: vmem.as_ref(),
            skipped: &skipped,
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
