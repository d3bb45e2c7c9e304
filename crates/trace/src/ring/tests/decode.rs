//! The page decoder ([`PageView`]) on generated pages that are mostly well
//! formed: random bytes almost never carry a commit length a page can hold
//! (about one page in two thousand reached the decoder), so the pages here
//! are built from a plan of ftrace records — data events small and large,
//! paddings, time extends, time stamps — with the commit cut inside the
//! last record, past the records, or beyond the page, and some headers
//! flipped. What the decoder must yield is worked out from the plan, record
//! by record, not from the bytes.

use super::*;
use crate::output::decode_pages;
use crate::output::Entry;
use crate::ring::page::PAGE_HEADER_SIZE;
use crate::ring::page::{
    RingPageError, COMMIT_MASK, MAX_TIME_DELTA, MISSED_EVENTS, MISSED_STORED, TIME_DELTA_BITS,
    TYPE_LEN_BITS, TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP,
};
use core::cell::Cell;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One record of a planned page.
#[derive(Debug, Clone)]
enum Record {
    /// `type_len` 1..=28: the data is `type_len` words.
    Small { delta: u32, words: Vec<u32> },
    /// `type_len` 0: a length word (data bytes + 4), the data, zero padding
    /// to a whole word.
    Large { delta: u32, payload: Vec<u8> },
    /// A discarded event: padding with a non-zero delta, then its length
    /// (Linux's `array[0]`, which counts itself) and that many bytes less 4.
    Discarded { delta: u32, length: u32 },
    /// Adds `high << 27 | delta` to the time.
    Extend { delta: u32, high: u32 },
    /// Sets the time to `high << 27 | low`.
    Stamp { low: u32, high: u32 },
    /// Padding with a zero delta: the rest of the page is empty.
    End,
}

/// The record kinds counted for how often the decoder reaches them.
const KINDS: [&str; 7] = [
    "small data",
    "large data",
    "discarded",
    "time extend",
    "time stamp",
    "end padding",
    "zero word past the records",
];
const ZERO_WORD: usize = 6;

impl Record {
    fn kind(&self) -> usize {
        match self {
            Record::Small { .. } => 0,
            Record::Large { .. } => 1,
            Record::Discarded { .. } => 2,
            Record::Extend { .. } => 3,
            Record::Stamp { .. } => 4,
            Record::End => 5,
        }
    }

    fn size(&self) -> usize {
        match self {
            Record::Small { words, .. } => 4 + 4 * words.len(),
            Record::Large { payload, .. } => 8 + payload.len().div_ceil(4) * 4,
            Record::Discarded { length, .. } => 4 + *length as usize,
            Record::Extend { .. } | Record::Stamp { .. } => 8,
            Record::End => 4,
        }
    }

    /// The record's bytes, from the layout in page.rs's module documentation
    /// (not through its encoder).
    fn bytes(&self) -> Vec<u8> {
        let header =
            |type_len: u32, delta: u32| (type_len | (delta << TYPE_LEN_BITS)).to_le_bytes();
        let mut out = Vec::new();
        match self {
            Record::Small { delta, words } => {
                out.extend(header(words.len() as u32, *delta));
                words.iter().for_each(|w| out.extend(w.to_le_bytes()));
            }
            Record::Large { delta, payload } => {
                out.extend(header(0, *delta));
                out.extend((payload.len() as u32 + 4).to_le_bytes());
                out.extend(payload);
            }
            Record::Discarded { delta, length } => {
                out.extend(header(TYPE_PADDING, *delta));
                out.extend(length.to_le_bytes());
            }
            Record::Extend { delta, high } => {
                out.extend(header(TYPE_TIME_EXTEND, *delta));
                out.extend(high.to_le_bytes());
            }
            Record::Stamp { low, high } => {
                out.extend(header(TYPE_TIME_STAMP, *low));
                out.extend(high.to_le_bytes());
            }
            Record::End => out.extend(header(TYPE_PADDING, 0)),
        }
        // Padding and a discarded event's body are filler the decoder skips.
        out.resize(self.size(), if self.kind() == 2 { 0xdd } else { 0 });
        out
    }
}

/// Where the page's commit length ends.
#[derive(Debug, Clone, Copy)]
enum Commit {
    /// Right after the last record.
    Exact,
    /// Inside the last record, this many bytes (mod its size) short.
    CutInLast(usize),
    /// This many zero bytes past the last record.
    PastEnd(usize),
    /// After a discarded event stretched to leave exactly this many bytes
    /// of the page free (0..=12: around the room for a stored lost count).
    FillTo(usize),
    /// Beyond the page: this length.
    TooLarge(u64),
}

