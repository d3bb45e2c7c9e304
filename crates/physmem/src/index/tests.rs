//! The index's table of sections: which sections it lists, and which an
//! update rebuilds and which it shares with the index it was made from.
//! Lookups alone cannot tell: a table too long, a section listed where no
//! segment is, or a rebuild of everything all give the right answers.

use super::*;
use crate::section::Detail;
use crate::types::FreeList;
use alloc::vec::Vec;
use directory::LEAF;

/// Frames per section at the smallest section size.
const S: u64 = 1 << SECTION_SHIFT;

fn entry(slot: u32, start: u64, end: u64) -> Entry<()> {
    Entry {
        run: Run {
            start,
            end,
            pages: ptr::null(),
            slot,
            generation: 0,
        },
        avail_start: start,
        avail_end: end,
        free_list: FreeList::DEFAULT,
        start_hint: 0,
    }
}

fn frames(start: u64, end: u64) -> FrameRange {
    FrameRange {
        start: Pfn(start),
        end: Pfn(end),
    }
}

/// Absolute numbers of the sections the table lists.
fn listed(index: &Index<()>) -> Vec<u64> {
    (0..index.sections.len())
        .filter(|&n| !index.sections.get(n).unwrap().is_null())
        .map(|n| index.sections.base + n as u64)
        .collect()
}

fn slot_at(index: &Index<()>, pfn: u64) -> Option<u32> {
    index.find(pfn).map(|run| run.slot)
}

#[test]
fn the_table_runs_from_the_first_to_the_last_section_of_a_segment() {
    // Segments in section 3 and in sections 5 and 6; none in 4.
    let entries = [
        entry(0, 3 * S + 10, 3 * S + 20),
        entry(1, 5 * S + 100, 6 * S + 1),
    ];
    let index = Index::build(&entries, 2).unwrap();
    assert_eq!((index.shift, index.sections.base), (SECTION_SHIFT, 3));
    assert_eq!(index.sections.len(), 4);
    assert_eq!(listed(&index), [3, 5, 6]);
    assert_eq!(slot_at(&index, 6 * S), Some(1));
    assert_eq!(slot_at(&index, 4 * S), None);
    // The benchmark's binary-search lookup agrees on every frame.
    for pfn in 2 * S..8 * S {
        let by_search = index.find_by_section_search(pfn).map(|run| run.slot);
        assert_eq!(by_search, slot_at(&index, pfn), "pfn {pfn}");
    }
    // Retiring the index passes on its three sections and one slot chunk:
    // room for that many must be reserved before it is replaced.
    assert_eq!(index.slots.chunk_count(), 1);
    let (sections, chunks) = (3, 1);
    assert!(index.release_bound(None) >= sections + chunks);
    index.discard(None);
}

#[test]
fn table_bytes_count_the_table_and_each_shared_section_once() {
    // One segment covers sections 0 to 3 (one uniform section, listed four
    // times) and the start of section 4, which holds a second segment too;
    // a third holds two frames of section 5. Section 4 is larger than the
    // shared one, so counting the shared one again instead of section 4
    // gives another total.
    let entries = [
        entry(0, 0, 4 * S + 100),
        entry(1, 4 * S + 200, 4 * S + 300),
        entry(2, 5 * S + 1, 5 * S + 3),
    ];
    let index = Index::build(&entries, 3).unwrap();
    assert_eq!(listed(&index), [0, 1, 2, 3, 4, 5]);
    assert!((1..4).all(|n| index.sections.get(n) == index.sections.get(0)));
    assert_ne!(
        index.sections.get(4).unwrap(),
        index.sections.get(0).unwrap()
    );
    // Runs and the sentinel are 32 bytes each, blocks 4. The shared
    // section and section 5: one block, one run, one detail. Section 4:
    // ends at offsets 100 and 300 fit blocks of 2^8 (MAX_SCAN allows one
    // end inside a block), so two blocks, two runs, two details.
    let detail = size_of::<Detail>();
    let single = 4 + 2 * 32 + detail;
    let section_4 = 2 * 4 + 3 * 32 + 2 * detail;
    // One leaf of the table holds all six entries: its pointer in the
    // directory and its LEAF entries.
    let table = 8 + LEAF * 8;
    assert_eq!(index.table_bytes(), table + 2 * single + section_4);
    // Three distinct sections and a chunk to retire, at least.
    let (sections, chunks) = (3, 1);
    assert!(index.release_bound(None) >= sections + chunks);
    assert_eq!(slot_at(&index, 4 * S + 99), Some(0));
    assert_eq!(slot_at(&index, 4 * S + 100), None);
    assert_eq!(slot_at(&index, 4 * S + 299), Some(1));
    index.discard(None);
}

#[test]
fn sections_grow_only_when_the_span_needs_more_than_the_table_allows() {
    let span = |start, sections: u64| frames(start, start + sections * S);
    // Exactly the most sections the table holds, away from frame 0.
    assert_eq!(shift_for(span(1 << 20, MAX_SECTIONS)), SECTION_SHIFT);
    // One frame more needs one more section: twice as large ones.
    let over = frames(1 << 20, (1 << 20) + MAX_SECTIONS * S + 1);
    assert_eq!(shift_for(over), SECTION_SHIFT + 1);
    // Frames 0 to 2^34: 2^(34 - s) + 1 sections of 2^s frames, at most
    // 2^16 from s = 19.
    assert_eq!(shift_for(frames(0, (1 << 34) + 1)), 19);
}

