//! `hotkern bench physmem`: NetBSD's t_uvm_physseg_load side by side for
//! `static` (sorted array, binary search), `rbtree` (UVM_HOTPLUG) and
//! `hotkern` (direct-indexed published index), plus lookups under churn and
//! the cost of a plug+unplug pair.
//!
//! Every random input (lookup addresses, unplug lengths) is generated before
//! the timed region and shared by all implementations; each implementation's
//! lookups are summed into a checksum, which must agree across them.

mod churn;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use hotkern_physmem::baseline::{RbTreeSegments, StaticSegments};
use hotkern_physmem::{BasicPage, PageCount, Pfn, PhysSegments, Physmem};
use rand::rngs::StdRng;
use rand::Rng;

use super::measure::{input_rng, ns_per_op, wall_time};
use super::{BenchOptions, Case, Report};
use crate::progress::Progress;

type Hotkern = Physmem<BasicPage>;

const IMPLS: [&str; 3] = ["static", "rbtree", "hotkern"];

/// Lookups a small case repeats up to, so its timing is not all noise.
const MIN_TIMED_LOOKUPS: usize = 100_000;

fn label(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}

/// Random frames of random byte addresses in `[0, bytes)`.
fn random_pfns(rng: &mut StdRng, count: usize, bytes: u64) -> Vec<Pfn> {
    (0..count)
        .map(|_| Pfn(rng.random_range(0..bytes) >> hotkern_physmem::PAGE_SHIFT))
        .collect()
}

/// Times `rounds` passes of lookups over `pfns`; returns (elapsed, checksum).
fn time_lookups<S: PhysSegments>(set: &S, pfns: &[Pfn], rounds: usize) -> (Duration, u64) {
    wall_time(|| {
        let mut sum = 0u64;
        for _ in 0..rounds {
            sum = sum.wrapping_add(set.sum_lookups(black_box(pfns)));
        }
        sum
    })
}

/// hotkern with a read guard taken and dropped around every single lookup.
fn time_guard_each(set: &Hotkern, pfns: &[Pfn]) -> Duration {
    let (elapsed, _sum) = time_design(pfns, |pfn| {
        PhysSegments::find(set, pfn).map_or(0, |found| found.offset.0 + 1)
    });
    elapsed
}

fn new_impl(name: &str, static_capacity: usize) -> Box<dyn FnOnce() -> AnySet> {
    match name {
        "static" => Box::new(move || AnySet::Static(StaticSegments::new(static_capacity))),
        "rbtree" => Box::new(|| AnySet::RbTree(RbTreeSegments::new())),
        _ => Box::new(|| AnySet::Hotkern(Hotkern::initialized())),
    }
}

/// The three implementations, so cases can loop over them.
// Only three of these exist at a time; boxing the large one would add an
// indirection to hotkern's lookups alone, which the comparison must not do.
#[allow(clippy::large_enum_variant)]
enum AnySet {
    Static(StaticSegments<BasicPage>),
    RbTree(RbTreeSegments<BasicPage>),
    Hotkern(Hotkern),
}

macro_rules! with_set {
    ($set:expr, $s:ident => $body:expr) => {
        match $set {
            AnySet::Static($s) => $body,
            AnySet::RbTree($s) => $body,
            AnySet::Hotkern($s) => $body,
        }
    };
}

/// 32 segments of 8 pages covering PFN 0..256 (t_uvm_physseg_load's set).
fn build_fixed<S: PhysSegments>(set: &mut S) -> Result<(), String> {
    for i in 0..32u64 {
        set.plug(Pfn(i * 8), PageCount(8))
            .map_err(|e| format!("fixed set-up: {e}"))?;
    }
    Ok(())
}

/// One segment of `pages`, then for every 8th frame `unplug(pf, len)` with
/// the pre-drawn `len` (rand % 7 + 1).
fn build_fragmented<S: PhysSegments>(
    set: &mut S,
    pages: u64,
    lengths: &[u64],
) -> Result<(), String> {
    set.plug(Pfn(0), PageCount(pages))
        .map_err(|e| format!("fragmented set-up: {e}"))?;
    for (i, &len) in lengths.iter().enumerate() {
        set.unplug(Pfn(i as u64 * 8), PageCount(len))
            .map_err(|e| format!("fragmented set-up: {e}"))?;
    }
    Ok(())
}

