//! The roles of per-CPU kernel threads. The threads themselves are the
//! platform's (OS threads in the machine); what each does, and that every
//! online CPU has one of each, is the kernel's.

/// What a per-CPU kernel thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `ksoftirqd/N`: runs the CPU's expired timers.
    Softirq,
    /// `kworker/N`: runs the CPU's workqueue items.
    Worker,
    /// `rcuc/N`: invokes the CPU's RCU callbacks whose grace period ended.
    RcuCallbacks,
}

impl Role {
    /// Every role; each online CPU has one thread of each.
    pub const ALL: [Role; 3] = [Role::Softirq, Role::Worker, Role::RcuCallbacks];

    /// The thread's name without the CPU number.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Softirq => "ksoftirqd",
            Role::Worker => "kworker",
            Role::RcuCallbacks => "rcuc",
        }
    }

    /// The role's place in [`Role::ALL`], for per-role slots.
    pub const fn index(self) -> usize {
        match self {
            Role::Softirq => 0,
            Role::Worker => 1,
            Role::RcuCallbacks => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_indexes_its_own_slot() {
        for (slot, role) in Role::ALL.into_iter().enumerate() {
            assert_eq!(role.index(), slot, "{}", role.name());
        }
    }
}
