//! Why the kernel stops, the one list every architecture's
//! `qemu::exit` reports. `hotkern boot` (crates/cli/src/boot.rs) maps
//! QEMU's exit statuses back to these names; keep the two lists the same.

/// Why the kernel stops.
///
/// ```ignore
/// arch::qemu::exit(if failed == 0 { Exit::Success } else { Exit::ChecksFailed })
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Exit {
    /// Booted, ran every check, all passed: QEMU exits with 33.
    Success = 0x10,
    /// Booted and ran, but a check failed: QEMU exits with 35.
    ChecksFailed = 0x11,
    /// A CPU exception the kernel does not handle: QEMU exits with 37.
    Exception = 0x12,
    /// A Rust panic: QEMU exits with 39.
    Panic = 0x13,
}
