//! Stop-machine, written once for both platforms, after Linux's
//! `multi_cpu_stop` (kernel/stop_machine.c): every member CPU leaves what
//! it was doing and joins a rendezvous; once all have arrived the targets
//! (the CPUs being reconfigured) run the work (their dying or starting
//! steps), and no member leaves before every member is done, so nothing
//! else runs anywhere while the CPU masks change.
//!
//! The protocol, one stop-machine (a *generation*) at a time:
//!
//! - the controller, under `serial`, writes the generation's fields (work,
//!   targets, member count, counters reset) and last `unclaimed`, the bits
//!   of the members yet to join (release). Then it has the platform gather
//!   the other members (a cross-CPU call on bare metal, a doorbell ring
//!   that the vCPU's loop answers in user mode), and joins itself if it is
//!   a CPU: a controller on a CPU is always a member;
//! - a member *claims* its bit in `unclaimed` (an RMW, so it joins each
//!   generation once however often its loop looks) and counts itself in
//!   `arrived`; the one that brings `arrived` to the member count wakes the
//!   targets, which alone wait for everyone to arrive. Each target then
//!   runs the work;
//! - every member (targets after their work) counts itself in `finished`;
//!   the last one publishes `completed = generation` and wakes everyone
//!   else, the others wait for it. `completed` only grows, so a member that
//!   wakes late never mistakes the next generation's counters for its own;
//! - the controller returns once `completed` reaches its generation, when no
//!   target will touch the work again.
//!
//! Who writes what: the controller alone writes the fields and `completed`
//! is written only by the last finisher; members only claim, and count in
//! `arrived` and `finished`. Waiting is [`Cpus::wait_until`] (halted or
//! parked, never spinning: four virtual CPUs spinning on a two-core host
//! keep the CPUs they wait for off its cores), and every wake follows the
//! store its waiter's condition reads.
//!
//! If the platform fails to gather a member, the controller *abandons* the
//! generation: it adds [`ABANDONED`] to `arrived` unless everyone had
//! already arrived, so the count never reaches the member count, no target
//! ever runs the work, and returning (ending the work's borrow) is sound.
//! The members already there wait for good; the caller reports the error.
//!
//! ```
//! use hotkern_cpuhp::{CpuId, CpuSet};
//! use hotkern_kernel::platform::Cpus;
//! use hotkern_kernel::stop_machine::Rendezvous;
//!
//! /// A single-CPU platform: the controller is CPU 0 and never sleeps.
//! struct One;
//! impl Cpus for One {
//!     fn current(&self) -> Option<CpuId> { Some(CpuId(0)) }
//!     fn wake(&self, _: CpuId) {}
//!     fn wake_threads(&self) {}
//!     fn wait_until(&self, condition: &dyn Fn() -> bool) {
//!         while !condition() {}
//!     }
//! }
//!
//! let rendezvous = Rendezvous::new();
//! let ran = core::sync::atomic::AtomicU32::new(0);
//! let gathered = rendezvous.run(
//!     &One,
//!     CpuSet::single(CpuId(0)),
//!     CpuSet::single(CpuId(0)),
//!     &|cpu| { ran.fetch_add(1 + cpu.0, core::sync::atomic::Ordering::Relaxed); },
//!     |others| { assert!(others.is_empty()); Ok::<(), ()>(()) },
//! );
//! assert_eq!((gathered, ran.into_inner(), rendezvous.completed()), (Ok(()), 1, 1));
//! ```

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::{bit, bits, from_bits, MAX_CPUS};
use crate::platform::Cpus;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};

/// Added to `arrived` by a controller that gives up on a generation: the
/// count (at most [`MAX_CPUS`]) can then never equal the member count.
pub const ABANDONED: u64 = 1 << 32;

/// The work of one generation: a reference to the controller's `&dyn Fn`,
/// whose address `work` holds while the generation runs.
type Work<'a> = &'a (dyn Fn(CpuId) + Sync);

