//! The handle a writer holds between reserving an event's space and
//! committing it: committing publishes the event to the reader, so a
//! reservation dropped on any path (an early return, a panic unwinding in
//! user space) still commits and never leaves the ring's write position
//! stuck behind an unfinished event.

use super::CpuBuffer;

/// Space reserved for one event; dropping it (or [`Reservation::commit`])
/// commits the event.
pub struct Reservation<'a> {
    pub(super) buffer: &'a CpuBuffer,
    pub(super) data: *mut u8,
    pub(super) len: usize,
    /// `word` right after our reservation (its offset is where our event
    /// ends).
    pub(super) word: u64,
    pub(super) nested: bool,
}

impl Reservation<'_> {
    /// The event's payload bytes, to fill in.
    #[inline(always)]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: `data..data+len` lies in a page this reservation owns
        // exclusively until it commits.
        unsafe { core::slice::from_raw_parts_mut(self.data, self.len) }
    }

    /// Whether this writer interrupted another one on the same CPU (an
    /// interrupt, or a signal handler in user space).
    #[inline(always)]
    pub fn nested(&self) -> bool {
        self.nested
    }

    /// Commits the event, as dropping the reservation does; hot paths call
    /// it because the drop glue stayed out of line (a call and a spill).
    #[inline(always)]
    pub fn commit(self) {
        let this = core::mem::ManuallyDrop::new(self);
        this.buffer.finish_reserved(this.word, this.nested);
    }
}

impl Drop for Reservation<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.buffer.finish_reserved(self.word, self.nested);
    }
}
