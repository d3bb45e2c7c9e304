//! Model-based property test: random plug/unplug/find/iterate sequences run
//! against a plain reference model, for all three implementations.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::collections::BTreeMap;

use hotkern_physmem::baseline::{RbTreeSegments, StaticSegments};
use hotkern_physmem::{BasicPage, PageCount, Pfn, PhysSegments, Physmem, PhysmemError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Plug(u64, u64),
    Unplug(u64, u64),
    Find(u64),
    Iterate,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..600, 0u64..48).prop_map(|(p, n)| Op::Plug(p, n)),
        4 => (0u64..600, 0u64..24).prop_map(|(p, n)| Op::Unplug(p, n)),
        3 => (0u64..640).prop_map(Op::Find),
        1 => Just(Op::Iterate),
    ]
}

/// Frames spread over several 128 MiB sections, with segments that cross
/// section boundaries, so that the section and block tables are exercised.
fn wide_op() -> impl Strategy<Value = Op> {
    let pfn = (0u64..5, 0u64..40, 0u64..8)
        .prop_map(|(section, block, low)| (section << 15) + (block << 11) + low * 3);
    prop_oneof![
        4 => (pfn.clone(), 0u64..70_000).prop_map(|(p, n)| Op::Plug(p, n)),
        4 => (pfn.clone(), 0u64..5_000).prop_map(|(p, n)| Op::Unplug(p, n)),
        3 => pfn.prop_map(Op::Find),
        1 => Just(Op::Iterate),
    ]
}

/// start → (end, id). Ids name segments the way handles should.
#[derive(Default)]
struct Model {
    segments: BTreeMap<u64, (u64, u32)>,
    next_id: u32,
}

impl Model {
    fn containing(&self, pfn: u64) -> Option<(u64, u64, u32)> {
        let (&start, &(end, id)) = self.segments.range(..=pfn).next_back()?;
        (pfn < end).then_some((start, end, id))
    }

    fn plug(&mut self, pfn: u64, n: u64) -> Result<u32, PhysmemError> {
        if n == 0 {
            return Err(PhysmemError::ZeroPages);
        }
        let end = pfn + n;
        if let Some((&s, &(e, _))) = self.segments.range(..end).next_back() {
            if e > pfn {
                return Err(PhysmemError::Overlap {
                    existing_start: Pfn(s),
                    existing_end: Pfn(e),
                });
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.segments.insert(pfn, (end, id));
        Ok(id)
    }

    /// Ok(Some(id of a new upper half)) on a middle split.
    fn unplug(&mut self, pfn: u64, n: u64) -> Result<Option<u32>, PhysmemError> {
        if n == 0 {
            return Err(PhysmemError::ZeroPages);
        }
        let stop = pfn + n;
        let outside = PhysmemError::NotInOneSegment {
            pfn: Pfn(pfn),
            npages: PageCount(n),
        };
        let (start, end, id) = self.containing(pfn).ok_or(outside)?;
        if stop > end {
            return Err(outside);
        }
        match (pfn == start, stop == end) {
            (true, true) if self.segments.len() == 1 => return Err(PhysmemError::LastSegment),
            (true, true) => {
                self.segments.remove(&start);
            }
            (true, false) => {
                self.segments.remove(&start);
                self.segments.insert(stop, (end, id));
            }
            (false, true) => {
                self.segments.insert(start, (pfn, id));
            }
            (false, false) => {
                self.segments.insert(start, (pfn, id));
                let upper = self.next_id;
                self.next_id += 1;
                self.segments.insert(stop, (end, upper));
                return Ok(Some(upper));
            }
        }
        Ok(None)
    }

    fn live(&self, id: u32) -> Option<(u64, u64)> {
        self.segments
            .iter()
            .find(|(_, &(_, i))| i == id)
            .map(|(&s, &(e, _))| (s, e))
    }

    fn list(&self) -> Vec<(u64, u64)> {
        self.segments.iter().map(|(&s, &(e, _))| (s, e)).collect()
    }
}

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

fn run<S: PhysSegments>(set: S, handles: Handles, ops: &[Op]) -> Result<(), TestCaseError> {
    run_with(set, handles, ops, no_extra::<S>)
}

fn run_with<S: PhysSegments>(
    mut set: S,
    handles: Handles,
    ops: &[Op],
    extra: Extra<S>,
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut known: Vec<(u32, S::Handle)> = Vec::new();
    for op in ops {
        match *op {
            Op::Plug(pfn, n) => {
                let got = set.plug(Pfn(pfn), PageCount(n));
                match (got, model.plug(pfn, n)) {
                    (Ok(h), Ok(id)) => known.push((id, h)),
                    (Err(a), Err(b)) => prop_assert!(same_error(&a, &b), "{a:?} vs {b:?}"),
                    (got, want) => prop_assert!(false, "plug {op:?}: {got:?} vs {want:?}"),
                }
            }
            Op::Unplug(pfn, n) => {
                let got = set.unplug(Pfn(pfn), PageCount(n));
                match (got, model.unplug(pfn, n)) {
                    (Ok(()), Ok(upper)) => {
                        if let Some(id) = upper {
                            let (h, offset) = set.find(Pfn(pfn + n)).expect("upper half");
                            prop_assert_eq!(offset, PageCount(0));
                            known.push((id, h));
                        }
                    }
                    (Err(a), Err(b)) => prop_assert!(same_error(&a, &b), "{a:?} vs {b:?}"),
                    (got, want) => prop_assert!(false, "unplug {op:?}: {got:?} vs {want:?}"),
                }
            }
            Op::Find(pfn) => {
                let got = set
                    .find(Pfn(pfn))
                    .map(|(h, offset)| (bounds(&set, h).unwrap(), offset.0));
                let want = model.containing(pfn).map(|(s, e, _)| ((s, e), pfn - s));
                prop_assert_eq!(got, want, "find {}", pfn);
                let hits = set.sum_lookups(&[Pfn(pfn)]);
                prop_assert_eq!(hits, want.map_or(0, |(_, offset)| offset + 1));
            }
            Op::Iterate => {
                check_iteration(&set, &model)?;
                extra(&set, &model.list())?;
            }
        }
        prop_assert_eq!(set.count(), model.segments.len());
        if handles != Handles::Moving {
            for &(id, h) in &known {
                match model.live(id) {
                    Some(range) => prop_assert_eq!(bounds(&set, h), Some(range)),
                    None if handles == Handles::Stable => prop_assert_eq!(bounds(&set, h), None),
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

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 2000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn hotkern_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        run_with(Physmem::<BasicPage>::initialized(), Handles::Stable, &ops, hotkern_views)?;
    }

    #[test]
    fn rbtree_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        run(RbTreeSegments::<BasicPage>::new(), Handles::StableWhileLive, &ops)?;
    }

    #[test]
    fn static_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        // Large enough never to fill: the model has no capacity.
        run(StaticSegments::<BasicPage>::new(1024), Handles::Moving, &ops)?;
    }
}

proptest! {
    // Fewer cases: plugs here initialise up to 70,000 descriptors each.
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn hotkern_matches_the_model_across_sections(ops in prop::collection::vec(wide_op(), 1..40)) {
        run_with(Physmem::<BasicPage>::initialized(), Handles::Stable, &ops, hotkern_views)?;
    }
}
