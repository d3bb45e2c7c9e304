//! This kernel's kernel threads as the shared core's [`Thread`]: a run is
//! a switch to the thread's stack ([`Kthread::switch_to`], the arch
//! layer's), a park a flag its CPU's loop honours.

use hotkern_kernel::kthread::Thread;

use crate::arch::kthread::Kthread;

impl Thread for Kthread {
    fn run(&self) -> bool {
        if self.parked() {
            return false;
        }
        self.switch_to();
        true
    }

    /// Takes effect at the CPU's next look. Only the thread's own CPU
    /// switches to it, one thread at a time, and parks come from hotplug
    /// steps on that CPU's hotplug thread or while it is offline: the
    /// thread is never running when this returns.
    fn park(&self) {
        self.set_parked(true);
    }

    fn unpark(&self) {
        self.set_parked(false);
    }

    fn is_parked(&self) -> bool {
        self.parked()
    }
}
