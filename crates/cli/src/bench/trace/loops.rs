//! The timing loops of the hot disabled-site cases, `event/disabled`,
//! `function/disabled` and `overhead/all-sites-off`: one function per
//! implementation (`four_a_turn!`, `lookups!`), each starting a cache
//! line. Moving `overhead/all-sites-off`'s 27 functions out of `.text`
//! took `event/disabled`'s `hotkern` loop from 0.068 ns (as fast as
//! `none`'s) to 0.135 ns a site without a byte of it changing: where a
//! loop of a few instructions lands decides its speed. With every compared
//! loop on the same alignment, none gains or loses by its neighbours
//! (LTTng-UST's loop is aligned the same way in `c/lttng_bench.c`).
//! `overhead/all-sites-off`'s loops are here too: with only the others
//! moved, its `hotkern` build ran +10.1% over `none` (5-run medians, its
//! own code unchanged); with its loops aligned as well, +0.5%.
//!
//! The event sites get the loop counter as it is: `tracing`'s macro
//! evaluates its arguments only once the event is wanted, so a `black_box`
//! around one would cost hotkern's call (arguments evaluated first, as for
//! a kernel tracepoint) a stack round trip that `tracing` never pays.

use std::hint::black_box;

use super::compared::{calls, workloads, Tables};
use super::workload::bench_quiet;

four_a_turn!(
    /// `event/disabled`, `hotkern`: the patched site.
    event_disabled_hotkern,
    |i, k| bench_quiet::trace(i, i + k, i as u32)
);
four_a_turn!(
    /// `event/disabled`, `hotkern-branch`: the load-and-branch site.
    event_disabled_branch,
    |i, k| bench_quiet::trace_branch(i, i + k, i as u32)
);
four_a_turn!(
    /// `event/disabled`, `tracing-bare`: a `trace!` below the level.
    event_disabled_tracing,
    |i, k| tracing::trace!(a = i, b = i + k, c = i as u32)
);

/// `event/disabled`, `none`: the loop alone, its counter kept (the floor;
/// one turn stands for four sites).
#[link_section = ".text.hotkern_bench_aligned.loop.event_disabled_none"]
#[inline(never)]
pub fn event_disabled_none(first: u64, turns: u64) {
    for i in first..first + turns {
        black_box(i);
    }
}

four_a_turn!(
    /// `function/disabled`, `hotkern`.
    function_disabled_hotkern,
    |i, k| black_box(calls::patched_call(i + k))
);
four_a_turn!(
    /// `function/disabled`, `hotkern-branch`.
    function_disabled_branch,
    |i, k| black_box(calls::branch_call(i + k))
);
four_a_turn!(
    /// `function/disabled`, `none`.
    function_disabled_none,
    |i, k| black_box(calls::plain_call(i + k))
);

/// `$name(tables, blocks)`: `overhead/all-sites-off`'s loop, one
/// `read_block` of the `$workload` build a turn, a turn a block.
macro_rules! lookups {
    ($(#[$doc:meta])* $name:ident, $workload:ident) => {
        $(#[$doc])*
        #[link_section = concat!(".text.hotkern_bench_aligned.loop.", stringify!($name))]
        #[inline(never)]
        pub fn $name(tables: &mut Tables, blocks: &[u64]) {
            for &block in blocks {
                black_box(workloads::$workload::read_block(tables, block));
            }
        }
    };
}

lookups!(
    /// `overhead/all-sites-off`, `hotkern`.
    all_sites_off_hotkern,
    patched
);
lookups!(
    /// `overhead/all-sites-off`, `hotkern-branch`.
    all_sites_off_branch,
    branch
);
lookups!(
    /// `overhead/all-sites-off`, `none`.
    all_sites_off_none,
    plain
);

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop of `four_a_turn!`: first turn, turns.
    type Turns = fn(u64, u64);

    /// Every loop of this module, by name, for the test of their alignment.
    const ALL: [(&str, Turns); 7] = [
        ("event_disabled_hotkern", event_disabled_hotkern),
        ("event_disabled_branch", event_disabled_branch),
        ("event_disabled_tracing", event_disabled_tracing),
        ("event_disabled_none", event_disabled_none),
        ("function_disabled_hotkern", function_disabled_hotkern),
        ("function_disabled_branch", function_disabled_branch),
        ("function_disabled_none", function_disabled_none),
    ];

    #[test]
    fn every_compared_loop_starts_a_cache_line() {
        for (name, run) in ALL {
            let address = run as usize;
            assert_eq!(address % 64, 0, "{name} at {address:#x}");
        }
        for (name, run) in [
            (
                "all_sites_off_hotkern",
                all_sites_off_hotkern as fn(&mut _, &_),
            ),
            ("all_sites_off_branch", all_sites_off_branch),
            ("all_sites_off_none", all_sites_off_none),
        ] {
            let address = run as usize;
            assert_eq!(address % 64, 0, "{name} at {address:#x}");
        }
    }
}
