//! The legacy interrupt pin (INTx) for devices without MSI-X, on QEMU's
//! i440fx machine (the contract's `interrupts::route_pin`): the PIIX3 routes the pin to an ISA interrupt, which the
//! I/O APIC delivers to a local APIC.
//!
//! QEMU 7.2's virtio-mem-pci has no MSI-X table (it gained a `vectors`
//! property later), so its configuration changes arrive only this way,
//! as Linux's `vp_interrupt` (drivers/virtio/virtio_pci_common.c) takes
//! them when `vp_find_vqs` falls back to INTx: read the ISR status, which
//! clears it and lowers the pin, then acknowledge.
//!
//! - **Routing.** A function's pin (configuration byte 0x3d, 1 = INTA)
//!   reaches PIRQ `(pin - 1 + slot - 1) % 4` (QEMU's `pci_slot_get_pirq`
//!   for the i440fx); the PIIX3's byte 0x60 + PIRQ (Intel's 82371SB
//!   datasheet, "PIRQRC") names the ISA interrupt it drives, bit 7
//!   disabling it. The firmware's choice is kept unless another PIRQ
//!   shares it; otherwise a free one of QEMU's PCI interrupts (11, 10, 5:
//!   its MADT declares them level-triggered, active high, on the I/O APIC
//!   pin of the same number) is taken.
//! - **The I/O APIC** (Intel's 82093AA datasheet): at 0xFEC0_0000 in QEMU's
//!   PC machines (in the uncached identity map), an index register at 0
//!   and a data window at 0x10; redirection entry `n` is the register pair
//!   0x10 + 2n (vector, delivery, trigger, mask) and 0x11 + 2n
//!   (destination APIC id in bits 24–31). The entry is level-triggered:
//!   the local APIC's EOI clears its remote IRR, and a pin still high
//!   interrupts again, so the handler reads the ISR before the EOI.

use core::fmt;
use core::ptr::{read_volatile, write_volatile};

use super::apic::DeviceTarget;
use super::pci::{config_read, config_write};

/// The I/O APIC of QEMU's PC machines (the MADT's only one, GSI base 0).
const IOAPIC: u64 = 0xfec0_0000;
const IOAPIC_WINDOW: u64 = 0x10;
const IOAPIC_VERSION: u32 = 0x01;
const IOAPIC_REDIRECTION: u32 = 0x10;
const ENTRY_LEVEL: u32 = 1 << 15;
const ENTRY_MASKED: u32 = 1 << 16;

/// The PIIX3's PCI-to-ISA bridge and its PIRQ route control registers.
const PIIX3: (u16, u16) = (0x8086, 0x7000);
const PIRQ_ROUTE: u8 = 0x60;
const PIRQ_DISABLED: u8 = 0x80;
/// The ISA interrupts QEMU wires for PCI devices, in order of preference.
const PCI_IRQS: [u8; 3] = [11, 10, 5];

/// Why the pin cannot carry the device's interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinError {
    /// The function has no interrupt pin.
    Pin,
    /// No PIIX3 on bus 0 (not QEMU's i440fx machine).
    Router,
    /// Every PCI interrupt is taken by another PIRQ.
    AllTaken,
    /// No I/O APIC answers at 0xFEC0_0000 with that many pins.
    IoApic,
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PinError::Pin => "the device has no interrupt pin",
            PinError::Router => "no PIIX3 interrupt router on bus 0",
            PinError::AllTaken => "ISA interrupts 11, 10 and 5 are all taken by other PIRQs",
            PinError::IoApic => "no I/O APIC at 0xfec00000",
        })
    }
}

impl core::error::Error for PinError {}

/// Where the pin goes once routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinRoute {
    /// The PIRQ line, 0 (A) to 3 (D).
    pub pirq: u8,
    /// The ISA interrupt, also the I/O APIC pin.
    pub irq: u8,
}

impl PinRoute {
    /// The interrupt controller's input the pin reaches (the I/O APIC
    /// pin), for [`mask`] and [`unmask`].
    pub fn number(self) -> u64 {
        u64::from(self.irq)
    }
}

impl fmt::Display for PinRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "INTx on PIRQ {}, ISA interrupt {} through the I/O APIC",
            char::from(b'A' + self.pirq),
            self.irq
        )
    }
}

