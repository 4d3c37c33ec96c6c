"""Rank-test math: the shift between two samples and its one-sided bounds.

Pure functions over plain numbers; no I/O. The rules that turn these
figures into a verdict are in :mod:`benchgate.rules`.

Method
------
One sample per *trial* (a trial is one full benchmark pass of the workload;
its value is, e.g., the trial's output tokens/s or its median TTFT). For each
metric we compare the candidate's trials with the baseline's trials:

* **Test**: one-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``), with the
  alternative set by the metric's direction (throughput: candidate *less*;
  latency: candidate *greater*). Exact p-values for small samples, so three
  trials per side can reach p = 1/20 = 0.05 when the samples separate fully.
* **Effect size**: the Hodges-Lehmann estimate of the shift between the two
  samples, taken on the *log* scale: the median of all ``m*n`` pairwise
  ``log(candidate_i) - log(baseline_j)``. ``exp(shift) - 1`` is the relative
  change (-0.27 = 27% lower). Working in logs makes the estimate a ratio, so a
  threshold in percent means the same on a fast and on a slow host.
* **Confidence bounds**: the distribution-free (Moses) interval for that shift,
  read off the sorted pairwise differences at ranks given by the exact null
  distribution of U. Each end is a one-sided ``confidence`` bound (default
  95%), so together they form a two-sided ``2*confidence - 1`` interval (90%).
  One-sided bounds are what the decision needs ("is the regression at most
  5%?") and, unlike a two-sided 95% interval, they exist with 3 + 3 trials.

Why this and not a bootstrap of the ratio of medians: with 3-10 trials a
bootstrap has only a handful of distinct resamples and under-covers badly; the
rank interval is exact for any continuous distribution under a shift model, is
deterministic (no seed), costs nothing, and ranks make it robust to heavy tails
and single outlier trials. It is the same pairing Kayenta's Mann-Whitney judge
uses (test + Hodges-Lehmann interval + an effect-size check).

Runs: the level moves between them
-----------------------------------
A measurement run is one pass of the workload's trials, back to back (the
baseline; the candidate; A-B-A's second baseline; the candidate's extra
trials). On a shared host the level of the whole machine moves over minutes:
on the 2-core demo host the same release measured 4-6% apart (standard
deviation) from one run to the next, restarted or not, while the trials of
one run agreed to 2-5% (lab/notes/benchmarks.md, "Noise on a 2-core machine").
The rank interval above is built from trials and knows nothing of that, so
it is far too narrow when each side is one run. ``run_spread_pct`` (default
0: on a GPU host runs agree to 0.1-0.3%) is that standard deviation of a
run's level in percent, as measured on the host (``lab/experiments/noise_floor.py``,
the A/A mode of ``playbooks/upgrade.yml``). When set, each one-sided bound
moves away from the estimate to ``sqrt(d**2 + (z * s * sqrt(1/k_b + 1/k_c))**2)``
on the log scale, where ``d`` is the rank bound's distance, ``z`` the normal
quantile of ``confidence``, ``s`` the spread and ``k_b``/``k_c`` the runs per
side (the ``run`` labels ``merge_results`` gives; one result is one run). The
two parts add as independent variances do. More runs per side (A-B-A, the
extra candidate trials) narrow it; more trials of one run cannot. The
smallest limit a schedule can decide follows: see :func:`decidable_limit_pct`.

Pairs: side by side
-------------------
Measured side by side (``bench.run_side_by_side_async``), trial i of the
baseline and trial i of the candidate ran back to back with the same prompts,
in the order A B, then B A (ABBA). Whatever the machine did over those few
seconds, it did to both; between pairs it may have done anything. So with
``paired`` the two sides are judged as pairs: the change is the
Hodges-Lehmann estimate of the pairs' log-ratios (the median of their Walsh
averages), its one-sided bounds the Walsh averages at the exact Wilcoxon
signed-rank critical rank, and the p-values Wilcoxon's. The run-to-run
spread is not added (both sides share every run), and no trials are set
aside (a pair has to stay whole). A pair with an invalid trial on either
side is dropped.

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

# Exact U distribution up to this m*n; the normal approximation beyond.
_EXACT_MAX_MN = 10_000


@dataclass(frozen=True)
class ShiftEstimate:
    """Hodges-Lehmann log-shift of candidate vs baseline, as relative changes."""

    change: float  # exp(HL) - 1: -0.27 means the candidate is 27% lower
    change_lo: float  # one-sided lower bound of change (-inf if unattainable)
    change_hi: float  # one-sided upper bound of change (+inf if unattainable)
    p_lower: float  # one-sided U-test p-value for "candidate lower"
    p_higher: float  # one-sided U-test p-value for "candidate higher"


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sample."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of an empty sample")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _u_null_cdf_counts(m: int, n: int) -> list[int]:
    """Number of arrangements giving U = 0..m*n under H0 (no ties).

    The counts are the coefficients of the Gaussian binomial [m+n choose m]_q,
    built as prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i) with exact integers.
    """
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), top down
        step = n + i
        for j in range(size - 1, step - 1, -1):
            poly[j] -= poly[j - step]
        # divide by (1 - q^i): running sum with stride i
        for j in range(i, size):
            poly[j] += poly[j - i]
    return poly


def _rank_for_bound(m: int, n: int, alpha: float) -> int:
    """Largest k with P(U <= k - 1) <= alpha; 0 when no bound exists.

    The k-th smallest pairwise difference is then a one-sided (1 - alpha)
    lower bound for the shift, and the k-th largest an upper bound.
    """
    if m * n <= _EXACT_MAX_MN:
        counts = _u_null_cdf_counts(m, n)
        total = math.comb(m + n, m)
        k = 0
        cum = 0
        for u in range(len(counts)):
            cum += counts[u]
            # P(U <= u) <= alpha allows k = u + 1 (tiny slack for float rounding)
            if cum <= alpha * total * (1 + 1e-12):
                k = u + 1
            else:
                break
        return k
    # Normal approximation for large samples.
    from scipy.stats import norm

    z = float(norm.ppf(1.0 - alpha))
    mean = m * n / 2.0
    sd = math.sqrt(m * n * (m + n + 1) / 12.0)
    return max(0, int(math.floor(mean - z * sd)))


def _signed_rank_counts(n: int) -> list[int]:
    """Number of sign patterns giving the signed-rank sum T+ = 0..n(n+1)/2 under H0."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for t in range(len(counts) - 1, rank - 1, -1):
            counts[t] += counts[t - rank]
    return counts


