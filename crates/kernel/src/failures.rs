//! Failures outside the hotplug engine's operations: a grace period a
//! step waited for that stalled, the hotplug lock that did not settle
//! between operations. Each is a broken invariant that the run reports
//! by name and counts against its checks, so the list keeps them all, in
//! order, and hands each one to the platform's printer as it comes (the
//! bare-metal kernel's console).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::sync::Mutex;

/// Every failure recorded outside an engine operation, in order.
///
/// ```
/// use hotkern_kernel::failures::Failures;
///
/// static FAILURES: Failures = Failures::new(|_what| {});
/// FAILURES.record(format_args!("the hotplug lock did not settle"));
/// assert_eq!(FAILURES.len(), 1);
/// assert_eq!(FAILURES.all(), ["the hotplug lock did not settle"]);
/// ```
pub struct Failures {
    list: Mutex<Vec<String>>,
    print: fn(&str),
}

impl Failures {
    /// No failure yet; `print` shows each one as it is recorded.
    #[cfg(not(loom))]
    pub const fn new(print: fn(&str)) -> Self {
        Failures {
            list: Mutex::new(Vec::new()),
            print,
        }
    }

    /// No failure yet; `print` shows each one as it is recorded.
    #[cfg(loom)]
    pub fn new(print: fn(&str)) -> Self {
        Failures {
            list: Mutex::new(Vec::new()),
            print,
        }
    }

    /// Records `what` and prints it.
    pub fn record(&self, what: fmt::Arguments<'_>) {
        let what = format!("{what}");
        (self.print)(&what);
        self.list.lock().push(what);
    }

    /// How many were recorded.
    pub fn len(&self) -> usize {
        self.list.lock().len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.list.lock().is_empty()
    }

    /// Every failure recorded, in order (a copy: the caller may print
    /// while another CPU records).
    pub fn all(&self) -> Vec<String> {
        self.list.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    static PRINTED: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn each_failure_is_printed_once_and_kept_in_order() {
        let failures = Failures::new(|_| {
            PRINTED.fetch_add(1, Ordering::SeqCst);
        });
        assert!(failures.is_empty());
        failures.record(format_args!("first {}", 1));
        failures.record(format_args!("second"));
        assert_eq!(failures.all(), ["first 1", "second"]);
        assert_eq!(failures.len(), 2);
        assert_eq!(PRINTED.load(Ordering::SeqCst), 2);
    }
}
