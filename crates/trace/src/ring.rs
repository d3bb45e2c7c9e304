//! Per-CPU lock-free ring buffers of pages in ftrace's binary format.
//!
//! One writer per CPU (plus writers nesting on it: interrupts in a kernel,
//! signal handlers in user space) reserves and commits events without locks;
//! any thread reads whole pages without stopping writers. See [`PageView`] for
//! the encoding and `cpu.rs` for the algorithm.
//!
//! ```
//! use hotkern_trace::ring::{Mode, RingBuffer, PAGE_SIZE};
//! let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
//! // SAFETY: this thread is the only writer of CPU 0.
//! unsafe { ring.write(0, 1_000, b"12345678").unwrap() };
//! let mut page = [0u8; PAGE_SIZE];
//! let read = ring.read_page(0, &mut page).unwrap();
//! assert_eq!(read.events, 1);
//! let stats = ring.stats(0).unwrap();
//! assert_eq!(stats.written, stats.read + stats.lost());
//! ```

mod cpu;
pub(crate) mod local;
pub(crate) mod page;

use alloc::boxed::Box;
use alloc::vec::Vec;

pub use cpu::{CpuStats, PageRead, Refused, Reservation, MAX_PAGES_PER_CPU};
pub(crate) use page::PAGE_DATA_SIZE;
pub use page::{
    Events, PageView, RawEvent, RingPageError, HEADER_EVENT_FORMAT, HEADER_PAGE_FORMAT,
    MAX_PAYLOAD, PAGE_SIZE,
};

use cpu::CpuBuffer;

/// The raw mutex behind every lock of this crate: `parking_lot` in user
/// space, a spin lock without `std`.
#[cfg(all(feature = "std", not(loom)))]
pub(crate) type RawLock = parking_lot::RawMutex;
/// The raw mutex behind every lock of this crate: `parking_lot` in user
/// space, a spin lock without `std` (and under loom, whose scheduler cannot
/// see through parking_lot's thread parking; the models never contend it).
#[cfg(any(not(feature = "std"), loom))]
pub(crate) type RawLock = spin::Mutex<()>;

/// What a full buffer does with a new event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Overwrite the oldest page (ftrace's default, `options/overwrite` = 1).
    #[default]
    Overwrite,
    /// Keep the old data and drop the new event (`options/overwrite` = 0).
    ProducerConsumer,
}

/// Why a ring buffer could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingError {
    /// No CPUs.
    NoCpus,
    /// Fewer than 2 or more than [`MAX_PAGES_PER_CPU`] pages per CPU.
    BadPageCount(usize),
    /// A CPU number out of range.
    NoSuchCpu(usize),
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RingError::NoCpus => write!(f, "a ring buffer needs at least one CPU"),
            RingError::BadPageCount(n) => write!(
                f,
                "{n} pages per CPU: need between 2 and {MAX_PAGES_PER_CPU}"
            ),
            RingError::NoSuchCpu(cpu) => write!(f, "no CPU {cpu} in this buffer"),
        }
    }
}

impl core::error::Error for RingError {}

/// Pages per CPU for a size in KiB (ftrace's `buffer_size_kb` counts data
/// bytes per CPU), at least 2.
pub fn pages_for_kb(kb: usize) -> usize {
    (kb.saturating_mul(1024)).div_ceil(PAGE_DATA_SIZE).max(2)
}

/// One ring of pages per CPU.
pub struct RingBuffer {
    cpus: Box<[CpuBuffer]>,
    mode: Mode,
}

impl core::fmt::Debug for RingBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingBuffer")
            .field("cpus", &self.cpus.len())
            .field("pages_per_cpu", &self.pages_per_cpu())
            .field("mode", &self.mode)
            .finish()
    }
}

impl RingBuffer {
    /// `cpus` rings of `pages_per_cpu` pages each.
    pub fn new(cpus: usize, pages_per_cpu: usize, mode: Mode) -> Result<Self, RingError> {
        if cpus == 0 {
            return Err(RingError::NoCpus);
        }
        if !(2..=MAX_PAGES_PER_CPU).contains(&pages_per_cpu) {
            return Err(RingError::BadPageCount(pages_per_cpu));
        }
        let rings: Vec<CpuBuffer> = (0..cpus)
            .map(|_| CpuBuffer::new(pages_per_cpu, mode))
            .collect();
        Ok(RingBuffer {
            cpus: rings.into_boxed_slice(),
            mode,
        })
    }

