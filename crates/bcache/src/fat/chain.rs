//! Noticing that a cluster chain comes back to a cluster it already
//! visited, with constant memory.
//!
//! A FAT chain is a walk through a function (cluster → its FAT entry), so
//! once a cluster repeats the walk cycles for ever and never reaches an
//! end-of-chain mark. Brent's algorithm finds such a cycle while the walk
//! goes on: it keeps one remembered cluster (the tortoise), moved to the
//! current cluster after 1, 2, 4, 8, … steps, and compares each new cluster
//! with it. A bitmap over the volume's clusters would need up to 32 MiB on
//! FAT32; this needs three words and one comparison per cluster.

/// Brent's cycle detection, fed one cluster at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoopDetector {
    /// The remembered cluster, at chain index 2^k − 1.
    tortoise: u32,
    /// How many clusters to compare with the tortoise before moving it.
    power: u64,
    /// Clusters compared with the current tortoise.
    steps: u64,
}

impl LoopDetector {
    /// Starts watching a chain whose first cluster is `first`.
    pub fn new(first: u32) -> Self {
        LoopDetector {
            tortoise: first,
            power: 1,
            steps: 0,
        }
    }

    /// Records the chain's next cluster. `Some(length)` once the chain is
    /// known to loop, `length` being the number of clusters in the cycle.
    ///
    /// If the first repeated cluster is at chain index `r` (the chain's
    /// first cluster is index 0), the loop is reported at an index below
    /// `3 × (r + 1)`: callers that only care about repeats among the first
    /// `n` clusters can stop looking at index `3n`.
    pub fn step(&mut self, cluster: u32) -> Option<u64> {
        self.steps += 1;
        if cluster == self.tortoise {
            return Some(self.steps);
        }
        if self.steps == self.power {
            self.tortoise = cluster;
            self.power = self.power.saturating_mul(2);
            self.steps = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::LoopDetector;
    use alloc::vec::Vec;

    /// The chain 0, 1, …, tail + cycle − 1, then back to `tail`.
    fn chain(tail: u32, cycle: u32) -> impl Iterator<Item = u32> {
        (0u32..).map(move |i| {
            if i < tail {
                i
            } else {
                tail + (i - tail) % cycle
            }
        })
    }

    #[test]
    fn every_loop_is_found_with_its_length_before_three_times_its_first_repeat() {
        for tail in 0..70 {
            for cycle in 1..70 {
                let mut walk = chain(tail, cycle);
                let mut detector = LoopDetector::new(walk.next().unwrap());
                let first_repeat = u64::from(tail + cycle);
                let (index, length) = walk
                    .enumerate()
                    .find_map(|(i, c)| detector.step(c).map(|length| (i as u64 + 1, length)))
                    .unwrap();
                assert_eq!(length, u64::from(cycle), "tail {tail} cycle {cycle}");
                assert!(index >= first_repeat, "tail {tail} cycle {cycle}");
                assert!(index < 3 * (first_repeat + 1), "tail {tail} cycle {cycle}");
            }
        }
    }

    #[test]
    fn distinct_clusters_never_report_a_loop() {
        let clusters: Vec<u32> = (0..5000).map(|i| (i * 7919) % 5003).collect();
        let mut detector = LoopDetector::new(clusters[0]);
        assert!(clusters[1..].iter().all(|&c| detector.step(c).is_none()));
    }
}
