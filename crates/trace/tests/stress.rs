//! Multi-thread stress tests of the ring buffer and the tracer:
//! writers on their own CPUs, readers taking pages concurrently, real
//! signal handlers nesting on a writer; every event checked for tearing and
//! every CPU's accounting checked exactly (`written == read + lost`).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hotkern_trace::ring::{Mode, PageView, RingBuffer, PAGE_SIZE};

/// Writes the payload of event `seq` of `cpu` into `out` (no allocation:
/// signal handlers use it) and returns its length.
fn fill(cpu: u8, seq: u32, nested: bool, out: &mut [u8; 128]) -> usize {
    let len = 8 + (seq as usize * 7) % 120;
    out[..8].fill(0);
    out[0] = cpu;
    out[1] = u8::from(nested);
    out[4..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in out.iter_mut().enumerate().take(len).skip(8) {
        *b = (seq as usize)
            .wrapping_mul(13)
            .wrapping_add(i)
            .wrapping_add(cpu as usize) as u8;
    }
    len
}

fn payload(cpu: u8, seq: u32, nested: bool) -> Vec<u8> {
    let mut out = [0u8; 128];
    let len = fill(cpu, seq, nested, &mut out);
    out[..len].to_vec()
}

/// Checks every event of a page; returns (nested, seq) of each.
fn check(page: &[u8; PAGE_SIZE], cpu: u8) -> Vec<(bool, u32)> {
    let view = PageView::new(&page[..]).expect("page header");
    let mut out = Vec::new();
    let mut last_time = 0;
    for event in view.events() {
        let p = event.payload;
        assert_eq!(p[0], cpu, "event from another CPU's buffer");
        let seq = u32::from_le_bytes(p[4..8].try_into().unwrap());
        let nested = p[1] == 1;
        let expected = payload(cpu, seq, nested);
        assert_eq!(
            &p[..expected.len()],
            &expected[..],
            "torn event cpu {cpu} seq {seq}"
        );
        assert!(event.timestamp_ns >= last_time, "time went backwards");
        last_time = event.timestamp_ns;
        out.push((nested, seq));
    }
    assert!(view.check().is_ok());
    out
}

fn now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What a run may lose.
#[derive(Clone, Copy, PartialEq)]
enum Loss {
    /// Small buffers: whatever the readers fail to keep up with.
    Allowed,
    /// The buffer holds every event of the run: nothing may be lost.
    None,
}

fn stress(mode: Mode, pages: usize, per_writer: u32, loss: Loss) {
    const CPUS: usize = 3;
    let ring = Arc::new(RingBuffer::new(CPUS, pages, mode).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let collected: Arc<Vec<Mutex<Vec<u32>>>> =
        Arc::new((0..CPUS).map(|_| Mutex::new(Vec::new())).collect());
    std::thread::scope(|s| {
        for reader in 0..2 {
            let (ring, done, collected) = (ring.clone(), done.clone(), collected.clone());
            s.spawn(move || {
                let mut page = Box::new([0u8; PAGE_SIZE]);
                while !done.load(Ordering::Acquire) {
                    for cpu in 0..CPUS {
                        // Both readers take pages; the per-CPU lock orders them,
                        // so collect under our own lock to keep order.
                        let mut list = collected[cpu].lock().unwrap();
                        if ring.read_page(cpu, &mut page).is_some() {
                            list.extend(check(&page, cpu as u8).into_iter().map(|(_, seq)| seq));
                        }
                    }
                    // Only varies the interleaving of the two readers; no
                    // assertion depends on it.
                    if reader == 1 {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let writers: Vec<_> = (0..CPUS)
            .map(|cpu| {
                let ring = ring.clone();
                s.spawn(move || {
                    for seq in 0..per_writer {
                        // SAFETY: this thread is the only writer of `cpu`.
                        let _ = unsafe { ring.write(cpu, now(), &payload(cpu as u8, seq, false)) };
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    let mut page = Box::new([0u8; PAGE_SIZE]);
    for cpu in 0..CPUS {
        let mut list = collected[cpu].lock().unwrap();
        while ring.read_page(cpu, &mut page).is_some() {
            list.extend(check(&page, cpu as u8).into_iter().map(|(_, seq)| seq));
        }
        let stats = ring.stats(cpu).unwrap();
        assert_eq!(stats.written, u64::from(per_writer));
        assert_eq!(
            stats.written,
            stats.read + stats.lost(),
            "cpu {cpu}: {stats:?}"
        );
        assert_eq!(list.len() as u64, stats.read);
        if loss == Loss::None {
            assert_eq!(stats.lost(), 0, "cpu {cpu}: {stats:?}");
            assert_eq!(stats.read, u64::from(per_writer), "cpu {cpu}: {stats:?}");
            assert!(
                list.iter().copied().eq(0..per_writer),
                "cpu {cpu}: not every event came back once, in order"
            );
        }
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "cpu {cpu}: out of order or duplicated"
        );
        match mode {
            Mode::Overwrite => {
                assert_eq!(stats.dropped, 0);
                assert_eq!(*list.last().unwrap(), per_writer - 1, "newest survives");
            }
            Mode::ProducerConsumer => {
                assert_eq!(stats.overrun, 0);
                assert_eq!(list[0], 0, "oldest survives");
            }
        }
    }
}

#[test]
fn overwrite_mode_under_concurrent_readers_accounts_exactly() {
    stress(Mode::Overwrite, 4, 60_000, Loss::Allowed);
}

#[test]
fn producer_consumer_mode_under_concurrent_readers_accounts_exactly() {
    stress(Mode::ProducerConsumer, 4, 60_000, Loss::Allowed);
}

#[test]
fn large_buffer_loses_nothing_when_readers_keep_up() {
    // Each CPU's 20k events of at most 127 payload bytes take at most 144
    // bytes each (8 of header, 8 of time extend, 4-byte alignment): 2.9 MB,
    // and its 1024 pages hold 4.1 MB. Even readers that never ran could
    // not make a writer lose one.
    stress(Mode::ProducerConsumer, 1024, 20_000, Loss::None);
}

// --- A real signal handler nesting on the writer ------------------------

static SIGNAL_RING: OnceLock<RingBuffer> = OnceLock::new();
static HANDLER_SEQ: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    if let Some(ring) = SIGNAL_RING.get() {
        let seq = HANDLER_SEQ.fetch_add(1, Ordering::Relaxed) as u32;
        // Async-signal-safe: a stack buffer, no allocation, no lock.
        let mut bytes = [0u8; 128];
        let len = fill(0, seq, true, &mut bytes);
        // SAFETY: the handler runs on CPU 0's writer thread and nests on it.
        let _ = unsafe { ring.write(0, now(), &bytes[..len]) };
    }
}

/// Sends `signal` to `target` `count` times, each only once the handler has
/// counted the one before in `handled` (standard signals do not queue: a
/// second one sent before the first is handled would merge with it), so
/// exactly `count` handlers run. `target` must keep running until this
/// returns.
fn signal_one_at_a_time(
    target: libc::pthread_t,
    signal: libc::c_int,
    handled: &AtomicU64,
    count: u64,
) {
    let start = handled.load(Ordering::Acquire);
    for sent in 1..=count {
        // SAFETY: the caller keeps the target thread alive.
        assert_eq!(unsafe { libc::pthread_kill(target, signal) }, 0);
        while handled.load(Ordering::Acquire) < start + sent {
            // Two cores and three busy threads: let the target run.
            std::thread::yield_now();
        }
    }
}

#[test]
fn signal_handlers_nest_on_a_writer_without_tearing_or_losing_count() {
    const EVENTS: u32 = 100_000;
    const SIGNALS: u64 = 200;
    // Room for everything (~7.6 MB per 100k events), producer/consumer: nothing may be lost
    // but nested writers that arrive during a page switch, which are
    // counted as dropped.
    let ring =
        SIGNAL_RING.get_or_init(|| RingBuffer::new(1, 16_000, Mode::ProducerConsumer).unwrap());
    // SAFETY: installing a handler that only does async-signal-safe work.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    let done = AtomicBool::new(false);
    let signals_handled = AtomicBool::new(false);
    let mut main_seqs = Vec::new();
    let mut nested_seqs = Vec::new();
    let mut written_by_writer = 0;
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let signals_handled = &signals_handled;
        let writer = s.spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
            // At least EVENTS, and on until every signal has been handled:
            // each one lands at whatever point of a write it interrupts.
            let mut bytes = [0u8; 128];
            let mut seq = 0u32;
            while seq < EVENTS || !signals_handled.load(Ordering::Acquire) {
                let len = fill(0, seq, false, &mut bytes);
                // SAFETY: this thread is CPU 0's writer.
                let _ = unsafe { ring.write(0, now(), &bytes[..len]) };
                seq += 1;
            }
            seq
        });
        let target = rx.recv().unwrap() as libc::pthread_t;
        let done = &done;
        let signaller = s.spawn(move || {
            signal_one_at_a_time(target, libc::SIGUSR1, &HANDLER_SEQ, SIGNALS);
            signals_handled.store(true, Ordering::Release);
        });
        let reader = s.spawn(|| {
            let mut page = Box::new([0u8; PAGE_SIZE]);
            let mut seen = Vec::new();
            while !done.load(Ordering::Acquire) {
                if ring.read_page(0, &mut page).is_some() {
                    seen.extend(check(&page, 0));
                }
            }
            seen
        });
        written_by_writer = writer.join().unwrap();
        signaller.join().unwrap();
        done.store(true, Ordering::Release);
        for (nested, seq) in reader.join().unwrap() {
            if nested {
                nested_seqs.push(seq)
            } else {
                main_seqs.push(seq)
            }
        }
    });
    let mut page = Box::new([0u8; PAGE_SIZE]);
    while ring.read_page(0, &mut page).is_some() {
        for (nested, seq) in check(&page, 0) {
            if nested {
                nested_seqs.push(seq)
            } else {
                main_seqs.push(seq)
            }
        }
    }
    let handler_events = HANDLER_SEQ.load(Ordering::Relaxed);
    let stats = ring.stats(0).unwrap();
    assert_eq!(handler_events, SIGNALS);
    eprintln!(
        "{handler_events} handler events nested on {written_by_writer} writer events: {stats:?}"
    );
    assert_eq!(stats.written, u64::from(written_by_writer) + handler_events);
    assert_eq!(stats.written, stats.read + stats.lost(), "{stats:?}");
    assert_eq!((main_seqs.len() + nested_seqs.len()) as u64, stats.read);
    assert_eq!(stats.overrun, 0);
    // Every event is read or counted as dropped (a nested writer arriving
    // during a page switch; or, on a badly overloaded machine, a full
    // buffer), and each writer's events come back in order.
    assert_eq!(
        main_seqs.len() as u64 + nested_seqs.len() as u64 + stats.dropped,
        stats.written
    );
    assert!(main_seqs.windows(2).all(|w| w[0] < w[1]));
    assert!(nested_seqs.windows(2).all(|w| w[0] < w[1]));
    if stats.dropped < handler_events {
        // The buffer never filled: the interrupted writer lost nothing.
        assert_eq!(main_seqs.len() as u32, written_by_writer);
    }
}

// --- The whole tracer path from a signal handler ------------------------

hotkern_trace::define_event! {
    /// Emitted by the writer thread and by the signal handler.
    pub stress_tick in stress {
        seq: u64,
        from_handler: u8,
    }
    print "seq=%llu handler=%u", seq, from_handler
}

static HANDLER_TICKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal_event(_: libc::c_int) {
    let seq = HANDLER_TICKS.fetch_add(1, Ordering::Relaxed);
    // Async-signal-safe: the event is registered and this thread's CPU is
    // claimed before signals start, so this is atomics and stores only.
    stress_tick::trace(seq, 1);
}

#[test]
fn events_from_signal_handlers_are_recorded_with_the_interrupt_flag() {
    use hotkern_trace::event::FLAG_HARDIRQ;
    use hotkern_trace::{TraceConfig, Tracer};
    let tracer = Tracer::with_threads(
        TraceConfig {
            buffer_kb: 16_384,
            mode: Mode::ProducerConsumer,
        },
        4,
    )
    .unwrap()
    .install()
    .unwrap();
    let id = stress_tick::EVENT.id();
    tracer.set_event_enabled(id, true).unwrap();
    // SAFETY: the handler only does async-signal-safe work.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal_event as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()),
            0
        );
    }
    const SIGNALS: u64 = 100;
    let signals_handled = AtomicBool::new(false);
    let mut writer_events = 0u64;
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let signals_handled = &signals_handled;
        let writer = s.spawn(move || {
            // Claim a CPU before the first signal can arrive.
            stress_tick::trace(u64::MAX, 0);
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
            let mut seq = 0u64;
            while seq < 50_000 || !signals_handled.load(Ordering::Acquire) {
                stress_tick::trace(seq, 0);
                seq += 1;
            }
            seq + 1
        });
        let target = rx.recv().unwrap() as libc::pthread_t;
        let signaller = s.spawn(move || {
            signal_one_at_a_time(target, libc::SIGUSR2, &HANDLER_TICKS, SIGNALS);
            signals_handled.store(true, Ordering::Release);
        });
        writer_events = writer.join().unwrap();
        signaller.join().unwrap();
    });
    tracer.set_event_enabled(id, false).unwrap();
    let records: Vec<_> = tracer
        .drain_records()
        .into_iter()
        .filter(|r| r.event_id == id)
        .collect();
    let handler_events = HANDLER_TICKS.load(Ordering::Relaxed);
    assert_eq!(handler_events, SIGNALS);
    let mut dropped = 0;
    let mut written = 0;
    for cpu in 0..tracer.cpus() {
        let stats = tracer.stats(cpu).unwrap();
        assert_eq!(
            stats.written,
            stats.read + stats.lost(),
            "cpu {cpu}: {stats:?}"
        );
        dropped += stats.dropped;
        written += stats.written;
    }
    assert_eq!(written, writer_events + handler_events);
    assert_eq!(records.len() as u64 + dropped, written);
    for record in &records {
        // The flag marks an event that nested on another one in progress:
        // only handler events can (a handler that lands between two events
        // does not nest, so it carries no flag).
        if record.flags & FLAG_HARDIRQ != 0 {
            assert_eq!(record.unsigned(16, 1), 1, "{record:?}");
        }
    }
    let handler_records = records.iter().filter(|r| r.unsigned(16, 1) == 1).count() as u64;
    // Every handler's event is recorded or among the dropped ones.
    assert!(handler_records > 0);
    assert!(handler_records <= SIGNALS && handler_records + dropped >= SIGNALS);
    tracer.uninstall();
}
