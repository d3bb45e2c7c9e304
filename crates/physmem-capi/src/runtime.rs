//! What the C side provides: memory, page descriptor init and a way to
//! stop. The library's `#[global_allocator]` and `#[panic_handler]` call
//! these hooks; unit tests run with std's allocator and a Rust stand-in
//! for the page hook.

#[cfg(not(test))]
mod hooks {
    extern "C" {
        /// `kmem_alloc(size, KM_NOSLEEP)` with an alignment: `size` bytes
        /// aligned to `align` (a power of two), or NULL.
        pub fn hotkern_physseg_alloc(size: usize, align: usize) -> *mut u8;
        /// `kmem_free(ptr, size)`: gives back what `hotkern_physseg_alloc`
        /// returned for the same `size` and `align`.
        pub fn hotkern_physseg_free(ptr: *mut u8, size: usize, align: usize);
        /// Initialises the (zeroed) descriptor at `page` for the frame at
        /// byte address `phys_addr`.
        pub fn hotkern_physseg_page_init(page: *mut u8, phys_addr: u64);
        /// Reports a broken invariant inside the library; must not return.
        pub fn hotkern_physseg_panic(message: *const u8, length: usize);
    }
}

/// Lets C initialise the descriptor at `page` (a zeroed [`VmPage`]'s bytes)
/// for the frame at byte address `phys_addr`.
///
/// [`VmPage`]: crate::VmPage
pub(crate) fn page_init(page: *mut u8, phys_addr: u64) {
    // SAFETY: `page` points at a whole, aligned, writable descriptor; the
    // hook's contract is to initialise it.
    #[cfg(not(test))]
    unsafe {
        hooks::hotkern_physseg_page_init(page, phys_addr)
    };
    // What a C `struct vm_page` starting with `paddr_t phys_addr` gets.
    // SAFETY: as above; a descriptor is larger than 8 bytes and aligned.
    #[cfg(test)]
    unsafe {
        page.cast::<u64>().write(phys_addr)
    };
}

#[cfg(not(test))]
mod global {
    use core::alloc::{GlobalAlloc, Layout};

    use super::hooks;

    /// Every allocation of the library goes to the C side's kmem hooks.
    struct Kmem;

    // SAFETY: the hooks' contract is the allocator's: `size` bytes aligned
    // to `align`, or NULL, given back with the same size and alignment.
    unsafe impl GlobalAlloc for Kmem {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: a plain call into C with plain values.
            unsafe { hooks::hotkern_physseg_alloc(layout.size(), layout.align()) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { hooks::hotkern_physseg_free(ptr, layout.size(), layout.align()) }
        }
    }

    #[global_allocator]
    static KMEM: Kmem = Kmem;

    /// The precompiled `core` and `alloc` of a hosted target were built to
    /// unwind and name this symbol in their unwind tables; with panic=abort
    /// nothing ever unwinds, so it is never called, only linked.
    #[no_mangle]
    extern "C" fn rust_eh_personality() {}

    /// A broken invariant: tell C (its `panic()`), never unwind into it.
    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        let message = info
            .message()
            .as_str()
            .unwrap_or("hotkern-physmem-capi: internal error");
        // SAFETY: a valid string and its length; the hook must not return.
        unsafe { hooks::hotkern_physseg_panic(message.as_ptr(), message.len()) };
        loop {
            core::hint::spin_loop();
        }
    }
}