struct Checksums(Vec<(String, u64)>);

impl Checksums {
    fn agree(&self) -> bool {
        self.0.windows(2).all(|w| w[0].1 == w[1].1)
    }
}

/// One run of the benchmark: inputs, progress and results so far.
struct Bench {
    full: bool,
    report: Report,
    rng: StdRng,
    progress: Progress,
    mismatches: Vec<String>,
}

const FRAGMENTED_SIZES: [(u64, &str); 4] = [
    (1 << 20, "1MB"),
    (64 << 20, "64MB"),
    (128 << 20, "128MB"),
    (256 << 20, "256MB"),
];
const PLUG_UNPLUG_SIZES: [(usize, &str); 3] = [(32, "32"), (1_000, "1K"), (8_000, "8K")];

pub fn run(options: &BenchOptions) -> Result<Report, String> {
    let full = options.full;
    let mut fixed_sizes: Vec<u64> = vec![100, 1_000, 10_000, 100_000, 1_000_000];
    if full {
        fixed_sizes.extend([10_000_000, 100_000_000]);
    }
    let steps =
        fixed_sizes.len() * 3 + FRAGMENTED_SIZES.len() * 3 + 2 + PLUG_UNPLUG_SIZES.len() * 3;
    let mut report = Report::new("physmem");
    report.table_figures = vec!["segments", "cpu_ns_per_op"];
    let mut bench = Bench {
        full,
        report,
        rng: input_rng(0x5eed_f00d_1a7e),
        progress: Progress::steps("physmem", steps as u64),
        mismatches: Vec::new(),
    };
    bench.fixed(&fixed_sizes)?;
    bench.fragmented()?;
    bench.churn()?;
    bench.plug_unplug()?;
    let Bench {
        mut report,
        progress,
        mismatches,
        ..
    } = bench;
    drop(progress);
    notes(&mut report, &fixed_sizes, full, &mismatches);
    if !mismatches.is_empty() {
        return Err(format!(
            "implementations disagree on {}",
            mismatches.join(", ")
        ));
    }
    Ok(report)
}

impl Bench {
    /// Records `case`'s ratios `<a>_over_<b>` for each (a, b).
    fn ratios(&mut self, case: &str, pairs: &[(&str, &str)]) {
        let key = case.replace('/', "-");
        for (top, bottom) in pairs {
            let name = format!("{key}/{top}_over_{bottom}");
            self.report.ratio(&name, case, "ns_per_op", top, bottom);
        }
    }

    /// `fixed/<N>`: t_uvm_physseg_load's 32 segments of 8 pages, N lookups.
    fn fixed(&mut self, sizes: &[u64]) -> Result<(), String> {
        // One buffer of the largest size up to 10M; 100M reuses it ten times.
        let buffer_len = (*sizes.last().unwrap_or(&1)).min(10_000_000) as usize;
        let fixed_pfns = random_pfns(&mut self.rng, buffer_len, 1 << 20);
        let mut sets: Vec<AnySet> = Vec::new();
        for name in IMPLS {
            let mut set = new_impl(name, 32)();
            with_set!(&mut set, s => build_fixed(s))?;
            sets.push(set);
        }
        for &n in sizes {
            let case = format!("fixed/{}", label(n));
            let (slice_len, rounds) = if n as usize <= buffer_len {
                let len = n as usize;
                (len, (MIN_TIMED_LOOKUPS / len).max(1))
            } else {
                (buffer_len, (n as usize) / buffer_len)
            };
            let pfns = &fixed_pfns[..slice_len];
            let mut sums = Checksums(Vec::new());
            for (name, set) in IMPLS.iter().zip(&sets) {
                self.progress.start(&format!("{case} {name}"));
                let (elapsed, sum) = with_set!(set, s => time_lookups(s, pfns, rounds));
                let ops = (slice_len * rounds) as u64;
                let mut row = Case::new(&case, *name, ops)
                    .ns_per_op(ns_per_op(elapsed, ops))
                    .with("lookups", n);
                if let AnySet::Hotkern(h) = set {
                    row = with_guard_each(row, h, pfns);
                }
                self.report.cases.push(row);
                sums.0.push((name.to_string(), sum));
                self.progress.advance();
            }
            if !sums.agree() {
                self.mismatches.push(case.clone());
            }
            self.ratios(&case, &[("static", "hotkern"), ("rbtree", "hotkern")]);
        }
        Ok(())
    }

