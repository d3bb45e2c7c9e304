//! The `tracing-bare` peer: the Rust `tracing` crate with the fastest fair
//! subscriber we could build — a global default [`Subscriber`] (no layers,
//! no registry, no formatting) that keeps every event's and span
//! transition's timestamp, metadata pointer and integer fields in a fixed
//! per-thread ring in memory, without synchronisation or loss accounting.
//! Disabled events are filtered by level, which `tracing` caches per call
//! site (`Interest::never`) behind its global max-level check. It reads
//! hotkern's calibrated TSC clock.

use std::cell::RefCell;

use hotkern_trace::platform::{Clock, TscClock};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The peer's name in the report.
pub const NAME: &str = "tracing-bare";

/// One recorded item: time, what (metadata or span id), up to 3 integers.
#[derive(Clone, Copy, Default)]
struct Slot {
    time: u64,
    what: u64,
    values: [u64; 3],
}

const RING: usize = 1 << 16;

thread_local! {
    static MEMORY: RefCell<(Vec<Slot>, usize, u64)> = RefCell::new((vec![Slot::default(); RING], 0, 0));
}

fn push(slot: Slot) {
    MEMORY.with(|memory| {
        let mut memory = memory.borrow_mut();
        let at = memory.1;
        memory.0[at] = slot;
        memory.1 = (at + 1) & (RING - 1);
    });
}

/// Reads back what this thread's ring holds (so the stores are real work).
pub fn memory_checksum() -> u64 {
    MEMORY.with(|memory| {
        memory.borrow().0.iter().fold(0u64, |sum, s| {
            sum ^ s.time ^ s.what ^ s.values[0] ^ s.values[1] ^ s.values[2]
        })
    })
}

struct Integers<'a>(&'a mut [u64; 3], usize);

impl Visit for Integers<'_> {
    fn record_u64(&mut self, _field: &Field, value: u64) {
        if self.1 < 3 {
            self.0[self.1] = value;
            self.1 += 1;
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, value as u64);
    }
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {
        // The message stays unformatted (its metadata identifies it).
    }
}

/// The subscriber; the benchmark installs it as the global default.
pub struct MemorySubscriber {
    /// The clock of every record.
    pub clock: TscClock,
}

impl Subscriber for MemorySubscriber {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if *metadata.level() <= Level::INFO {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }
    fn new_span(&self, _attributes: &Attributes<'_>) -> Id {
        let id = MEMORY.with(|memory| {
            let mut memory = memory.borrow_mut();
            memory.2 += 1;
            memory.2
        });
        Id::from_u64(id)
    }
    fn record(&self, _span: &Id, _values: &Record<'_>) {}
    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut values = [0u64; 3];
        event.record(&mut Integers(&mut values, 0));
        push(Slot {
            time: self.clock.now_ns(),
            what: event.metadata() as *const Metadata<'_> as u64,
            values,
        });
    }
    fn enter(&self, span: &Id) {
        push(Slot {
            time: self.clock.now_ns(),
            what: span.into_u64(),
            values: [1, 0, 0],
        });
    }
    fn exit(&self, span: &Id) {
        push(Slot {
            time: self.clock.now_ns(),
            what: span.into_u64(),
            values: [2, 0, 0],
        });
    }
    fn try_close(&self, _id: Id) -> bool {
        true
    }
}
