//! The model test's operations and its reference: a `BTreeMap` of
//! segments that does what plug and unplug should, in the plainest way.

use std::collections::BTreeMap;

use hotkern_physmem::{PageCount, Pfn, PhysmemError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Plug(u64, u64),
    Unplug(u64, u64),
    Find(u64),
    Iterate,
    /// An unplug inside a live segment (the `which`-th, modulo their
    /// number): from `at` frames in (`None`: its first frame), `len` frames
    /// (`None`: up to its end), both wrapped into the segment. Random
    /// ranges rarely fit inside a segment: these reach every kind of cut.
    Cut {
        which: usize,
        at: Option<u64>,
        len: Option<u64>,
    },
    /// A lookup at or next to a live segment's edges, or inside it.
    Probe {
        which: usize,
        at: Edge,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Edge {
    BeforeStart,
    Start,
    Inside(u64),
    Last,
    PastEnd,
}

fn edge() -> impl Strategy<Value = Edge> {
    prop_oneof![
        Just(Edge::BeforeStart),
        Just(Edge::Start),
        any::<u64>().prop_map(Edge::Inside),
        Just(Edge::Last),
        Just(Edge::PastEnd),
    ]
}

/// The targeted operations, shared by both frame layouts.
fn targeted() -> impl Strategy<Value = Op> {
    let anchored =
        |value: BoxedStrategy<u64>| prop_oneof![1 => Just(None), 2 => value.prop_map(Some)];
    prop_oneof![
        3 => (any::<usize>(), anchored(any::<u64>().boxed()), anchored(any::<u64>().boxed()))
            .prop_map(|(which, at, len)| Op::Cut { which, at, len }),
        3 => (any::<usize>(), edge()).prop_map(|(which, at)| Op::Probe { which, at }),
    ]
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..600, 0u64..48).prop_map(|(p, n)| Op::Plug(p, n)),
        2 => (0u64..600, 0u64..24).prop_map(|(p, n)| Op::Unplug(p, n)),
        1 => (0u64..640).prop_map(Op::Find),
        1 => Just(Op::Iterate),
        6 => targeted(),
    ]
}

/// Frames spread over several 128 MiB sections, with segments that cross
/// section boundaries, so that the section and block tables are exercised.
pub(crate) fn wide_op() -> impl Strategy<Value = Op> {
    let pfn = (0u64..5, 0u64..40, 0u64..8)
        .prop_map(|(section, block, low)| (section << 15) + (block << 11) + low * 3);
    prop_oneof![
        4 => (pfn.clone(), 0u64..70_000).prop_map(|(p, n)| Op::Plug(p, n)),
        2 => (pfn.clone(), 0u64..5_000).prop_map(|(p, n)| Op::Unplug(p, n)),
        1 => pfn.prop_map(Op::Find),
        1 => Just(Op::Iterate),
        6 => targeted(),
    ]
}

/// What a successful unplug took from its segment.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cut {
    Whole,
    Front,
    Back,
    /// A split; the upper half is a new segment with this id.
    Middle {
        upper: u32,
    },
}

/// start → (end, id). Ids name segments the way handles should.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) segments: BTreeMap<u64, (u64, u32)>,
    next_id: u32,
}

impl Model {
    pub(crate) fn containing(&self, pfn: u64) -> Option<(u64, u64, u32)> {
        let (&start, &(end, id)) = self.segments.range(..=pfn).next_back()?;
        (pfn < end).then_some((start, end, id))
    }

    pub(crate) fn plug(&mut self, pfn: u64, n: u64) -> Result<u32, PhysmemError> {
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

    pub(crate) fn unplug(&mut self, pfn: u64, n: u64) -> Result<Cut, PhysmemError> {
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
            (true, true) if self.segments.len() == 1 => Err(PhysmemError::LastSegment),
            (true, true) => {
                self.segments.remove(&start);
                Ok(Cut::Whole)
            }
            (true, false) => {
                self.segments.remove(&start);
                self.segments.insert(stop, (end, id));
                Ok(Cut::Front)
            }
            (false, true) => {
                self.segments.insert(start, (pfn, id));
                Ok(Cut::Back)
            }
            (false, false) => {
                self.segments.insert(start, (pfn, id));
                let upper = self.next_id;
                self.next_id += 1;
                self.segments.insert(stop, (end, upper));
                Ok(Cut::Middle { upper })
            }
        }
    }

    /// A targeted operation as the plain one it stands for now; with no
    /// segment, a lookup that misses.
    pub(crate) fn resolve(&self, op: &Op) -> Op {
        let nth = |which: usize| {
            let count = self.segments.len();
            (count > 0).then(|| {
                let (&start, &(end, _)) = self.segments.iter().nth(which % count).unwrap();
                (start, end)
            })
        };
        match *op {
            Op::Cut { which, at, len } => {
                let Some((start, end)) = nth(which) else {
                    return Op::Find(0);
                };
                let pfn = start + at.map_or(0, |at| at % (end - start));
                Op::Unplug(pfn, len.map_or(end - pfn, |len| 1 + len % (end - pfn)))
            }
            Op::Probe { which, at } => {
                let Some((start, end)) = nth(which) else {
                    return Op::Find(0);
                };
                Op::Find(match at {
                    Edge::BeforeStart => start.saturating_sub(1),
                    Edge::Start => start,
                    Edge::Inside(offset) => start + offset % (end - start),
                    Edge::Last => end - 1,
                    Edge::PastEnd => end,
                })
            }
            ref plain => plain.clone(),
        }
    }

    pub(crate) fn live(&self, id: u32) -> Option<(u64, u64)> {
        self.segments
            .iter()
            .find(|(_, &(_, i))| i == id)
            .map(|(&s, &(e, _))| (s, e))
    }

    pub(crate) fn list(&self) -> Vec<(u64, u64)> {
        self.segments.iter().map(|(&s, &(e, _))| (s, e)).collect()
    }
}
