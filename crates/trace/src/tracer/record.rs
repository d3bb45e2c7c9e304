//! Decoded events, as readers (text, JSON, trace.dat writers) consume them.

use alloc::vec::Vec;

use crate::event::COMMON_HEADER_SIZE;
use crate::ring::{PageView, PAGE_SIZE};

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// CPU whose buffer held it.
    pub cpu: usize,
    /// Absolute time, ns.
    pub timestamp_ns: u64,
    /// `common_type`.
    pub event_id: u16,
    /// `common_flags` (see [`crate::event::FLAG_HARDIRQ`] …).
    pub flags: u8,
    /// `common_preempt_count`.
    pub preempt_count: u8,
    /// `common_pid`.
    pub pid: i32,
    /// The whole payload, common header included, so that field offsets of
    /// the event's [`EventFormat`](crate::event::EventFormat) index it directly.
    pub payload: Vec<u8>,
}

impl Record {
    /// Decodes the events of one page (skipping any shorter than the common
    /// header).
    pub(crate) fn from_page(cpu: usize, page: &[u8; PAGE_SIZE]) -> Vec<Record> {
        let Ok(view) = PageView::new(&page[..]) else {
            return Vec::new();
        };
        view.events()
            .filter(|e| e.payload.len() >= COMMON_HEADER_SIZE)
            .map(|e| Record::from_payload(cpu, e.timestamp_ns, e.payload))
            .collect()
    }

    /// A record from a raw payload.
    pub(crate) fn from_payload(cpu: usize, timestamp_ns: u64, payload: &[u8]) -> Record {
        let mut header = [0u8; COMMON_HEADER_SIZE];
        let n = payload.len().min(COMMON_HEADER_SIZE);
        header[..n].copy_from_slice(&payload[..n]);
        Record {
            cpu,
            timestamp_ns,
            event_id: u16::from_ne_bytes([header[0], header[1]]),
            flags: header[2],
            preempt_count: header[3],
            pid: i32::from_ne_bytes([header[4], header[5], header[6], header[7]]),
            payload: payload.to_vec(),
        }
    }

    /// An unsigned field of `size` bytes at `offset` (0 if out of range).
    pub fn unsigned(&self, offset: usize, size: usize) -> u64 {
        let Some(bytes) = offset
            .checked_add(size)
            .and_then(|end| self.payload.get(offset..end))
        else {
            return 0;
        };
        let mut word = [0u8; 8];
        word[..size.min(8)].copy_from_slice(&bytes[..size.min(8)]);
        u64::from_ne_bytes(word)
    }

    /// A signed field of `size` bytes at `offset` (sign-extended).
    pub fn signed(&self, offset: usize, size: usize) -> i64 {
        let raw = self.unsigned(offset, size);
        let bits = (size.min(8) * 8) as u32;
        if bits == 0 || bits == 64 {
            return raw as i64;
        }
        let shift = 64 - bits;
        ((raw << shift) as i64) >> shift
    }

    /// A NUL-terminated string starting at `offset`.
    pub fn string(&self, offset: usize) -> &str {
        let bytes = self.payload.get(offset..).unwrap_or(&[]);
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        core::str::from_utf8(&bytes[..end]).unwrap_or("")
    }
}

/// Sorts records of several CPUs into one timeline (stable: same-time
/// records keep CPU order).
pub fn merge(records: &mut [Record]) {
    records.sort_by_key(|r| (r.timestamp_ns, r.cpu));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_decode_with_sign_and_bounds() {
        let mut payload = alloc::vec![0u8; 24];
        payload[..2].copy_from_slice(&7u16.to_ne_bytes());
        payload[2] = 0x08;
        payload[4..8].copy_from_slice(&(-5i32).to_ne_bytes());
        payload[8..12].copy_from_slice(&(-2i32).to_ne_bytes());
        payload[12..17].copy_from_slice(b"hey\0x");
        let record = Record::from_payload(3, 99, &payload);
        assert_eq!((record.event_id, record.flags, record.pid), (7, 0x08, -5));
        assert_eq!(record.signed(8, 4), -2);
        assert_eq!(record.unsigned(8, 4), 0xffff_fffe);
        assert_eq!(record.string(12), "hey");
        assert_eq!(record.unsigned(30, 8), 0);
        assert_eq!(record.unsigned(usize::MAX, 8), 0);
        assert_eq!(record.string(usize::MAX), "");
        let mut records = alloc::vec![
            Record::from_payload(1, 5, &payload),
            Record::from_payload(0, 5, &payload),
            Record::from_payload(0, 1, &payload),
        ];
        merge(&mut records);
        let order: Vec<(u64, usize)> = records.iter().map(|r| (r.timestamp_ns, r.cpu)).collect();
        assert_eq!(order, alloc::vec![(1, 0), (5, 0), (5, 1)]);
    }
}
