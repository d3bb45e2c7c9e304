//! How a modern device's configuration changes reach the CPU, and the
//! vector's handler.
//!
//! [`route_config`] tries MSI-X first (virtio 1.2, 4.1.5.1.2: the driver
//! names a table entry in `config_msix_vector` and the read-back says
//! whether the device took it, as Linux's `vp_modern_config_vector` in
//! drivers/virtio/virtio_pci_modern_dev.c checks), then the legacy pin
//! (the arch's `interrupts::route_pin`). [`config_interrupt`] serves both: with the pin it
//! reads the ISR status first, which clears it and lowers the pin (virtio
//! 1.2, 4.1.4.5), as Linux's `vp_interrupt` does, then acknowledges.

use core::fmt;
use core::ptr::read_volatile;
use core::sync::atomic::{AtomicU64, Ordering};

use super::msix::{Msix, MsixError};
use super::regs::{capability_list, Mmio, MSIX_CONFIG};
use crate::arch::interrupts::{self, DeviceTarget, PinError, PinRoute};
use crate::drivers::pci::Function;

/// VIRTIO_MSI_NO_VECTOR: no MSI-X entry (the device's answer when it
/// cannot use the one named).
const NO_VECTOR: u16 = 0xffff;

/// The ISR status bit of a configuration change (virtio 1.2, 4.1.4.5).
const ISR_CONFIG: u8 = 2;
/// Interrupts in a row with nothing in the ISR before the pin is masked:
/// a line another device holds high would otherwise never stop.
const UNCLAIMED_LIMIT: u64 = 10_000;

/// Configuration-change interrupts taken (every modern device's: the
/// kernel drives one).
static CONFIG_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
/// The ISR status byte's address when the interrupt is the legacy pin
/// (0 for MSI-X, which needs no read), and the pin's interrupt
/// controller input (`PinRoute::number`).
static INTX_ISR: AtomicU64 = AtomicU64::new(0);
static INTX_IRQ: AtomicU64 = AtomicU64::new(0);
static UNCLAIMED: AtomicU64 = AtomicU64::new(0);

/// The configuration-change vector's handler, called from the IDT's
/// dispatch with interrupts off: counts and acknowledges (for the pin,
/// after reading the ISR status, which lowers it). The interrupt targets
/// the driver's CPU, so taking it is what ends that CPU's halt; nothing
/// else needs waking.
pub fn config_interrupt() {
    let isr = INTX_ISR.load(Ordering::Relaxed);
    if isr == 0 {
        CONFIG_INTERRUPTS.fetch_add(1, Ordering::Release);
    } else {
        // SAFETY: the ISR byte of the device `route_config` routed, in the
        // uncached identity map; reading it is the acknowledgement.
        let status = unsafe { read_volatile(isr as *const u8) };
        if status & ISR_CONFIG != 0 {
            CONFIG_INTERRUPTS.fetch_add(1, Ordering::Release);
        }
        if status == 0 {
            if UNCLAIMED.fetch_add(1, Ordering::Relaxed) + 1 == UNCLAIMED_LIMIT {
                interrupts::mask_pin(INTX_IRQ.load(Ordering::Relaxed));
            }
        } else {
            UNCLAIMED.store(0, Ordering::Relaxed);
        }
    }
    interrupts::end_of_interrupt();
}

/// Configuration-change interrupts taken so far.
pub fn config_interrupts() -> u64 {
    CONFIG_INTERRUPTS.load(Ordering::Acquire)
}

/// How a device's configuration changes reach the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigRoute {
    /// MSI-X table entry 0.
    Msix,
    /// The legacy pin, as the arch routed it (x86-64: through the PIIX3
    /// and the I/O APIC).
    Intx(PinRoute),
}

impl ConfigRoute {
    /// A short name for the summary: `"msix"` or `"intx"`.
    pub fn name(self) -> &'static str {
        match self {
            ConfigRoute::Msix => "msix",
            ConfigRoute::Intx(_) => "intx",
        }
    }
}

impl fmt::Display for ConfigRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigRoute::Msix => f.write_str("MSI-X entry 0"),
            ConfigRoute::Intx(route) => route.fmt(f),
        }
    }
}

/// Why neither MSI-X nor the pin could carry configuration changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoute {
    /// Why not MSI-X.
    pub msix: MsixError,
    /// Why not the pin.
    pub intx: PinError,
}

impl fmt::Display for NoRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no MSI-X ({}), no INTx ({})", self.msix, self.intx)
    }
}

impl core::error::Error for NoRoute {}

/// Routes configuration changes to `target`: MSI-X entry 0 if the device
/// takes it as its configuration vector (its read-back says so, virtio
/// 1.2, 4.1.5.1.2), else the legacy pin, whose ISR status is at `isr`.
pub(super) fn route_config(
    function: Function,
    bars: &[u64; 6],
    common: Mmio,
    isr: u64,
    target: DeviceTarget,
) -> Result<ConfigRoute, NoRoute> {
    // The vector's handler is in place before either route can fire it.
    interrupts::set_device_handler(config_interrupt);
    let msix = Msix::find(function, capability_list(function), bars).and_then(|msix| {
        msix.program(0, target)?;
        msix.enable();
        common.write16(MSIX_CONFIG, 0);
        if common.read16(MSIX_CONFIG) == NO_VECTOR {
            msix.disable();
            return Err(MsixError::Refused);
        }
        Ok(())
    });
    let msix = match msix {
        Ok(()) => {
            INTX_ISR.store(0, Ordering::Relaxed);
            return Ok(ConfigRoute::Msix);
        }
        Err(why) => why,
    };
    let intx = interrupts::route_pin(function.device, function.function, target)
        .map_err(|intx| NoRoute { msix, intx })?;
    // The command register's INTx disable bit (10) cleared.
    let command = function.read(0x04) & 0xffff;
    function.write(0x04, command & !(1 << 10));
    INTX_IRQ.store(intx.number(), Ordering::Relaxed);
    INTX_ISR.store(isr, Ordering::Release);
    // A status left from before the reset would hold the pin high.
    let _ = Mmio(isr).read8(0);
    interrupts::unmask_pin(intx.number());
    Ok(ConfigRoute::Intx(intx))
}