    /// `fragmented/<S>`: one segment of S, every 8th frame unplugged with
    /// 1..7 pages, then random lookups.
    fn fragmented(&mut self) -> Result<(), String> {
        let lookups = if self.full { 10_000_000 } else { 1_000_000 };
        for (bytes, size) in FRAGMENTED_SIZES {
            let case = format!("fragmented/{size}");
            let pages = bytes >> hotkern_physmem::PAGE_SHIFT;
            let lengths: Vec<u64> = (0..pages / 8)
                .map(|_| self.rng.random_range(1..=7))
                .collect();
            let pfns = random_pfns(&mut self.rng, lookups, bytes);
            let mut sums = Checksums(Vec::new());
            for name in IMPLS {
                self.progress.start(&format!("{case} {name}"));
                // `static` gets room for every fragment: the strongest fair baseline.
                let mut set = new_impl(name, lengths.len() + 1)();
                let (setup, built) =
                    wall_time(|| with_set!(&mut set, s => build_fragmented(s, pages, &lengths)));
                built?;
                let (elapsed, sum) = with_set!(&set, s => time_lookups(s, &pfns, 1));
                let segments = with_set!(&set, s => s.count());
                let ops = pfns.len() as u64;
                let mut row = Case::new(&case, name, ops)
                    .ns_per_op(ns_per_op(elapsed, ops))
                    .with("segments", segments as u64)
                    .with("setup_ms", setup.as_secs_f64() * 1e3);
                if let AnySet::Hotkern(h) = &set {
                    row = with_guard_each(row, h, &pfns);
                    if size == "256MB" {
                        lookup_designs(&mut self.report, h, &pfns);
                    }
                }
                self.report.cases.push(row);
                sums.0.push((name.to_string(), sum));
                self.progress.advance();
            }
            if !sums.agree() {
                self.mismatches.push(case.clone());
            }
            self.ratios(&case, &[("rbtree", "hotkern"), ("static", "hotkern")]);
        }
        let hotkern = |size: &str| {
            let case = self.report.case(&format!("fragmented/{size}"), "hotkern");
            case.and_then(|c| c.ns_per_op)
        };
        if let (Some(big), Some(small)) = (hotkern("256MB"), hotkern("1MB")) {
            let key = "hotkern/fragmented-256MB_over_1MB".to_owned();
            self.report.ratios.insert(key, big / small);
        }
        Ok(())
    }

    /// churn/idle, churn/busy: hotkern lookups over the 64 MB fragmented
    /// set, alone and while another thread plugs and unplugs.
    fn churn(&mut self) -> Result<(), String> {
        let lookups = if self.full { 20_000_000 } else { 2_000_000 };
        let pages = (64u64 << 20) >> hotkern_physmem::PAGE_SHIFT;
        let lengths: Vec<u64> = (0..pages / 8)
            .map(|_| self.rng.random_range(1..=7))
            .collect();
        let pfns = random_pfns(&mut self.rng, lookups, 64 << 20);
        let mut sums = Vec::new();
        for busy in [false, true] {
            let case = if busy { "churn/busy" } else { "churn/idle" };
            self.progress.start(case);
            let mut mem = Hotkern::initialized();
            build_fragmented(&mut mem, pages, &lengths)?;
            let run = churn::churn(Arc::new(mem), &pfns, busy)?;
            sums.push(run.checksum);
            let ops = pfns.len() as u64;
            self.report.cases.push(
                Case::new(case, "hotkern", ops)
                    .ns_per_op(ns_per_op(run.time.wall, ops))
                    .with("cpu_ns_per_op", ns_per_op(run.time.cpu, ops))
                    .with("writer_ops", run.writes)
                    .with("segments", lengths.len() as u64),
            );
            self.progress.advance();
        }
        if sums.windows(2).any(|w| w[0] != w[1]) {
            self.mismatches.push("churn".into());
        }
        // The target ratio uses the reader's CPU time, which the scheduler
        // cannot inflate by giving the reader's core to the writer; the
        // wall-clock ratio is kept beside it.
        let figure = |report: &Report, case: &str, figure: &str| {
            report.case(case, "hotkern").and_then(|c| c.figure(figure))
        };
        for (key, name) in [
            ("churn/busy_over_idle", "cpu_ns_per_op"),
            ("churn/busy_over_idle_wall", "ns_per_op"),
        ] {
            let busy = figure(&self.report, "churn/busy", name);
            let idle = figure(&self.report, "churn/idle", name);
            if let (Some(busy), Some(idle)) = (busy, idle) {
                if idle > 0.0 {
                    self.report.ratios.insert(key.into(), busy / idle);
                }
            }
        }
        Ok(())
    }