    /// Number of CPUs.
    pub fn cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Pages in each CPU's ring.
    pub(crate) fn pages_per_cpu(&self) -> usize {
        self.cpus.first().map_or(0, CpuBuffer::pages)
    }

    /// Data bytes per CPU, in KiB (ftrace's `buffer_size_kb`).
    pub(crate) fn size_kb(&self) -> usize {
        self.pages_per_cpu() * PAGE_DATA_SIZE / 1024
    }

    /// The full-buffer behaviour.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Reserves an event of `payload` bytes stamped `now` (ns) on `cpu`.
    ///
    /// # Safety
    /// Only one thread may write a given CPU's ring at a time: the thread
    /// acting as that CPU, and handlers that interrupt it (which nest).
    #[inline(always)]
    pub unsafe fn reserve(
        &self,
        cpu: usize,
        now: u64,
        payload: usize,
    ) -> Result<Reservation<'_>, Refused> {
        match self.cpus.get(cpu) {
            Some(ring) => ring.reserve(now, payload),
            None => Err(Refused::NoSuchCpu),
        }
    }

    /// Records `payload` as one event.
    ///
    /// # Safety
    /// As for [`RingBuffer::reserve`].
    #[inline]
    pub unsafe fn write(&self, cpu: usize, now: u64, payload: &[u8]) -> Result<(), Refused> {
        // SAFETY: forwarded contract.
        let mut reservation = unsafe { self.reserve(cpu, now, payload.len())? };
        reservation.payload_mut().copy_from_slice(payload);
        reservation.commit();
        Ok(())
    }

    /// Takes the oldest unread page of `cpu` into `out` (consuming it), or a
    /// copy of the committed unread part of the page being written.
    pub fn read_page(&self, cpu: usize, out: &mut [u8; PAGE_SIZE]) -> Option<PageRead> {
        self.cpus.get(cpu)?.read_page(out)
    }

    /// Calls `each` with a copy of every unread page of `cpu`, oldest first,
    /// without consuming anything.
    pub fn peek_pages(&self, cpu: usize, each: impl FnMut(&[u8; PAGE_SIZE])) {
        if let Some(ring) = self.cpus.get(cpu) {
            ring.peek_pages(each);
        }
    }

    /// The counters of `cpu`.
    pub fn stats(&self, cpu: usize) -> Result<CpuStats, RingError> {
        self.cpus
            .get(cpu)
            .map(CpuBuffer::stats)
            .ok_or(RingError::NoSuchCpu(cpu))
    }

    /// The counters of all CPUs added up.
    #[cfg(test)]
    pub(crate) fn total_stats(&self) -> CpuStats {
        self.cpus
            .iter()
            .map(CpuBuffer::stats)
            .fold(CpuStats::default(), |a, b| CpuStats {
                written: a.written + b.written,
                read: a.read + b.read,
                dropped: a.dropped + b.dropped,
                overrun: a.overrun + b.overrun,
            })
    }

    /// Discards every unread event of every CPU (counted as read).
    pub fn clear(&self) -> u64 {
        self.cpus.iter().map(CpuBuffer::clear).sum()
    }

    /// Reads every unread page of `cpu`, consuming them.
    pub fn drain_cpu(&self, cpu: usize) -> Vec<Box<[u8; PAGE_SIZE]>> {
        drain_with(|page| self.read_page(cpu, page))
    }
}

/// Every page `read` hands out, until it has none left.
pub(crate) fn drain_with(
    mut read: impl FnMut(&mut [u8; PAGE_SIZE]) -> Option<PageRead>,
) -> Vec<Box<[u8; PAGE_SIZE]>> {
    let mut pages = Vec::new();
    loop {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        if read(&mut page).is_none() {
            return pages;
        }
        pages.push(page);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
