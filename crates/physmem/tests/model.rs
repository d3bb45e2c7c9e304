//! Model-based property test: random plug/unplug/find/iterate sequences run
//! against a plain reference model, for all three implementations. Random
//! ranges rarely land inside a segment, so half the operations are aimed
//! at live segments (cuts and lookups at their edges); each test prints and
//! asserts how often plugs and unplugs succeed and are refused, each kind
//! of cut happens and lookups hit and miss.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::cell::Cell;

use hotkern_physmem::baseline::{RbTreeSegments, StaticSegments};
use hotkern_physmem::{BasicPage, Lookup, PageCount, Pfn, PhysSegments, Physmem, PhysmemError};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};

#[path = "model/reference.rs"]
mod reference;
use reference::{op, wide_op, Cut, Model, Op};

/// How much of handle identity an implementation promises.
#[derive(Clone, Copy, PartialEq)]
enum Handles {
    /// Live handles keep naming their segment; dead ones are detectably stale.
    Stable,
    /// Live handles keep naming their segment (rbtree: dead ones dangle).
    StableWhileLive,
    /// Array indices: no promise (the static design).
    Moving,
}

fn same_error(a: &PhysmemError, b: &PhysmemError) -> bool {
    // Which overlapping segment an implementation names may differ.
    match (a, b) {
        (PhysmemError::Overlap { .. }, PhysmemError::Overlap { .. }) => true,
        _ => a == b,
    }
}

fn bounds<S: PhysSegments>(set: &S, h: S::Handle) -> Option<(u64, u64)> {
    set.bounds(h).map(|(s, e)| (s.0, e.0))
}

fn check_iteration<S: PhysSegments>(set: &S, model: &Model) -> Result<(), TestCaseError> {
    let expected = model.list();
    let mut forward = Vec::new();
    let mut at = set.first();
    while let Some(h) = at {
        forward.push(bounds(set, h).unwrap());
        prop_assert!(
            forward.len() <= expected.len(),
            "iteration runs past the end"
        );
        at = set.next(h);
    }
    prop_assert_eq!(&forward, &expected);
    let mut backward = Vec::new();
    let mut at = set.last();
    while let Some(h) = at {
        backward.push(bounds(set, h).unwrap());
        prop_assert!(backward.len() <= expected.len());
        at = set.prev(h);
    }
    backward.reverse();
    prop_assert_eq!(&backward, &expected);
    prop_assert_eq!(set.count(), expected.len());
    prop_assert_eq!(
        set.highest_frame().map(|p| p.0),
        expected.last().map(|&(_, e)| e - 1)
    );
    Ok(())
}

type Extra<S> = fn(&S, &[(u64, u64)]) -> Result<(), TestCaseError>;

fn no_extra<S>(_: &S, _: &[(u64, u64)]) -> Result<(), TestCaseError> {
    Ok(())
}

/// hotkern's own iterator, both ways, and its page descriptors.
fn hotkern_views(mem: &Physmem<BasicPage>, expected: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let guard = mem.read();
    let forward: Vec<(u64, u64)> = guard.segments().map(|s| (s.start().0, s.end().0)).collect();
    prop_assert_eq!(&forward, expected);
    let mut backward: Vec<(u64, u64)> = guard
        .segments()
        .rev()
        .map(|s| (s.start().0, s.end().0))
        .collect();
    backward.reverse();
    prop_assert_eq!(&backward, expected);
    prop_assert_eq!(guard.segments().len(), expected.len());
    for segment in guard.segments() {
        let pages = segment.pages();
        prop_assert_eq!(pages.len() as u64, segment.len().0);
        prop_assert_eq!(pages[0].phys_addr, segment.start().phys_addr());
        prop_assert_eq!(
            pages[pages.len() - 1].phys_addr,
            Pfn(segment.end().0 - 1).phys_addr()
        );
    }
    Ok(())
}

/// How often the operations of a test reached the branches it is about,
/// summed over all its cases (the model and the implementation agree, so
/// the model's results are counted).
#[derive(Default)]
struct Reached {
    plugs: Cell<u32>,
    plugged: Cell<u32>,
    /// Plugged segments spanning more than one index section (2^9 frames).
    plugged_across_sections: Cell<u32>,
    unplugs: Cell<u32>,
    whole: Cell<u32>,
    front: Cell<u32>,
    back: Cell<u32>,
    middle: Cell<u32>,
    finds: Cell<u32>,
    hits: Cell<u32>,
    /// Handles of removed segments checked to be stale.
    stale_checked: Cell<u32>,
}

fn bump(counter: &Cell<u32>) {
    counter.set(counter.get() + 1);
}

