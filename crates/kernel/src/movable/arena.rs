//! Physical memory as a heap arena of atomic words: the machine's frames,
//! and the tests'.

use alloc::vec::Vec;

use hotkern_physmem::Pfn;

use super::{CopyFault, FrameMemory};
use crate::sync::{AtomicU64, Ordering};

/// Frames `first..first + frames`, each `words` 64-bit words, zeroed.
/// Words are atomics so that an optimistic reader racing a writer reads a
/// stale word, not undefined memory; the sequence check throws it away.
///
/// ```
/// use hotkern_kernel::movable::{Arena, FrameMemory};
/// use hotkern_physmem::Pfn;
///
/// let memory = Arena::new(Pfn(16), 4, 8);
/// memory.store(Pfn(17), 3, 42);
/// memory.copy(Pfn(17), Pfn(19)).unwrap();
/// assert_eq!(memory.load(Pfn(19), 3), 42);
/// assert_eq!(memory.checksum(Pfn(19)), memory.checksum(Pfn(17)));
/// ```
pub struct Arena {
    first: u64,
    words: usize,
    memory: Vec<AtomicU64>,
}

impl Arena {
    /// An arena of `frames` frames of `words` words from `first`.
    pub fn new(first: Pfn, frames: usize, words: usize) -> Self {
        Arena {
            first: first.0,
            words,
            memory: (0..frames * words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn at(&self, frame: Pfn, word: usize) -> &AtomicU64 {
        &self.memory[(frame.0 - self.first) as usize * self.words + word]
    }

    /// A checksum of a frame's words (FNV-1a over the words), to compare a
    /// moved frame with its source.
    pub fn checksum(&self, frame: Pfn) -> u64 {
        (0..self.words).fold(0xcbf2_9ce4_8422_2325, |hash, word| {
            (hash ^ self.load(frame, word)).wrapping_mul(0x100_0000_01b3)
        })
    }
}

impl FrameMemory for Arena {
    fn words(&self) -> usize {
        self.words
    }

    fn load(&self, frame: Pfn, word: usize) -> u64 {
        self.at(frame, word).load(Ordering::Relaxed)
    }

    fn store(&self, frame: Pfn, word: usize, value: u64) {
        self.at(frame, word).store(value, Ordering::Relaxed);
    }

    fn copy(&self, from: Pfn, to: Pfn) -> Result<(), CopyFault> {
        for word in 0..self.words {
            self.store(to, word, self.load(from, word));
        }
        Ok(())
    }
}