def signed_rank_shift(
    baseline: Sequence[float], candidate: Sequence[float], alpha: float = 0.05
) -> ShiftEstimate:
    """Relative change of ``candidate`` over ``baseline`` from pairs (``baseline[i]``
    with ``candidate[i]``), with one-sided bounds: see "Pairs" in the module docstring.

    All values must be positive and finite; both lists the same length.
    """
    from scipy.stats import wilcoxon

    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("pairs need two lists of the same, non-zero length")
    d = [math.log(c) - math.log(b) for b, c in zip(baseline, candidate, strict=True)]
    n = len(d)
    walsh = sorted((d[i] + d[j]) / 2.0 for i in range(n) for j in range(i, n))
    shift = median(walsh)
    counts = _signed_rank_counts(n)
    total = 2**n
    k = 0
    cum = 0
    for t, count in enumerate(counts):
        cum += count
        if cum <= alpha * total * (1 + 1e-12):
            k = t + 1
        else:
            break
    lo, hi = (walsh[k - 1], walsh[len(walsh) - k]) if k >= 1 else (-math.inf, math.inf)
    if all(x == 0 for x in d):
        p_lower = p_higher = 1.0
    else:
        p_lower = float(wilcoxon(d, alternative="less").pvalue)
        p_higher = float(wilcoxon(d, alternative="greater").pvalue)
    return ShiftEstimate(
        change=math.expm1(shift),
        change_lo=math.expm1(lo) if math.isfinite(lo) else -math.inf,
        change_hi=math.expm1(hi) if math.isfinite(hi) else math.inf,
        p_lower=p_lower,
        p_higher=p_higher,
    )


