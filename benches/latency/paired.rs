//! The paired verdict's statistics: is one system's tail latency in a row no worse than
//! another's, within a tolerance, at 95 % confidence?
//!
//! A block runs every system once, in a fresh random order, so the systems of one block share
//! the machine's state of the moment; the log of the ratio of two systems' quantiles in one
//! block is one paired observation. The Hodges–Lehmann shift (the median of the Walsh
//! averages of the observations) estimates the typical log-ratio, robust to the odd block a
//! descheduled worker ruined; its one-sided upper confidence bound is a Walsh average picked
//! by the exact null distribution of the Wilcoxon signed-rank statistic, so it assumes no
//! distribution beyond symmetry about the shift.

/// The Hodges–Lehmann shift of some paired log-ratios, and its upper confidence bound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shift {
    /// The median of the Walsh averages.
    pub(crate) estimate: f64,
    /// The one-sided upper bound at confidence `1 - alpha`; infinite when there are too few
    /// observations to reach that confidence at all.
    pub(crate) upper: f64,
}

/// Every Walsh average `(x[i] + x[j]) / 2` for `i <= j`, sorted.
fn walsh(x: &[f64]) -> Vec<f64> {
    let mut w = Vec::with_capacity(x.len() * (x.len() + 1) / 2);
    for i in 0..x.len() {
        for j in i..x.len() {
            w.push((x[i] + x[j]) / 2.0);
        }
    }
    w.sort_by(f64::total_cmp);
    w
}

/// `P(T <= t)` for `t` in `0..=n(n+1)/2`, where `T` is the signed-rank statistic of `n`
/// observations under the null: the number of subsets of `{1..n}` with sum `t`, over `2^n`.
fn signed_rank_cdf(n: usize) -> Vec<f64> {
    let top = n * (n + 1) / 2;
    let mut ways = vec![0f64; top + 1];
    ways[0] = 1.0;
    for rank in 1..=n {
        for t in (rank..=top).rev() {
            ways[t] += ways[t - rank];
        }
    }
    let total = 2f64.powi(n as i32);
    let mut below = 0.0;
    ways.iter()
        .map(|w| {
            below += w;
            below / total
        })
        .collect()
}

/// How many Walsh averages the upper bound leaves above it, plus one: the largest `c` with
/// `P(T <= c - 1) <= alpha` (0 when even `P(T <= 0)` is more than `alpha`). Remembered per
/// `(n, alpha)`: the bootstrap asks for the same few thousands of times.
fn cut(n: usize, alpha: f64) -> usize {
    thread_local! {
        static CUTS: std::cell::RefCell<Vec<((usize, u64), usize)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = (n, alpha.to_bits());
    CUTS.with_borrow_mut(|cuts| {
        if let Some(&(_, c)) = cuts.iter().find(|(k, _)| *k == key) {
            return c;
        }
        let c = signed_rank_cdf(n)
            .iter()
            .take_while(|&&p| p <= alpha)
            .count();
        cuts.push((key, c));
        c
    })
}

/// The Hodges–Lehmann shift of `x` and its one-sided upper bound at confidence `1 - alpha`:
/// the Walsh average of rank `M + 1 - c` of the `M`, with `c` from [`cut`].
pub(crate) fn shift(x: &[f64], alpha: f64) -> Shift {
    let w = walsh(x);
    if w.is_empty() {
        return Shift {
            estimate: f64::NAN,
            upper: f64::INFINITY,
        };
    }
    let m = w.len();
    let estimate = if m % 2 == 1 {
        w[m / 2]
    } else {
        (w[m / 2 - 1] + w[m / 2]) / 2.0
    };
    let c = cut(x.len(), alpha);
    let upper = if c == 0 { f64::INFINITY } else { w[m - c] };
    Shift { estimate, upper }
}

/// A small deterministic generator (xorshift64*) for the blocks' orders and the bootstrap:
/// the bench needs no statistical quality beyond "not the same order every time".
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `0..n` in a random order (Fisher–Yates).
    pub(crate) fn order(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i + 1));
        }
        v
    }
}

/// The share of `resamples` bootstrap resamples of `size` blocks (drawn with replacement
/// from the blocks measured, each test of `tests` resampled by the same block indices) in
/// which every test passes: the upper bound of test `k`'s log-ratios below `limits[k]`. Used
/// on the A/A comparison, it estimates how often a run of `size` blocks passes a system level
/// with itself (with `size` above the blocks measured, as far as they represent the machine).
pub(crate) fn pass_rate(
    tests: &[Vec<f64>],
    limits: &[f64],
    alpha: f64,
    (resamples, size): (usize, usize),
    rng: &mut Rng,
) -> f64 {
    let Some(blocks) = tests.first().map(Vec::len).filter(|&b| b > 0) else {
        return f64::NAN;
    };
    let mut passed = 0;
    let mut sample = vec![0.0; size];
    for _ in 0..resamples {
        let picks: Vec<usize> = (0..size).map(|_| rng.below(blocks)).collect();
        let all = tests.iter().zip(limits).all(|(x, &limit)| {
            for (s, &i) in sample.iter_mut().zip(&picks) {
                *s = x[i];
            }
            shift(&sample, alpha).upper < limit
        });
        passed += usize::from(all);
    }
    passed as f64 / resamples as f64
}

/// Checks the statistics against published values before any run relies on them (a bench has
/// no test harness; this runs in every invocation, in microseconds).
pub(crate) fn self_check() {
    // The signed-rank statistic's one-sided 5 % critical values (Wilcoxon's table): for
    // n = 10, P(T <= 10) = 0.042 and P(T <= 11) = 0.053; for n = 20, P(T <= 60) = 0.0487
    // and P(T <= 61) = 0.0527; n = 4 cannot reach 5 % (P(T <= 0) = 1/16).
    assert_eq!(cut(10, 0.05), 11, "signed-rank critical value, n = 10");
    assert_eq!(cut(20, 0.05), 61, "signed-rank critical value, n = 20");
    assert_eq!(cut(4, 0.05), 0, "signed-rank critical value, n = 4");
    // n = 5: only the largest Walsh average is a 96.9 % upper bound.
    let five = shift(&[1.0, 2.0, 3.0, 4.0, 10.0], 0.05);
    assert_eq!(five.upper, 10.0, "n = 5 upper bound");
    // 1..=10: the Walsh averages are symmetric about 5.5; the bound is the 45th of 55.
    let ten: Vec<f64> = (1..=10).map(f64::from).collect();
    let s = shift(&ten, 0.05);
    assert_eq!(s.estimate, 5.5, "HL estimate of 1..=10");
    assert_eq!(s.upper, walsh(&ten)[44], "upper bound of 1..=10");
    assert!(s.upper > s.estimate && s.upper < 10.0);
}
