//! The functions `bench trace`'s disabled-site cases compare, once per
//! kind of call site (`site_fn!`): `function/disabled`'s call and
//! `overhead/all-sites-off`'s workload. Their own module, so the cases
//! (`sites.rs`) and their timing loops (`loops.rs`) both use them.

use rand::Rng;

use super::super::measure::input_rng;

/// A function with hotkern's patched site, the load-and-branch site, or
/// none; the body is the same. Each is in a link section of its own, which
/// `aligned.ld` (linked by the crate's build script) starts on a 64-byte
/// boundary: the copies are compared on the same alignment, where the
/// linker's 16 put the copies' functions at different offsets in a cache
/// line, and `overhead/all-sites-off`'s gap fell from +13.6% to +4.4% (5-run
/// medians) once they started at the same one.
macro_rules! site_fn {
    (hotkern, fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        #[link_section = concat!(".text.hotkern_bench_aligned.hotkern.", stringify!($name))]
        #[hotkern_trace::function]
        #[inline(never)]
        pub fn $name($($a: $t),*) -> $r $body
    };
    (branch, fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        #[link_section = concat!(".text.hotkern_bench_aligned.branch.", stringify!($name))]
        #[inline(never)]
        pub fn $name($($a: $t),*) -> $r {
            // What `#[hotkern_trace::function]` expanded to before sites
            // were patched.
            static SITE: hotkern_trace::function::FunctionSite =
                hotkern_trace::function::FunctionSite::new(
                    module_path!(), stringify!($name), file!(), line!());
            let _guard = hotkern_trace::function::enter(&SITE);
            $body
        }
    };
    (none, fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        #[link_section = concat!(".text.hotkern_bench_aligned.none.", stringify!($name))]
        #[inline(never)]
        pub fn $name($($a: $t),*) -> $r $body
    };
}

pub mod calls {
    use std::hint::black_box;
    site_fn!(
        hotkern,
        fn patched_call(x: u64) -> u64 {
            black_box(x).wrapping_mul(3)
        }
    );
    site_fn!(
        branch,
        fn branch_call(x: u64) -> u64 {
            black_box(x).wrapping_mul(3)
        }
    );
    site_fn!(
        none,
        fn plain_call(x: u64) -> u64 {
            black_box(x).wrapping_mul(3)
        }
    );
}

/// The workload of `overhead/all-sites-off`, once per kind of site.
macro_rules! workload {
    ($module:ident, $kind:ident) => {
        pub mod $module {
            use super::Tables;
            site_fn!(
                $kind,
                fn section_of(t: &Tables, pfn: u64) -> usize {
                    (pfn >> 6) as usize % t.sections.len()
                }
            );
            site_fn!(
                $kind,
                fn segment_of(t: &Tables, section: usize) -> usize {
                    t.sections[section] as usize
                }
            );
            site_fn!(
                $kind,
                fn frame_at(t: &Tables, segment: usize, pfn: u64) -> u64 {
                    t.frames[(segment * 64 + (pfn & 63) as usize) % t.frames.len()]
                }
            );
            site_fn!(
                $kind,
                fn lookup(t: &Tables, pfn: u64) -> u64 {
                    frame_at(t, segment_of(t, section_of(t, pfn)), pfn)
                }
            );
            site_fn!(
                $kind,
                fn bucket_of(t: &Tables, block: u64) -> usize {
                    (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % t.buckets.len()
                }
            );
            site_fn!(
                $kind,
                fn probe(t: &Tables, bucket: usize, block: u64) -> bool {
                    t.buckets[bucket] == block
                }
            );
            site_fn!(
                $kind,
                fn fill(t: &mut Tables, bucket: usize, block: u64) -> () {
                    t.buckets[bucket] = block;
                }
            );
            site_fn!(
                $kind,
                fn read_block(t: &mut Tables, block: u64) -> u64 {
                    let bucket = bucket_of(t, block);
                    if !probe(t, bucket, block) {
                        fill(t, bucket, block);
                    }
                    lookup(t, block)
                }
            );
        }
    };
}

/// The workload's tables: a section index, frames, cache buckets (small
/// enough for L2: the calls, not memory, are measured).
pub struct Tables {
    sections: Vec<u32>,
    frames: Vec<u64>,
    buckets: Vec<u64>,
}

impl Tables {
    /// Fresh tables, the same every time.
    pub fn new() -> Tables {
        let mut rng = input_rng(26);
        Tables {
            sections: (0..1024).map(|_| rng.random_range(0..256)).collect(),
            frames: (0..16_384).map(|_| rng.random()).collect(),
            buckets: vec![u64::MAX; 4096],
        }
    }
}

pub mod workloads {
    use super::Tables;
    workload!(patched, hotkern);
    workload!(branch, branch);
    workload!(plain, none);
}
