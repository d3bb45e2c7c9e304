//! Statistics every command's figures share: the benchmarks' cases, the
//! boot report's resizes and the tour's latencies take the same median, so
//! that their figures compare.

/// The median of `values`: the middle value of an odd count and the mean
/// of the two middle values of an even count; 0 for no values.
pub fn median(values: &[u64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[mid] as f64,
        // Halves first: the sum of two large samples could overflow.
        _ => sorted[mid - 1] as f64 / 2.0 + sorted[mid] as f64 / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[7]), 7.0);
        assert_eq!(median(&[9, 1, 5]), 5.0);
        assert_eq!(median(&[4, 1, 3, 10]), 3.5);
        assert_eq!(median(&[u64::MAX, u64::MAX]), u64::MAX as f64);
    }
}
