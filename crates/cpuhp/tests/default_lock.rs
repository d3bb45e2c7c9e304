//! The default lock: `SpinHotplug` serialises operations from several
//! threads as `parking_lot`'s lock does, with no lock named by the user.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Engine, InlinePlatform, Section, SpinHotplug, StepSpec,
};

#[test]
fn spin_hotplug_runs_one_operation_at_a_time() {
    const THREADS: u32 = 4;
    let table = [StepSpec::new("mm:pages", Section::Prepare, Class::Critical)];
    let possible = CpuSet::range(0, THREADS + 1);
    let hotplug = Arc::new(
        SpinHotplug::new(
            InlinePlatform,
            &table,
            possible,
            CpuSet::single(CpuId(0)),
            Engine::Classic,
        )
        .unwrap(),
    );
    // Set while a callback runs: a second operation's callback finding it
    // set ran at the same time, which the hotplug lock forbids.
    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let up = Arc::new(AtomicUsize::new(0));
    let enter = {
        let (busy, overlaps, up) = (busy.clone(), overlaps.clone(), up.clone());
        move |delta: isize| {
            if busy.swap(true, SeqCst) {
                overlaps.fetch_add(1, SeqCst);
            }
            // Long enough for another thread to arrive.
            for _ in 0..2_000 {
                std::hint::spin_loop();
            }
            up.fetch_add(delta as usize, SeqCst);
            busy.store(false, SeqCst);
            Ok(())
        }
    };
    let (startup, teardown) = (enter.clone(), enter);
    let step = hotplug.step_id("mm:pages").unwrap();
    hotplug
        .setup_nocalls(
            step,
            Callbacks::new()
                .startup(move |_| startup(1))
                .teardown(move |_| teardown(-1)),
        )
        .unwrap();

    let threads: Vec<_> = (1..=THREADS)
        .map(|cpu| {
            let hotplug = hotplug.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    hotplug.online(CpuId(cpu)).unwrap();
                    hotplug.offline(CpuId(cpu)).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(overlaps.load(SeqCst), 0);
    assert_eq!(up.load(SeqCst), 0);
    assert_eq!(hotplug.online_cpus(), CpuSet::single(CpuId(0)));
}
