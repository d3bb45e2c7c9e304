//! The `uftrace` peer: a C function compiled with `-pg` and recorded by
//! `uftrace record`, the function_graph tracer of user space.
//!
//! `c/uftrace_bench.c` (hotkern's `traced_call`, one call per loop turn,
//! hotkern's timing) is compiled twice at the same `-O2`: with `-pg`, run
//! under `uftrace record` (its libmcount, preloaded, takes every `mcount`
//! call: an entry record, and a hooked return address that writes the exit
//! record), and without, run bare. `function_graph/pair` is the difference
//! per call: what uftrace adds to a call, not counting the call itself
//! (which hotkern's figure does count). The recorded data goes to a scratch
//! directory that is removed afterwards.

use std::process::Command;

use super::tools::{self, NotMeasured, Scratch};

/// The peer's name in the report.
pub const NAME: &str = "uftrace";

/// What to install for it.
const PACKAGES: &str = "uftrace";

const BENCH_C: &str = include_str!("c/uftrace_bench.c");

/// Traced and untraced ns per call, and what tracing adds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// ns per call under `uftrace record`.
    pub traced: f64,
    /// ns per call of the build without `-pg`.
    pub untraced: f64,
}

impl Pair {
    /// ns uftrace adds per call: its entry + exit pair.
    pub fn added(self) -> f64 {
        (self.traced - self.untraced).max(0.0)
    }
}

/// `function_graph/pair` from `ops` calls in `runs` runs (the fastest
/// counts).
pub fn measure(ops: u64, runs: u64) -> Result<Pair, NotMeasured> {
    tools::require(&["cc", "uftrace"], PACKAGES)?;
    let scratch = Scratch::new(NAME)?;
    scratch.write(&[("timing.h", tools::TIMING_H), ("uftrace_bench.c", BENCH_C)])?;
    let dir = scratch.path();
    let traced = tools::compile(dir, "traced", &["uftrace_bench.c"], &["-pg"], PACKAGES)?;
    let untraced = tools::compile(dir, "untraced", &["uftrace_bench.c"], &[], PACKAGES)?;
    let counts = [ops.to_string(), runs.to_string()];
    let bare = tools::run(
        "the uftrace peer, untraced",
        Command::new(&untraced).args(&counts),
    )?;
    let recorded = tools::run(
        "uftrace record",
        Command::new("uftrace")
            .arg("record")
            .arg("--data")
            .arg(dir.join("uftrace.data"))
            .arg(&traced)
            .args(&counts),
    )?;
    let case = "function_graph/pair";
    Ok(Pair {
        traced: tools::figure(&String::from_utf8_lossy(&recorded.stdout), case)?,
        untraced: tools::figure(&String::from_utf8_lossy(&bare.stdout), case)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_is_traced_minus_untraced_never_negative() {
        let pair = Pair {
            traced: 88.9,
            untraced: 1.4,
        };
        assert!((pair.added() - 87.5).abs() < 1e-9);
        let noise = Pair {
            traced: 1.3,
            untraced: 1.4,
        };
        assert_eq!(noise.added(), 0.0);
    }
}