    /// `plug-unplug/<segments>`: a plug+unplug pair among existing segments.
    fn plug_unplug(&mut self) -> Result<(), String> {
        let pairs = if self.full { 20_000 } else { 2_000 };
        for (segments, size) in PLUG_UNPLUG_SIZES {
            let case = format!("plug-unplug/{size}");
            let holes: Vec<u64> = (0..pairs)
                .map(|_| self.rng.random_range(0..segments as u64))
                .collect();
            for name in IMPLS {
                self.progress.start(&format!("{case} {name}"));
                let mut set = new_impl(name, segments + 1)();
                let elapsed = with_set!(&mut set, s => plug_unplug(s, segments, &holes))?;
                let ops = holes.len() as u64;
                let row = Case::new(&case, name, ops).ns_per_op(ns_per_op(elapsed, ops));
                self.report.cases.push(row);
                self.progress.advance();
            }
            self.ratios(&case, &[("hotkern", "rbtree"), ("hotkern", "static")]);
        }
        Ok(())
    }
}

/// Adds hotkern's cost with a read guard per lookup (up to 1M lookups).
fn with_guard_each(row: Case, mem: &Hotkern, pfns: &[Pfn]) -> Case {
    let each = &pfns[..pfns.len().min(1_000_000)];
    let elapsed = time_guard_each(mem, each);
    row.with(
        "guard_each_ns_per_op",
        ns_per_op(elapsed, each.len() as u64),
    )
}

/// The lookup designs measured on the same 256 MB fragmented snapshot:
/// hotkern's block tables against binary search within each section, an
/// MRU entry in front of that, and a table with one entry per frame (the
/// VMEMMAP-like limit). A global binary search over all segments is the
/// `static` baseline itself.
fn lookup_designs(report: &mut Report, mem: &Hotkern, pfns: &[Pfn]) {
    let case = "lookup-design/fragmented-256MB";
    let guard = mem.read();
    let hit = |found: Option<hotkern_physmem::Lookup>| found.map_or(0, |found| found.offset.0 + 1);
    // The most recently found segment, checked first (QEMU's MRU entry).
    let mru = std::cell::Cell::new((0u64, 0u64));
    let with_mru = |p: Pfn| {
        let (start, end) = mru.get();
        if start <= p.0 && p.0 < end {
            return p.0 - start + 1;
        }
        guard
            .find_bounds_by_section_search(p)
            .map_or(0, |(_, start, end)| {
                mru.set((start.0, end.0));
                p.0 - start.0 + 1
            })
    };
    // The physical limit (VMEMMAP-like): one table entry per frame.
    let mut direct = Vec::new();
    let mut starts = Vec::new();
    for segment in guard.segments() {
        for pfn in segment.frames() {
            let at = pfn as usize;
            if direct.len() <= at {
                direct.resize(at + 1, u32::MAX);
            }
            direct[at] = starts.len() as u32;
        }
        starts.push(segment.start().0);
    }
    let direct_map = |p: Pfn| match direct.get(p.0 as usize) {
        Some(&id) if id != u32::MAX => p.0 - starts[id as usize] + 1,
        _ => 0,
    };
    let timings = [
        ("section+blocks", time_design(pfns, |p| hit(guard.find(p)))),
        (
            "section+bsearch",
            time_design(pfns, |p| hit(guard.find_by_section_search(p))),
        ),
        ("mru+section+bsearch", time_design(pfns, with_mru)),
        ("direct-map", time_design(pfns, direct_map)),
    ];
    let mut sums = Vec::new();
    for (name, (elapsed, sum)) in timings {
        sums.push(sum);
        let mut row = Case::new(case, name, pfns.len() as u64)
            .ns_per_op(ns_per_op(elapsed, pfns.len() as u64));
        match name {
            "section+blocks" => row = row.with("table_bytes", guard.table_bytes() as u64),
            "direct-map" => row = row.with("table_bytes", (direct.len() * 4) as u64),
            _ => {}
        }
        report.cases.push(row);
    }
    if sums.windows(2).any(|w| w[0] != w[1]) {
        report
            .notes
            .push("lookup designs DISAGREE on 256MB lookups".into());
    }
    for other in ["section+bsearch", "mru+section+bsearch", "direct-map"] {
        report.ratio(
            &format!("lookup-design-256MB/{other}_over_section+blocks"),
            case,
            "ns_per_op",
            other,
            "section+blocks",
        );
    }
}

