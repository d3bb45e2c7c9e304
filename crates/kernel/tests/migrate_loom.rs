//! Model checks of taking memory away while it is used:
//!
//! * isolation against a concurrent allocation: once a block is isolated,
//!   the list of its used frames is complete, because no allocation lands
//!   in it after;
//! * the owner's slot switch against a reader: a reader of a frame being
//!   moved, whose old frame is then reused by another owner, never keeps a
//!   torn or stale read;
//! * a new chunk of owner slots against a reader of a slot in it: the
//!   reader finds no slot, or a slot made whole (under loom a chunk is one
//!   slot, so every allocation here makes one).
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test migrate_loom`.
#![cfg(loom)]

mod common;

use loom::sync::Arc;

use common::checker;
use hotkern_kernel::blockframes::BlockFrames;
use hotkern_kernel::migrate::{shrink_block, NoHooks};
use hotkern_kernel::movable::{Arena, MovableFrames, Slot};
use hotkern_physmem::Pfn;

#[test]
fn an_allocation_racing_isolation_is_listed_or_lands_outside() {
    checker().check(|| {
        // Two blocks of one frame: the allocation takes block 0's frame
        // if it comes first, block 1's if isolation does.
        let frames = Arc::new(BlockFrames::new(Pfn(0), 2, 1).unwrap());
        assert!(frames.add_blocks(0, 2));
        let theirs = Arc::clone(&frames);
        let allocation = loom::thread::spawn(move || theirs.alloc());
        let used = frames.isolate(0).unwrap();
        let mut listed = Vec::new();
        frames.each_used(0, |frame| listed.push(frame));
        assert_eq!(listed.len() as u64, used);
        let got = allocation.join().unwrap().expect("a frame is free");
        if frames.block_of(got) == Some(0) {
            assert_eq!(
                listed,
                [got],
                "allocated in the block after its list was made"
            );
        }
        let after = frames.alloc();
        assert!(
            after.is_none_or(|frame| frames.block_of(frame) == Some(1)),
            "the isolated block hands out nothing"
        );
    });
}

#[test]
fn a_reader_never_keeps_a_torn_or_stale_frame_across_a_move() {
    checker().check(|| {
        let frames = Arc::new(MovableFrames::new(Pfn(0), 2, 1).unwrap());
        let memory = Arc::new(Arena::new(Pfn(0), 2, 2));
        assert!(frames.blocks().add_blocks(0, 2));
        let slot = frames.alloc().unwrap();
        assert!(frames.write(slot, &*memory, &[1, 1]));
        let (their_frames, their_memory) = (Arc::clone(&frames), Arc::clone(&memory));
        let reader = loom::thread::spawn(move || {
            let mut words = [0; 2];
            assert!(their_frames.read(slot, &*their_memory, &mut words));
            assert_eq!(words, [1, 1], "torn or stale");
        });
        // Move the frame out of block 0, hand block 0 back, and let
        // another owner overwrite the old frame through its own slot.
        shrink_block(&frames, &*memory, 0, &NoHooks).unwrap();
        assert!(frames.blocks().add_blocks(0, 1));
        let other = frames.alloc().unwrap();
        assert_eq!(
            frames.frame_of(other),
            Some(Pfn(0)),
            "the old frame, reused"
        );
        assert!(frames.write(other, &*memory, &[2, 2]));
        reader.join().unwrap();
    });
}

#[test]
fn a_reader_racing_a_new_chunk_of_slots_sees_none_or_a_whole_slot() {
    checker().check(|| {
        let frames = Arc::new(MovableFrames::new(Pfn(0), 2, 1).unwrap());
        let memory = Arc::new(Arena::new(Pfn(0), 2, 1));
        assert!(frames.blocks().add_blocks(0, 2));
        let (their_frames, their_memory) = (Arc::clone(&frames), Arc::clone(&memory));
        // The reader guesses slot 1, which the second allocation makes.
        let reader = loom::thread::spawn(move || {
            let slot = Slot::from_index(1);
            let mut words = [0];
            let read = their_frames.read(slot, &*their_memory, &mut words);
            let frame = their_frames.frame_of(slot);
            assert!(!read || words == [0] || words == [2], "{words:?}");
            assert!(frame.is_none() || frame == Some(Pfn(1)), "{frame:?}");
        });
        let first = frames.alloc().unwrap();
        let second = frames.alloc().unwrap();
        assert_eq!(second, Slot::from_index(1));
        assert!(frames.write(first, &*memory, &[1]));
        assert!(frames.write(second, &*memory, &[2]));
        reader.join().unwrap();
    });
}
