//! Arbitrary sequences of boot and run-time operations against a plain
//! model: results, segments and page descriptors must agree after every step,
//! and nothing may panic.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use hotkern_physmem::{BasicPage, BootRange, FreeList, PageCount, Pfn, Physmem, PhysmemError, SegmentHandle};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Physload {
        start: u16,
        pages: u8,
        avail_skip: u8,
        list: bool,
    },
    InitPages,
    Plug {
        pfn: u16,
        pages: u8,
    },
    Unplug {
        pfn: u16,
        pages: u8,
    },
    Physunload {
        which: u8,
        list: bool,
    },
    PhysunloadForce {
        which: u8,
    },
    Find {
        pfn: u16,
    },
    Reclaim,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Seg {
    end: u64,
    avail_start: u64,
    avail_end: u64,
    list: u32,
}

/// start → segment.
type Model = BTreeMap<u64, Seg>;

fn containing(model: &Model, pfn: u64) -> Option<(u64, Seg)> {
    let (&s, &seg) = model.range(..=pfn).next_back()?;
    (pfn < seg.end).then_some((s, seg))
}

fn cut(seg: Seg, start: u64, end: u64) -> Seg {
    let avail_start = seg.avail_start.clamp(start, end);
    let avail_end = seg.avail_end.clamp(avail_start, end);
    Seg {
        end,
        avail_start,
        avail_end,
        list: seg.list,
    }
}

fn model_unplug(model: &mut Model, pfn: u64, n: u64) -> Result<(), PhysmemError> {
    if n == 0 {
        return Err(PhysmemError::ZeroPages);
    }
    let outside = PhysmemError::NotInOneSegment {
        pfn: Pfn(pfn),
        npages: PageCount(n),
    };
    let (start, seg) = containing(model, pfn).ok_or(outside)?;
    let stop = pfn + n;
    if stop > seg.end {
        return Err(outside);
    }
    if pfn == start && stop == seg.end && model.len() == 1 {
        return Err(PhysmemError::LastSegment);
    }
    model.remove(&start);
    if pfn > start {
        model.insert(start, cut(seg, start, pfn));
    }
    if stop < seg.end {
        model.insert(stop, cut(seg, stop, seg.end));
    }
    Ok(())
}

fn model_load(model: &mut Model, start: u64, seg: Seg) -> Result<(), PhysmemError> {
    if let Some((_, other)) = model.range(..seg.end).next_back() {
        if other.end > start {
            return Err(PhysmemError::Overlap {
                existing_start: Pfn(0),
                existing_end: Pfn(0),
            });
        }
    }
    model.insert(start, seg);
    Ok(())
}

