//! Used memory for the shrinks to move (`vmem_fill=PERCENT`): before each
//! shrink the owners hold movable frames, PERCENT of the size the shrink
//! goes to, spread evenly over every plugged block so that no block is
//! wholly free and every block taken back has frames to migrate. Each
//! frame holds a pattern derived from its owner (slot) and the resize
//! that wrote it (generation); after every resize every owner re-reads
//! all its frames, word by word, and the readers on the other CPUs read
//! them through their slots while the frames move ([`read_one`]).
//!
//! The owners' list is published to the readers as one word per owner
//! (slot and generation) under a sequence count, as a seqlock: odd while
//! the boot CPU changes the list, so a reader that overlapped a change
//! drops what it read.

use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

use hotkern_kernel::movable::{MovableFrames, Slot};

use crate::arch::clock;
use crate::platform::pages::HotMemory;

/// Words of a frame the readers check (the owner's re-read checks all).
const READER_WORDS: usize = 8;

static SEQUENCE: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static OWNERS: spin::Once<Vec<AtomicU64>> = spin::Once::new();

/// What the fill did over the run.
#[derive(Debug, Default, Clone)]
pub(super) struct FillReport {
    /// The share asked for, in percent of each shrink's size.
    pub percent: u64,
    /// Frames owned before each shrink, the most over the run.
    pub most: u64,
    /// Frames wanted but not found (no free frame or no slot).
    pub short: u64,
    /// Nanoseconds spent filling and re-reading (not part of a resize).
    pub fill_ns: u64,
    /// Nanoseconds spent re-reading after the resizes.
    pub verify_ns: u64,
    /// Re-reads after resizes.
    pub rounds: u64,
    /// Frames re-read in all.
    pub frames_read: u64,
    /// Frames whose slot held no frame or whose words were not the
    /// pattern: data lost or torn.
    pub bad: u64,
}

/// The owners of the filled frames, on the boot CPU.
pub(super) struct Fill {
    owners: Vec<(Slot, u32)>,
    /// The report so far.
    pub report: FillReport,
}

/// The `word`-th word of the frame owned by `slot`, written in resize
/// `generation`.
fn pattern(slot: Slot, generation: u32, word: usize) -> u64 {
    let owner = (u64::from(slot.index()) << 32 | u64::from(generation)) ^ 0x5bd1_e995_0000_0000;
    owner.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (word as u64).wrapping_mul(0xff51_afd7_ed55_8ccd)
}

impl Fill {
    /// A fill of `percent`, with room for the owners of `percent` of a
    /// region of `frames` frames (the most any target asks for: the list
    /// is the test's, on the heap, so a 4 GiB region at 50% takes 8 MiB,
    /// not 16); `None` for a fill of 0 or no heap for the list.
    pub(super) fn new(percent: u64, frames: u64) -> Option<Fill> {
        if percent == 0 {
            return None;
        }
        let frames = (frames * percent.min(100)).div_ceil(100);
        let mut owners = Vec::new();
        owners.try_reserve_exact(frames as usize).ok()?;
        let mut published = Vec::new();
        published.try_reserve_exact(frames as usize).ok()?;
        published.extend((0..frames).map(|_| AtomicU64::new(0)));
        OWNERS.call_once(|| published);
        Some(Fill {
            owners,
            report: FillReport {
                percent: percent.min(100),
                ..FillReport::default()
            },
        })
    }

    /// Owns `percent` of `target_frames` frames, spread evenly over the
    /// plugged blocks: frees owners beyond it, or takes an equal share of
    /// each block (the remainder in the lowest), writing the pattern of
    /// `generation` into each new one.
    pub(super) fn fill(&mut self, hot: &MovableFrames, target_frames: u64, generation: u32) {
        let started = clock::nanos();
        let wanted = (target_frames * self.report.percent / 100) as usize;
        SEQUENCE.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        while self.owners.len() > wanted {
            if let Some((slot, _)) = self.owners.pop() {
                hot.free(slot);
            }
        }
        if self.owners.len() < wanted {
            self.take(hot, wanted - self.owners.len(), generation);
        }
        self.report.short += wanted.saturating_sub(self.owners.len()) as u64;
        self.report.most = self.report.most.max(self.owners.len() as u64);
        self.publish();
        SEQUENCE.fetch_add(1, Ordering::Release);
        self.report.fill_ns += clock::nanos() - started;
    }

