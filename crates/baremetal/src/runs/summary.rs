//! The run's last words: one `hotkern: summary {json}` line that
//! `hotkern boot` parses (crates/cli/src/boot.rs reads the same keys).

use core::fmt::{self, Write};

use crate::arch::clock;
use crate::arch::console::println;
use crate::arch::heap;
use crate::arch::interrupts;
use crate::arch::memory::{KernelPage, Layout, PHYSMEM};
use crate::arch::ranges::PAGE_SIZE;
use crate::runs::checks::Checks;
use crate::runs::json::{JsonNumber, JsonStr};

/// The line's prefix; the JSON document follows it.
pub const PREFIX: &str = "hotkern: summary ";

/// What the summary reports besides the layout and the checks.
pub struct Figures<'a> {
    /// The kernel command line.
    pub cmdline: &'a str,
    /// CPUs running the kernel.
    pub cpus: u32,
    /// The CPUs' figures.
    pub smp: &'a crate::runs::cpus::SmpReport,
    /// The hypervisor's signature, if any.
    pub hypervisor: Option<&'a str>,
    /// The clock's frequency, if calibrated.
    pub tsc_hz: Option<u64>,
    /// The clock at the kernel's first instruction.
    pub boot_tsc: u64,
    /// Microseconds spent in the self checks.
    pub checks_us: Option<u64>,
    /// The trace.dat sent on COM2, if tracing ran.
    pub trace: Option<crate::platform::trace::Shipped>,
    /// The trace patching check's figures, if it ran.
    pub patch: Option<crate::runs::trace_patch::PatchReport>,
    /// The `tracebench=` figures, if it ran.
    pub tracebench: Option<&'a crate::runs::trace_bench::BenchReport>,
    /// The CPU hotplug run, if there was more than one CPU.
    pub hotplug: Option<&'a crate::runs::hotplug::Run>,
    /// The differential scenario's log, if `differential=` asked for it.
    pub differential: Option<&'a hotkern_kernel::steps::differential::Log>,
    /// The disk load `load=` asked for, if any.
    pub load: Option<&'a Result<crate::runs::load::Loaded, crate::runs::load::LoadError>>,
    /// The tree walk `walk=` asked for, if any.
    pub walk: Option<&'a Result<crate::runs::load::Loaded, crate::runs::load::LoadError>>,
    /// The virtio-mem resizes, if a device was there.
    pub vmem: Option<&'a crate::runs::vmem::VmemReport>,
    /// The runs this architecture cannot do yet.
    pub skipped: &'a crate::runs::skipped::SkippedRuns,
}

/// A JSON string or `null`.
struct MaybeStr<'a>(Option<&'a str>);

impl fmt::Display for MaybeStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) => JsonStr(text).fmt(f),
            None => f.write_str("null"),
        }
    }
}

/// The failed checks' names as a JSON array.
struct FailedChecks<'a>(&'a Checks);

impl fmt::Display for FailedChecks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('[')?;
        for (index, name) in self.0.failures().enumerate() {
            if index > 0 {
                f.write_char(',')?;
            }
            write!(f, "{}", JsonStr(name))?;
        }
        f.write_char(']')
    }
}

/// Prints the summary line.
pub fn print(layout: &Layout, checks: &Checks, figures: &Figures<'_>) {
    let (heap_size, heap_used, heap_peak) = heap::usage();
    let frames = layout.managed.frames();
    let [physload_us, heap_us, init_us] = layout.micros;
    let boot_us = clock::micros_since(figures.boot_tsc);
    println!(
        "{PREFIX}{{\"kernel\":{},\"arch\":{},\"cpus\":{},\"hypervisor\":{},\"cmdline\":{},\
         \"memory\":{{\"ram_bytes\":{},\"segments\":{},\"frames\":{},\"managed_bytes\":{},\
         \"kernel_bytes\":{},\"heap_bytes\":{},\"heap_used_bytes\":{},\"heap_peak_bytes\":{},\
         \"page_descriptor_bytes\":{},\"segments_now\":{}}},\
         \"checks\":{{\"passed\":{},\"failed\":{},\"skipped\":{},\"failures\":{}}},\
         \"breakpoints\":{},\"tsc_mhz\":{},\"boot_us\":{},\
         \"phases_us\":{{\"physload\":{},\"heap\":{},\"init_pages\":{},\"checks\":{}}},\"smp\":{},\"trace\":{},\"tracebench\":{},\"hotplug\":{},\"differential\":{},\"load\":{},\"walk\":{},\"vmem\":{},\"skipped_runs\":{}}}",
        JsonStr(concat!("hotkern-kernel ", env!("CARGO_PKG_VERSION"))),
        JsonStr(crate::arch::NAME),
        figures.cpus,
        MaybeStr(figures.hypervisor),
        JsonStr(figures.cmdline),
        layout.ram.frames() * PAGE_SIZE,
        layout.managed.len(),
        frames,
        frames * PAGE_SIZE,
        (layout.kernel.1 - layout.kernel.0) * PAGE_SIZE,
        heap_size,
        heap_used,
        heap_peak,
        core::mem::size_of::<KernelPage>(),
        PHYSMEM.len(),
        checks.passed(),
        checks.failed(),
        checks.skipped(),
        FailedChecks(checks),
        interrupts::breakpoints(),
        JsonNumber(figures.tsc_hz.map(|hz| hz / 1_000_000)),
        JsonNumber(boot_us),
        JsonNumber(physload_us),
        JsonNumber(heap_us),
        JsonNumber(init_us),
        JsonNumber(figures.checks_us),
        crate::runs::cpus::SmpJson(figures.smp),
        crate::runs::trace_patch::TraceJson(figures.trace, figures.patch),
        crate::runs::trace_bench::BenchJson(figures.tracebench),
        crate::runs::hotplug::HotplugJson(figures.hotplug),
        crate::runs::hotplug::differential::DifferentialJson(figures.differential),
        crate::runs::load::LoadJson(figures.load),
        crate::runs::load::LoadJson(figures.walk),
        crate::runs::vmem::VmemJson(figures.vmem),
        crate::runs::skipped::SkippedJson(figures.skipped),
    );
}
