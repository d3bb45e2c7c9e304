//! Cost of a plug+unplug pair with many segments present (a profiling aid).
use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem};
use std::time::Instant;

fn main() {
    let segments: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8000);
    let mem: Physmem<BasicPage> = Physmem::initialized();
    let t = Instant::now();
    for i in 0..segments {
        mem.plug(Pfn(i * 8), PageCount(4)).unwrap();
    }
    println!("setup {:?}", t.elapsed());
    let t = Instant::now();
    let pairs = 2000;
    for k in 0..pairs {
        let pfn = Pfn((k * 7919 % segments) * 8 + 4);
        mem.plug(pfn, PageCount(4)).unwrap();
        mem.unplug(pfn, PageCount(4)).unwrap();
    }
    println!(
        "{:.1} us per pair",
        t.elapsed().as_secs_f64() * 1e6 / pairs as f64
    );
}