/// The rendezvous of one kernel's stop-machines.
pub struct Rendezvous {
    /// One controller at a time.
    serial: Mutex<()>,
    /// Written by the controller before `unclaimed`.
    generation: AtomicU64,
    work: AtomicUsize,
    targets: AtomicU64,
    /// Bits of every member, to wake them.
    members: AtomicU64,
    /// How many members.
    count: AtomicU64,
    /// The controller is no CPU: the last finisher wakes it as a thread.
    controller_off_cpu: AtomicBool,
    /// Members yet to join: set by the controller (last of its fields),
    /// cleared one bit at a time by each member's claim.
    unclaimed: AtomicU64,
    /// Members arrived (plus [`ABANDONED`] once given up).
    arrived: AtomicU64,
    /// Members done.
    finished: AtomicU64,
    /// The last generation every member finished; only grows.
    completed: AtomicU64,
}

/// The fields of a rendezvous no stop-machine has used; a macro so that
/// the `const` constructor and loom's (whose atomics are not `const`)
/// share it.
macro_rules! rendezvous_new {
    () => {
        Rendezvous {
            serial: Mutex::new(()),
            generation: AtomicU64::new(0),
            work: AtomicUsize::new(0),
            targets: AtomicU64::new(0),
            members: AtomicU64::new(0),
            count: AtomicU64::new(0),
            controller_off_cpu: AtomicBool::new(false),
            unclaimed: AtomicU64::new(0),
            arrived: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        }
    };
}

