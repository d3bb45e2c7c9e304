//! Running a borrowed function on other CPUs and waiting for it: the
//! hotplug engine's `run_on_each` (Linux's `cpuhp_kick_ap_work`, whose
//! target runs the step from its `cpuhp/N` thread while the controller
//! waits in `wait_for_ap_thread`), written once for every platform.
//!
//! Each CPU has a slot: the address of the posted `&dyn Fn`, the number of
//! the last request, the last one claimed and the last one done, and who
//! waits. The poster stores the work and then the request number
//! (release); the CPU, in [`Mailboxes::run_pending`], loads the number
//! (acquire, pairing with that release), claims it, runs the work and
//! stores the number as done (release), then wakes the waiter, whose
//! acquire load of `done` pairs with it, so the work's effects are seen.
//!
//! The work is borrowed, not owned: the poster's `&dyn Fn` lives on its
//! stack. That is sound only because nobody runs it after the poster
//! returns: [`Mailboxes::run_on_each`] returns once every request is done,
//! or taken back ([`Mailboxes::take_back`]) from a CPU that never came to
//! it. A request is run by whoever claims its number first — the CPU, to
//! run it, or the poster, to take it back — and both claim with
//! `fetch_max`, so exactly one wins: a CPU that arrives after its request
//! was taken back finds it claimed and leaves it alone. A request that is
//! neither done nor can be taken back by the deadline leaves no way on
//! (its CPU may be running it), and the poster panics rather than return.
//!
//! ```
//! use hotkern_cpuhp::{CpuId, CpuSet};
//! use hotkern_kernel::mailbox::Mailboxes;
//! # use hotkern_kernel::platform::Cpus;
//! # struct Spin;
//! # impl Cpus for Spin {
//! #     fn current(&self) -> Option<CpuId> { None }
//! #     fn wake(&self, _: CpuId) {}
//! #     fn wake_threads(&self) {}
//! #     fn wait_until(&self, condition: &dyn Fn() -> bool) { while !condition() {} }
//! # }
//! let boxes = Mailboxes::new(4);
//! let seen = std::sync::Mutex::new(Vec::new());
//! std::thread::scope(|scope| {
//!     // CPU 2's loop: runs what is posted to it.
//!     scope.spawn(|| while !boxes.run_pending(&Spin, 2) {});
//!     boxes
//!         .run_on_each(&Spin, CpuSet::single(CpuId(2)), &|cpu| seen.lock().unwrap().push(cpu), u64::MAX)
//!         .unwrap();
//! });
//! assert_eq!(*seen.lock().unwrap(), [CpuId(2)]);
//! ```

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::platform::Cpus;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// `waiter` when the poster is no CPU.
const NO_CPU: u64 = u64::MAX;

/// One CPU's slot.
struct Slot {
    /// The address of the posted `&&(dyn Fn(CpuId) + Sync)`.
    work: AtomicUsize,
    requested: AtomicU64,
    claimed: AtomicU64,
    done: AtomicU64,
    waiter: AtomicU64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            work: AtomicUsize::new(0),
            requested: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            done: AtomicU64::new(0),
            waiter: AtomicU64::new(NO_CPU),
        }
    }
}

/// What [`Mailboxes::post`] posted: each CPU and the number of its
/// request.
#[must_use = "posted work must be waited for or taken back before it goes away"]
pub struct Posted(Vec<(CpuId, u64)>);

/// A request neither done nor taken back in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfinished(pub CpuId);

/// Every CPU's slot. One poster at a time per slot (the hotplug engine's
/// operations are serialised).
pub struct Mailboxes {
    slots: Vec<Slot>,
}

