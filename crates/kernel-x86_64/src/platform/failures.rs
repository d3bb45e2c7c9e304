//! Failures outside the hotplug engine's operations (a grace period that
//! stalled, the hotplug lock that did not settle), on the console as they
//! come and counted against the run's checks.

use hotkern_kernel::failures::Failures;

use crate::arch::console::println;

/// Every failure recorded, in order.
pub static FAILURES: Failures = Failures::new(|what| println!("hotkern: hotplug platform: {what}"));