#[test]
fn an_update_rebuilds_the_sections_it_touches_and_shares_the_others() {
    let entries = [
        entry(0, 3 * S + 10, 3 * S + 20),
        entry(1, 5 * S + 100, 6 * S + 1),
        entry(2, 8 * S, 8 * S + 5),
    ];
    let old = Index::build(&entries, 3).unwrap();
    // Segment 1 loses its last frame: it now ends where section 6 starts.
    let shrunk = [entry(1, 5 * S + 100, 6 * S)];
    let update = Update {
        frames: frames(5 * S + 100, 6 * S + 1),
        entries: &shrunk,
        span: Some(frames(3 * S + 10, 8 * S + 5)),
        slots: &[(1, Some(5 * S + 100))],
        slot_count: 3,
        len: 3,
    };
    let new = old
        .update(update)
        .unwrap()
        .expect("the same section size: an update, not a rebuild");
    assert_eq!((new.sections.base, new.sections.len()), (3, 6));
    // Section 6 held only the lost frame: nothing overlaps it any more.
    assert_eq!(listed(&new), [3, 5, 8]);
    assert_eq!(
        new.sections.get(0).unwrap(),
        old.sections.get(0).unwrap(),
        "untouched: shared"
    );
    assert_eq!(
        new.sections.get(5).unwrap(),
        old.sections.get(5).unwrap(),
        "untouched: shared"
    );
    assert_ne!(
        new.sections.get(2).unwrap(),
        old.sections.get(2).unwrap(),
        "touched: rebuilt"
    );
    assert_eq!(slot_at(&new, 6 * S - 1), Some(1));
    assert_eq!(slot_at(&new, 6 * S), None);
    assert_eq!(slot_at(&new, 3 * S + 10), Some(0));
    assert_eq!(slot_at(&new, 8 * S + 4), Some(2));
    // As when `new` is published and later torn down.
    old.discard(Some(&new));
    new.discard(None);
}

#[test]
fn an_update_whose_span_needs_larger_sections_asks_for_a_rebuild() {
    let entries = [entry(0, 0, 10)];
    let old = Index::build(&entries, 1).unwrap();
    let far = [entry(1, 1 << 34, (1 << 34) + 1)];
    let update = Update {
        frames: frames(1 << 34, (1 << 34) + 1),
        entries: &far,
        span: Some(frames(0, (1 << 34) + 1)),
        slots: &[(1, Some(1 << 34))],
        slot_count: 2,
        len: 2,
    };
    assert!(old.update(update).unwrap().is_none());
    old.discard(None);
}

#[test]
fn retiring_an_updated_index_looks_only_at_the_sections_the_write_changed() {
    // Boot memory low, hot-plugged memory 3,000 sections up, nothing
    // between: a table of 3,009 entries, as a kernel with RAM below and a
    // virtio-mem region above 4 GiB has.
    let entries = [entry(0, 0, 4 * S), entry(1, 3000 * S, 3008 * S)];
    let old = Index::build(&entries, 3).unwrap();
    assert_eq!(old.sections.len(), 3008);
    // Plug four sections just above the hot-plugged segment: the span
    // grows by four sections, all of them fresh.
    let plugged = [entry(2, 3008 * S, 3012 * S)];
    let update = Update {
        frames: frames(3008 * S, 3012 * S),
        entries: &plugged,
        span: Some(frames(0, 3012 * S)),
        slots: &[(2, Some(3008 * S))],
        slot_count: 3,
        len: 3,
    };
    let new = old.update(update).unwrap().unwrap();
    assert_eq!(new.fresh, 3008..3012);
    assert_eq!(listed(&new).len(), 4 + 8 + 4);
    // Every old entry stays (the write touched no old section): nothing to
    // retire but the slot chunk and the one leaf holding the fresh
    // entries (the other five are shared), and the walk that finds that out visits
    // the four fresh entries, not the 3,008 kept ones.
    let mut visited = Vec::new();
    old.changed(Some(&new), new.fresh.clone(), |number, _| {
        visited.push(number)
    });
    assert!(visited.is_empty(), "{visited:?}");
    new.changed(Some(&old), new.fresh.clone(), |number, _| {
        visited.push(number)
    });
    assert_eq!(visited, [3008, 3009, 3010, 3011]);
    assert_eq!(old.release_bound(Some(&new)), old.slots.chunk_count() + 1);
    // The same plug taken back: the four sections go, and only they are
    // looked at.
    let update = Update {
        frames: frames(3008 * S, 3012 * S),
        entries: &[],
        span: Some(frames(0, 3008 * S)),
        slots: &[(2, None)],
        slot_count: 3,
        len: 2,
    };
    let back = new.update(update).unwrap().unwrap();
    assert_eq!(back.fresh, 3008..3008, "the table shrank back");
    let mut released = 0;
    new.changed(Some(&back), back.fresh.clone(), |number, _| {
        assert!((3008..3012).contains(&number));
        released += 1;
    });
    assert_eq!(released, 4);
    old.discard(Some(&new));
    new.discard(Some(&back));
    back.discard(None);
}