def hodges_lehmann(
    baseline: Sequence[float], candidate: Sequence[float], alpha: float = 0.05
) -> ShiftEstimate:
    """Relative shift of ``candidate`` over ``baseline`` with one-sided bounds.

    All values must be positive and finite (use :func:`benchgate.samples.clean_samples`).
    """
    from scipy.stats import mannwhitneyu

    if len(baseline) < 1 or len(candidate) < 1:
        raise ValueError("both samples need at least one value")
    lb = [math.log(x) for x in baseline]
    lc = [math.log(x) for x in candidate]
    diffs = sorted(c - b for c in lc for b in lb)
    shift = median(diffs)
    k = _rank_for_bound(len(lc), len(lb), alpha)
    if k >= 1:
        lo, hi = diffs[k - 1], diffs[len(diffs) - k]
    else:
        lo, hi = -math.inf, math.inf

    method = "auto"
    p_lower = float(mannwhitneyu(lc, lb, alternative="less", method=method).pvalue)
    p_higher = float(mannwhitneyu(lc, lb, alternative="greater", method=method).pvalue)
    return ShiftEstimate(
        change=math.expm1(shift),
        change_lo=math.expm1(lo) if math.isfinite(lo) else -math.inf,
        change_hi=math.expm1(hi) if math.isfinite(hi) else math.inf,
        p_lower=p_lower,
        p_higher=p_higher,
    )


def _run_term(spread_pct: float, runs: tuple[int, int], alpha: float) -> float:
    """The run-to-run part of a bound's distance, on the log scale."""
    from statistics import NormalDist

    k_b, k_c = (max(1, k) for k in runs)
    return (
        NormalDist().inv_cdf(1.0 - alpha)
        * math.log1p(spread_pct / 100.0)
        * math.sqrt(1.0 / k_b + 1.0 / k_c)
    )


def decidable_limit_pct(spread_pct: float, runs: tuple[int, int], alpha: float = 0.05) -> float:
    """The smallest regression limit that identical releases PASS with probability
    ``1 - alpha`` from the run-to-run spread alone: their estimate scatters by the
    same normal term the bound adds, so the bound stays within the limit only
    when the limit is twice that term (the trials' own noise comes on top)."""
    return 100.0 * math.expm1(2.0 * _run_term(spread_pct, runs, alpha))


def widen_for_runs(
    est: ShiftEstimate, spread_pct: float, runs: tuple[int, int], alpha: float
) -> ShiftEstimate:
    """``est`` with both bounds widened by the run-to-run spread (module docstring,
    "Runs"); unchanged when the spread is 0 or a bound is unattainable."""
    if spread_pct <= 0 or not (math.isfinite(est.change_lo) and math.isfinite(est.change_hi)):
        return est
    extra = _run_term(spread_pct, runs, alpha)
    shift = math.log1p(est.change)
    down = shift - math.log1p(est.change_lo)
    up = math.log1p(est.change_hi) - shift
    return replace(
        est,
        change_lo=math.expm1(shift - math.hypot(down, extra)),
        change_hi=math.expm1(shift + math.hypot(up, extra)),
    )


def count_outliers(values: Sequence[float], z: float = 3.5) -> int:
    """Trials whose robust z-score (median/MAD) exceeds ``z``.

    Reported only: the rank statistics above already bound the influence of a
    single wild trial, and dropping slow trials could hide a real regression.
    """
    if len(values) < 3:
        return 0
    med = median(values)
    mad = median([abs(v - med) for v in values])
    if mad == 0:
        return 0
    return sum(1 for v in values if 0.6745 * abs(v - med) / mad > z)
