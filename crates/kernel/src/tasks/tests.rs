use alloc::vec::Vec;
use std::sync::atomic::AtomicBool;
use std::thread;

use super::*;

type Body = u32;

fn countdown(_: CpuId, task: &mut Task<Body>) -> TaskStatus {
    task.body -= 1;
    if task.body == 0 {
        TaskStatus::Done
    } else {
        TaskStatus::Again
    }
}

fn fixture(cpus: usize) -> (Scheduler<Body>, Books, Limbo<(), Task<Body>>) {
    (Scheduler::new(cpus), Books::default(), Limbo::new())
}

#[test]
fn closing_hands_over_the_tasks_and_counts_them_migrated() {
    let (scheduler, books, limbo) = fixture(2);
    scheduler.open(CpuId(1));
    for _ in 0..3 {
        scheduler.spawn(&books, 1, CpuSet::EMPTY, |_| 1, &limbo);
    }
    assert_eq!(scheduler.queue_state(CpuId(1)), (3, true));
    let left = scheduler.close(CpuId(1));
    assert_eq!(
        left.iter().map(|task| task.id).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(scheduler.queue_state(CpuId(1)), (0, false));
    assert_eq!(scheduler.tally(&books).migrated, 3);
    // Closing an empty queue moves nothing.
    assert!(scheduler.close(CpuId(0)).is_empty());
    assert_eq!(scheduler.tally(&books).migrated, 3);
}

#[test]
fn placement_asks_the_next_candidates_then_keeps_the_task_in_the_limbo() {
    let (scheduler, books, limbo) = fixture(4);
    scheduler.open(CpuId(1));
    // CPU 3 is preferred but closed; CPU 1 comes after it, wrapping.
    let (_, cpu) = scheduler.spawn(&books, 3, CpuSet::range(0, 4), |_| 1, &limbo);
    assert_eq!(cpu, Some(CpuId(1)));
    assert!(limbo.is_empty());
    // No candidate takes it: it waits, issued and outstanding.
    let (id, cpu) = scheduler.spawn(&books, 2, CpuSet::range(2, 4), |_| 1, &limbo);
    assert_eq!(cpu, None);
    assert!(matches!(limbo.take()[..], [Waiting::Task(Task { id: waiting, .. })] if waiting == id));
    assert_eq!(scheduler.tally(&books).outstanding, 2);
    // A CPU beyond the scheduler's refuses too.
    let task = Task { id: 9, body: 1 };
    assert!(scheduler.offer(CpuId(7), task).is_err());
}

#[test]
fn a_slice_that_asks_again_stays_on_an_open_queue_and_leaves_a_closed_one() {
    let (scheduler, books, limbo) = fixture(2);
    scheduler.open(CpuId(0));
    scheduler.spawn(&books, 0, CpuSet::EMPTY, |_| 3, &limbo);
    let mut moved = Vec::new();
    assert_eq!(
        scheduler.run_slices(&books, CpuId(0), 1, countdown, |t| moved.push(t)),
        1
    );
    assert!(moved.is_empty());
    assert_eq!(scheduler.queue_state(CpuId(0)), (1, true));
    // The queue closes under a slice (a dying step from a handler): the
    // task goes elsewhere.
    let closing = |cpu: CpuId, task: &mut Task<Body>| {
        scheduler.close(cpu);
        countdown(cpu, task)
    };
    assert_eq!(
        scheduler.run_slices(&books, CpuId(0), 4, closing, |t| moved.push(t)),
        1
    );
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].body, 1);
    let tally = scheduler.tally(&books);
    assert_eq!(
        (tally.slices, tally.completed, tally.outstanding),
        (2, 0, 1)
    );
    // Running nothing, or a CPU the scheduler does not have, runs nothing.
    assert_eq!(
        scheduler.run_slices(&books, CpuId(0), 4, countdown, |_| {}),
        0
    );
    assert_eq!(
        scheduler.run_slices(&books, CpuId(5), 4, countdown, |_| {}),
        0
    );
}

#[test]
fn a_task_finished_twice_is_counted_by_the_books() {
    let (scheduler, books, _) = fixture(1);
    scheduler.open(CpuId(0));
    let id = books.issue();
    for _ in 0..2 {
        assert!(scheduler.offer(CpuId(0), Task { id, body: 1 }).is_ok());
    }
    assert_eq!(
        scheduler.run_slices(&books, CpuId(0), 4, countdown, |_| {}),
        2
    );
    let tally = scheduler.tally(&books);
    assert_eq!((tally.issued, tally.completed, tally.twice), (1, 0, 1));
}

#[test]
fn balancing_takes_the_longest_waiting_tasks_and_keeps_the_rest() {
    let (scheduler, books, limbo) = fixture(1);
    scheduler.open(CpuId(0));
    for _ in 0..5 {
        scheduler.spawn(&books, 0, CpuSet::EMPTY, |_| 1, &limbo);
    }
    let extra = scheduler.take_beyond(CpuId(0), 2);
    assert_eq!(
        extra.iter().map(|task| task.id).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(scheduler.queue_state(CpuId(0)), (2, true));
    assert!(scheduler.take_beyond(CpuId(0), 2).is_empty());
}

/// CPUs as threads: each runs its queue while others spawn into it and a
/// "hotplug" thread closes and reopens queues, placing what it took. No
/// task may be lost or run twice, and every slice is counted.
#[test]
fn tasks_survive_queues_closing_under_contending_threads() {
    const CPUS: usize = 4;
    const TASKS: u32 = 400;
    const SLICES: u32 = 5;
    let (scheduler, books, limbo) = fixture(CPUS);
    for cpu in 0..CPUS {
        scheduler.open(cpu_id(cpu));
    }
    let all = CpuSet::range(0, CPUS as u32);
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        for cpu in 0..CPUS {
            let (scheduler, books, limbo, stop) = (&scheduler, &books, &limbo, &stop);
            scope.spawn(move || {
                let next = (cpu + 1) % CPUS;
                let elsewhere = |task| {
                    scheduler.place(next, all, task, limbo);
                };
                while !stop.load(Ordering::Relaxed) {
                    if scheduler.run_slices(books, cpu_id(cpu), 3, countdown, elsewhere) == 0 {
                        thread::yield_now();
                    }
                }
            });
        }
        let spawner = scope.spawn(|| {
            for n in 0..TASKS {
                scheduler.spawn(&books, n as usize % CPUS, all, |_| SLICES, &limbo);
            }
        });
        // CPU 0 stays; the others leave and come back, their tasks placed
        // on the ones that stay, what none takes put back from the limbo.
        for round in 0..200 {
            let cpu = cpu_id(1 + round % (CPUS - 1));
            for task in scheduler.close(cpu) {
                scheduler.place(0, all.difference(&CpuSet::single(cpu)), task, &limbo);
            }
            thread::yield_now();
            scheduler.open(cpu);
        }
        spawner.join().unwrap();
        while scheduler.tally(&books).outstanding > 0 {
            for waiting in limbo.take() {
                if let Waiting::Task(task) = waiting {
                    scheduler.place(0, all, task, &limbo);
                }
            }
            thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let tally = scheduler.tally(&books);
    assert_eq!(tally.issued, u64::from(TASKS));
    assert_eq!(
        (tally.completed, tally.twice, tally.outstanding),
        (tally.issued, 0, 0)
    );
    assert_eq!(tally.slices, u64::from(TASKS * SLICES), "every slice once");
    assert!(limbo.is_empty());
    let queued: usize = (0..CPUS)
        .map(|cpu| scheduler.queue_state(cpu_id(cpu)).0)
        .sum();
    assert_eq!(queued, 0);
}