fn same(a: &Result<(), PhysmemError>, b: &Result<(), PhysmemError>) -> bool {
    match (a, b) {
        (Err(PhysmemError::Overlap { .. }), Err(PhysmemError::Overlap { .. })) => true,
        _ => a == b,
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mem: Physmem<BasicPage, hotkern_physmem::DefaultRawMutex, 4> = Physmem::new();
    let mut model = Model::new();
    let mut initialized = false;
    let handle_of = |mem: &Physmem<BasicPage, hotkern_physmem::DefaultRawMutex, 4>,
                     model: &Model,
                     which: u8|
     -> Option<(u64, SegmentHandle)> {
        if model.is_empty() {
            return None;
        }
        let start = *model.keys().nth(which as usize % model.len())?;
        if initialized_handle(mem) {
            Some((start, mem.read().find(Pfn(start))?.segment))
        } else {
            None
        }
    };
    for op in ops.into_iter().take(64) {
        match op {
            Op::Physload {
                start,
                pages,
                avail_skip,
                list,
            } => {
                let (start, end) = (start as u64, start as u64 + pages as u64);
                let avail_start = (start + avail_skip as u64).min(end);
                let seg = Seg {
                    end,
                    avail_start,
                    avail_end: end,
                    list: list as u32,
                };
                let got = mem
                    .physload(BootRange { start: Pfn(start), end: Pfn(end), avail_start: Pfn(avail_start), avail_end: Pfn(end) }, FreeList(list as u32))
                    .map(drop);
                let want = if start >= end {
                    Err(PhysmemError::InvalidRange {
                        start: Pfn(start),
                        end: Pfn(end),
                    })
                } else if !initialized
                    && model.len() == 4
                    && model_load(&mut model.clone(), start, seg).is_ok()
                {
                    Err(PhysmemError::StorageFull)
                } else {
                    model_load(&mut model, start, seg)
                };
                assert!(same(&got, &want), "physload {got:?} vs {want:?}");
            }
            Op::InitPages => {
                let got = mem.init_pages();
                let want = if initialized {
                    Err(PhysmemError::AlreadyInitialized)
                } else {
                    Ok(())
                };
                assert_eq!(got, want);
                initialized = true;
            }
            Op::Plug { pfn, pages } => {
                let (start, n) = (pfn as u64, pages as u64);
                let got = mem.plug(Pfn(start), PageCount(n)).map(drop);
                let seg = Seg {
                    end: start + n,
                    avail_start: start,
                    avail_end: start + n,
                    list: 0,
                };
                let want = if n == 0 {
                    Err(PhysmemError::ZeroPages)
                } else if !initialized
                    && model.len() == 4
                    && model_load(&mut model.clone(), start, seg).is_ok()
                {
                    Err(PhysmemError::StorageFull)
                } else {
                    model_load(&mut model, start, seg)
                };
                assert!(same(&got, &want), "plug {got:?} vs {want:?}");
            }
            Op::Unplug { pfn, pages } => {
                let (pfn, n) = (pfn as u64, pages as u64);
                let got = mem.unplug(Pfn(pfn), PageCount(n));
                let mut trial = model.clone();
                let want = model_unplug(&mut trial, pfn, n);
                if want.is_ok() && !initialized && trial.len() > 4 {
                    assert_eq!(got, Err(PhysmemError::StorageFull));
                } else {
                    assert_eq!(got, want);
                    model = trial;
                }
            }
            Op::Physunload { which, list } => {
                if let Some((start, handle)) = handle_of(&mem, &model, which) {
                    let seg = model[&start];
                    let got = mem.physunload(handle, FreeList(list as u32));
                    if seg.list != list as u32 {
                        assert_eq!(got, Err(PhysmemError::FreeListMismatch));
                    } else if seg.avail_start == start && seg.avail_start < seg.avail_end {
                        let want = model_unplug(&mut model, start, 1).map(|()| Pfn(start));
                        assert_eq!(got, want);
                    } else if seg.avail_end == seg.end && seg.avail_start < seg.avail_end {
                        let want =
                            model_unplug(&mut model, seg.end - 1, 1).map(|()| Pfn(seg.end - 1));
                        assert_eq!(got, want);
                    } else {
                        assert_eq!(got, Err(PhysmemError::NoPageAtEnds));
                    }
                }
            }
            Op::PhysunloadForce { which } => {
                if let Some((start, handle)) = handle_of(&mem, &model, which) {
                    let seg = model[&start];
                    let got = mem.physunload_force(handle);
                    if seg.avail_start >= seg.avail_end {
                        assert_eq!(got, Err(PhysmemError::NoAvailablePages));
                    } else {
                        let want = model_unplug(&mut model, seg.avail_start, 1)
                            .map(|()| Pfn(seg.avail_start));
                        assert_eq!(got, want);
                    }
                }
            }
            Op::Find { pfn } => {
                let pfn = pfn as u64;
                let guard = mem.read();
                let got = guard.find(Pfn(pfn)).map(|found| {
                    let s = guard.segment(found.segment).unwrap();
                    assert_eq!(
                        guard.page(Pfn(pfn)).unwrap().phys_addr,
                        Pfn(pfn).phys_addr()
                    );
                    (s.start().0, s.end().0, found.offset.0)
                });
                let want = if initialized {
                    containing(&model, pfn).map(|(s, seg)| (s, seg.end, pfn - s))
                } else {
                    None
                };
                assert_eq!(got, want);
            }
            Op::Reclaim => mem.reclaim(),
        }
        assert_eq!(mem.len(), model.len());
        if initialized {
            let guard = mem.read();
            let got: Vec<_> = guard
                .segments()
                .map(|s| {
                    (
                        s.start().0,
                        Seg {
                            end: s.end().0,
                            avail_start: s.avail_start().0,
                            avail_end: s.avail_end().0,
                            list: s.free_list().0,
                        },
                    )
                })
                .collect();
            let want: Vec<_> = model.iter().map(|(&s, &seg)| (s, seg)).collect();
            assert_eq!(got, want);
        }
    }
});

fn initialized_handle(mem: &Physmem<BasicPage, hotkern_physmem::DefaultRawMutex, 4>) -> bool {
    mem.is_initialized()
}