fn ioapic_read(register: u32) -> u32 {
    // SAFETY: the I/O APIC's two registers lie in the uncached identity
    // map; only the boot CPU programs it, one index-then-data pair at a
    // time (from the driver's probe, before the pin is unmasked).
    unsafe {
        write_volatile(IOAPIC as *mut u32, register);
        read_volatile((IOAPIC + IOAPIC_WINDOW) as *const u32)
    }
}

fn ioapic_write(register: u32, value: u32) {
    // SAFETY: as `ioapic_read`.
    unsafe {
        write_volatile(IOAPIC as *mut u32, register);
        write_volatile((IOAPIC + IOAPIC_WINDOW) as *mut u32, value);
    }
}

/// The PIIX3 on bus 0: its device and function numbers.
fn find_router() -> Option<(u8, u8)> {
    let ids = u32::from(PIIX3.0) | u32::from(PIIX3.1) << 16;
    (0..32u8)
        .flat_map(|device| (0..8u8).map(move |function| (device, function)))
        .find(|&(device, function)| config_read(device, function, 0) == ids)
}

/// Routes the pin of bus 0's `device`/`function` through the PIIX3 and
/// the I/O APIC to `target`, masked; [`unmask`] lets it through once the
/// handler can find the device's ISR.
pub fn route(device: u8, function: u8, target: DeviceTarget) -> Result<PinRoute, PinError> {
    let pin = (config_read(device, function, 0x3c) >> 8) as u8;
    if !(1..=4).contains(&pin) {
        return Err(PinError::Pin);
    }
    let router = find_router().ok_or(PinError::Router)?;
    let pirq = (pin - 1 + device.wrapping_sub(1)) & 3;
    // The PIRQ route bytes 0x60–0x63 of the router.
    let mut bytes = config_read(router.0, router.1, PIRQ_ROUTE).to_le_bytes();
    let taken = |irq: u8, bytes: &[u8; 4]| {
        (0..4).any(|other| {
            other != pirq && bytes[usize::from(other)] & PIRQ_DISABLED == 0 && {
                bytes[usize::from(other)] & 0xf == irq
            }
        })
    };
    let current = bytes[usize::from(pirq)];
    let irq = if current & PIRQ_DISABLED == 0
        && PCI_IRQS.contains(&(current & 0xf))
        && !taken(current & 0xf, &bytes)
    {
        current & 0xf
    } else {
        *PCI_IRQS
            .iter()
            .find(|&&irq| !taken(irq, &bytes))
            .ok_or(PinError::AllTaken)?
    };
    let pins = (ioapic_read(IOAPIC_VERSION) >> 16 & 0xff) + 1;
    if ioapic_read(IOAPIC_VERSION) == u32::MAX || u32::from(irq) >= pins {
        return Err(PinError::IoApic);
    }
    let entry = IOAPIC_REDIRECTION + 2 * u32::from(irq);
    // Masked while it changes; fixed delivery, physical destination,
    // active high (QEMU's MADT says so for its PCI interrupts).
    ioapic_write(entry, ENTRY_MASKED);
    ioapic_write(entry + 1, (target.apic_id & 0xff) << 24);
    ioapic_write(entry, ENTRY_MASKED | ENTRY_LEVEL | u32::from(target.vector));
    bytes[usize::from(pirq)] = irq;
    config_write(router.0, router.1, PIRQ_ROUTE, u32::from_le_bytes(bytes));
    // The interrupt line register, for whoever reads it (Linux does).
    let line = config_read(device, function, 0x3c);
    config_write(device, function, 0x3c, (line & !0xff) | u32::from(irq));
    Ok(PinRoute { pirq, irq })
}

/// The redirection entry of I/O APIC pin `number`, if the pin exists.
fn entry(number: u64) -> Option<u32> {
    u8::try_from(number)
        .ok()
        .map(|irq| IOAPIC_REDIRECTION + 2 * u32::from(irq))
}

/// Lets the interrupts of the pin routed to input `number` through.
pub fn unmask(number: u64) {
    if let Some(entry) = entry(number) {
        ioapic_write(entry, ioapic_read(entry) & !ENTRY_MASKED);
    }
}

/// Stops the interrupts of the pin routed to input `number` (a line
/// that stays high with nothing for the driver in the ISR would
/// interrupt forever).
pub fn mask(number: u64) {
    if let Some(entry) = entry(number) {
        ioapic_write(entry, ioapic_read(entry) | ENTRY_MASKED);
    }
}
