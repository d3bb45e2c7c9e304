//! What the machine's integration tests share.

use std::time::Duration;

use hotkern_machine::{Item, Machine};

/// How long an item may take before it counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(60);

/// Waits until every task, work item, timer and RCU callback handed to
/// `machine` has completed, or fails saying how many of each did not.
///
/// The wait itself is signalled: the machine's ledger wakes the waiter
/// when its count of outstanding items reaches zero. The wall-clock bound
/// stays because a lost item never completes and nothing else would say
/// so; it is long because it only matters when something is lost.
pub fn drain(machine: &Machine) {
    if machine.wait_idle(LOST_AFTER) {
        return;
    }
    let outstanding: Vec<String> = [Item::Task, Item::Work, Item::Timer, Item::RcuCallback]
        .into_iter()
        .map(|item| {
            let tally = machine.tally(item);
            format!(
                "{} of {} {}s outstanding ({} completed twice)",
                tally.outstanding,
                tally.issued,
                item.name(),
                tally.completed_twice
            )
        })
        .collect();
    panic!(
        "items lost or stuck after {LOST_AFTER:?}: {}; {} deferred hotplug callbacks pending",
        outstanding.join(", "),
        machine.pending_deferred()
    );
}
