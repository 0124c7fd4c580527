//! The one percentile jobcast reports: the simulator's summaries, the
//! bench's latencies and the service's live error figures all mean the
//! same thing by "P90".

/// The `p`-th percentile (0–100) of ascending `sorted` values, interpolating
/// linearly between the closest ranks (the definition of numpy's default
/// and of R's type 7); `None` when there are no values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p / 100.0).clamp(0.0, 1.0) * last as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// The median of `v` (the mean of the two middle values of an even
/// count), found in linear time: `v` is reordered, not sorted.
/// `percentile(sorted, 50.0)` is the same value up to rounding, but needs
/// the values sorted.
pub fn median(mut v: Vec<f64>) -> f64 {
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *m;
    if v.len() % 2 == 1 {
        upper
    } else {
        let lower = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        // 90 % of the way from rank 0 to rank 3: 2.7, between 3 and 4.
        assert!((percentile(&v, 90.0).unwrap() - 3.7).abs() < 1e-12);
        // Out of range clamps; one value is every percentile; none is none.
        assert_eq!(percentile(&v, 150.0), Some(4.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
