//! Bringing up the CPUs at boot and exercising them: the firmware's CPUs
//! started, a cross-CPU call to each, one offline/online cycle of each
//! application processor, timed with the clock; the figures go into the
//! summary (`"smp"`).

use core::fmt;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::arch::boot::BootInfo;
use crate::arch::clock;
use crate::arch::console::println;
use crate::arch::cpu::MAX_CPUS;
use crate::arch::{interrupts, smp, tick};
use crate::platform::trace::trace_marker;
use crate::platform::Kernel;
use crate::runs::checks::Checks;

/// Calls per CPU for the round-trip figure.
const CALLS: usize = 20;

/// What the summary reports about the CPUs.
pub struct SmpReport {
    /// CPUs the firmware's tables listed (1 if they could not be read).
    pub found: u32,
    /// Why the firmware's tables could not be read, if so.
    pub acpi_error: Option<smp::DiscoveryError>,
    /// The tick timer's rate.
    pub apic_timer_hz: u64,
    /// Microseconds from INIT to online, per application processor.
    pub start_us: [u64; MAX_CPUS],
    /// Microseconds to take each application processor offline.
    pub offline_us: [u64; MAX_CPUS],
    /// Microseconds to bring each back online.
    pub online_us: [u64; MAX_CPUS],
    /// Median cross-CPU call round trip in nanoseconds, over every call.
    pub call_ns: Option<u64>,
    /// Fastest cross-CPU call round trip in nanoseconds.
    pub call_min_ns: Option<u64>,
}

fn nanos(ticks: u64, clock_hz: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(clock_hz.max(1))) as u64
}

/// Starts the boot CPU's tick and opens interrupts, finds the CPUs in
/// the firmware's tables and starts the others.
pub fn bring_up(info: &BootInfo, clock_hz: u64, checks: &mut Checks) -> SmpReport {
    let apic_timer_hz = tick::start_on_boot_cpu(clock_hz);
    interrupts::enable();
    let mut report = SmpReport {
        found: 1,
        acpi_error: None,
        apic_timer_hz,
        start_us: [0; MAX_CPUS],
        offline_us: [0; MAX_CPUS],
        online_us: [0; MAX_CPUS],
        call_ns: None,
        call_min_ns: None,
    };
    if let Some((name, refused)) = smp::firmware_check(info) {
        checks.check(name, refused);
    }
    match smp::discover(info) {
        Ok(found) => report.found = found,
        Err(error) => report.acpi_error = Some(error),
    }
    for cpu in smp::application_processors() {
        let started = clock::now();
        match Kernel::start_cpus(CpuSet::single(cpu)) {
            Ok(()) => report.start_us[cpu.index()] = clock::micros_since(started).unwrap_or(0),
            Err(error) => println!("hotkern: cpu {} did not start: {error}", cpu.0),
        }
    }
    checks.check(
        "every CPU the MADT lists came online",
        smp::online() == smp::cpu_count() && report.acpi_error.is_none(),
    );
    report
}

/// The cross-CPU call the check sends: the answering CPU's hardware id
/// (its APIC id on x86-64), read from the hardware.
fn own_apic_id(_: u64) -> u64 {
    let id = smp::own_hardware_id();
    let cpu = crate::arch::cpu::current_id().unwrap_or(CpuId(0));
    crate::platform::trace::cpu_call::trace(cpu.0, id as u32);
    id
}