    /// Takes `needed` more frames spread over the blocks: an equal share
    /// of each plugged block, the lowest `needed % blocks` one more.
    fn take(&mut self, hot: &MovableFrames, needed: usize, generation: u32) {
        let blocks = hot.blocks();
        let (count, _) = blocks.shape();
        let plugged: usize = (0..count)
            .filter(|&block| blocks.block_use(block).is_some())
            .count();
        let (share, extra) = (needed / plugged.max(1), needed % plugged.max(1));
        let mut rank = 0;
        for block in 0..count {
            if blocks.block_use(block).is_none() {
                continue;
            }
            let quota = share + usize::from(rank < extra);
            rank += 1;
            for _ in 0..quota {
                if self.owners.len() == self.owners.capacity() {
                    return;
                }
                let Some(slot) = hot.alloc_in(block) else {
                    break;
                };
                hot_store(hot, slot, generation);
                self.owners.push((slot, generation));
            }
        }
    }

    /// Re-reads every owned frame whole through its slot; returns the
    /// frames that were not intact.
    pub(super) fn verify(&mut self, hot: &MovableFrames) -> u64 {
        let started = clock::nanos();
        let mut words = [0u64; 512];
        let mut bad = 0;
        for &(slot, generation) in &self.owners {
            let intact = hot.read(slot, &HotMemory, &mut words)
                && words
                    .iter()
                    .enumerate()
                    .all(|(word, &value)| value == pattern(slot, generation, word));
            bad += u64::from(!intact);
        }
        self.report.rounds += 1;
        self.report.frames_read += self.owners.len() as u64;
        self.report.bad += bad;
        self.report.verify_ns += clock::nanos() - started;
        bad
    }

    /// Frees every owned frame (before the end-of-run audit counts frames).
    pub(super) fn release(&mut self, hot: &MovableFrames) {
        SEQUENCE.fetch_add(1, Ordering::AcqRel);
        COUNT.store(0, Ordering::Release);
        for (slot, _) in self.owners.drain(..) {
            hot.free(slot);
        }
        SEQUENCE.fetch_add(1, Ordering::Release);
    }

    fn publish(&self) {
        let Some(published) = OWNERS.get() else {
            return;
        };
        for (word, &(slot, generation)) in published.iter().zip(&self.owners) {
            word.store(
                u64::from(generation) << 32 | u64::from(slot.index()),
                Ordering::Relaxed,
            );
        }
        COUNT.store(self.owners.len(), Ordering::Release);
    }
}

/// Writes the whole pattern of `generation` into `slot`'s frame.
fn hot_store(hot: &MovableFrames, slot: Slot, generation: u32) {
    let mut words = [0u64; 512];
    for (word, value) in words.iter_mut().enumerate() {
        *value = pattern(slot, generation, word);
    }
    hot.write(slot, &HotMemory, &words);
}

/// A reader's check of the owner `pick` selects (modulo the owners):
/// `None` if there are none or the list changed meanwhile, else whether
/// the first words read through the slot were the owner's pattern.
pub fn read_one(hot: &MovableFrames, pick: u64) -> Option<bool> {
    let before = SEQUENCE.load(Ordering::Acquire);
    if before % 2 == 1 {
        return None;
    }
    let count = COUNT.load(Ordering::Acquire);
    let published = OWNERS.get().filter(|_| count > 0)?;
    let entry = published[(pick % count as u64) as usize].load(Ordering::Relaxed);
    let (slot, generation) = (Slot::from_index(entry as u32), (entry >> 32) as u32);
    let mut words = [0u64; READER_WORDS];
    let read = hot.read(slot, &HotMemory, &mut words);
    fence(Ordering::Acquire);
    if SEQUENCE.load(Ordering::Relaxed) != before {
        return None;
    }
    Some(
        read && words
            .iter()
            .enumerate()
            .all(|(word, &value)| value == pattern(slot, generation, word)),
    )
}
