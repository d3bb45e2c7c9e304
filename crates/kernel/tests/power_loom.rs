//! Model checks of the start and stop handshake ([`Lifecycle`]): a
//! controller thread starts a CPU thread and stops it again, sleeping
//! while it waits with no deadline; the CPU sleeps while it is dead or
//! alive. Loom fails a model whose threads all sleep, so a lost wake-up
//! in either direction (the kick, the arrival, the request to die, the
//! death) fails it.
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test power_loom`.
#![cfg(loom)]

mod common;

use loom::sync::Arc;

use common::{checker, Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::power::{Life, Lifecycle, Power};

impl Power for Cpu {
    fn kick(&self, cpu: CpuId) {
        self.wake(cpu);
    }
}

/// CPU 1's life, `rounds` times: sleep while dead, arrive, sleep while
/// alive, die.
fn cpu_life(lives: &Lifecycle, me: &Cpu, rounds: usize) {
    for _ in 0..rounds {
        me.wait_until(&|| lives.life(1) != Life::Dead);
        assert!(lives.arrive(me, 1));
        me.wait_until(&|| lives.should_die(1));
        assert!(lives.die(me, 1));
    }
}

fn start_and_stop(controller_is_cpu: bool) {
    checker().check(move || {
        let bells = Bells::new(2);
        let lives = Arc::new(Lifecycle::new());
        lives.boot_cpu(0);
        let cpu = Cpu {
            me: Some(CpuId(1)),
            bells: Arc::clone(&bells),
        };
        let theirs = Arc::clone(&lives);
        let thread = loom::thread::spawn(move || cpu_life(&theirs, &cpu, 1));
        let controller = Cpu {
            me: controller_is_cpu.then_some(CpuId(0)),
            bells,
        };
        let one = CpuSet::single(CpuId(1));
        lives.start_many(&controller, one, u64::MAX).unwrap();
        assert_eq!(lives.life(1), Life::Alive);
        lives.stop_many(&controller, one, u64::MAX).unwrap();
        assert_eq!(lives.life(1), Life::Dead);
        thread.join().unwrap();
    });
}

#[test]
fn a_thread_starts_and_stops_a_cpu() {
    start_and_stop(false);
}

#[test]
fn a_cpu_starts_and_stops_another() {
    start_and_stop(true);
}
