//! A reader-writer lock whose readers touch only their own CPU's counter
//! while no writer is near: Linux's `percpu_rw_semaphore`
//! (kernel/locking/percpu-rwsem.c), the shape of `cpu_hotplug_lock`.
//!
//! * **Layout.** One reader count per CPU plus one for threads that are no
//!   CPU (a reader may leave on another CPU than it came in on: only the
//!   sum means anything, and counts wrap); `block`, set while a writer
//!   holds the lock or waits for readers to leave; the [`RcuSync`] that
//!   says whether a writer is near.
//! * **Who writes what.** Readers add and remove themselves from a count;
//!   the writer sets and clears `block`, and waits for the counts to sum to
//!   zero; the last reader out wakes it.
//! * **Fast and slow paths.** With no writer near, a reader on a CPU inside
//!   a read-side section of the grace periods the writer waits for adds
//!   itself with no barrier: the writer's grace period (in
//!   [`RcuSync::enter`]) waits for every such section, so the writer sums
//!   counts that include it. Otherwise a reader takes the slow path: it
//!   adds itself, then reads `block`; the writer sets `block`, then sums.
//!   Linux puts a full fence in each (the pairs it marks A/D and B/C);
//!   here the reader's read of `block` is itself a read-modify-write, as
//!   the writer's set is, so whichever comes second in `block`'s order
//!   sees the other's count or flag (in loom's model too, which treats a
//!   `SeqCst` load as an acquire). The last reader out and the writer
//!   waiting for it pair the same way on `writer`.
//! * **The cost.** A writer after a quiet spell pays one grace period in
//!   [`RcuSync::enter`]; hotplug operations in a row share it.

use alloc::boxed::Box;

use crate::cpuset::AtomicCpuSet;
use crate::platform::Cpus;
use crate::rcu_sync::RcuSync;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// One reader count, on a cache line of its own so that CPUs do not
/// contend on each other's.
#[repr(align(64))]
#[derive(Default)]
struct Count(AtomicUsize);

/// A per-CPU reader-writer lock.
///
/// ```
/// use hotkern_kernel::percpu_rwsem::PercpuRwsem;
/// use hotkern_kernel::platform::Cpus;
/// # use hotkern_cpuhp::CpuId;
/// # struct Thread;
/// # impl Cpus for Thread {
/// #     fn current(&self) -> Option<CpuId> { None }
/// #     fn wake(&self, _: CpuId) {}
/// #     fn wake_threads(&self) {}
/// #     fn wait_until(&self, condition: &dyn Fn() -> bool) { while !condition() {} }
/// # }
///
/// let lock = PercpuRwsem::new(4);
/// assert!(lock.try_read(&Thread));
/// assert_eq!(lock.readers(), 1);
/// lock.read_unlock(&Thread);
/// lock.write_lock(&Thread, || { /* a grace period */ });
/// assert!(!lock.try_read(&Thread), "a writer holds it");
/// assert!(lock.write_unlock(&Thread), "queue the grace period of RcuSync::exit");
/// ```
pub struct PercpuRwsem {
    sync: RcuSync,
    counts: Box<[Count]>,
    block: AtomicBool,
    /// Where the writer waiting for readers sleeps: a CPU's index, or
    /// [`PercpuRwsem::NO_WRITER`] / [`PercpuRwsem::THREAD`].
    writer: AtomicUsize,
    /// CPUs of readers and writers waiting for the writer to leave.
    waiting: AtomicCpuSet,
}

impl PercpuRwsem {
    const NO_WRITER: usize = usize::MAX;
    const THREAD: usize = usize::MAX - 1;

