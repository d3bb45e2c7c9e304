//! The kernel mechanisms hotkern's two platforms share, written once: the
//! user-mode machine (`hotkern-machine`, whose vCPUs are OS threads) and
//! the bare-metal x86-64 kernel (`crates/baremetal`).
//!
//! `#![no_std]` + `alloc`. [`sync`] is the one place that picks locks and
//! atomics: `loom`'s under `--cfg loom`, `parking_lot`'s with the
//! `parking_lot` feature, spinlocks with the `spin` feature (or none). A
//! build that turns on both features fails to compile rather than swap one
//! user's spinlocks for another's sleeping locks (see [`sync`]).
//!
//! * CPUs: the online and active masks ([`cpuset`]), per-CPU slots
//!   ([`percpu`]), the roles of per-CPU kernel threads ([`kthread`]) and
//!   what each does, its predicate and its turn ([`smpboot`]).
//! * Deferred work: timer bases ([`timer`], deadlines in nanoseconds of the
//!   platform's clock), workqueue pools ([`workqueue`]), run queues and
//!   scheduling domains ([`sched`]), and the task system over them:
//!   placing tasks, running their slices, their books ([`tasks`]).
//! * Memory: the frame pool over [`hotkern_physmem`] ([`frames`]), per-CPU
//!   page caches ([`pagecache`]) and the allocator a memory device's
//!   blocks are handed to ([`blockframes`]), its movable frames' owners
//!   ([`movable`]) and the shrink that migrates them out of a block
//!   ([`migrate`]).
//! * CPU hotplug: the step table both platforms run, each row with its
//!   class, its reason and callbacks written over the shared mechanisms
//!   and a small [`StepKernel`] trait for what only the platform can do
//!   ([`steps`]), reading the mechanisms every kernel keeps one instance
//!   of from one struct ([`subsystems`]); per-CPU counters retired after a grace period
//!   ([`vmstat`]); RCU callback lists that a dying CPU hands on
//!   ([`cblist`]), and what a kernel does with RCU callbacks — queue them,
//!   migrate them, run the ready ones — over each platform's grace-period
//!   driver ([`rcu::callbacks`]).
//! * Checking itself: the ledger of deferred items, lost or run twice
//!   ([`ledger`]), and the per-CPU resource audit ([`audit`]).
//! * Time: the scheduler tick at Linux's HZ, jiffies, and each CPU's tick
//!   stopping while it idles ([`tick`]).
//! * Mechanisms that sleep and wake CPUs, over the platform's [`Cpus`]
//!   ([`platform`]): stop-machine's rendezvous ([`stop_machine`]) and
//!   grace periods, normal and expedited, with tree RCU's timing ([`rcu`]).
//! * Each CPU's loop: one turn runs calls, the tick, kernel threads and a
//!   task, reports quiescent states, and idles with the tick stopped and
//!   RCU told, over a small [`CpuLoop`] trait for what only the platform
//!   does ([`idle`]).
//! * The hotplug lock's shape: a reader-writer lock whose readers touch
//!   only their CPU's counter ([`percpu_rwsem`]), switched to a slow path
//!   by a grace period when a writer comes ([`rcu_sync`]); its atomic read
//!   side, for code that picks a CPU from the online mask with preemption
//!   off, which lets a CPU go down without a stop-machine ([`hotplug_read`]).
//!
//! * The run trace: a tracer with a ring per CPU, the kernel's
//!   tracepoints, markers, the function filter, and the trace.dat shipped
//!   once at the end or as a crash dump, over a small [`TracePlatform`]
//!   trait for the clock, the CPU, the byte sink and the console
//!   ([`kernel_trace`]).
//!
//! How a kernel thread is made and switched to, and who drives grace
//! periods, are still each platform's.
//!
//! [`Cpus`]: platform::Cpus
//! [`CpuLoop`]: idle::CpuLoop
//! [`StepKernel`]: steps::StepKernel
//! [`TracePlatform`]: kernel_trace::TracePlatform
#![no_std]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-kernel/0.1")]

extern crate alloc;
// The spinlocks' tests contend from std threads; loom's model needs std's
// clock for its condvar's timed wait.
#[cfg(any(test, loom))]
extern crate std;

pub mod activity;
pub mod audit;
#[cfg(not(loom))]
pub mod baremetal;
pub mod blockframes;
pub mod cblist;
pub mod command_line;
pub mod cpuset;
pub mod directmap;
pub mod failures;
pub mod frames;
pub mod hotplug;
pub mod hotplug_read;
pub mod idle;
// Its locks are const statics, which loom's models (the machine's
// `tests/loom.rs`, which do not trace) cannot give.
#[cfg(not(loom))]
pub mod kernel_trace;
pub mod kthread;
pub mod ledger;
pub mod mailbox;
pub mod migrate;
pub mod movable;
pub mod pagecache;
pub mod percpu;
pub mod percpu_rwsem;
pub mod placement;
pub mod platform;
pub mod power;
pub mod rcu;
pub mod rcu_sync;
pub mod runs;
pub mod sched;
pub mod smpboot;
pub mod steps;
pub mod stop_machine;
pub mod subsystems;
pub mod sync;
pub mod tasks;
pub mod tick;
pub mod timer;
pub mod vmstat;
pub mod workqueue;
