//! What the library needs from the C side: memory and a way to stop.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::{c_char, c_void};
use core::fmt::Write;

extern "C" {
    /// `malloc`-shaped: `size` bytes or null.
    fn bcache_hook_malloc(size: usize) -> *mut c_void;
    /// `free`-shaped.
    fn bcache_hook_free(pointer: *mut c_void);
    /// Called with a message when the library hits a bug; must not return.
    fn bcache_hook_panic(message: *const c_char, length: usize);
}

/// Allocates through the C hooks. `malloc` promises only the alignment of
/// the C types, so each block gets room for any alignment asked for, and
/// the pointer `malloc` returned is kept just below the one handed out.
struct HostAllocator;

const POINTER: usize = core::mem::size_of::<*mut u8>();

// SAFETY: blocks come from the C heap, are at least `layout.size()` bytes
// at `layout.align()` and are freed through the pointer malloc gave.
unsafe impl GlobalAlloc for HostAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let align = layout.align().max(POINTER);
        let Some(total) = layout.size().checked_add(align + POINTER) else {
            return core::ptr::null_mut();
        };
        // SAFETY: a plain call of the C side's malloc.
        let raw = unsafe { bcache_hook_malloc(total) }.cast::<u8>();
        if raw.is_null() {
            return core::ptr::null_mut();
        }
        let start = raw as usize + POINTER;
        let aligned = start.next_multiple_of(align);
        // SAFETY: `aligned - raw` is at most `POINTER + align - 1`, inside
        // the block, with `layout.size()` bytes after it.
        let pointer = unsafe { raw.add(aligned - raw as usize) };
        // SAFETY: the word below `pointer` is in the block (aligned ≥ raw +
        // POINTER) and aligned for a pointer (align ≥ POINTER).
        unsafe { pointer.cast::<*mut u8>().sub(1).write(raw) };
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, _layout: Layout) {
        // SAFETY: `alloc` stored malloc's pointer in the word below.
        let raw = unsafe { pointer.cast::<*mut u8>().sub(1).read() };
        // SAFETY: `raw` came from bcache_hook_malloc.
        unsafe { bcache_hook_free(raw.cast()) };
    }
}

#[global_allocator]
static ALLOCATOR: HostAllocator = HostAllocator;

/// A panic message, cut to fit.
struct Message {
    bytes: [u8; 256],
    len: usize,
}

impl Write for Message {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        let room = self.bytes.len() - self.len;
        let n = text.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&text.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut message = Message {
        bytes: [0; 256],
        len: 0,
    };
    let _ = write!(message, "{info}");
    // SAFETY: the message is valid for `len` bytes during the call.
    unsafe { bcache_hook_panic(message.bytes.as_ptr().cast(), message.len) };
    // The hook should not return; if it does, stop here.
    loop {
        core::hint::spin_loop();
    }
}

/// The precompiled `alloc` library refers to Rust's unwinding personality
/// routine; in this panic=abort library nothing unwinds, so it is never
/// called, but the C linker wants the symbol.
#[no_mangle]
extern "C" fn rust_eh_personality() {}