/// Times one lookup design over `pfns`; generic so each design is inlined.
fn time_design(pfns: &[Pfn], find: impl Fn(Pfn) -> u64) -> (Duration, u64) {
    wall_time(|| pfns.iter().map(|&p| find(black_box(p))).sum())
}

/// `segments` segments of 4 pages every 8 frames, then one plug+unplug pair
/// per entry of `holes`, each filling and emptying that segment's hole.
fn plug_unplug<S: PhysSegments>(
    set: &mut S,
    segments: usize,
    holes: &[u64],
) -> Result<Duration, String> {
    for i in 0..segments as u64 {
        set.plug(Pfn(i * 8), PageCount(4))
            .map_err(|e| format!("plug-unplug set-up: {e}"))?;
    }
    let (elapsed, pairs) = wall_time(|| -> Result<(), String> {
        for &hole in holes {
            let pfn = Pfn(hole * 8 + 4);
            black_box(
                set.plug(pfn, PageCount(4))
                    .map_err(|e| format!("plug: {e}"))?,
            );
            set.unplug(pfn, PageCount(4))
                .map_err(|e| format!("unplug: {e}"))?;
        }
        Ok(())
    });
    pairs.map(|()| elapsed)
}

fn notes(report: &mut Report, fixed_sizes: &[u64], full: bool, mismatches: &[String]) {
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    let ns =
        |report: &Report, case: &str, name: &str| report.case(case, name).and_then(|c| c.ns_per_op);
    if !full {
        report.notes.push(
            "quick run: fixed up to 1M lookups, 1M lookups per fragmented case, 2M per churn case; \
             --full runs 10M/100M fixed and 10M fragmented"
                .into(),
        );
    }
    report.notes.push(
        "small fixed cases repeat their N lookups up to 100K timed lookups; lookups run inside one \
         read guard per batch, guard_each_ns_per_op takes a guard per lookup"
            .into(),
    );
    let biggest = format!(
        "fixed/{}",
        label(
            *fixed_sizes
                .iter()
                .filter(|&&n| n <= 10_000_000)
                .max()
                .unwrap_or(&0)
        )
    );
    if let (Some(s), Some(h)) = (
        ns(report, &biggest, "static"),
        ns(report, &biggest, "hotkern"),
    ) {
        report.notes.push(format!(
            "target hotkern <= static on fixed/10M: {} on {biggest} ({h:.2} vs {s:.2} ns)",
            met(h <= s)
        ));
    }
    let case = "fragmented/256MB";
    if let (Some(r), Some(s), Some(h)) = (
        ns(report, case, "rbtree"),
        ns(report, case, "static"),
        ns(report, case, "hotkern"),
    ) {
        report.notes.push(format!(
            "target >= 5x faster than rbtree at 256MB: {} ({:.1}x); no slower than static: {} ({:.2}x)",
            met(r / h >= 5.0),
            r / h,
            met(h <= s),
            s / h
        ));
    }
    if let Some(&ratio) = report.ratios.get("hotkern/fragmented-256MB_over_1MB") {
        report.notes.push(format!(
            "target hotkern 256MB within 1.5x of 1MB: {} ({ratio:.2}x)",
            met(ratio <= 1.5)
        ));
    }
    if let Some(&ratio) = report.ratios.get("churn/busy_over_idle") {
        report.notes.push(format!(
            "target churn/busy within 1.25x of churn/idle (reader CPU time): {} ({ratio:.2}x)",
            met(ratio <= 1.25)
        ));
    }
    report.notes.push(
        "plug-unplug: a hotkern write rebuilds the 2 MiB sections it touches, copies the section \
         table and one 4 KiB slot chunk, and publishes them for lock-free readers (a fixed cost \
         of a few microseconds; rbtree's O(log n) insert has no readers to protect)"
            .into(),
    );
    if mismatches.is_empty() {
        report
            .notes
            .push("all implementations returned identical lookup checksums".into());
    }
}
