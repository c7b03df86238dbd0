//! Summaries of timing samples.

use serde::{Deserialize, Serialize};

/// Median and spread of a set of samples (milliseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Number of samples.
    pub n: usize,
}

/// The `q`-quantile (0..=1) of sorted samples, linearly interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

impl Summary {
    /// Summarises samples (non-finite ones are dropped); `None` when none is left.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        Some(Summary {
            median: quantile(&s, 0.5),
            p10: quantile(&s, 0.1),
            p90: quantile(&s, 0.9),
            min: s[0],
            max: s[s.len() - 1],
            n: s.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0, f64::NAN]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 5));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12);
        assert_eq!(Summary::of(&[2.5]).unwrap().p90, 2.5);
        assert!(Summary::of(&[]).is_none());
    }
}
