//! Tasks' movable frames, and the memory invariants: every owned frame
//! re-read intact, every frame counted once, the device, physmem and the
//! allocator agreeing on every block.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::Ordering;

use hotkern_kernel::blockframes::Mobility;
use hotkern_kernel::frames::FramePool;
use hotkern_kernel::movable::{FrameMemory, Slot};
use hotkern_physmem::Pfn;

use super::system::MemorySystem;
use crate::task::Context;

/// Word `word` of a frame its owner wrote at `generation`: word 0 names
/// both (owner in the high half, the generation's low 32 bits in the low
/// half), the others are mixed from it, so that a torn frame, or one of
/// another owner or generation, does not match.
///
/// ```
/// use hotkern_machine::frame_pattern;
///
/// assert_eq!(frame_pattern(3, 7, 0), 3 << 32 | 7);
/// assert_ne!(frame_pattern(3, 7, 1), frame_pattern(3, 8, 1));
/// ```
pub fn frame_pattern(owner: u64, generation: u64, word: usize) -> u64 {
    let head = owner << 32 | (generation & 0xffff_ffff);
    if word == 0 {
        head
    } else {
        (head ^ word as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// A memory invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryViolation {
    /// The device, physmem and the allocator disagree about a block.
    BlockState {
        /// The block.
        block: usize,
        /// The device counts it plugged.
        device: bool,
        /// physmem finds its frames.
        physmem: bool,
        /// The allocator has it handed over.
        allocator: bool,
    },
    /// A plugged block's descriptors are not where they should be: its
    /// run's holder ([`MemoryDeviceConfig::descriptors_on_block`]) is not
    /// plugged, or physmem's descriptor of one of its frames does not
    /// name that frame (something wrote over it).
    ///
    /// [`MemoryDeviceConfig::descriptors_on_block`]: crate::MemoryDeviceConfig::descriptors_on_block
    Descriptors {
        /// The block.
        block: usize,
        /// The block holding its descriptors, if they are on a block.
        holder: Option<usize>,
    },
    /// A block stayed isolated after a resize.
    Isolated {
        /// The block.
        block: usize,
    },
    /// An owned frame does not hold what its owner last wrote.
    Corrupt {
        /// The owner.
        owner: u64,
        /// The generation it wrote last.
        generation: u64,
        /// Word 0 as read.
        found: u64,
    },
    /// A slot holds no frame, or one outside the blocks handed over, or
    /// the reverse map does not point back at it.
    Misplaced {
        /// The owner.
        owner: u64,
        /// The frame, if any.
        frame: Option<Pfn>,
    },
    /// Two slots hold the same frame.
    OwnedTwice {
        /// The frame.
        frame: Pfn,
    },
    /// Free, owned and unmovable frames do not add up to the frames
    /// handed over: frames lost or counted twice.
    Accounting {
        /// Free in the allocator.
        free: u64,
        /// Owned through slots.
        owned: u64,
        /// Handed out unmovable.
        unmovable: u64,
        /// Handed over.
        total: u64,
    },
    /// Tasks read frames ([`Context::check_movable`]) that did not match.
    TornReads {
        /// How many.
        count: u64,
    },
}

impl fmt::Display for MemoryViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memory device: {self:?}")
    }
}

fn system<'a>(ctx: &'a Context<'_>) -> Option<&'a MemorySystem> {
    ctx.kernel.memory()
}

impl Context<'_> {
    /// A movable frame from the machine's memory device for `owner`, who
    /// reaches it only through the returned [`Slot`] (a shrink may move it
    /// at any time); it holds `owner`'s pattern at generation 0. `None`
    /// with no device or no free frame.
    ///
    /// ```
    /// use hotkern_machine::{Machine, MemoryDeviceConfig, TaskStatus};
    ///
    /// let config = MemoryDeviceConfig { plugged_blocks: 2, ..Default::default() };
    /// let machine = Machine::builder().cpus(2).memory_device(config).build()?;
    /// machine.submit(|ctx| {
    ///     let slot = ctx.alloc_movable(7).expect("a plugged block");
    ///     assert!(ctx.write_movable(slot, 1));
    ///     assert!(ctx.check_movable(slot, 7, 1));
    ///     assert!(ctx.free_movable(slot));
    ///     TaskStatus::Done
    /// });
    /// assert!(machine.wait_idle(std::time::Duration::from_secs(10)));
    /// assert!(machine.check_memory().is_empty());
    /// # Ok::<(), hotkern_machine::MachineError>(())
    /// ```
    pub fn alloc_movable(&mut self, owner: u64) -> Option<Slot> {
        let system = system(self)?;
        let mut owners = system.owners.lock();
        let slot = system.frames.alloc()?;
        write(system, slot, owner, 0);
        owners.insert(slot, (owner, 0));
        Some(slot)
    }

    /// Writes the slot owner's pattern at `generation` over the whole
    /// frame; false if the slot holds no frame.
    pub fn write_movable(&mut self, slot: Slot, generation: u64) -> bool {
        let Some(system) = system(self) else {
            return false;
        };
        let mut owners = system.owners.lock();
        let Some(entry) = owners.get_mut(&slot) else {
            return false;
        };
        entry.1 = generation;
        write(system, slot, entry.0, generation)
    }

    /// Reads the slot's frame into `out`, through the slot's sequence
    /// check (so never a torn or stale frame); false if it holds none.
    pub fn read_movable(&mut self, slot: Slot, out: &mut [u64]) -> bool {
        system(self).is_some_and(|system| system.frames.read(slot, &system.memory, out))
    }

    /// Reads the slot's frame and compares it with `owner`'s pattern at
    /// `generation`; a mismatch is counted and reported by
    /// [`Machine::check_memory`](crate::Machine::check_memory).
    pub fn check_movable(&mut self, slot: Slot, owner: u64, generation: u64) -> bool {
        let Some(system) = system(self) else {
            return false;
        };
        let intact = read_intact(system, slot, owner, generation).is_ok();
        if !intact {
            system.torn_reads.fetch_add(1, Ordering::Relaxed);
        }
        intact
    }

    /// Frees the slot and its frame; false if it holds none.
    pub fn free_movable(&mut self, slot: Slot) -> bool {
        let Some(system) = system(self) else {
            return false;
        };
        let mut owners = system.owners.lock();
        owners.remove(&slot).is_some() && system.frames.free(slot)
    }
}