impl Reached {
    fn unplugged(&self) -> u32 {
        self.whole.get() + self.front.get() + self.back.get() + self.middle.get()
    }
}

/// Prints `part` of `whole` as a share and asserts it is at least `least`.
fn share(test: &str, what: &str, part: u32, whole: u32, least: f64) {
    let share = f64::from(part) / f64::from(whole.max(1));
    println!("{test}: {what}: {part} of {whole} ({:.1} %)", share * 100.0);
    assert!(
        share >= least,
        "{test}: {what} reached in {:.1} % of cases, want at least {:.1} %",
        share * 100.0,
        least * 100.0
    );
}

fn run<S: PhysSegments>(
    set: S,
    handles: Handles,
    ops: &[Op],
    reached: &Reached,
) -> Result<(), TestCaseError> {
    run_with(set, handles, ops, no_extra::<S>, reached)
}

fn run_with<S: PhysSegments>(
    mut set: S,
    handles: Handles,
    ops: &[Op],
    extra: Extra<S>,
    reached: &Reached,
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut known: Vec<(u32, S::Handle)> = Vec::new();
    for op in ops {
        let op = &model.resolve(op);
        match *op {
            Op::Plug(pfn, n) => {
                bump(&reached.plugs);
                let got = set.plug(Pfn(pfn), PageCount(n));
                match (got, model.plug(pfn, n)) {
                    (Ok(h), Ok(id)) => {
                        bump(&reached.plugged);
                        if pfn >> 9 != (pfn + n - 1) >> 9 {
                            bump(&reached.plugged_across_sections);
                        }
                        known.push((id, h));
                    }
                    (Err(a), Err(b)) => prop_assert!(same_error(&a, &b), "{a:?} vs {b:?}"),
                    (got, want) => prop_assert!(false, "plug {op:?}: {got:?} vs {want:?}"),
                }
            }
            Op::Unplug(pfn, n) => {
                bump(&reached.unplugs);
                let got = set.unplug(Pfn(pfn), PageCount(n));
                match (got, model.unplug(pfn, n)) {
                    (Ok(()), Ok(cut)) => match cut {
                        Cut::Whole => bump(&reached.whole),
                        Cut::Front => bump(&reached.front),
                        Cut::Back => bump(&reached.back),
                        Cut::Middle { upper } => {
                            bump(&reached.middle);
                            let Lookup { segment: h, offset } =
                                set.find(Pfn(pfn + n)).expect("upper half");
                            prop_assert_eq!(offset, PageCount(0));
                            known.push((upper, h));
                        }
                    },
                    (Err(a), Err(b)) => prop_assert!(same_error(&a, &b), "{a:?} vs {b:?}"),
                    (got, want) => prop_assert!(false, "unplug {op:?}: {got:?} vs {want:?}"),
                }
            }
            Op::Find(pfn) => {
                bump(&reached.finds);
                let got = set
                    .find(Pfn(pfn))
                    .map(|found| (bounds(&set, found.segment).unwrap(), found.offset.0));
                let want = model.containing(pfn).map(|(s, e, _)| ((s, e), pfn - s));
                prop_assert_eq!(got, want, "find {}", pfn);
                if want.is_some() {
                    bump(&reached.hits);
                }
                let hits = set.sum_lookups(&[Pfn(pfn)]);
                prop_assert_eq!(hits, want.map_or(0, |(_, offset)| offset + 1));
            }
            Op::Iterate => {
                check_iteration(&set, &model)?;
                extra(&set, &model.list())?;
            }
            Op::Cut { .. } | Op::Probe { .. } => unreachable!("resolved above"),
        }
        prop_assert_eq!(set.count(), model.segments.len());
        if handles != Handles::Moving {
            for &(id, h) in &known {
                match model.live(id) {
                    Some(range) => prop_assert_eq!(bounds(&set, h), Some(range)),
                    None if handles == Handles::Stable => {
                        bump(&reached.stale_checked);
                        prop_assert_eq!(bounds(&set, h), None)
                    }
                    None => {}
                }
            }
            if handles == Handles::StableWhileLive {
                known.retain(|&(id, _)| model.live(id).is_some());
            }
        }
    }
    check_iteration(&set, &model)?;
    extra(&set, &model.list())
}

/// The least share of its cases in which a test must reach each branch.
struct Least {
    /// Of plugs: typically 74 % (51 % across sections).
    plugged: f64,
    /// Of unplugs: typically 58 % (63 %).
    unplugged: f64,
    /// Of plugs and of unplugs, those refused (where both must return the
    /// same error): typically 26 % and 42 % (49 % and 37 %).
    refused: f64,
    /// Of successful unplugs, for each kind of cut: typically 21 % or more
    /// (9 % for whole segments across sections, whose segments are long).
    each_cut: f64,
    /// Of finds, hits and misses each: typically 40 % and 60 %.
    hits_and_misses: f64,
}