    /// A free lock for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Self {
        PercpuRwsem {
            sync: RcuSync::new(),
            counts: (0..=cpus).map(|_| Count::default()).collect(),
            block: AtomicBool::new(false),
            writer: AtomicUsize::new(Self::NO_WRITER),
            waiting: AtomicCpuSet::default(),
        }
    }

    /// The count of the caller: its CPU's, or the threads' (the last).
    fn count<P: Cpus + ?Sized>(&self, cpus: &P) -> &AtomicUsize {
        let last = self.counts.len() - 1;
        let slot = cpus.current().map_or(last, |cpu| cpu.index().min(last));
        &self.counts[slot].0
    }

    /// Takes the lock for reading if no writer holds it (Linux's
    /// `percpu_down_read_trylock`). On a CPU the caller must be inside a
    /// read-side section of the grace periods writers wait for (between two
    /// quiescent states): that is what lets its fast path skip reading `block`.
    pub fn try_read<P: Cpus + ?Sized>(&self, cpus: &P) -> bool {
        if cpus.current().is_some() && self.sync.is_idle() {
            // Nothing more: the writer's grace period orders it (see the
            // module's doc).
            self.count(cpus).fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let count = self.count(cpus);
        count.fetch_add(1, Ordering::SeqCst);
        // Partner: the writer's compare-exchange of `block` before it sums.
        if !self.block.fetch_or(false, Ordering::SeqCst) {
            return true;
        }
        count.fetch_sub(1, Ordering::SeqCst);
        self.wake_writer(cpus);
        false
    }

    /// Takes the lock for reading, sleeping while a writer holds it (Linux's
    /// `percpu_down_read`).
    pub fn read<P: Cpus + ?Sized>(&self, cpus: &P) {
        while !self.try_read(cpus) {
            self.wait_for_writer(cpus);
        }
    }

    /// Gives back a read hold taken by [`PercpuRwsem::try_read`] or
    /// [`PercpuRwsem::read`], on any CPU or thread (Linux's
    /// `percpu_up_read`).
    pub fn read_unlock<P: Cpus + ?Sized>(&self, cpus: &P) {
        if cpus.current().is_some() && self.sync.is_idle() {
            // Release: what the section did is seen by the writer that
            // later sums this count.
            self.count(cpus).fetch_sub(1, Ordering::Release);
            return;
        }
        self.count(cpus).fetch_sub(1, Ordering::SeqCst);
        self.wake_writer(cpus);
    }

    /// Takes the lock for writing: readers are switched to their slow path
    /// (`synchronize` waits for one grace period, when [`RcuSync`] needs
    /// one), other writers are waited for, then the readers in. Returns
    /// whether a grace period was waited for (Linux's
    /// `percpu_down_write`).
    pub fn write_lock<P: Cpus + ?Sized>(&self, cpus: &P, synchronize: impl FnOnce()) -> bool {
        let waited = self.sync.enter(cpus, synchronize);
        while self
            .block
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.wait_for_writer(cpus);
        }
        let me = cpus.current().map_or(Self::THREAD, |cpu| cpu.index());
        // Partner: the last reader's read of `writer` after its count.
        self.writer.swap(me, Ordering::SeqCst);
        cpus.wait_until(&|| self.readers() == 0);
        self.writer.store(Self::NO_WRITER, Ordering::SeqCst);
        waited
    }

    /// Gives the write side back. Returns whether the caller must arrange
    /// for [`PercpuRwsem::grace_period_ended`] to run after a grace period,
    /// as [`RcuSync::exit`] says (Linux's `percpu_up_write`).
    pub fn write_unlock<P: Cpus + ?Sized>(&self, cpus: &P) -> bool {
        // An RMW, paired with the waiters' in `wait_for_writer`.
        self.block.swap(false, Ordering::SeqCst);
        for cpu in self.waiting.load_latest().iter() {
            cpus.wake(cpu);
        }
        cpus.wake_threads();
        self.sync.exit()
    }

    /// The grace period [`PercpuRwsem::write_unlock`] asked for has ended;
    /// returns whether to queue one more ([`RcuSync::grace_period_ended`]).
    pub fn grace_period_ended(&self) -> bool {
        self.sync.grace_period_ended()
    }

    /// Readers in now (Linux's `per_cpu_sum` of the counts).
    pub fn readers(&self) -> usize {
        self.counts.iter().fold(0usize, |sum, count| {
            sum.wrapping_add(count.0.load(Ordering::SeqCst))
        })
    }

    /// Whether readers take their slow path: a writer holds the lock, waits
    /// for it, or left less than a grace period ago.
    pub fn writer_near(&self) -> bool {
        !self.sync.is_idle()
    }

    /// Whether a writer holds the lock or waits for its readers.
    pub fn is_write_locked(&self) -> bool {
        self.block.load(Ordering::SeqCst)
    }

    fn wake_writer<P: Cpus + ?Sized>(&self, cpus: &P) {
        // An RMW: paired with the writer's swap before it sums.
        match self.writer.fetch_add(0, Ordering::SeqCst) {
            Self::NO_WRITER => {}
            Self::THREAD => cpus.wake_threads(),
            cpu => cpus.wake(crate::cpuset::cpu_id(cpu)),
        }
    }

    /// Sleeps until no writer holds the lock.
    fn wait_for_writer<P: Cpus + ?Sized>(&self, cpus: &P) {
        let me = cpus.current();
        if let Some(cpu) = me {
            // Registered before the check: `write_unlock` clears `block`
            // before it reads the set, so its wake cannot miss us.
            self.waiting.set(cpu, true);
        }
        cpus.wait_until(&|| !self.block.fetch_or(false, Ordering::SeqCst));
        if let Some(cpu) = me {
            self.waiting.set(cpu, false);
        }
    }
}
