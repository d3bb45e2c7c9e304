//! Failures outside the hotplug engine's operations — a grace period a
//! step waited for that stalled, the hotplug lock that did not settle
//! between operations — each by name: every one is a broken invariant,
//! which the run reports and counts against its checks.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::arch::console::println;

/// Every failure recorded, in order.
pub static FAILURES: spin::Mutex<Vec<String>> = spin::Mutex::new(Vec::new());

/// Records a failure outside an engine operation and prints it.
pub fn platform_failed(what: fmt::Arguments<'_>) {
    let what = format!("{what}");
    println!("hotkern: hotplug platform: {what}");
    FAILURES.lock().push(what);
}
