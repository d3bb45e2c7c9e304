//! Per-CPU trace buffers: each vCPU records what it runs in its own
//! `hotkern-trace` ring buffer (ftrace's page and event layout, overwrite
//! mode), allocated when the CPU comes up and freed when it goes. A CPU
//! going offline hands its unread events to the machine-wide log, so a
//! reader loses none but those the ring itself overwrote, which it counts.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_trace::ring::{pages_for_kb, Mode, PageView, RingBuffer, PAGE_SIZE};
use parking_lot::Mutex;

/// Data bytes each CPU's ring holds before it overwrites the oldest page.
pub(crate) const RING_KB: usize = 16;

/// What a trace event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A task slice started.
    TaskSlice,
    /// A deferred job (work item, timer, RCU callback) started.
    Job,
}

impl EventKind {
    fn code(self) -> u8 {
        match self {
            EventKind::TaskSlice => 1,
            EventKind::Job => 2,
        }
    }

    fn from_code(code: u8) -> Option<EventKind> {
        match code {
            1 => Some(EventKind::TaskSlice),
            2 => Some(EventKind::Job),
            _ => None,
        }
    }
}

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the machine started.
    pub nanos: u64,
    /// The vCPU it happened on.
    pub cpu: CpuId,
    /// What happened.
    pub kind: EventKind,
    /// The task's or job's ledger id.
    pub id: u64,
}

/// What the trace buffers hold, from [`Machine::trace`](crate::Machine::trace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Every event still held: those handed over by CPUs that went
    /// offline, then each online CPU's ring, oldest first per CPU.
    pub events: Vec<Event>,
    /// Events the rings overwrote before anyone read them (overwrite
    /// mode keeps the newest): counted, not kept.
    pub lost: u64,
}

/// The payload: kind, then the id (little-endian).
const PAYLOAD: usize = 9;

fn encode(event: &Event) -> [u8; PAYLOAD] {
    let mut payload = [0u8; PAYLOAD];
    payload[0] = event.kind.code();
    payload[1..].copy_from_slice(&event.id.to_le_bytes());
    payload
}

/// Decodes the events of ring pages (oldest first) recorded on `cpu`.
fn decode(cpu: CpuId, page: &[u8; PAGE_SIZE], out: &mut Vec<Event>) {
    let Ok(view) = PageView::new(page) else {
        return;
    };
    for raw in view.events() {
        let Some(bytes) = raw.payload.get(..PAYLOAD) else {
            continue;
        };
        let Some(kind) = EventKind::from_code(bytes[0]) else {
            continue;
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[1..]);
        out.push(Event {
            nanos: raw.timestamp_ns,
            cpu,
            kind,
            id: u64::from_le_bytes(id),
        });
    }
}

#[derive(Default)]
struct Retired {
    events: Vec<Event>,
    overwritten: u64,
}

/// One CPU's ring, with its own count of what went in, so that what did
/// not come out (overwritten, or refused) is known exactly.
struct Ring {
    buffer: RingBuffer,
    /// Events offered since the ring was created or last retired.
    recorded: u64,
}

pub(crate) struct EventLogs {
    /// One single-CPU ring per vCPU; the lock makes its holder the ring's
    /// only writer, as the ring requires.
    rings: Box<[Mutex<Option<Ring>>]>,
    retired: Mutex<Retired>,
}

impl EventLogs {
    pub(crate) fn new(cpus: usize) -> Self {
        EventLogs {
            rings: (0..cpus).map(|_| Mutex::new(None)).collect(),
            retired: Mutex::new(Retired::default()),
        }
    }

    /// Allocates `cpu`'s ring; false if it exists (or cannot be built).
    pub(crate) fn create(&self, cpu: usize) -> bool {
        let mut ring = self.rings[cpu].lock();
        if ring.is_some() {
            return false;
        }
        match RingBuffer::new(1, pages_for_kb(RING_KB), Mode::Overwrite) {
            Ok(buffer) => {
                *ring = Some(Ring {
                    buffer,
                    recorded: 0,
                });
                true
            }
            Err(_) => false,
        }
    }

