//! Per-CPU trace buffers: each vCPU records what it ran in its own ring
//! (no lock shared with other CPUs on the fast path); a CPU going offline
//! hands its events to the machine-wide log so a reader loses none but
//! those the ring itself overwrote, which are counted.

use parking_lot::Mutex;

/// Events a ring holds before it overwrites the oldest.
pub(crate) const RING_EVENTS: usize = 1024;

/// What a trace event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A task slice started.
    TaskSlice,
    /// A deferred job (work item, timer, RCU callback) started.
    Job,
}

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the machine started.
    pub nanos: u64,
    /// The vCPU it happened on.
    pub cpu: usize,
    /// What happened.
    pub kind: EventKind,
    /// The task's or job's ledger id.
    pub id: u64,
}

struct Ring {
    events: Vec<Event>,
    /// Next slot to write once the ring is full.
    next: usize,
    overwritten: u64,
}

impl Ring {
    fn new() -> Self {
        Ring {
            events: Vec::with_capacity(RING_EVENTS),
            next: 0,
            overwritten: 0,
        }
    }

    fn push(&mut self, event: Event) {
        if self.events.len() < RING_EVENTS {
            self.events.push(event);
        } else {
            self.events[self.next] = event;
            self.next = (self.next + 1) % RING_EVENTS;
            self.overwritten += 1;
        }
    }

    /// Events oldest first, emptying the ring.
    fn drain(&mut self) -> Vec<Event> {
        let mut out = self.events.split_off(self.next);
        out.append(&mut self.events);
        self.next = 0;
        out
    }
}

#[derive(Default)]
struct Retired {
    events: Vec<Event>,
    overwritten: u64,
}

pub(crate) struct EventLogs {
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

    /// Creates `cpu`'s ring; false if it exists.
    pub(crate) fn create(&self, cpu: usize) -> bool {
        let mut ring = self.rings[cpu].lock();
        if ring.is_some() {
            return false;
        }
        *ring = Some(Ring::new());
        true
    }

    /// Records an event in `cpu`'s ring (dropped if it has none).
    pub(crate) fn record(&self, event: Event) {
        if let Some(ring) = self.rings[event.cpu].lock().as_mut() {
            ring.push(event);
        }
    }

    /// Moves `cpu`'s events to the machine-wide log; frees the ring too
    /// unless `keep`. False if there was no ring.
    pub(crate) fn retire(&self, cpu: usize, keep: bool) -> bool {
        let mut slot = self.rings[cpu].lock();
        let Some(ring) = slot.as_mut() else {
            return false;
        };
        let events = ring.drain();
        let overwritten = core::mem::take(&mut ring.overwritten);
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
    /// many rings overwrote.
    pub(crate) fn snapshot(&self) -> (Vec<Event>, u64) {
        let retired = self.retired.lock();
        let mut events = retired.events.clone();
        let mut overwritten = retired.overwritten;
        drop(retired);
        for ring in self.rings.iter() {
            if let Some(ring) = ring.lock().as_ref() {
                let (newer, older) = ring.events.split_at(ring.next);
                events.extend_from_slice(older);
                events.extend_from_slice(newer);
                overwritten += ring.overwritten;
            }
        }
        (events, overwritten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cpu: usize, id: u64) -> Event {
        Event {
            nanos: id,
            cpu,
            kind: EventKind::TaskSlice,
            id,
        }
    }

    #[test]
    fn ring_overwrites_oldest_and_retire_keeps_order() {
        let logs = EventLogs::new(2);
        assert!(logs.create(1) && !logs.create(1));
        for id in 0..(RING_EVENTS as u64 + 5) {
            logs.record(event(1, id));
        }
        logs.record(event(0, 7)); // no ring: dropped
        let (events, overwritten) = logs.snapshot();
        assert_eq!(overwritten, 5);
        assert_eq!(events.len(), RING_EVENTS);
        assert_eq!(events[0].id, 5);
        assert!(logs.retire(1, false));
        let (after, overwritten) = logs.snapshot();
        assert_eq!(after, events);
        assert_eq!(overwritten, 5);
        assert!(!logs.retire(1, false));
    }
}
