use alloc::vec;
use alloc::vec::Vec;

use hotkern_physmem::{BasicPage, PageCount, Physmem, PAGE_SIZE};

use super::*;

/// 8-byte descriptors: 512 to a frame.
fn descriptors(frames: PageCount) -> PageCount {
    Physmem::<BasicPage>::descriptor_frames(frames)
}

/// Sixteen 2 MiB blocks in runs of four.
fn layout() -> Runs {
    Runs::new(16, 512, 4, descriptors).unwrap()
}

#[test]
fn bad_shapes_are_refused() {
    assert_eq!(
        Runs::new(0, 512, 4, descriptors).err(),
        Some(RunsError::Empty)
    );
    assert_eq!(
        Runs::new(4, 0, 4, descriptors).err(),
        Some(RunsError::Empty)
    );
    assert_eq!(
        Runs::new(4, 512, 0, descriptors).err(),
        Some(RunsError::Empty)
    );
    // 64 frames a block, runs of 64: 8 descriptor frames and 64 × 37
    // words of bitmaps, counts and reverse map (5 frames) fit; runs of
    // 512 (64 + 37 frames) do not.
    assert_eq!(BlockFrames::map_words(64), 2 + 3 + 32);
    assert!(Runs::new(4, 64, 64, descriptors).is_ok());
    assert_eq!(
        Runs::new(4, 64, 512, descriptors).err(),
        Some(RunsError::HolderFull {
            kept: 64 + 37,
            block_frames: 64
        })
    );
}

#[test]
fn a_grow_is_cut_into_runs() {
    let runs = layout();
    assert_eq!(
        runs.cut(3, 9).collect::<Vec<_>>(),
        [(3, 4), (7, 4), (11, 1)]
    );
    assert_eq!(runs.cut(5, 4).collect::<Vec<_>>(), [(5, 4)]);
    assert_eq!(runs.cut(5, 0).count(), 0);
}

#[test]
fn a_run_is_recorded_only_inside_the_region_and_no_longer_than_a_run() {
    let mut runs = layout();
    let out = |first, count| Err(RunsError::OutOfRange { first, count });
    assert_eq!(runs.plugged(14, 4, true), out(14, 4));
    assert_eq!(runs.plugged(0, 5, true), out(0, 5));
    assert_eq!(runs.plugged(0, 0, true), out(0, 0));
    assert_eq!(runs.plugged(usize::MAX, 2, true), out(usize::MAX, 2));
    assert!(
        (0..16).all(|block| runs.holder(block).is_none()),
        "nothing changed"
    );
}

#[test]
fn each_block_of_a_run_has_its_maps_on_the_holder_after_the_descriptors() {
    let mut runs = layout();
    assert_eq!(runs.plugged(4, 4, true), Ok(4));
    let map_bytes = BlockFrames::map_words(512) as u64 * 8;
    for block in 4..8 {
        assert_eq!(runs.holder(block), Some(4));
        let maps = runs.maps(block);
        assert_eq!(maps.block, 4);
        assert_eq!(maps.offset, 4 * PAGE_SIZE + (block - 4) as u64 * map_bytes);
        // The last block's maps end inside what the holder keeps back.
        assert!(maps.offset + map_bytes <= runs.maps(4).reserved * PAGE_SIZE);
    }
    assert_eq!(runs.maps(4).reserved, 4 + runs.map_frames());
    assert_eq!(runs.maps(5).reserved, 0);
    assert!(runs.is_holder(4) && !runs.is_holder(5));
    assert_eq!((runs.held_descriptors(4), runs.held_descriptors(5)), (4, 0));
}

#[test]
fn a_block_with_heap_descriptors_keeps_its_maps_at_its_own_front() {
    let mut runs = layout();
    assert_eq!(runs.plugged(8, 2, false), Ok(0));
    assert_eq!(runs.holder(9), None);
    let maps = runs.maps(9);
    assert_eq!((maps.block, maps.offset, maps.reserved), (9, 0, 1));
}

#[test]
fn a_holder_stays_while_its_run_keeps_a_block() {
    let mut runs = layout();
    runs.plugged(0, 4, true).unwrap();
    runs.plugged(4, 4, true).unwrap();
    let mut taken = vec![0, 1, 2, 4, 5, 6, 7];
    assert_eq!(runs.keep_holders(&mut taken), [0], "block 3 stays");
    assert_eq!(
        taken,
        [1, 2, 4, 5, 6, 7],
        "run 4's holder goes with all its run"
    );
    // Block 3 unplugged earlier: its run keeps 1 and 2 only.
    runs.unplugged(3);
    let mut taken = vec![0, 1, 2];
    assert!(runs.keep_holders(&mut taken).is_empty());
    // A gap in the run does not hide a block beyond it.
    runs.plugged(8, 4, true).unwrap();
    runs.unplugged(9);
    let mut taken = vec![8, 10];
    assert_eq!(runs.keep_holders(&mut taken), [8], "block 11 stays");
}

#[test]
fn a_piece_plugged_back_holds_itself() {
    let mut runs = layout();
    runs.plugged(0, 4, true).unwrap();
    // A failed shrink had unplugged blocks 2 and 3 and plugs them back as
    // one piece on its own first frames.
    assert_eq!(runs.plugged(2, 2, true), Ok(2));
    assert_eq!(
        (runs.holder(1), runs.holder(2), runs.holder(3)),
        (Some(0), Some(2), Some(2))
    );
    assert_eq!(runs.maps(3).offset, 2 * PAGE_SIZE + runs.map_bytes());
    assert_eq!(runs.maps(2).reserved, 2 + runs.map_frames());
    let mut taken = vec![0, 1, 2];
    assert_eq!(runs.keep_holders(&mut taken), [2], "block 3 stays");
    assert_eq!(taken, [0, 1], "run 0 has no block left but these");
}