const LEAST: Least = Least {
    plugged: 0.4,
    unplugged: 0.4,
    refused: 0.15,
    each_cut: 0.15,
    hits_and_misses: 0.3,
};

/// Runs `cases` generated operation sequences through `test`, then prints
/// and asserts how often they reached each branch. Failures are replayed
/// from (and saved to) model.proptest-regressions, as `proptest!` would.
fn check<S: Strategy<Value = Vec<Op>>>(
    name: &str,
    (cases, ops): (u32, S),
    least: &Least,
    test: impl Fn(&[Op], &Reached) -> Result<(), TestCaseError>,
) -> Reached {
    let reached = Reached::default();
    // PROPTEST_CASES, proptest's own setting, can make a run shorter (as
    // mutation testing does), never longer than intended here.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(cases, |wanted: u32| wanted.min(cases));
    let mut runner = TestRunner::new(Config {
        cases,
        source_file: Some(file!()),
        // Next to this file, where `proptest!` put them too.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    });
    if let Err(error) = runner.run(&ops, |ops| test(&ops, &reached)) {
        panic!("{name}: {error}");
    }
    let r = &reached;
    let (plugs, unplugs, finds) = (r.plugs.get(), r.unplugs.get(), r.finds.get());
    share(
        name,
        "plugs that succeed",
        r.plugged.get(),
        plugs,
        least.plugged,
    );
    share(
        name,
        "unplugs that succeed",
        r.unplugged(),
        unplugs,
        least.unplugged,
    );
    share(
        name,
        "plugs refused",
        plugs - r.plugged.get(),
        plugs,
        least.refused,
    );
    share(
        name,
        "unplugs refused",
        unplugs - r.unplugged(),
        unplugs,
        least.refused,
    );
    for (what, count) in [
        ("unplugs of a whole segment", &r.whole),
        ("unplugs of a front", &r.front),
        ("unplugs of a back", &r.back),
        ("unplugs that split a segment", &r.middle),
    ] {
        share(name, what, count.get(), r.unplugged(), least.each_cut);
    }
    let (hits, misses) = (r.hits.get(), finds - r.hits.get());
    share(
        name,
        "finds that hit a segment",
        hits,
        finds,
        least.hits_and_misses,
    );
    share(
        name,
        "finds that miss",
        misses,
        finds,
        least.hits_and_misses,
    );
    reached
}

/// 2000 sequences of up to 60 operations on frames 0..640.
fn narrow() -> (u32, impl Strategy<Value = Vec<Op>>) {
    (2000, prop::collection::vec(op(), 1..60))
}

#[test]
fn hotkern_matches_the_model() {
    let name = "hotkern_matches_the_model";
    let reached = check(name, narrow(), &LEAST, |ops, reached| {
        let mem = Physmem::<BasicPage>::initialized();
        run_with(mem, Handles::Stable, ops, hotkern_views, reached)
    });
    // Every dead handle is checked after each later operation: typically
    // 3.5 checks per plugged segment.
    let (stale, plugged) = (reached.stale_checked.get(), reached.plugged.get());
    share(
        name,
        "stale handle checks per plugged segment",
        stale,
        plugged,
        1.0,
    );
}

#[test]
fn rbtree_matches_the_model() {
    check(
        "rbtree_matches_the_model",
        narrow(),
        &LEAST,
        |ops, reached| {
            let set = RbTreeSegments::<BasicPage>::new();
            run(set, Handles::StableWhileLive, ops, reached)
        },
    );
}

#[test]
fn static_matches_the_model() {
    check(
        "static_matches_the_model",
        narrow(),
        &LEAST,
        |ops, reached| {
            // Large enough never to fill: the model has no capacity.
            let set = StaticSegments::<BasicPage>::new(1024);
            run(set, Handles::Moving, ops, reached)
        },
    );
}

#[test]
fn hotkern_matches_the_model_across_sections() {
    let name = "hotkern_matches_the_model_across_sections";
    // Fewer cases: plugs here initialise up to 70,000 descriptors each.
    let wide = (500, prop::collection::vec(wide_op(), 1..40));
    let least = Least {
        each_cut: 0.05,
        ..LEAST
    };
    let reached = check(name, wide, &least, |ops, reached| {
        let mem = Physmem::<BasicPage>::initialized();
        run_with(mem, Handles::Stable, ops, hotkern_views, reached)
    });
    // Typically 99 %: what this test is for.
    let (across, plugged) = (reached.plugged_across_sections.get(), reached.plugged.get());
    share(
        name,
        "plugged segments spanning sections",
        across,
        plugged,
        0.9,
    );
}
