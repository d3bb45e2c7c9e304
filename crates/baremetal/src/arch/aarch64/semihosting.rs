//! Arm semihosting ("Semihosting for AArch64, Arm, and RISC-V"): calls
//! QEMU answers on the host when started with `-semihosting-config
//! enable=on,target=native` — here, writing the run trace to a host file,
//! `-M virt` having no second UART for it (x86-64 sends it on COM2).

use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};

/// `SYS_OPEN`.
const SYS_OPEN: u64 = 0x01;
/// `SYS_WRITE`.
const SYS_WRITE: u64 = 0x05;
/// `SYS_OPEN`'s mode "wb".
const MODE_WRITE_BINARY: u64 = 5;
/// Bytes of a host path kept, with its NUL.
const MAX_PATH: usize = 256;
/// No file open yet (or the open failed).
const CLOSED: u64 = u64::MAX;

/// A semihosting call: operation `operation`, parameter block `block`.
fn call(operation: u64, block: &[u64]) -> u64 {
    let result: u64;
    // SAFETY: `HLT #0xF000` is the AArch64 semihosting trap; QEMU reads the
    // block `x1` points at and answers in `x0`. Without semihosting it is
    // an undefined instruction, reported by the vector table.
    unsafe {
        asm!("hlt #0xf000", inout("x0") operation => result, in("x1") block.as_ptr(), options(nostack));
    }
    result
}

/// The trace file's handle, opened at the first [`send_trace`].
static TRACE_FILE: AtomicU64 = AtomicU64::new(CLOSED);

/// Writes `bytes` to the host file `path` (`trace_file=` on the command
/// line), which the first call creates or truncates. Without a path, or if
/// the host refuses, the bytes are dropped: the host then sees the trace's
/// size not match, as it would with x86-64's COM2 missing.
pub fn send_trace(path: Option<&str>, bytes: &[u8]) {
    let mut handle = TRACE_FILE.load(Ordering::Acquire);
    if handle == CLOSED {
        let Some(path) = path.filter(|path| !path.is_empty() && path.len() < MAX_PATH) else {
            return;
        };
        let mut name = [0u8; MAX_PATH];
        name[..path.len()].copy_from_slice(path.as_bytes());
        let opened = call(
            SYS_OPEN,
            &[name.as_ptr() as u64, MODE_WRITE_BINARY, path.len() as u64],
        );
        // -1 is the host's refusal.
        if opened as i64 == -1 {
            return;
        }
        handle = opened;
        TRACE_FILE.store(handle, Ordering::Release);
    }
    // Returns the bytes not written; a short write is dropped the same way.
    call(
        SYS_WRITE,
        &[handle, bytes.as_ptr() as u64, bytes.len() as u64],
    );
}
