//! Fixed-size lateness histogram (log-linear buckets) so percentile stats
//! cost O(1) memory regardless of how many packets a shell carries.
//! Resolution: 1 us below 1 ms, 10 us below 100 ms, 1 ms below 10 s.

const R1: u64 = 1_000; // us covered by 1 us buckets
const R2: u64 = 100_000; // us covered by 10 us buckets
const R3: u64 = 10_000_000; // us covered by 1 ms buckets
const N1: usize = R1 as usize;
const N2: usize = ((R2 - R1) / 10) as usize;
const N3: usize = ((R3 - R2) / 1000) as usize;
const NB: usize = N1 + N2 + N3 + 1; // + overflow bucket

#[derive(Clone)]
pub struct Hist {
    buckets: Vec<u64>,
    count: u64,
    max_us: u64,
    sum_us: u128,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    pub fn new() -> Hist {
        Hist { buckets: vec![0; NB], count: 0, max_us: 0, sum_us: 0 }
    }

    fn index(us: u64) -> usize {
        if us < R1 {
            us as usize
        } else if us < R2 {
            N1 + ((us - R1) / 10) as usize
        } else if us < R3 {
            N1 + N2 + ((us - R2) / 1000) as usize
        } else {
            NB - 1
        }
    }

    /// Upper edge of a bucket: percentiles report the conservative bound.
    fn upper(idx: usize) -> u64 {
        if idx < N1 {
            idx as u64
        } else if idx < N1 + N2 {
            R1 + ((idx - N1) as u64 + 1) * 10 - 1
        } else if idx < N1 + N2 + N3 {
            R2 + ((idx - N1 - N2) as u64 + 1) * 1000 - 1
        } else {
            u64::MAX
        }
    }

    pub fn record_us(&mut self, us: u64) {
        self.buckets[Self::index(us)] += 1;
        self.count += 1;
        self.sum_us += us as u128;
        if us > self.max_us {
            self.max_us = us;
        }
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.record_us(ns / 1000);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max_us(&self) -> u64 {
        self.max_us
    }

    pub fn mean_us(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.sum_us as f64 / self.count as f64 }
    }

    /// How many values were at least `us`, exactly when `us` is a bucket's lower edge (every
    /// whole us below 1 ms, every 10 us below 100 ms, every ms above): the pooled share of
    /// packets late by 1 ms or more is then summed over shells without a quantile's rounding.
    pub fn count_at_least_us(&self, us: u64) -> u64 {
        self.buckets[Self::index(us)..].iter().sum()
    }

    /// q in [0,1]; returns 0 for an empty histogram.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut acc = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return Self::upper(i).min(self.max_us);
            }
        }
        self.max_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn quantiles() {
        let mut h = Hist::new();
        assert_eq!(h.quantile_us(0.99), 0);
        for us in 0..1000u64 {
            h.record_us(us);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.quantile_us(0.5), 499);
        assert_eq!(h.quantile_us(0.99), 989);
        assert_eq!(h.max_us(), 999);
        h.record_us(5_000);
        h.record_us(50_000_000);
        assert_eq!(h.max_us(), 50_000_000);
        assert_eq!(h.quantile_us(1.0), 50_000_000);
        assert_eq!(h.count_at_least_us(1_000), 2);
        assert_eq!(h.count_at_least_us(990), 12);
        assert_eq!(h.count_at_least_us(0), 1002);
        let mut g = Hist::new();
        g.record_us(12_345);
        assert_eq!(g.quantile_us(0.5), 12_345); // clamped to max
        g.record_us(20_000);
        assert!(g.quantile_us(0.5) >= 12_345 && g.quantile_us(0.5) < 12_360);
    }
}
