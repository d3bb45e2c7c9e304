//! The contract's call-site patching on arm64: not there yet. A site stays
//! the `NOP` it was compiled as (the trace crate's fallback on targets it
//! does not patch), `CAPABILITIES.text_patching` is false so the patching
//! check is skipped, and [`check_range`] refuses every range.

use core::ops::Range;

use hotkern_trace::platform::TextError;

/// Registers the patcher: there is none on arm64.
pub fn install() {}

/// Whether breakpoints work under this hypervisor: nothing uses it here.
pub fn set_breakpoints_work(_work: bool) {}

/// Cross-CPU syncs made and CPUs not reached: none.
pub fn syncs() -> (u64, u64) {
    (0, 0)
}

/// Refuses every range: nothing here writes the text.
pub fn check_range(range: Range<usize>) -> Result<(), TextError> {
    Err(TextError::NotText {
        address: range.start,
    })
}
