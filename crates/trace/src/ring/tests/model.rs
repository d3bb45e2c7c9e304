//! The ring against a model of what it must hand back, over random runs of
//! writes and reads on one CPU.

use super::*;
use core::cell::Cell;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
enum Step {
    Write { len: usize, gap: u64 },
    Read,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        // Whole words, so `tags` can compare whole payloads. Reads are
        // rare, so the writer often laps the reader and events are lost
        // (about 80 % of runs; more reads and the reader always keeps up).
        40 => (2usize..75, prop_oneof![0u64..50, 1u64 << 26..1u64 << 33])
            .prop_map(|(words, gap)| Step::Write { len: words * 4, gap }),
        1 => Just(Step::Read),
    ]
}

/// How many runs reached each path the model's checks are about.
#[derive(Default)]
struct Shares {
    runs: Cell<u32>,
    /// Events were lost (overwritten or dropped), so the "which events may
    /// be missing" checks compare something.
    lost: Cell<u32>,
    /// A read copied part of the page still being written.
    partial: Cell<u32>,
    /// A read took a whole page by swapping it out of the ring.
    whole: Cell<u32>,
}

fn bump(counter: &Cell<u32>) {
    counter.set(counter.get() + 1);
}

fn check_run(
    pages: usize,
    overwrite: bool,
    steps: &[Step],
    shares: &Shares,
) -> Result<(), TestCaseError> {
    let mode = if overwrite {
        Mode::Overwrite
    } else {
        Mode::ProducerConsumer
    };
    let ring = RingBuffer::new(1, pages, mode).unwrap();
    let mut time = 1u64;
    let mut written: Vec<(u64, u32)> = Vec::new();
    let mut read: Vec<(u64, u32)> = Vec::new();
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let (mut partial, mut whole) = (false, false);
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Write { len, gap } => {
                time += gap + 1;
                let _ = write(&ring, 0, time, i as u32, *len);
                written.push((time, i as u32));
            }
            Step::Read => {
                if let Some(got) = ring.read_page(0, &mut page) {
                    partial |= got.partial;
                    whole |= !got.partial;
                    read.extend(tags(&[page.clone()]));
                }
            }
        }
    }
    read.extend(tags(&ring.drain_cpu(0)));
    let stats = ring.stats(0).unwrap();
    bump(&shares.runs);
    if stats.lost() > 0 {
        bump(&shares.lost);
    }
    if partial {
        bump(&shares.partial);
    }
    if whole {
        bump(&shares.whole);
    }
    prop_assert_eq!(stats.written, written.len() as u64);
    prop_assert_eq!(stats.written, stats.read + stats.lost());
    prop_assert_eq!(read.len() as u64, stats.read);
    // Read events are a subsequence of the written ones, times exact.
    let mut cursor = written.iter();
    for event in &read {
        prop_assert!(cursor.any(|w| w == event), "{:?} not in order", event);
    }
    if !overwrite {
        prop_assert_eq!(stats.overrun, 0);
        // Producer/consumer refuses the newest: what was read is the
        // oldest written, with gaps only where a page was full.
        if let (Some(first), Some(read_first)) = (written.first(), read.first()) {
            prop_assert_eq!(read_first, first);
        }
    } else {
        prop_assert_eq!(stats.dropped, 0);
        if let Some(last) = written.last() {
            prop_assert_eq!(read.last(), Some(last));
        }
    }
    Ok(())
}

/// Against a model: every event read is one written, in order, with its
/// exact time (times strictly increase here); what is missing is exactly
/// what the counters call lost, and in producer/consumer mode only the
/// newest can be missing, in overwrite mode the oldest. Most runs must
/// lose events, and reads must take both whole pages and partial copies,
/// or those checks compare nothing.
#[test]
fn ring_matches_a_model() {
    let shares = Shares::default();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        ..Config::default()
    });
    let strategy = (
        2usize..6,
        any::<bool>(),
        proptest::collection::vec(step(), 50..600),
    );
    runner
        .run(&strategy, |(pages, overwrite, steps)| {
            check_run(pages, overwrite, &steps, &shares)
        })
        .unwrap();
    let runs = f64::from(shares.runs.get());
    let share = |counter: &Cell<u32>| f64::from(counter.get()) / runs;
    std::eprintln!("{} runs", shares.runs.get());
    let floors = [
        ("lost events", &shares.lost, 0.5),
        ("partial read", &shares.partial, 0.4),
        ("whole page read", &shares.whole, 0.5),
    ];
    for (name, counter, _) in floors {
        std::eprintln!("  {name}: {:.1} %", 100.0 * share(counter));
    }
    for (name, counter, least) in floors {
        assert!(share(counter) >= least, "{name} reached too rarely");
    }
}
