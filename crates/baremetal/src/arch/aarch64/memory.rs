//! arm64's memory: the device tree's RAM fed to the shared bring-up
//! ([`crate::arch::bring_up`]: physmem, the heap, the descriptors), as on
//! x86-64 but from the `/memory` node instead of the PVH memory map. As on
//! x86-64, RAM beyond the boot map is tracked but not mapped until a plug
//! maps it ([`map_range`]).

pub use crate::arch::bring_up::MemoryError;
pub use crate::arch::frames::{KernelPage, Layout, FRAME_LIMIT, PHYSMEM};

use crate::arch::boot::{self, IDENTITY_MAP_END};
use crate::arch::boot_info::{BootInfo, RegionKind};
use crate::arch::bring_up::{self, Plan};
use crate::arch::ranges::{FrameRanges, PAGE_SIZE};

// The names the drivers above reach the page tables by, as on x86-64.
#[allow(unused_imports)]
pub use crate::arch::direct::{
    directories_made, flush_tlb, huge_pages, is_mapped, map_range, prepare_map, unmap_large,
    unmap_range, MapError,
};

/// The frames the boot information says are RAM: the tree's `/memory`,
/// less what it reserves and the tree itself (x86-64's rule: where the map
/// overlaps itself, reserved wins).
fn ram_frames(info: &BootInfo) -> FrameRanges {
    let mut ram = FrameRanges::new();
    for region in info.regions().iter().filter(|r| r.kind == RegionKind::Ram) {
        ram.add_bytes(region.start, region.end);
    }
    ram.remove_bytes(FRAME_LIMIT * PAGE_SIZE, u64::MAX);
    ram
}

/// Runs the shared bring-up on the device tree's RAM less the tree, its
/// `/memreserve/` entries and the kernel; the heap from the boot map (one
/// GiB of RAM, so a large-RAM heap stays within half of its segment).
pub fn bring_up(info: &BootInfo) -> Result<Layout, MemoryError> {
    let ram = ram_frames(info);
    let kernel = boot::kernel_image();
    let mut loaded = ram.clone();
    for region in info.regions().iter().filter(|r| r.kind != RegionKind::Ram) {
        loaded.remove_bytes(region.start, region.end);
    }
    loaded.remove_bytes(kernel.0, kernel.1);
    bring_up::bring_up(Plan {
        ram,
        loaded,
        boot_map_end: IDENTITY_MAP_END / PAGE_SIZE,
        heap_end: IDENTITY_MAP_END / PAGE_SIZE,
        cap_heap_to_segment: true,
        kernel,
    })
}