/// Lost-event flags of the commit word.
#[derive(Debug, Clone, Copy)]
enum Missed {
    No,
    NotStored,
    Stored(u64),
    /// `MISSED_STORED` without `MISSED_EVENTS`: nothing was lost.
    StoredFlagOnly,
}

#[derive(Debug, Clone)]
struct Plan {
    timestamp: u64,
    records: Vec<Record>,
    commit: Commit,
    missed: Missed,
    /// Bits of the commit word outside the length and the flags.
    noise: u64,
    /// Flip this bit of this record's header word (indexes taken modulo).
    flip: Option<(usize, u32)>,
}

impl Plan {
    /// The commit length (before masking) and the page.
    fn page(&self) -> (u64, Vec<u8>) {
        let mut data: Vec<u8> = self.records.iter().flat_map(Record::bytes).collect();
        if let Some((index, bit)) = self.flip {
            let at: usize = self.records[..index].iter().map(Record::size).sum();
            data[at + bit as usize / 8] ^= 1 << (bit % 8);
        }
        let len = match self.commit {
            Commit::Exact | Commit::FillTo(_) => data.len() as u64,
            Commit::CutInLast(short) => (data.len() - short) as u64,
            Commit::PastEnd(extra) => (data.len() + extra) as u64,
            Commit::TooLarge(len) => len,
        };
        let mut page = vec![0u8; PAGE_SIZE];
        page[..8].copy_from_slice(&self.timestamp.to_le_bytes());
        page[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + data.len()].copy_from_slice(&data);
        let mut commit = len | self.noise;
        let count_at = PAGE_HEADER_SIZE + len as usize;
        match self.missed {
            Missed::No => {}
            Missed::NotStored => commit |= MISSED_EVENTS,
            Missed::Stored(count) => {
                commit |= MISSED_EVENTS | MISSED_STORED;
                if count_at + 8 <= PAGE_SIZE {
                    page[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
                }
            }
            Missed::StoredFlagOnly => commit |= MISSED_STORED,
        }
        page[8..16].copy_from_slice(&commit.to_le_bytes());
        (len, page)
    }
}

/// What decoding the first `upto` records of a plan with `len` committed
/// bytes yields, by the rules in page.rs's documentation and Linux's
/// `rb_event_length`: a header needs 4 bytes (a cut one is truncated), an extend, a stamp or a large
/// event's length word 8, an event all its data; a discarded event is
/// skipped by its length (and ends the page quietly if that is cut); times
/// add up modulo 2^64 as in libtraceevent's kbuffer.
#[derive(Debug, Default)]
struct Expected {
    events: Vec<(u64, usize, Vec<u8>)>,
    /// The time reached where decoding stops (`Events::time`).
    time: u64,
    truncated: Option<usize>,
    reached: [bool; KINDS.len()],
}

fn expected(plan: &Plan, len: usize, upto: usize) -> Expected {
    let mut out = Expected {
        time: plan.timestamp,
        ..Expected::default()
    };
    let mut time = plan.timestamp;
    let mut at = 0;
    for record in &plan.records[..upto] {
        if at >= len {
            return out;
        }
        if at + 4 > len {
            out.truncated = Some(at);
            return out;
        }
        out.reached[record.kind()] = true;
        let size = record.size();
        let high_part = |high: u32| u64::from(high) << TIME_DELTA_BITS;
        match record {
            Record::End => return out,
            Record::Discarded { .. } if at + 8 > len => return out,
            Record::Discarded { delta, .. } => time = time.wrapping_add(u64::from(*delta)),
            _ if at + size > len => {
                out.truncated = Some(at);
                return out;
            }
            Record::Extend { delta, high } => {
                time = time.wrapping_add(high_part(*high) + u64::from(*delta));
            }
            Record::Stamp { low, high } => time = high_part(*high) + u64::from(*low),
            Record::Small { delta, words } => {
                time = time.wrapping_add(u64::from(*delta));
                let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                out.events.push((time, at, bytes));
            }
            Record::Large { delta, payload } => {
                time = time.wrapping_add(u64::from(*delta));
                out.events.push((time, at, payload.clone()));
            }
        }
        at += size;
        out.time = time;
    }
    // Committed bytes past the records are zero: a large-event header whose
    // length word, if committed, is 0 — truncated either way.
    if upto == plan.records.len() && at < len {
        out.reached[ZERO_WORD] = at + 4 <= len;
        out.truncated = Some(at);
    }
    out
}

fn record() -> impl Strategy<Value = Record> {
    let delta = || prop_oneof![3 => 0u32..64, 1 => 0..=MAX_TIME_DELTA as u32];
    prop_oneof![
        4 => (delta(), proptest::collection::vec(any::<u32>(), 1..=28))
            .prop_map(|(delta, words)| Record::Small { delta, words }),
        2 => (delta(), proptest::collection::vec(any::<u8>(), 1..300))
            .prop_map(|(delta, payload)| Record::Large { delta, payload }),
        1 => (1..=MAX_TIME_DELTA as u32, 1u32..=16)
            .prop_map(|(delta, words)| Record::Discarded { delta, length: words * 4 }),
        1 => (delta(), any::<u32>()).prop_map(|(delta, high)| Record::Extend { delta, high }),
        1 => (0..=MAX_TIME_DELTA as u32, 0u32..1 << 10)
            .prop_map(|(low, high)| Record::Stamp { low, high }),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    let timestamp = prop_oneof![8 => 0u64..1 << 40, 1 => u64::MAX - (1 << 28)..=u64::MAX];
    let commit = prop_oneof![
        4 => Just(Commit::Exact),
        3 => (1usize..400).prop_map(Commit::CutInLast),
        2 => (1usize..40).prop_map(Commit::PastEnd),
        1 => (0usize..4).prop_map(|words| Commit::FillTo(words * 4)),
        1 => prop_oneof![
            Just(PAGE_DATA_SIZE as u64 + 1),
            PAGE_DATA_SIZE as u64 + 1..=COMMIT_MASK
        ]
        .prop_map(Commit::TooLarge),
    ];
    let missed = prop_oneof![
        4 => Just(Missed::No),
        1 => Just(Missed::NotStored),
        2 => any::<u64>().prop_map(Missed::Stored),
        1 => Just(Missed::StoredFlagOnly),
    ];
    let noise = prop_oneof![3 => Just(0u64), 1 => any::<u64>()]
        .prop_map(|bits| bits & !(COMMIT_MASK | MISSED_EVENTS | MISSED_STORED));
    let flip = prop_oneof![3 => Just(None), 1 => (any::<usize>(), 0u32..32).prop_map(Some)];
    (
        timestamp,
        proptest::collection::vec(record(), 0..40),
        any::<bool>(),
        commit,
        missed,
        noise,
        flip,
    )
        .prop_map(
            |(timestamp, mut records, end, commit, missed, noise, flip)| {
                // Leave room for the commit variants past the records.
                while records.iter().map(Record::size).sum::<usize>() > PAGE_DATA_SIZE - 64 {
                    records.pop();
                }
                if let Commit::FillTo(free) = commit {
                    let used: usize = records.iter().map(Record::size).sum();
                    let length = (PAGE_DATA_SIZE - free - used - 4) as u32;
                    records.push(Record::Discarded { delta: 1, length });
                } else if end {
                    records.push(Record::End);
                }
                let commit = match commit {
                    Commit::CutInLast(short) => match records.last() {
                        Some(last) => Commit::CutInLast(1 + short % last.size()),
                        None => Commit::Exact,
                    },
                    other => other,
                };
                let flip = flip
                    .filter(|_| !records.is_empty())
                    .map(|(index, bit)| (index % records.len(), bit));
                Plan {
                    timestamp,
                    records,
                    commit,
                    missed,
                    noise,
                    flip,
                }
            },
        )
}

/// Counts over all generated pages, printed and checked at the end.
#[derive(Default)]
struct Shares {
    pages: Cell<u32>,
    reached: Cell<u32>,
    kinds: [Cell<u32>; KINDS.len()],
    truncated_last: Cell<u32>,
    past_end: Cell<u32>,
    too_large: Cell<u32>,
    flipped: Cell<u32>,
    count_stored: Cell<u32>,
}

fn bump(counter: &Cell<u32>) {
    counter.set(counter.get() + 1);
}

fn check_plan(plan: &Plan, shares: &Shares) -> Result<(), TestCaseError> {
    bump(&shares.pages);
    let (len, page) = plan.page();
    let view = match PageView::new(&page) {
        Err(error) => {
            prop_assert!(matches!(plan.commit, Commit::TooLarge(_)), "{:?}", error);
            prop_assert_eq!(error, RingPageError::CommitTooLarge(len));
            bump(&shares.too_large);
            return Ok(());
        }
        Ok(view) => view,
    };
    prop_assert!(!matches!(plan.commit, Commit::TooLarge(_)));
    let len = len as usize;
    prop_assert_eq!(view.data_len(), len);
    prop_assert_eq!(view.timestamp(), plan.timestamp);
    let missed = match plan.missed {
        Missed::No | Missed::StoredFlagOnly => None,
        Missed::NotStored => Some(None),
        Missed::Stored(count) if len + 8 <= PAGE_DATA_SIZE => Some(Some(count)),
        Missed::Stored(_) => Some(None),
    };
    prop_assert_eq!(view.missed_events(), missed);
    if matches!(missed, Some(Some(_))) {
        bump(&shares.count_stored);
    }

    let mut events = view.events();
    let got: Vec<(u64, usize, Vec<u8>)> = events
        .by_ref()
        .map(|event| (event.timestamp_ns, event.offset, event.payload.to_vec()))
        .collect();
    let error = events.error();
    let time = events.time();
    prop_assert_eq!(
        view.check(),
        error.map_or(Ok(got.len()), Err),
        "check agrees with the iterator"
    );
    let upto = plan.flip.map_or(plan.records.len(), |(index, _)| index);
    let want = expected(plan, len, upto);
    if want.reached.iter().any(|&kind| kind) || plan.flip.is_some() && len >= 4 {
        bump(&shares.reached);
    }
    for (kind, counter) in want.reached.iter().zip(&shares.kinds) {
        if *kind {
            bump(counter);
        }
    }
    if plan.flip.is_some() {
        bump(&shares.flipped);
        // A flipped header changes nothing before it; after it, whatever
        // comes out lies inside the committed data.
        prop_assert!(got.len() >= want.events.len(), "{:?}", got);
        prop_assert_eq!(&got[..want.events.len()], &want.events[..]);
        let mut previous = None;
        for (_, offset, payload) in &got {
            prop_assert!(*offset + 4 + payload.len() <= len);
            prop_assert!(previous < Some(*offset), "offsets increase");
            previous = Some(*offset);
        }
        return Ok(());
    }
    prop_assert_eq!(&got, &want.events);
    prop_assert_eq!(error, want.truncated.map(RingPageError::Truncated));
    prop_assert_eq!(time, want.time, "the time reached");
    match plan.commit {
        Commit::CutInLast(_) => bump(&shares.truncated_last),
        Commit::PastEnd(_) => bump(&shares.past_end),
        _ => {}
    }
    // A stored-count flag with no room for the count never comes from
    // Linux (`ring_buffer_read_page` sets it only when the count fits);
    // there the decoders part ways (none, or an error).
    let count_fits = len + 8 <= PAGE_DATA_SIZE || !matches!(plan.missed, Missed::Stored(_));
    if error.is_none() && count_fits {
        // trace-cmd's side (output/pages.rs) decodes the same
        // events; it hands out data rounded up to whole words.
        let entries = decode_pages(0, &page, PAGE_SIZE).map_err(|e| {
            TestCaseError::fail(alloc::format!("trace.dat decoder refused it: {e}"))
        })?;
        let theirs: Vec<(u64, Vec<u8>)> = entries
            .into_iter()
            .filter_map(|entry| match entry {
                Entry::Event(record) => Some((record.timestamp_ns, record.payload)),
                Entry::Lost { .. } => None,
            })
            .collect();
        let ours: Vec<(u64, Vec<u8>)> = got
            .iter()
            .map(|(time, _, payload)| {
                let mut padded = payload.clone();
                padded.resize(payload.len().div_ceil(4) * 4, 0);
                (*time, padded)
            })
            .collect();
        prop_assert_eq!(ours, theirs);
    }
    Ok(())
}

/// Every record kind decodes to the planned events and times, a cut or
/// overlong commit is reported where the record starts, and most pages get
/// past the commit check into the record walk.
#[test]
fn planned_pages_decode_as_planned() {
    let shares = Shares::default();
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        ..Config::default()
    });
    runner
        .run(&plan(), |plan| check_plan(&plan, &shares))
        .unwrap();
    let pages = f64::from(shares.pages.get());
    let share = |counter: &Cell<u32>| f64::from(counter.get()) / pages;
    std::eprintln!("{} pages", shares.pages.get());
    let report = |name: &str, counter: &Cell<u32>, least: f64| {
        std::eprintln!("  {name}: {:.1} %", 100.0 * share(counter));
        assert!(share(counter) >= least, "{name} reached too rarely");
    };
    report("reach the record walk", &shares.reached, 0.5);
    for (name, counter) in KINDS.iter().zip(&shares.kinds) {
        report(name, counter, 0.05);
    }
    report("cut inside the last record", &shares.truncated_last, 0.1);
    report("commit past the records", &shares.past_end, 0.05);
    report("commit beyond the page", &shares.too_large, 0.02);
    report("flipped header bit", &shares.flipped, 0.1);
    report("lost count stored", &shares.count_stored, 0.05);
}