impl Rendezvous {
    /// A rendezvous no stop-machine has used; a `static` on bare metal.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        rendezvous_new!()
    }

    /// A rendezvous no stop-machine has used.
    #[cfg(loom)]
    pub fn new() -> Self {
        rendezvous_new!()
    }

    /// The controller's part: stops every CPU of `members` (and the
    /// calling CPU, if the caller is one), runs `work(cpu)` on each CPU
    /// of `targets` that is a member while all of them wait, and returns
    /// once all are done. `gather(others)` makes the members other than
    /// the caller call [`Rendezvous::join`] soon; it is called once the
    /// generation is published.
    ///
    /// If `gather` fails, the generation is abandoned (see the module
    /// doc) and its error returned: the members it did gather stay
    /// stopped, so the caller must not go on as if the CPUs were running.
    /// CPUs at or above [`MAX_CPUS`] are never members. Concurrent calls
    /// take turns.
    pub fn run<P: Cpus + ?Sized, E>(
        &self,
        cpus: &P,
        members: CpuSet,
        targets: CpuSet,
        work: Work<'_>,
        gather: impl FnOnce(CpuSet) -> Result<(), E>,
    ) -> Result<(), E> {
        let _one_at_a_time = self.serial.lock();
        let me = cpus.current().filter(|cpu| cpu.index() < MAX_CPUS);
        let member_bits = bits(&members) | me.map_or(0, bit);
        if member_bits == 0 {
            return Ok(());
        }
        let count = u64::from(member_bits.count_ones());
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        // `work` stays borrowed until `completed` reaches `generation`,
        // after every target's last use of it.
        let work_ref: Work<'_> = work;
        self.work
            .store(&work_ref as *const Work<'_> as usize, Ordering::Relaxed);
        self.targets
            .store(bits(&targets) & member_bits, Ordering::Relaxed);
        self.members.store(member_bits, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        self.controller_off_cpu
            .store(me.is_none(), Ordering::Relaxed);
        self.arrived.store(0, Ordering::Relaxed);
        self.finished.store(0, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        // Release: pairs with the acquire of each member's claim in
        // `join`, which then sees every field above.
        self.unclaimed.store(member_bits, Ordering::Release);
        let others = from_bits(member_bits & !me.map_or(0, bit));
        let gathered = gather(others);
        if gathered.is_err() {
            // AcqRel: ordered in `arrived`'s RMW chain against every
            // member's count; whichever comes first decides (see `member`).
            let before = self.arrived.fetch_add(ABANDONED, Ordering::AcqRel);
            if before != count {
                return gathered;
            }
        }
        if let Some(me) = me {
            if self.claim(me) {
                self.member(cpus, me);
            }
        }
        // Acquire: pairs with the last finisher's release in `member`; the
        // work's effects are then seen by the caller.
        cpus.wait_until(&|| self.completed.load(Ordering::Acquire) >= generation);
        gathered
    }

    /// Whether `cpu` is a member of the published generation that has not
    /// joined yet: what a platform's gathering loop checks before
    /// [`Rendezvous::join`].
    pub fn requested(&self, cpu: CpuId) -> bool {
        // Relaxed: a stale answer is corrected by the gathering's wake-up,
        // which the platform sends after the controller's release store.
        self.unclaimed.load(Ordering::Relaxed) & bit(cpu) != 0
    }

    /// The member's part, on the calling CPU ([`Cpus::current`]): joins the
    /// published generation if this CPU is one of its members and has not
    /// joined it yet; then waits as the protocol says, runs the work if
    /// it is a target, and returns when every member is done. Returns
    /// whether it took part. Called from the platform's gathering (a
    /// cross-CPU call handler, a vCPU's loop), any number of times.
    pub fn join<P: Cpus + ?Sized>(&self, cpus: &P) -> bool {
        let Some(me) = cpus.current() else {
            return false;
        };
        if !self.requested(me) || !self.claim(me) {
            return false;
        }
        self.member(cpus, me);
        true
    }

    /// The last generation every member finished (they count from 1): the
    /// number of stop-machines done while none was abandoned.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Takes `me`'s bit of `unclaimed`; false if it was not there.
    fn claim(&self, me: CpuId) -> bool {
        // Acquire: pairs with the controller's release of `unclaimed`
        // (other members' claims continue its release sequence).
        self.unclaimed.fetch_and(!bit(me), Ordering::Acquire) & bit(me) != 0
    }

    /// Arrive, run the work if a target, finish, leave together. `me` has
    /// claimed its bit, so the fields are this generation's until
    /// `completed` reaches it, which needs `me`'s count.
    fn member<P: Cpus + ?Sized>(&self, cpus: &P, me: CpuId) {
        let generation = self.generation.load(Ordering::Relaxed);
        let count = self.count.load(Ordering::Relaxed);
        let targets = self.targets.load(Ordering::Relaxed);
        let members = self.members.load(Ordering::Relaxed);
        let others = |set: u64| from_bits(set & !bit(me));
        // AcqRel: the last arriver's wake-ups follow every count, and the
        // targets' acquire below pairs with the count that completes it.
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == count {
            for target in others(targets).iter() {
                cpus.wake(target);
            }
        }
        if targets & bit(me) != 0 {
            cpus.wait_until(&|| self.arrived.load(Ordering::Acquire) == count);
            let address = self.work.load(Ordering::Relaxed);
            // SAFETY: the controller stored the address of its `Work`
            // before releasing `unclaimed` (our claim acquired it), and
            // keeps it alive until `completed` reaches this generation,
            // which needs our count in `finished` below. `arrived` reached
            // `count`, so the generation was not abandoned.
            let work = unsafe { *(address as *const Work<'_>) };
            work(me);
        }
        // AcqRel: the last finisher acquires every target's work and
        // releases it with `completed`.
        if self.finished.fetch_add(1, Ordering::AcqRel) + 1 == count {
            self.completed.store(generation, Ordering::Release);
            for member in others(members).iter() {
                cpus.wake(member);
            }
            if self.controller_off_cpu.load(Ordering::Relaxed) {
                cpus.wake_threads();
            }
        } else {
            // Acquire: pairs with the last finisher's release above.
            cpus.wait_until(&|| self.completed.load(Ordering::Acquire) >= generation);
        }
    }
}

impl Default for Rendezvous {
    fn default() -> Self {
        Self::new()
    }
}