fn write(system: &MemorySystem, slot: Slot, owner: u64, generation: u64) -> bool {
    let words: Vec<u64> = (0..system.memory.words())
        .map(|word| frame_pattern(owner, generation, word))
        .collect();
    system.frames.write(slot, &system.memory, &words)
}

/// Word 0 as read, if the frame does not hold the pattern.
fn read_intact(system: &MemorySystem, slot: Slot, owner: u64, generation: u64) -> Result<(), u64> {
    let mut words = vec![0; system.memory.words()];
    if !system.frames.read(slot, &system.memory, &mut words) {
        return Err(0);
    }
    let whole = words
        .iter()
        .enumerate()
        .all(|(at, &word)| word == frame_pattern(owner, generation, at));
    if whole {
        Ok(())
    } else {
        Err(words[0])
    }
}

impl MemorySystem {
    /// An unmovable frame, as a kernel structure takes: only from a
    /// kernel block.
    pub(crate) fn alloc_unmovable(&self) -> Option<Pfn> {
        let mut unmovable = self.unmovable.lock();
        let frame = self.frames.blocks().alloc_as(Mobility::Unmovable)?;
        unmovable.push(frame);
        Some(frame)
    }

    pub(crate) fn free_unmovable(&self, frame: Pfn) -> bool {
        let mut unmovable = self.unmovable.lock();
        let Some(at) = unmovable.iter().position(|&held| held == frame) else {
            return false;
        };
        unmovable.swap_remove(at);
        self.frames.blocks().free(frame)
    }

    /// Every memory invariant, checked with no resize running and owners
    /// kept from allocating, writing and freeing meanwhile.
    pub(crate) fn check(&self, pool: &FramePool) -> Vec<MemoryViolation> {
        let _resizing = self.resizing.lock();
        let owners = self.owners.lock();
        let unmovable = self.unmovable.lock();
        let blocks = self.frames.blocks();
        let mut found = Vec::new();
        for block in 0..self.config.blocks {
            let start = self.block_start(block);
            let last = Pfn(start.0 + self.config.block_frames - 1);
            let device = self.device.is_plugged(block);
            let physmem = pool.holds(start) && pool.holds(last);
            let in_use = blocks.block_use(block);
            if physmem != device || in_use.is_some() != device {
                found.push(MemoryViolation::BlockState {
                    block,
                    device,
                    physmem,
                    allocator: in_use.is_some(),
                });
            }
            if device {
                let holder = self
                    .runs
                    .as_ref()
                    .and_then(|runs| runs.lock().holder(block));
                let holder_plugged = holder.is_some_and(|holder| {
                    self.device.is_plugged(holder) && pool.holds(self.block_start(holder))
                });
                let described = (start.0..=last.0).all(|frame| pool.describes(Pfn(frame)));
                if !described || (self.runs.is_some() && !holder_plugged) {
                    found.push(MemoryViolation::Descriptors { block, holder });
                }
            }
            if in_use.is_some_and(|used| used.isolated) {
                found.push(MemoryViolation::Isolated { block });
            }
        }
        let mut frames = BTreeSet::new();
        for (&slot, &(owner, generation)) in owners.iter() {
            let frame = self.frames.frame_of(slot);
            let placed = frame.is_some_and(|frame| {
                blocks.holds(frame) && self.frames.owner_of(frame) == Some(slot)
            });
            if !placed {
                found.push(MemoryViolation::Misplaced { owner, frame });
                continue;
            }
            if let Some(frame) = frame.filter(|&frame| !frames.insert(frame)) {
                found.push(MemoryViolation::OwnedTwice { frame });
            }
            if let Err(word) = read_intact(self, slot, owner, generation) {
                found.push(MemoryViolation::Corrupt {
                    owner,
                    generation,
                    found: word,
                });
            }
        }
        let (free, total) = blocks.counts();
        let (owned, held) = (owners.len() as u64, unmovable.len() as u64);
        if free + owned + held != total {
            found.push(MemoryViolation::Accounting {
                free,
                owned,
                unmovable: held,
                total,
            });
        }
        let torn = self.torn_reads.load(Ordering::Relaxed);
        if torn != 0 {
            found.push(MemoryViolation::TornReads { count: torn });
        }
        found
    }
}
