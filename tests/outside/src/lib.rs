//! A `no_std` crate outside hotkern's workspace that uses each library the
//! way its documentation shows: what a kernel or boot loader that depends
//! on the published crates would write. Each function returns what it saw,
//! so the host tests below can check it; the build for
//! `x86_64-unknown-none` with `-D warnings` is the check that matters most.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::vec;
use alloc::vec::Vec;

use hotkern_bcache::{BlockCache, HotkernCache, MemoryDevice};
use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Engine, Hotplug, InlinePlatform, Section, StepSpec,
};
use hotkern_kernel::sync::{AtomicUsize, Ordering, RawSpinlock};
use hotkern_physmem::{BasicPage, BootRange, FreeList, PageCount, Pfn, Physmem, PhysmemError};
use hotkern_trace::ring::{Mode, RingBuffer, PAGE_SIZE};
use hotkern_tracedat::write::{write_trace_dat, TraceDat, WriteOptions};

/// Boot memory loaded and initialised, more plugged at run time, and a
/// frame found without a lock: returns the offset of frame 0x250 in its
/// segment, or `None` if the lookup found nothing.
pub fn physical_memory() -> Result<Option<u64>, PhysmemError> {
    let memory: Physmem<BasicPage> = Physmem::new();
    let boot = BootRange {
        start: Pfn(0x200),
        end: Pfn(0x300),
        avail_start: Pfn(0x200),
        avail_end: Pfn(0x300),
    };
    memory.physload(boot, FreeList(0))?;
    memory.init_pages()?;
    memory.plug(Pfn(0x1000), PageCount(64))?;
    let guard = memory.read();
    Ok(guard.find(Pfn(0x250)).map(|lookup| lookup.offset.0))
}

/// A block cache over a memory device: a block written through it and
/// read back; returns the byte read and how many requests the cache saw.
pub fn block_cache() -> Option<(u8, u64)> {
    let disk = MemoryDevice::zeroed(64, 512).ok()?;
    let mut cache = HotkernCache::new(disk, 16 * 512);
    cache.write(3, 10, &[0xa5]).ok()?;
    let mut byte = [0u8; 1];
    cache.read(3, 10, &mut byte).ok()?;
    Some((byte[0], cache.stats().requests))
}

/// Two hotplug steps registered with the inline platform and the kernel
/// crate's spin lock; CPUs 2 and 3 taken offline and CPU 2 brought back.
/// Returns the CPUs online and how many CPUs the step is up on.
pub fn cpu_hotplug() -> Option<(CpuSet, usize)> {
    let table = [
        StepSpec::new("outside:buffers", Section::Prepare, Class::Critical),
        StepSpec::new("outside:online", Section::Online, Class::Critical),
    ];
    let hotplug: Hotplug<RawSpinlock, _> = Hotplug::new(
        InlinePlatform,
        &table,
        CpuSet::range(0, 4),
        CpuSet::range(0, 4),
        Engine::Classic,
    )
    .ok()?;
    // Shared with the callbacks, which must be 'static.
    let live: &'static AtomicUsize =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(AtomicUsize::new(0)));
    let step = hotplug.step_id("outside:buffers")?;
    hotplug
        .setup(
            step,
            Callbacks::new()
                .startup(move |context| {
                    live.fetch_add(context.cpus.len(), Ordering::SeqCst);
                    Ok(())
                })
                .teardown(move |context| {
                    live.fetch_sub(context.cpus.len(), Ordering::SeqCst);
                    Ok(())
                }),
        )
        .ok()?;
    hotplug.offline(CpuId(3)).ok()?;
    hotplug.offline(CpuId(2)).ok()?;
    hotplug.online(CpuId(2)).ok()?;
    Some((hotplug.online_cpus(), live.load(Ordering::SeqCst)))
}

/// A traced function: a NOP call site until a tracer enables it.
#[hotkern_trace::function]
pub fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().map(|&byte| u32::from(byte)).sum()
}

/// An event written to CPU 0's ring, its page read out and saved as a
/// trace.dat in memory. Returns the file's bytes.
pub fn trace_file() -> Option<Vec<u8>> {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).ok()?;
    let sum = checksum(b"hotkern");
    // SAFETY: this function is the only writer of CPU 0 of a ring it owns.
    unsafe { ring.write(0, 1_000, &sum.to_le_bytes()).ok()? };
    let mut page = [0u8; PAGE_SIZE];
    let read = ring.read_page(0, &mut page)?;
    if read.events != 1 {
        return None;
    }
    let file = TraceDat {
        page_size: PAGE_SIZE as u32,
        cpu_data: vec![page.to_vec()],
        ..TraceDat::default()
    };
    write_trace_dat(&file, &WriteOptions::default()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_memory_finds_the_frame() {
        assert_eq!(physical_memory(), Ok(Some(0x50)));
    }

    #[test]
    fn block_cache_reads_back_what_it_wrote() {
        assert_eq!(block_cache(), Some((0xa5, 2)));
    }

    #[test]
    fn cpu_hotplug_ends_with_three_cpus() {
        let expected = CpuSet::range(0, 3);
        assert_eq!(cpu_hotplug(), Some((expected, 3)));
    }

    #[test]
    fn traced_function_and_trace_file() {
        assert_eq!(checksum(b"ab"), 195);
        let file = trace_file().unwrap();
        // trace.dat's magic, then "tracing" and the version.
        assert_eq!(&file[..10], b"\x17\x08\x44tracing");
        assert_eq!(&file[10..12], b"6\0");
    }
}
