//! A tracer's buffers: the live ring and the snapshot ring, their size and
//! mode, and the ways readers take or copy what they hold.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::Ordering;

use super::{record, Record, TraceError, Tracer};
use crate::ring::{self, CpuStats, Mode, PageRead, RingBuffer, RingError, PAGE_SIZE};

pub(super) struct Buffers {
    /// Every ring this tracer allocated. A ring is never freed while the
    /// tracer lives: a writer may still be finishing an event in a ring that
    /// was just swapped out (a kernel would free it after a grace period).
    /// Boxed so that a ring's address survives the vector growing.
    #[allow(clippy::vec_box)]
    owned: Vec<Box<RingBuffer>>,
    /// Indices (in `owned`) of rings replaced by a resize, oldest first;
    /// readers drain them before the live ring.
    retired: Vec<usize>,
    /// A freed snapshot ring kept for reuse.
    idle_spare: Option<usize>,
}

impl Buffers {
    /// The buffers of a new tracer: `owned` holds its live ring.
    #[allow(clippy::vec_box)]
    pub(super) fn new(owned: Vec<Box<RingBuffer>>) -> Self {
        Buffers {
            owned,
            retired: Vec::new(),
            idle_spare: None,
        }
    }
}

impl Tracer {
    /// `buffer_size_kb`: data KiB per CPU.
    pub(crate) fn buffer_size_kb(&self) -> usize {
        self.live_ring().size_kb()
    }

    /// The live buffer's full-buffer behaviour (`options/overwrite`).
    pub(crate) fn mode(&self) -> Mode {
        self.live_ring().mode()
    }

    /// Changes the per-CPU buffer size while tracing runs. The old ring's
    /// unread events stay readable (readers drain it first).
    pub(crate) fn set_buffer_size_kb(&self, kb: usize) -> Result<(), TraceError> {
        let pages = pages_for(kb)?;
        self.replace_live(pages, self.mode())
    }

    /// Switches overwrite / producer-consumer mode (`options/overwrite`).
    pub(crate) fn set_mode(&self, mode: Mode) -> Result<(), TraceError> {
        if mode == self.mode() {
            return Ok(());
        }
        self.replace_live(self.live_ring().pages_per_cpu(), mode)
    }

    fn replace_live(&self, pages: usize, mode: Mode) -> Result<(), TraceError> {
        let mut buffers = self.buffers.lock();
        let fresh = Box::new(RingBuffer::new(self.cpus, pages, mode)?);
        let spare = if self.spare_ring().is_some() {
            Some(Box::new(RingBuffer::new(self.cpus, pages, mode)?))
        } else {
            None
        };
        let old = self.live.load(Ordering::Acquire);
        let old_index = buffers
            .owned
            .iter()
            .position(|r| ptr::eq(&**r, old))
            .unwrap_or(0);
        let fresh_ptr = &*fresh as *const RingBuffer as *mut RingBuffer;
        buffers.owned.push(fresh);
        buffers.retired.push(old_index);
        if let Some(spare) = spare {
            let spare_ptr = &*spare as *const RingBuffer as *mut RingBuffer;
            buffers.owned.push(spare);
            self.spare.store(spare_ptr, Ordering::Release);
        }
        buffers.idle_spare = None;
        self.live.store(fresh_ptr, Ordering::Release);
        Ok(())
    }

    /// Allocates the snapshot buffer (`echo 1 > snapshot` does this first).
    pub(crate) fn snapshot_allocate(&self) -> Result<(), TraceError> {
        let mut buffers = self.buffers.lock();
        if self.spare_ring().is_some() {
            return Ok(());
        }
        let live = self.live_ring();
        let reuse = buffers.idle_spare.take().filter(|&i| {
            let ring = &buffers.owned[i];
            ring.pages_per_cpu() == live.pages_per_cpu() && ring.mode() == live.mode()
        });
        let index = match reuse {
            Some(index) => index,
            None => {
                let ring = Box::new(RingBuffer::new(
                    self.cpus,
                    live.pages_per_cpu(),
                    live.mode(),
                )?);
                buffers.owned.push(ring);
                buffers.owned.len() - 1
            }
        };
        let ring = &*buffers.owned[index] as *const RingBuffer as *mut RingBuffer;
        self.spare.store(ring, Ordering::Release);
        Ok(())
    }

    /// Whether the snapshot buffer is allocated.
    pub(crate) fn snapshot_allocated(&self) -> bool {
        self.spare_ring().is_some()
    }

    /// Swaps the live buffer with the snapshot buffer (allocating it first
    /// if needed): what was recorded becomes the snapshot, tracing goes on
    /// in the old spare, which is cleared first.
    pub(crate) fn snapshot_swap(&self) -> Result<(), TraceError> {
        self.snapshot_allocate()?;
        let _buffers = self.buffers.lock();
        let spare = self.spare.load(Ordering::Acquire);
        // SAFETY: non-null (allocated above, and only changed under the lock).
        unsafe { &*spare }.clear();
        let old = self.live.swap(spare, Ordering::AcqRel);
        self.spare.store(old, Ordering::Release);
        Ok(())
    }