impl Mailboxes {
    /// Slots for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Mailboxes {
        Mailboxes {
            slots: (0..cpus).map(|_| Slot::new()).collect(),
        }
    }

    /// Runs `work(cpu)` on every CPU of `cpus` — on the caller for its own
    /// CPU, else posted to the CPU, which runs it from
    /// [`run_pending`](Mailboxes::run_pending) — and returns once all
    /// ran. A CPU with no slot is skipped and named in the error after
    /// the others ran.
    ///
    /// # Errors
    ///
    /// [`Unfinished`] naming a CPU of `cpus` outside the slots.
    ///
    /// # Panics
    ///
    /// If a CPU has neither run its request by `deadline_ns` (the
    /// platform's clock) nor can have it taken back: it may be running the
    /// borrowed work, so returning would free what it reads.
    pub fn run_on_each<C: Cpus + ?Sized>(
        &self,
        platform: &C,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        deadline_ns: u64,
    ) -> Result<(), Unfinished> {
        let me = platform.current();
        let others: CpuSet = cpus.iter().filter(|&cpu| Some(cpu) != me).collect();
        let outside = others.iter().find(|cpu| cpu.index() >= self.slots.len());
        // `post` skips the CPUs outside the slots.
        let posted = self.post(platform, others, &work);
        if let Some(me) = me.filter(|me| cpus.contains(*me)) {
            work(me);
        }
        if self.wait(platform, &posted, deadline_ns).is_err() {
            // Whoever claims first runs it; a CPU that claimed it is
            // running the borrowed work, so wait on for it.
            match self.take_back(platform, posted, u64::MAX) {
                Ok(taken) if taken.is_empty() => {}
                Ok(taken) => return Err(Unfinished(taken[0])),
                Err(Unfinished(cpu)) => panic!("{cpu} did not finish its posted work"),
            }
        }
        match outside {
            Some(cpu) => Err(Unfinished(cpu)),
            None => Ok(()),
        }
    }

    /// Posts `*work` to every CPU of `cpus` and wakes each; a CPU not
    /// started yet finds it at its first [`run_pending`](Mailboxes::run_pending).
    /// The returned requests must be waited for ([`wait`](Mailboxes::wait))
    /// or taken back ([`take_back`](Mailboxes::take_back)) before `*work`
    /// goes away.
    pub fn post<C: Cpus + ?Sized>(
        &self,
        platform: &C,
        cpus: CpuSet,
        work: &&(dyn Fn(CpuId) + Sync),
    ) -> Posted {
        let waiter = platform.current().map_or(NO_CPU, |cpu| u64::from(cpu.0));
        let address = work as *const &(dyn Fn(CpuId) + Sync) as usize;
        let mut posted = Vec::with_capacity(cpus.len());
        for cpu in cpus.iter().filter(|cpu| cpu.index() < self.slots.len()) {
            let slot = &self.slots[cpu.index()];
            slot.work.store(address, Ordering::Relaxed);
            slot.waiter.store(waiter, Ordering::Relaxed);
            let number = slot.requested.load(Ordering::Relaxed) + 1;
            // Release: pairs with the acquire in `run_pending`, which
            // reads the work after it.
            slot.requested.store(number, Ordering::Release);
            platform.wake(cpu);
            posted.push((cpu, number));
        }
        Posted(posted)
    }

    /// Waits, sleeping, until every request of `posted` is done, or
    /// `deadline_ns` passes (`u64::MAX`: no deadline).
    ///
    /// # Errors
    ///
    /// [`Unfinished`] naming the first CPU not done by the deadline; the
    /// caller must then take the requests back before the work goes away.
    pub fn wait<C: Cpus + ?Sized>(
        &self,
        platform: &C,
        posted: &Posted,
        deadline_ns: u64,
    ) -> Result<(), Unfinished> {
        for &(cpu, number) in &posted.0 {
            // Acquire: pairs with the release in `run_pending`.
            let done = || self.slots[cpu.index()].done.load(Ordering::Acquire) >= number;
            if deadline_ns == u64::MAX {
                platform.wait_until(&done);
            } else if !platform.wait_until_deadline(&done, deadline_ns) {
                return Err(Unfinished(cpu));
            }
        }
        Ok(())
    }

    /// Takes back the requests of `posted` that no CPU has claimed, and
    /// waits (until `deadline_ns`) for those a CPU did claim: afterwards no
    /// CPU runs the work. Returns the CPUs whose request was taken back
    /// (they never run it).
    ///
    /// # Errors
    ///
    /// [`Unfinished`] naming a CPU that claimed its request and did not
    /// finish it by the deadline: the work must stay alive.
    pub fn take_back<C: Cpus + ?Sized>(
        &self,
        platform: &C,
        posted: Posted,
        deadline_ns: u64,
    ) -> Result<Vec<CpuId>, Unfinished> {
        let mut running = Vec::new();
        let mut taken = Vec::new();
        for (cpu, number) in posted.0 {
            let slot = &self.slots[cpu.index()];
            // AcqRel: pairs with the CPU's claim in `run_pending`; the
            // loser leaves the work alone.
            if slot.claimed.fetch_max(number, Ordering::AcqRel) >= number {
                running.push((cpu, number));
            } else {
                slot.done.store(number, Ordering::Release);
                taken.push(cpu);
            }
        }
        self.wait(platform, &Posted(running), deadline_ns)?;
        Ok(taken)
    }

    /// Runs the work posted to `cpu`, if there is new work; called on
    /// `cpu` (its hotplug thread, or its loop). Returns whether it ran
    /// something.
    pub fn run_pending<C: Cpus + ?Sized>(&self, platform: &C, cpu: usize) -> bool {
        let Some(slot) = self.slots.get(cpu) else {
            return false;
        };
        // Acquire: pairs with the release in `post`, which stored the
        // work first.
        let number = slot.requested.load(Ordering::Acquire);
        if slot.done.load(Ordering::Acquire) >= number {
            return false;
        }
        // AcqRel: pairs with the poster's claim in `take_back`.
        if slot.claimed.fetch_max(number, Ordering::AcqRel) >= number {
            return false;
        }
        let address = slot.work.load(Ordering::Relaxed);
        // SAFETY: `post` stored the address of a `&dyn Fn` that its caller
        // keeps alive until this request is done or taken back, and this
        // CPU won the claim, so the poster is waiting for `done`.
        let work = unsafe { *(address as *const &(dyn Fn(CpuId) + Sync)) };
        work(CpuId(cpu as u32));
        // Release: the work's effects are seen by the waiter's acquire.
        slot.done.store(number, Ordering::Release);
        match slot.waiter.load(Ordering::Relaxed) {
            NO_CPU => platform.wake_threads(),
            waiter => platform.wake(CpuId(waiter as u32)),
        }
        true
    }

    /// Whether work waits for `cpu`.
    pub fn has_pending(&self, cpu: usize) -> bool {
        // Claimed covers done: a request is claimed before it is done,
        // by the CPU that runs it or the poster that takes it back.
        self.slots.get(cpu).is_some_and(|slot| {
            slot.claimed.load(Ordering::Acquire) < slot.requested.load(Ordering::Acquire)
        })
    }
}

#[cfg(test)]
mod tests;
