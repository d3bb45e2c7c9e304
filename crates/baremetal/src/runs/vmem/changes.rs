//! How the driver waits for the device's next configuration change: halted
//! until its interrupt (MSI-X or the legacy pin, whichever the transport
//! routed), or, without one, halted between polls of the configuration
//! generation.
//!
//! Linux's driver is told by its transport's config-changed callback
//! (`virtio_mem_config_changed` in drivers/virtio/virtio_mem.c) and reads
//! `requested_size` afterwards; here the interrupt handler only counts
//! ([`virtio_pci::config_interrupts`]) and the waiting CPU halts with
//! [`Kernel`]'s `wait_until_deadline` (`sti; hlt` with the check under
//! `cli`), so an interrupt that lands after the count was taken ends the
//! halt instead of being lost. The boot CPU waits here while the other
//! CPUs run their readers: a spinning vCPU would hold a host core they
//! need (two host cores, four vCPUs under TCG).
//!
//! Lost interrupts cannot hang the driver: an interrupt wait ends every
//! [`SLICE_NS`] to look at the generation, and a change found that way
//! is counted as missed ([`Counted::missed`]), which the kernel's check
//! and `scripts/check-kernel-boot` fail on.

use hotkern_kernel::platform::Cpus;

use crate::arch::clock;
use crate::arch::console::println;
use crate::drivers::virtio::pci::{self as virtio_pci, Transport};
use crate::platform::Kernel;
use crate::runs::checks::Checks;

/// How long an interrupt wait halts before it looks at the generation in
/// case the interrupt was lost.
const SLICE_NS: u64 = 1_000_000_000;
/// How long a change found by the generation waits for its interrupt
/// before it counts as missed.
const GRACE_NS: u64 = 10_000_000;

/// What wakes the driver for a configuration change, and what came.
pub(super) struct Changes {
    /// The interrupt count when watching began.
    start: u64,
    how: How,
}

enum How {
    /// The device's interrupt to this CPU.
    Interrupt {
        /// Interrupts counted when the driver last looked.
        seen: u64,
        /// The generation when the driver last looked.
        generation: u8,
        /// Changes found by the generation, without their interrupt.
        missed: u64,
    },
    /// No interrupt: the generation, looked at on every wake-up (the
    /// tick's at the latest).
    Poll {
        /// The generation when the driver last looked.
        generation: u8,
    },
}

impl Changes {
    /// Starts watching `transport`, before the host can send its first
    /// size; says on the console how changes will come.
    pub(super) fn new(transport: &Transport) -> Changes {
        let start = virtio_pci::config_interrupts();
        let generation = transport.generation();
        let how = match transport.config_route() {
            Some(Ok(route)) => {
                println!("hotkern: virtio-mem: configuration changes by interrupt: {route}");
                How::Interrupt {
                    seen: start,
                    generation,
                    missed: 0,
                }
            }
            Some(Err(why)) => {
                println!("hotkern: virtio-mem: configuration changes polled, halting between polls: {why}");
                How::Poll { generation }
            }
            None => {
                println!("hotkern: virtio-mem: configuration changes polled, halting between polls: no interrupt asked for");
                How::Poll { generation }
            }
        };
        Changes { start, how }
    }

    /// Halts until the configuration may have changed since the last call
    /// (or [`Changes::new`]); `false` if `deadline_ns` passed first.
    pub(super) fn wait(&mut self, transport: &Transport, deadline_ns: u64) -> bool {
        match &mut self.how {
            How::Interrupt {
                seen,
                generation,
                missed,
            } => loop {
                let before = *seen;
                let slice = clock::nanos().saturating_add(SLICE_NS).min(deadline_ns);
                let counted = || virtio_pci::config_interrupts() != before;
                let mut woken = Kernel::HANDLE.wait_until_deadline(&counted, slice);
                let now = transport.generation();
                let moved = now != *generation;
                *generation = now;
                if moved && !woken {
                    // An interrupt may have landed after the last check,
                    // with interrupts off: give it a moment to count.
                    let grace = clock::nanos().saturating_add(GRACE_NS);
                    woken = Kernel::HANDLE.wait_until_deadline(&counted, grace);
                }
                *seen = virtio_pci::config_interrupts();
                if woken {
                    return true;
                }
                if moved {
                    *missed += 1;
                    return true;
                }
                if clock::nanos() >= deadline_ns {
                    return false;
                }
            },
            How::Poll { generation } => {
                let before = *generation;
                let moved = || transport.generation() != before;
                let changed = Kernel::HANDLE.wait_until_deadline(&moved, deadline_ns);
                *generation = transport.generation();
                changed
            }
        }
    }

    /// Counts what came, says it on the console and checks that each of
    /// `resizes` came as an interrupt (QEMU interrupts once per change of
    /// `requested_size`, in `virtio_notify_config`), unless polled. An
    /// interrupt still on its way (a change the loop read without waiting)
    /// gets [`GRACE_NS`] to be taken first.
    pub(super) fn finish(
        &self,
        transport: &Transport,
        resizes: u64,
        checks: &mut Checks,
    ) -> Counted {
        let missed = match self.how {
            How::Interrupt { missed, .. } => {
                let arrived = || virtio_pci::config_interrupts() - self.start >= resizes;
                let grace = clock::nanos().saturating_add(GRACE_NS);
                Kernel::HANDLE.wait_until_deadline(&arrived, grace);
                missed
            }
            How::Poll { .. } => 0,
        };
        let counted = Counted {
            route: match transport.config_route() {
                Some(Ok(route)) => route.name(),
                _ => "polled",
            },
            interrupts: virtio_pci::config_interrupts() - self.start,
            missed,
        };
        println!(
            "hotkern: virtio-mem: configuration changes ({}): {} interrupts for {resizes} resizes, {} changes seen without one",
            counted.route, counted.interrupts, counted.missed
        );
        checks.check(
            "virtio-mem: every resize came as a configuration-change interrupt",
            counted.route == "polled" || (counted.interrupts >= resizes && counted.missed == 0),
        );
        counted
    }
}

/// How the host's configuration changes reached the driver.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counted {
    /// `"msix"`, `"intx"` or `"polled"` (`""` before the driver followed any).
    pub route: &'static str,
    /// Configuration-change interrupts taken while following the host.
    pub interrupts: u64,
    /// Changes the generation showed without their interrupt.
    pub missed: u64,
}