    /// Frees the snapshot buffer (`echo 0 > snapshot`); its memory is kept
    /// for reuse.
    pub(crate) fn snapshot_free(&self) {
        let mut buffers = self.buffers.lock();
        let spare = self.spare.swap(ptr::null_mut(), Ordering::AcqRel);
        if !spare.is_null() {
            // SAFETY: non-null, and every ring `spare` has pointed to stays in
            // `buffers.owned` until the tracer drops.
            unsafe { &*spare }.clear();
            buffers.idle_spare = buffers.owned.iter().position(|r| ptr::eq(&**r, spare));
        }
    }

    /// Clears the snapshot buffer (`echo 2 > snapshot`).
    pub(crate) fn snapshot_clear(&self) -> Result<(), TraceError> {
        self.spare_ring().ok_or(TraceError::NoSnapshot)?.clear();
        Ok(())
    }

    /// The snapshot's events (not consumed), all CPUs, in time order.
    #[cfg(test)]
    pub(crate) fn snapshot_records(&self) -> Result<Vec<Record>, TraceError> {
        let ring = self.spare_ring().ok_or(TraceError::NoSnapshot)?;
        let mut records = Vec::new();
        for cpu in 0..self.cpus {
            ring.peek_pages(cpu, |page| records.extend(Record::from_page(cpu, page)));
        }
        record::merge(&mut records);
        Ok(records)
    }

    /// Takes the oldest unread page of `cpu` (raw, ftrace layout) into `out`.
    /// Pages from rings replaced by a resize come first.
    pub(crate) fn read_page(&self, cpu: usize, out: &mut [u8; PAGE_SIZE]) -> Option<PageRead> {
        {
            let buffers = self.buffers.lock();
            for &index in &buffers.retired {
                if let Some(read) = buffers.owned[index].read_page(cpu, out) {
                    return Some(read);
                }
            }
        }
        self.live_ring().read_page(cpu, out)
    }

    /// Reads (consumes) every unread page of `cpu`.
    pub(crate) fn drain_pages(&self, cpu: usize) -> Vec<Box<[u8; PAGE_SIZE]>> {
        ring::drain_with(|page| self.read_page(cpu, page))
    }

    /// Copies every unread page of `cpu` (raw, ftrace layout) without
    /// consuming anything; pages of rings replaced by a resize come first.
    pub(crate) fn peek_pages(&self, cpu: usize) -> Vec<Box<[u8; PAGE_SIZE]>> {
        let mut pages = Vec::new();
        let buffers = self.buffers.lock();
        for &index in &buffers.retired {
            buffers.owned[index].peek_pages(cpu, |page| pages.push(Box::new(*page)));
        }
        self.live_ring()
            .peek_pages(cpu, |page| pages.push(Box::new(*page)));
        pages
    }

    /// Copies the snapshot buffer's pages of `cpu` (raw), not consuming them.
    pub(crate) fn snapshot_pages(
        &self,
        cpu: usize,
    ) -> Result<Vec<Box<[u8; PAGE_SIZE]>>, TraceError> {
        let ring = self.spare_ring().ok_or(TraceError::NoSnapshot)?;
        let mut pages = Vec::new();
        ring.peek_pages(cpu, |page| pages.push(Box::new(*page)));
        Ok(pages)
    }

    /// Reads (consumes) every unread event of every CPU, in time order.
    pub fn drain_records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for cpu in 0..self.cpus {
            for page in self.drain_pages(cpu) {
                records.extend(Record::from_page(cpu, &page));
            }
        }
        record::merge(&mut records);
        records
    }

    /// Copies every unread event of every CPU without consuming them (the
    /// `trace` file), in time order.
    #[cfg(test)]
    pub(crate) fn peek_records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        let buffers = self.buffers.lock();
        for cpu in 0..self.cpus {
            for &index in &buffers.retired {
                buffers.owned[index]
                    .peek_pages(cpu, |page| records.extend(Record::from_page(cpu, page)));
            }
            self.live_ring()
                .peek_pages(cpu, |page| records.extend(Record::from_page(cpu, page)));
        }
        record::merge(&mut records);
        records
    }

    /// Discards every unread event (`echo > trace`).
    pub fn clear(&self) {
        let buffers = self.buffers.lock();
        for &index in &buffers.retired {
            buffers.owned[index].clear();
        }
        self.live_ring().clear();
    }

    /// Counters of `cpu` summed over every ring this tracer used (live,
    /// replaced and snapshot), so `written == read + lost` once all are read.
    pub fn stats(&self, cpu: usize) -> Result<CpuStats, TraceError> {
        if cpu >= self.cpus {
            return Err(TraceError::Ring(RingError::NoSuchCpu(cpu)));
        }
        let buffers = self.buffers.lock();
        let mut total = CpuStats::default();
        for ring in &buffers.owned {
            let s = ring.stats(cpu)?;
            total.written += s.written;
            total.read += s.read;
            total.dropped += s.dropped;
            total.overrun += s.overrun;
        }
        Ok(total)
    }

    /// Events lost on `cpu` so far.
    pub fn lost(&self, cpu: usize) -> u64 {
        self.stats(cpu).map_or(0, |s| s.lost())
    }
}

pub(super) fn pages_for(kb: usize) -> Result<usize, TraceError> {
    if kb == 0 {
        return Err(TraceError::BadBufferSize(kb));
    }
    let pages = ring::pages_for_kb(kb);
    if pages > ring::MAX_PAGES_PER_CPU {
        return Err(TraceError::BadBufferSize(kb));
    }
    Ok(pages)
}
