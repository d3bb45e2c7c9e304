//! Leaving QEMU with a status: Arm semihosting's `SYS_EXIT_EXTENDED`.
//!
//! With `-semihosting-config enable=on,target=native`, QEMU takes the
//! `HLT #0xF000` instruction as a semihosting call (Arm's "Semihosting for
//! AArch64, Arm, and RISC-V", operation 0x20 `SYS_EXIT_EXTENDED`: `x1`
//! points at the pair `ADP_Stopped_ApplicationExit`, status) and ends with
//! that exit status. The statuses are x86-64's debug-exit ones as QEMU's
//! process reports them (`(v << 1) | 1`: 33, 35, 37, 39), so `hotkern boot`
//! (crates/cli/src/qemu.rs) reads both architectures the same way.

/// `SYS_EXIT_EXTENDED`.
const SYS_EXIT_EXTENDED: u64 = 0x20;
/// The reason that asks for an exit with a status.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x2_0026;

pub use crate::arch::exit_code::Exit;

/// The exit status QEMU's process ends with for `status`.
pub const fn process_status(status: Exit) -> u64 {
    ((status as u64) << 1) | 1
}

/// Ends the QEMU run with `status`. Without semihosting (QEMU started
/// without it, or another machine), PSCI's `SYSTEM_OFF`, then a halt.
pub fn exit(status: Exit) -> ! {
    let block = [ADP_STOPPED_APPLICATION_EXIT, process_status(status)];
    // SAFETY: `HLT #0xF000` is a semihosting call QEMU answers; `x1` points
    // at the two words it reads. Without semihosting enabled QEMU treats it
    // as an undefined instruction, which the exception handler reports.
    unsafe {
        core::arch::asm!(
            "hlt #0xf000",
            inout("x0") SYS_EXIT_EXTENDED => _,
            in("x1") block.as_ptr(),
            options(nostack)
        );
    }
    crate::arch::psci::system_off();
    crate::arch::cpu::halt_forever()
}
