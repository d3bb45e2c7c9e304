//! Slot → first frame of the slot's segment, for resolving handles without
//! locks. A persistent chunked array: a write copies the chunk table and
//! the one or two chunks it changes, not every slot, and retires the chunks
//! it replaced.

use alloc::boxed::Box;
use alloc::vec::Vec;

const CHUNK_SHIFT: u32 = 9;
const CHUNK: usize = 1 << CHUNK_SHIFT;

/// The start recorded for a free slot.
pub(crate) const NO_START: u64 = u64::MAX;

pub(crate) struct SlotChunk {
    starts: [u64; CHUNK],
    /// Under loom, reads touch this cell and drop writes it, so the model
    /// reports a chunk freed while a reader can still use it.
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<()>,
}

#[cfg(loom)]
impl Drop for SlotChunk {
    fn drop(&mut self) {
        self.alive.with_mut(|_| ());
    }
}

impl SlotChunk {
    fn with(starts: [u64; CHUNK]) -> *mut SlotChunk {
        Box::into_raw(Box::new(SlotChunk {
            starts,
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        }))
    }

    fn empty() -> *mut SlotChunk {
        Self::with([NO_START; CHUNK])
    }
}

pub(crate) struct SlotMap {
    /// Owned by the newest index that lists them; shared with older ones
    /// until a write replaces them.
    chunks: Vec<*const SlotChunk>,
}

fn chunks_for(slot_count: usize) -> usize {
    slot_count.div_ceil(CHUNK)
}

impl SlotMap {
    /// A map of `slot_count` slots holding `starts`.
    pub(crate) fn new(slot_count: usize, starts: impl Iterator<Item = (u32, u64)>) -> Self {
        let chunks: Vec<*const SlotChunk> = (0..chunks_for(slot_count))
            .map(|_| SlotChunk::empty().cast_const())
            .collect();
        for (slot, start) in starts {
            let chunk = chunks[(slot >> CHUNK_SHIFT) as usize].cast_mut();
            // SAFETY: just allocated here and not shared yet.
            unsafe { (*chunk).starts[slot as usize % CHUNK] = start };
        }
        SlotMap { chunks }
    }

    /// The start recorded for `slot`, if its segment is live.
    pub(crate) fn get(&self, slot: u32) -> Option<u64> {
        let chunk = *self.chunks.get((slot >> CHUNK_SHIFT) as usize)?;
        // SAFETY: chunks stay allocated while any index listing them may be
        // read (they are retired through the epoch like sections).
        let chunk = unsafe { &*chunk };
        #[cfg(loom)]
        chunk.alive.with(|_| ());
        let start = chunk.starts[slot as usize % CHUNK];
        (start != NO_START).then_some(start)
    }

    /// The map after `changes` (slot, new start or `None` when freed), with
    /// room for `slot_count` slots; the chunks it replaced go to `retired`.
    pub(crate) fn update(
        &self,
        slot_count: usize,
        changes: &[(u32, Option<u64>)],
        retired: &mut Vec<*const SlotChunk>,
    ) -> Self {
        let mut chunks = self.chunks.clone();
        while chunks.len() < chunks_for(slot_count) {
            chunks.push(SlotChunk::empty().cast_const());
        }
        for &(slot, start) in changes {
            let at = (slot >> CHUNK_SHIFT) as usize;
            let Some(&chunk) = chunks.get(at) else {
                continue;
            };
            let chunk = if self.chunks.get(at) == Some(&chunk) {
                // Still the published chunk: copy it before writing.
                retired.push(chunk);
                // SAFETY: a live chunk of the current map.
                let copy = SlotChunk::with(unsafe { &*chunk }.starts);
                chunks[at] = copy.cast_const();
                copy
            } else {
                chunk.cast_mut()
            };
            // SAFETY: allocated by this update, not published yet.
            unsafe { (*chunk).starts[slot as usize % CHUNK] = start.unwrap_or(NO_START) };
        }
        SlotMap { chunks }
    }

    /// Every chunk, for teardown or a rebuild from scratch.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = *const SlotChunk> + '_ {
        self.chunks.iter().copied()
    }
}