/// Calls each application processor, then takes each offline and back.
pub fn exercise(report: &mut SmpReport, clock_hz: u64, checks: &mut Checks) {
    let mut answered = true;
    let mut samples = [0u64; CALLS * MAX_CPUS];
    let mut calls = 0;
    for cpu in smp::application_processors() {
        for _ in 0..CALLS {
            let started = clock::now();
            let answer = smp::call(cpu, own_apic_id, 0);
            let ticks = clock::now() - started;
            if answer != Ok(smp::hardware_id(cpu)) {
                match answer {
                    Ok(id) => println!("hotkern: cpu {} answered APIC id {id}", cpu.0),
                    Err(error) => println!("hotkern: cpu {} did not answer: {error}", cpu.0),
                }
                answered = false;
                break;
            }
            samples[calls] = ticks;
            calls += 1;
        }
    }
    // The median, not the mean: with four vCPUs on two loaded host cores a
    // single call can wait a whole host time slice.
    let samples = &mut samples[..calls];
    samples.sort_unstable();
    if let (Some(&fastest), Some(&median)) = (samples.first(), samples.get(calls / 2)) {
        report.call_ns = Some(nanos(median, clock_hz));
        report.call_min_ns = Some(nanos(fastest, clock_hz));
    }
    checks.check(
        "each application processor answers a cross-CPU call with its APIC id",
        answered,
    );

    let mut cycled = true;
    for cpu in smp::application_processors() {
        let started = clock::now();
        if let Err(error) = Kernel::stop_cpus(CpuSet::single(cpu)) {
            println!("hotkern: cpu {} did not go offline: {error}", cpu.0);
            cycled = false;
            continue;
        }
        report.offline_us[cpu.index()] = clock::micros_since(started).unwrap_or(0);
        trace_marker!(
            "cpu {} offline in {} us",
            cpu.0,
            report.offline_us[cpu.index()]
        );
        let offline_count = smp::online();
        let started = clock::now();
        if let Err(error) = Kernel::start_cpus(CpuSet::single(cpu)) {
            println!("hotkern: cpu {} did not come back: {error}", cpu.0);
            cycled = false;
            continue;
        }
        report.online_us[cpu.index()] = clock::micros_since(started).unwrap_or(0);
        trace_marker!(
            "cpu {} online in {} us",
            cpu.0,
            report.online_us[cpu.index()]
        );
        let back = smp::call(cpu, own_apic_id, 0) == Ok(smp::hardware_id(cpu));
        cycled &= back && offline_count + 1 == smp::online();
    }
    checks.check(
        "each application processor goes offline and comes back online",
        cycled,
    );
}

/// Waits (up to a second) until every online CPU has taken a tick.
pub fn check_ticks(clock_hz: u64, checks: &mut Checks) {
    let limit = clock_hz;
    let started = clock::now();
    let all_ticked = || smp::cpus().all(|cpu| tick::ticks(cpu) > 0);
    while !all_ticked() && clock::now() - started < limit {
        core::hint::spin_loop();
    }
    checks.check("every CPU's local APIC timer ticks", all_ticked());
}

/// The report as a JSON object (for the summary).
pub struct SmpJson<'a>(pub &'a SmpReport);

struct List<'a>(&'a [u64]);

impl fmt::Display for List<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (index, value) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{value}")?;
        }
        f.write_str("]")
    }
}

fn optional(f: &mut fmt::Formatter<'_>, value: Option<u64>) -> fmt::Result {
    match value {
        Some(value) => write!(f, "{value}"),
        None => f.write_str("null"),
    }
}

impl fmt::Display for SmpJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self.0;
        let count = smp::cpu_count() as usize;
        let mut ids = [0; MAX_CPUS];
        let mut ticks = [0; MAX_CPUS];
        for cpu in smp::cpus() {
            ids[cpu.index()] = smp::hardware_id(cpu);
            ticks[cpu.index()] = tick::ticks(cpu);
        }
        let aps = 1..count.max(1);
        write!(
            f,
            "{{\"cpus_found\":{},\"cpus_online\":{},\"apic_ids\":{},\"ticks\":{},\
             \"tick_hz\":{},\"apic_timer_hz\":{},\"start_us\":{},\"offline_us\":{},\
             \"online_us\":{},\"call_round_trip_ns\":",
            report.found,
            smp::online(),
            List(&ids[..count]),
            List(&ticks[..count]),
            tick::hz(),
            report.apic_timer_hz,
            List(&report.start_us[aps.clone()]),
            List(&report.offline_us[aps.clone()]),
            List(&report.online_us[aps]),
        )?;
        optional(f, report.call_ns)?;
        f.write_str(",\"call_round_trip_min_ns\":")?;
        optional(f, report.call_min_ns)?;
        f.write_str(",\"acpi_error\":")?;
        match report.acpi_error {
            Some(error) => write!(f, "\"{error}\"")?,
            None => f.write_str("null")?,
        }
        f.write_str("}")
    }
}
