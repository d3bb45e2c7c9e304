//! Slot → first frame of the slot's segment, for resolving handles without
//! locks. A persistent chunked array: a write copies the chunk table and
//! the one or two chunks it changes, not every slot, and retires the chunks
//! it replaced once the new map is published.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::error::PhysmemError;
use crate::fallible::{boxed, try_vec};

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
    fn with(starts: [u64; CHUNK]) -> Result<*mut SlotChunk, PhysmemError> {
        let chunk = boxed(SlotChunk {
            starts,
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        })?;
        Ok(Box::into_raw(chunk))
    }

    fn empty() -> Result<*mut SlotChunk, PhysmemError> {
        Self::with([NO_START; CHUNK])
    }
}

pub(crate) struct SlotMap {
    /// Owned by the newest index that lists them; shared with the index a
    /// write builds until it replaces them.
    chunks: Vec<*const SlotChunk>,
}

fn chunks_for(slot_count: usize) -> usize {
    slot_count.div_ceil(CHUNK)
}

impl SlotMap {
    /// A map of `slot_count` slots holding `starts`.
    pub(crate) fn new(
        slot_count: usize,
        starts: impl Iterator<Item = (u32, u64)>,
    ) -> Result<Self, PhysmemError> {
        let mut map = SlotMap {
            chunks: try_vec(chunks_for(slot_count))?,
        };
        map.grow(slot_count, None)?;
        for (slot, start) in starts {
            let chunk = map.chunks[(slot >> CHUNK_SHIFT) as usize].cast_mut();
            // SAFETY: just allocated here and not shared yet.
            unsafe { (*chunk).starts[slot as usize % CHUNK] = start };
        }
        Ok(map)
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
    /// room for `slot_count` slots. It shares the chunks it does not change
    /// with `self`; on failure nothing is left allocated.
    pub(crate) fn update(
        &self,
        slot_count: usize,
        changes: &[(u32, Option<u64>)],
    ) -> Result<Self, PhysmemError> {
        let mut map = SlotMap {
            chunks: try_vec(self.chunks.len().max(chunks_for(slot_count)))?,
        };
        map.chunks.extend_from_slice(&self.chunks);
        map.grow(slot_count, Some(self))?;
        for &(slot, start) in changes {
            let at = (slot >> CHUNK_SHIFT) as usize;
            let Some(&chunk) = map.chunks.get(at) else {
                continue;
            };
            let chunk = if self.chunks.get(at) == Some(&chunk) {
                // Still the published chunk: copy it before writing.
                // SAFETY: a live chunk of the current map.
                match SlotChunk::with(unsafe { &*chunk }.starts) {
                    Ok(copy) => {
                        map.chunks[at] = copy.cast_const();
                        copy
                    }
                    Err(error) => {
                        map.discard(Some(self));
                        return Err(error);
                    }
                }
            } else {
                chunk.cast_mut()
            };
            // SAFETY: allocated by this update, not published yet.
            unsafe { (*chunk).starts[slot as usize % CHUNK] = start.unwrap_or(NO_START) };
        }
        Ok(map)
    }

    /// Adds empty chunks up to room for `slot_count` slots, within the
    /// capacity already reserved. On failure it frees what it made (every
    /// chunk `from`, the map this one is built from, does not list) and
    /// leaves the map to be dropped.
    fn grow(&mut self, slot_count: usize, from: Option<&SlotMap>) -> Result<(), PhysmemError> {
        while self.chunks.len() < chunks_for(slot_count) {
            match SlotChunk::empty() {
                Ok(chunk) => self.chunks.push(chunk.cast_const()),
                Err(error) => {
                    self.discard(from);
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Frees the chunks of this map that `other` (the map it was made from,
    /// if any) does not list at the same place.
    pub(crate) fn discard(&self, other: Option<&SlotMap>) {
        for chunk in self.replaced_by(other) {
            // SAFETY: made by this map alone and not published.
            drop(unsafe { Box::from_raw(chunk.cast_mut()) });
        }
    }

    /// Chunks of this map that `other` does not list at the same place:
    /// what replacing this map by `other` leaves unused.
    pub(crate) fn replaced_by<'a>(
        &'a self,
        other: Option<&'a SlotMap>,
    ) -> impl Iterator<Item = *const SlotChunk> + 'a {
        self.chunks
            .iter()
            .enumerate()
            .filter(move |&(at, chunk)| other.and_then(|o| o.chunks.get(at)) != Some(chunk))
            .map(|(_, &chunk)| chunk)
    }

    /// Number of chunks.
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}