    /// Records an event in `cpu`'s ring (dropped if it has none).
    pub(crate) fn record(&self, event: Event) {
        if let Some(ring) = self.rings[event.cpu.index()].lock().as_mut() {
            ring.recorded += 1;
            // SAFETY: the ring's lock is held, so this is its only writer.
            // A refusal (impossible for this size) only loses the event,
            // which `recorded` accounts for.
            let _ = unsafe { ring.buffer.write(0, event.nanos, &encode(&event)) };
        }
    }

    /// Moves `cpu`'s unread events to the machine-wide log; frees the ring
    /// too unless `keep`. False if there was no ring.
    pub(crate) fn retire(&self, cpu: usize, keep: bool) -> bool {
        let mut slot = self.rings[cpu].lock();
        let Some(ring) = slot.as_mut() else {
            return false;
        };
        let mut events = Vec::new();
        for page in ring.buffer.drain_cpu(0) {
            decode(cpu_id(cpu), &page, &mut events);
        }
        let overwritten = ring.recorded.saturating_sub(events.len() as u64);
        ring.recorded = 0;
        if !keep {
            *slot = None;
        }
        drop(slot);
        let mut retired = self.retired.lock();
        retired.events.extend(events);
        retired.overwritten += overwritten;
        true
    }

    /// Every event still held (retired ones, then each CPU's ring), and how
    /// many events rings overwrote.
    pub(crate) fn snapshot(&self) -> Trace {
        let retired = self.retired.lock();
        let mut events = retired.events.clone();
        let mut lost = retired.overwritten;
        drop(retired);
        for (cpu, ring) in self.rings.iter().enumerate() {
            if let Some(ring) = ring.lock().as_ref() {
                let before = events.len();
                ring.buffer
                    .peek_pages(0, |page| decode(cpu_id(cpu), page, &mut events));
                let held = (events.len() - before) as u64;
                lost += ring.recorded.saturating_sub(held);
            }
        }
        Trace { events, lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cpu: usize, id: u64) -> Event {
        Event {
            nanos: 1_000 + 10 * id,
            cpu: cpu_id(cpu),
            kind: EventKind::TaskSlice,
            id,
        }
    }

    #[test]
    fn events_round_trip_through_the_ring_and_survive_retirement() {
        let logs = EventLogs::new(2);
        assert!(logs.create(1) && !logs.create(1));
        for id in 0..100 {
            logs.record(event(1, id));
        }
        logs.record(event(0, 7)); // no ring: dropped
        let Trace { events, lost } = logs.snapshot();
        assert_eq!(lost, 0);
        assert_eq!(events, (0..100).map(|id| event(1, id)).collect::<Vec<_>>());
        assert!(logs.retire(1, true), "kept: drained, not freed");
        logs.record(event(1, 100));
        let after = logs.snapshot().events;
        assert_eq!(after.len(), 101);
        assert!(logs.retire(1, false));
        assert_eq!(logs.snapshot().events, after);
        assert!(!logs.retire(1, false));
    }

    #[test]
    fn a_full_ring_overwrites_and_counts_what_it_lost() {
        let logs = EventLogs::new(1);
        assert!(logs.create(0));
        let written = 20_000u64;
        for id in 0..written {
            logs.record(event(0, id));
        }
        let Trace {
            events,
            lost: overwritten,
        } = logs.snapshot();
        assert!(overwritten > 0);
        assert_eq!(events.len() as u64 + overwritten, written);
        // Retiring a kept ring reports its losses once.
        assert!(logs.retire(0, true));
        assert_eq!(
            logs.snapshot(),
            Trace {
                events: events.clone(),
                lost: overwritten
            }
        );
        // The newest events are kept, in order.
        assert_eq!(events.last().map(|e| e.id), Some(written - 1));
        assert!(events.windows(2).all(|w| w[0].id + 1 == w[1].id));
    }
}
