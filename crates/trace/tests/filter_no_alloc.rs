//! Evaluating a compiled filter never allocates: this test binary counts
//! every allocation and checks the count does not move while filters run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use hotkern_trace::internals::filter::{FieldSpec, Filter};
use hotkern_trace::internals::glob::Glob;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Only the measuring thread counts: the harness's own threads allocate
    // whenever they like.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: our caller upholds `GlobalAlloc::alloc`'s contract for
        // `layout`, which is all `System.alloc` needs.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from `System`, with
        // this `layout`, as our caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn matching_does_not_allocate() {
    let fields = [
        FieldSpec::signed("pid", 8, 4),
        FieldSpec::unsigned("flags", 12, 4),
        FieldSpec::fixed_string("comm", 16, 16),
        FieldSpec::data_loc_string("msg", 32),
    ];
    let filters: Vec<Filter> = [
        "pid > 10 && (comm ~ \"kwork*\" || comm == \"bash\")",
        "!(flags & 0x4) || msg ~ \"*error*\" || CPU == 3",
        "comm ~ \"*[0-9]?\" && msg != \"ok\" && pid <= -1",
    ]
    .iter()
    .map(|text| Filter::compile(text, &fields).unwrap())
    .collect();
    let globs = [Glob::new("sched_*"), Glob::new("*_[a-c]*x?")];
    let mut payload = vec![0u8; 64];
    payload[8..12].copy_from_slice(&42i32.to_ne_bytes());
    payload[16..23].copy_from_slice(b"kworker");
    payload[32..36].copy_from_slice(&(40u32 | (12 << 16)).to_ne_bytes());
    payload[40..51].copy_from_slice(b"some error!");

    let before = ALLOCATIONS.load(Ordering::Relaxed);
    MEASURING.with(|m| m.set(true));
    let mut hits = 0usize;
    for round in 0..10_000u32 {
        payload[12..16].copy_from_slice(&round.to_ne_bytes());
        for filter in &filters {
            hits += usize::from(filter.matches_on(&payload, round % 4));
        }
        for glob in &globs {
            hits += usize::from(glob.matches("sched_switch_abx1"));
        }
    }
    MEASURING.with(|m| m.set(false));
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(hits > 0);
    assert_eq!(after - before, 0, "filters allocated while matching");
}
