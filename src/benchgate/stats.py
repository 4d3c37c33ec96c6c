"""The regression judge: is the candidate release slower than the baseline?

Pure functions over plain numbers; no I/O. The CLI (``benchgate judge``), the
Ansible module ``benchgate_gate`` and the decision-quality benchmark all call
:func:`judge_results` (or :func:`judge` on samples already extracted).

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

Decision rule (per metric)
--------------------------
Let ``reg`` be the regression in percent, oriented so that positive is worse
(throughput: ``-change``; latency: ``+change``), ``reg_lo <= reg <= reg_hi`` its
one-sided confidence bounds, ``p`` the one-sided U-test p-value for a
regression, ``limit`` the metric's ``max_regression_pct``:

1. INCONCLUSIVE if either side has fewer than ``min_trials`` valid samples
   (invalid trials, non-finite and non-positive values are dropped first), or
   if the bound cannot be computed at this sample size. Never PASS.
2. FAIL if ``p <= alpha`` and ``reg_lo > limit``: significant, and the whole
   one-sided interval is beyond the limit (``fail_requires_bound=True``, the
   default). With ``fail_requires_bound=False`` the point estimate suffices
   (``reg > limit``, asv's "factor + significance"): FAIL comes earlier on
   borderline changes, but identical releases then FAIL far more often (see
   "Re-runs" below).
3. PASS if ``reg_hi <= limit``: the interval excludes any regression beyond the
   limit (a small but significant regression inside the limit passes).
4. INCONCLUSIVE otherwise: the interval is too wide to tell. More trials help.

Overall verdict
---------------
* *Critical* metrics (default ``output_tokens_per_s``) must each PASS; one
  FAIL makes the overall verdict FAIL, one INCONCLUSIVE makes it INCONCLUSIVE.
  If none of the judged metrics is listed as critical, all of them are.
* *Non-critical* metrics: a FAIL fails the overall verdict too when
  ``noncritical_fail == "fail"`` (the default: a 30% TTFT regression is a
  slowdown users see, and whoever set a limit on it meant it), or is only
  reported when it is ``"warn"``. An INCONCLUSIVE non-critical metric is
  reported, never blocking.
* An invalid trial on either side (errors beyond the workload's limit) turns
  a PASS into INCONCLUSIVE: the valid trials alone cannot pass a server that
  crashed or hung during the measurement.
* FAIL beats INCONCLUSIVE beats PASS. INCONCLUSIVE is for the caller to
  resolve (default: block); :func:`needs_more_trials` says whether to measure
  again first.

Re-runs and false blocks
------------------------
Callers judge again after adding trials (``playbooks/upgrade.yml``: one round
of more candidate trials against the same baseline), and every metric gets a
FAIL test at every look. Under the bound rule a FAIL of an identical release
needs the lower bound of its regression above the limit, an event of
probability below ``alpha`` per look and metric (in practice far below: the
bound must exceed the limit, not 0), so false FAILs stay rare over several
looks and metrics. With the point-estimate rule each look and each metric adds
up to about ``alpha`` (``lab/experiments/gate_decision_quality.py``: about 6% of
identical releases failed on 8+8 trials with one re-run, most of them on TTFT
or TPOT; 0-0.2% under the bound rule). A real regression well beyond the limit
is blocked either way: while its bound does not clear the limit it is
INCONCLUSIVE, which blocks too. What is left is INCONCLUSIVE at the end of the
budget, which only more trials reduce, above all more baseline trials: a
candidate-only re-run cannot shrink the baseline's share of the noise.

Bursts
------
Noise on a shared machine only ever slows a trial down, and it comes in
bursts that span several trials (lab/notes/benchmarks.md, "Noise on a 2-core
machine"). The rank statistics above already resist a short burst: 4 slow
trials of 16 barely move the bound. ``set_aside_slowest`` (default 0, off)
sets the same share of each measurement run's slowest trials aside before
the test (throughput: the lowest values; latency: the highest), so a burst
shorter than that share of a run cannot drag the verdict; only while
``SET_ASIDE_KEEPS`` (6) trials stay in the run, so small samples (3-5 trials,
enough on a quiet GPU) are judged whole. Per run, not per side: A-B-A's two
baselines drift apart and the cancellation needs both. A real regression
slows every trial and still shows; a release that is slow only in some
trials (a stall every minute) is judged on its good trials, which is the
price, and why it is off by default. The reason names how many trials were
set aside.

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

Reasons
-------
Every reason tells one story: the Hodges-Lehmann estimate of the change and
its two-sided ``2*confidence - 1`` interval, in words ("4.1% worse than the
baseline's 369.1 tok/s (90% interval 8.6% worse to 13.0% better)"); the
candidate's median is not shown, since it can point the other way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from . import numfmt

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

#: Metrics where a larger value is better. Everything else is a latency.
HIGHER_IS_BETTER = frozenset(
    {
        "output_tokens_per_s",
        "request_throughput",
        "total_tokens_per_s",
        "input_tokens_per_s",
        "goodput",
        "acceptance_rate",
    }
)
#: Metrics where a smaller value is better.
LOWER_IS_BETTER = frozenset({"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"})

DEFAULT_METRICS = ("output_tokens_per_s", "ttft_ms", "tpot_ms")
# The largest tolerated regression, percent, where nothing else is set: the
# gate module, `benchgate judge` and the benchgate role read this value (a test
# checks the literals that Ansible needs in documentation and defaults).
DEFAULT_MAX_REGRESSION_PCT = 5.0
DEFAULT_CRITICAL = ("output_tokens_per_s",)
LATENCY_STATS = ("median", "mean", "p50", "p90", "p95", "p99")

#: Units shown in reasons.
_UNITS = {
    "output_tokens_per_s": "tok/s",
    "total_tokens_per_s": "tok/s",
    "input_tokens_per_s": "tok/s",
    "request_throughput": "req/s",
    "goodput": "req/s",
    "ttft_ms": "ms",
    "tpot_ms": "ms",
    "itl_ms": "ms",
    "e2el_ms": "ms",
}

#: Trials are set aside only while this many stay on each side: with fewer,
#: the exact rank test loses too much (3+3 trials reach p = 0.05 at best).
SET_ASIDE_KEEPS = 6

# Exact U distribution up to this m*n; the normal approximation beyond.
_EXACT_MAX_MN = 10_000


class Direction(str, Enum):
    """Which way is better for a metric."""

    HIGHER = "higher"
    LOWER = "lower"


def direction_of(metric: str) -> Direction:
    """Direction of a metric by name: throughputs up, latencies (``*_ms``) down."""
    if metric in HIGHER_IS_BETTER:
        return Direction.HIGHER
    if metric in LOWER_IS_BETTER or metric.endswith(("_ms", "_s_latency", "_seconds")):
        return Direction.LOWER
    if metric.endswith(("_per_s", "_throughput")):
        return Direction.HIGHER
    raise ValueError(
        f"unknown direction for metric {metric!r}: give it in MetricSpec(direction=...)"
    )


@dataclass(frozen=True)
class MetricSpec:
    """How to judge one metric."""

    name: str
    max_regression_pct: float = 5.0
    direction: Direction | None = None
    critical: bool = False

    def resolved_direction(self) -> Direction:
        return self.direction if self.direction is not None else direction_of(self.name)


@dataclass(frozen=True)
class GateConfig:
    """Judge settings shared by all metrics."""

    alpha: float = 0.05
    min_trials: int = 3
    noncritical_fail: str = "fail"  # "fail" or "warn"
    fail_requires_bound: bool = True
    latency_stat: str = "median"
    # Share of each side's trials set aside at the slow end before judging
    # (0.25: the slowest quarter). See "Bursts" in the module docstring.
    set_aside_slowest: float = 0.0
    # Standard deviation of a measurement run's level, percent (see "Runs"
    # in the module docstring); 0 = the trials of one run suffice.
    run_spread_pct: float = 0.0
    # Side by side (see "Pairs" in the module docstring): trial i of the
    # baseline and trial i of the candidate ran back to back, and are judged
    # as pairs (Wilcoxon signed-rank) instead of as two samples.
    paired: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if self.min_trials < 2:
            raise ValueError(f"min_trials must be at least 2, got {self.min_trials}")
        if self.noncritical_fail not in ("fail", "warn"):
            raise ValueError(
                f"noncritical_fail must be 'fail' or 'warn', got {self.noncritical_fail!r}"
            )
        if not 0.0 <= self.set_aside_slowest < 0.5:
            raise ValueError(f"set_aside_slowest must be in [0, 0.5), got {self.set_aside_slowest}")
        if not (math.isfinite(self.run_spread_pct) and 0.0 <= self.run_spread_pct < 100.0):
            raise ValueError(f"run_spread_pct must be in [0, 100), got {self.run_spread_pct}")
        if self.latency_stat not in LATENCY_STATS:
            raise ValueError(
                f"latency_stat must be one of {', '.join(LATENCY_STATS)}, got {self.latency_stat!r}"
            )

    @property
    def confidence(self) -> float:
        """Level of each one-sided bound."""
        return 1.0 - self.alpha


@dataclass(frozen=True)
class ShiftEstimate:
    """Hodges-Lehmann log-shift of candidate vs baseline, as relative changes."""

    change: float  # exp(HL) - 1: -0.27 means the candidate is 27% lower
    change_lo: float  # one-sided lower bound of change (-inf if unattainable)
    change_hi: float  # one-sided upper bound of change (+inf if unattainable)
    p_lower: float  # one-sided U-test p-value for "candidate lower"
    p_higher: float  # one-sided U-test p-value for "candidate higher"


@dataclass(frozen=True)
class MetricVerdict:
    """Outcome for one metric, with everything needed to explain it."""

    metric: str
    direction: str
    verdict: str
    reason: str
    critical: bool
    max_regression_pct: float
    n_baseline: int
    n_candidate: int
    baseline_median: float | None = None
    candidate_median: float | None = None
    change_pct: float | None = None
    change_lo_pct: float | None = None
    change_hi_pct: float | None = None
    regression_pct: float | None = None
    p_value: float | None = None
    dropped_baseline: int = 0
    dropped_candidate: int = 0
    outliers_baseline: int = 0
    outliers_candidate: int = 0
    set_aside_baseline: int = 0
    set_aside_candidate: int = 0
    runs_baseline: int = 1
    runs_candidate: int = 1
    run_spread_pct: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Verdict:
    """Overall verdict over all judged metrics."""

    verdict: str
    reasons: list[str]
    metrics: list[MetricVerdict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    schema: str = "benchgate.verdict/1"

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def metric(self, name: str) -> MetricVerdict:
        for m in self.metrics:
            if m.metric == name:
                return m
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "verdict": self.verdict,
            "passed": self.passed,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "metrics": [m.to_dict() for m in self.metrics],
        }


def _json_number(value: Any) -> Any:
    """JSON has no infinities: unattainable bounds become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
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
    shift = _median(walsh)
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

    All values must be positive and finite (use :func:`clean_samples`).
    """
    from scipy.stats import mannwhitneyu

    if len(baseline) < 1 or len(candidate) < 1:
        raise ValueError("both samples need at least one value")
    lb = [math.log(x) for x in baseline]
    lc = [math.log(x) for x in candidate]
    diffs = sorted(c - b for c in lc for b in lb)
    shift = _median(diffs)
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


def clean_samples(values: Iterable[Any]) -> tuple[list[float], int]:
    """Keep finite positive numbers; return them and how many were dropped."""
    kept: list[float] = []
    dropped = 0
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            dropped += 1
            continue
        f = float(v)
        if math.isfinite(f) and f > 0:
            kept.append(f)
        else:
            dropped += 1
    return kept, dropped


def set_aside_slowest(
    values: Sequence[float], direction: Direction, share: float, keep_at_least: int
) -> tuple[list[float], int]:
    """Values without the slowest ``share`` of them (``floor(share * n)``), in order.

    Slow means low for a throughput, high for a latency. Never fewer than
    ``keep_at_least`` values are kept. Returns the kept values and how many
    were set aside.
    """
    drop = min(int(share * len(values)), max(len(values) - keep_at_least, 0))
    if drop <= 0:
        return list(values), 0
    # Slowest first: ascending for a throughput, descending for a latency.
    order = sorted(
        range(len(values)), key=lambda i: values[i], reverse=direction is Direction.LOWER
    )
    gone = set(order[:drop])
    return [v for i, v in enumerate(values) if i not in gone], drop


def _set_aside_by_run(
    values: Sequence[Any],
    runs: Sequence[int] | None,
    direction: Direction,
    share: float,
    keep_at_least: int,
) -> tuple[list[float], int]:
    """Clean values, then set aside the slowest ``share`` within each run (one run if None)."""
    labels = list(runs) if runs is not None else [0] * len(values)
    if len(labels) != len(values):
        raise ValueError("one run label per value is needed")
    groups: dict[int, list[Any]] = {}
    for value, run in zip(values, labels, strict=True):
        groups.setdefault(run, []).append(value)
    kept: list[float] = []
    aside = 0
    for run in sorted(groups):
        clean, _ = clean_samples(groups[run])
        part, n = set_aside_slowest(clean, direction, share, keep_at_least)
        kept += part
        aside += n
    return kept, aside


def count_outliers(values: Sequence[float], z: float = 3.5) -> int:
    """Trials whose robust z-score (median/MAD) exceeds ``z``.

    Reported only: the rank statistics above already bound the influence of a
    single wild trial, and dropping slow trials could hide a real regression.
    """
    if len(values) < 3:
        return 0
    med = _median(values)
    mad = _median([abs(v - med) for v in values])
    if mad == 0:
        return 0
    return sum(1 for v in values if 0.6745 * abs(v - med) / mad > z)


# --------------------------------------------------------------------------
# Judge
# --------------------------------------------------------------------------


def _worse_better(change_pct: float, direction: Direction) -> str:
    """A relative change in words, oriented for the metric: "4.1% worse", "2.0% better"."""
    return numfmt.change_words(change_pct, direction is Direction.HIGHER)


def judge_metric(
    spec: MetricSpec,
    baseline: Sequence[Any],
    candidate: Sequence[Any],
    config: GateConfig | None = None,
    *,
    invalid_baseline: int = 0,
    invalid_candidate: int = 0,
    baseline_runs: Sequence[int] | None = None,
    candidate_runs: Sequence[int] | None = None,
) -> MetricVerdict:
    """Judge one metric from per-trial values (see the module docstring for the rule).

    ``invalid_*`` count trials already excluded by the caller (marked invalid),
    so that the reason can say why samples are missing. ``*_runs`` name the
    measurement run of each value (A-B-A's two baselines, a candidate's extra
    trials): the slowest trials are set aside within each run, so a drift
    between runs, which A-B-A cancels, is not taken for a burst; and they
    count the runs per side for ``config.run_spread_pct``.
    """
    cfg = config or GateConfig()
    direction = spec.resolved_direction()
    keep = max(cfg.min_trials, SET_ASIDE_KEEPS)
    full_b, b_drop = clean_samples(baseline)
    full_c, c_drop = clean_samples(candidate)
    if cfg.paired:
        # Pairs stay whole: judge_results hands clean, aligned pairs.
        if len(full_b) != len(full_c) or b_drop or c_drop:
            raise ValueError("paired judging needs clean pairs of equal number")
        b, b_aside, c, c_aside = full_b, 0, full_c, 0
    else:
        b, b_aside = _set_aside_by_run(
            baseline, baseline_runs, direction, cfg.set_aside_slowest, keep
        )
        c, c_aside = _set_aside_by_run(
            candidate, candidate_runs, direction, cfg.set_aside_slowest, keep
        )
    b_drop += invalid_baseline
    c_drop += invalid_candidate
    limit = float(spec.max_regression_pct)
    unit = _UNITS.get(spec.name, "")
    unit_s = f" {unit}" if unit else ""

    common: dict[str, Any] = {
        "metric": spec.name,
        "direction": direction.value,
        "critical": spec.critical,
        "max_regression_pct": limit,
        "n_baseline": len(full_b),
        "n_candidate": len(full_c),
        "dropped_baseline": b_drop,
        "dropped_candidate": c_drop,
        "outliers_baseline": count_outliers(full_b),
        "outliers_candidate": count_outliers(full_c),
        "set_aside_baseline": b_aside,
        "set_aside_candidate": c_aside,
        "runs_baseline": len(set(baseline_runs)) if baseline_runs else 1,
        "runs_candidate": len(set(candidate_runs)) if candidate_runs else 1,
        "run_spread_pct": cfg.run_spread_pct,
        "baseline_median": _median(full_b) if full_b else None,
        "candidate_median": _median(full_c) if full_c else None,
    }

    if len(b) < cfg.min_trials or len(c) < cfg.min_trials:
        why = (
            f"{spec.name}: too few valid trials (baseline {len(b)}, candidate {len(c)}; "
            f"need {cfg.min_trials} each"
        )
        if b_drop or c_drop:
            why += f"; dropped {b_drop} baseline, {c_drop} candidate"
        return MetricVerdict(verdict=INCONCLUSIVE, reason=why + ")", **common)

    runs = (common["runs_baseline"], common["runs_candidate"])
    if cfg.paired:
        est = signed_rank_shift(b, c, cfg.alpha)
    else:
        est = widen_for_runs(hodges_lehmann(b, c, cfg.alpha), cfg.run_spread_pct, runs, cfg.alpha)
    change = est.change * 100.0
    lo = est.change_lo * 100.0
    hi = est.change_hi * 100.0
    if direction is Direction.HIGHER:
        reg, reg_lo, reg_hi, p = -change, -hi, -lo, est.p_lower
    else:
        reg, reg_lo, reg_hi, p = change, lo, hi, est.p_higher

    # Levels as users read them: 95 and 90, or 97.5 and 95 at alpha 0.025.
    conf = f"{round(cfg.confidence * 100, 1):g}"
    two_sided = f"{round((2 * cfg.confidence - 1) * 100, 1):g}"
    # One estimate of the change, with its interval, in words that say which
    # way is worse: the medians of the two sides can point the other way.
    worst, best = (lo, hi) if direction is Direction.HIGHER else (hi, lo)
    aside = b_aside + c_aside
    head = (
        f"{spec.name}: {_worse_better(change, direction)} "
        f"{'from' if _worse_better(change, direction) == 'no change' else 'than'} the baseline's "
        f"{numfmt.figure(common['baseline_median'])}{unit_s} ({two_sided}% interval "
        f"{_worse_better(worst, direction)} to {_worse_better(best, direction)}, p={p:.3g}"
        + (f"; the slowest {b_aside}+{c_aside} trials set aside" if aside else "")
        + (
            f"; {runs[0]}+{runs[1]} runs, {cfg.run_spread_pct:g}% run-to-run spread included"
            if cfg.run_spread_pct > 0 and not cfg.paired
            else ""
        )
        + (f"; {len(b)} pairs, side by side" if cfg.paired else "")
        + ")"
    )

    significant = p <= cfg.alpha * (1 + 1e-9)
    beyond = reg_lo > limit if cfg.fail_requires_bound else reg > limit
    if significant and beyond:
        verdict = FAIL
        reason = f"{head}: worse beyond the {limit:g}% limit"
    elif reg_hi <= limit:
        verdict = PASS
        if significant and reg > 0:
            reason = f"{head}, a significant regression but within the {limit:g}% limit"
        else:
            reason = f"{head}, within the {limit:g}% limit"
    elif math.isinf(reg_hi):
        verdict = INCONCLUSIVE
        reason = (
            f"{head}, no {conf}% bound is attainable with {len(b)}+{len(c)} trials; run more trials"
        )
    else:
        verdict = INCONCLUSIVE
        # More trials of the same runs cannot narrow the run-to-run term: when
        # the limit is below what the runs can decide, say so instead.
        floor = 0.0 if cfg.paired else decidable_limit_pct(cfg.run_spread_pct, runs, cfg.alpha)
        advice = (
            f"the {limit:g}% limit is below the {floor:.1f}% that {runs[0]}+{runs[1]} runs "
            f"with a {cfg.run_spread_pct:g}% run-to-run spread can decide: raise the limit, "
            "measure more runs per side or quiet the host"
            if limit < floor
            else "run more trials"
        )
        if significant:
            reason = (
                f"{head}, a significant regression whose size cannot be told apart from "
                f"the {limit:g}% limit; {advice}"
            )
        else:
            reason = (
                f"{head}, too noisy to rule out a regression beyond the {limit:g}% limit; {advice}"
            )

    return MetricVerdict(
        verdict=verdict,
        reason=reason,
        change_pct=change,
        change_lo_pct=lo,
        change_hi_pct=hi,
        regression_pct=reg,
        p_value=p,
        **common,
    )


def combine(metric_verdicts: Sequence[MetricVerdict], config: GateConfig | None = None) -> Verdict:
    """Overall verdict from per-metric verdicts (rule in the module docstring)."""
    cfg = config or GateConfig()
    if not metric_verdicts:
        return Verdict(INCONCLUSIVE, ["no metrics were judged"], [])
    any_critical = any(m.critical for m in metric_verdicts)
    blocking_fail: list[str] = []
    blocking_open: list[str] = []
    warnings: list[str] = []
    passed: list[str] = []
    for m in metric_verdicts:
        critical = m.critical or not any_critical
        if m.verdict == FAIL:
            if critical or cfg.noncritical_fail == "fail":
                blocking_fail.append(m.reason)
            else:
                warnings.append(m.reason + " (non-critical: warning only)")
        elif m.verdict == INCONCLUSIVE:
            if critical:
                blocking_open.append(m.reason)
            else:
                warnings.append(m.reason + " (non-critical: not blocking)")
        else:
            passed.append(m.reason)
    if blocking_fail:
        return Verdict(FAIL, blocking_fail, list(metric_verdicts), warnings)
    if blocking_open:
        return Verdict(INCONCLUSIVE, blocking_open, list(metric_verdicts), warnings)
    return Verdict(PASS, passed, list(metric_verdicts), warnings)


def judge(
    baseline: Mapping[str, Sequence[Any]],
    candidate: Mapping[str, Sequence[Any]],
    specs: Sequence[MetricSpec],
    config: GateConfig | None = None,
    *,
    invalid_baseline: int = 0,
    invalid_candidate: int = 0,
    baseline_runs: Sequence[int] | None = None,
    candidate_runs: Sequence[int] | None = None,
) -> Verdict:
    """Judge several metrics given per-trial samples keyed by metric name.

    ``*_runs``: the measurement run of each trial, for every metric alike
    (see :func:`judge_metric`)."""
    cfg = config or GateConfig()
    results = [
        judge_metric(
            spec,
            baseline.get(spec.name, []),
            candidate.get(spec.name, []),
            cfg,
            invalid_baseline=invalid_baseline,
            invalid_candidate=invalid_candidate,
            baseline_runs=baseline_runs,
            candidate_runs=candidate_runs,
        )
        for spec in specs
    ]
    return combine(results, cfg)


def make_specs(
    metrics: Sequence[str] | None = None,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    thresholds: Mapping[str, float] | None = None,
    critical: Sequence[str] | None = None,
) -> list[MetricSpec]:
    """Build metric specs: a default limit, per-metric overrides, critical set."""
    names = list(metrics) if metrics else list(DEFAULT_METRICS)
    thresholds = dict(thresholds or {})
    unknown = set(thresholds) - set(names)
    names.extend(sorted(unknown))  # a threshold for a metric means: judge it
    crit = set(DEFAULT_CRITICAL if critical is None else critical)
    seen: set[str] = set()
    specs: list[MetricSpec] = []
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        limit = float(thresholds.get(name, max_regression_pct))
        if limit < 0:
            raise ValueError(f"max_regression_pct for {name} must be >= 0, got {limit}")
        specs.append(
            MetricSpec(
                name=name,
                max_regression_pct=limit,
                direction=direction_of(name),
                critical=name in crit,
            )
        )
    return specs


# --------------------------------------------------------------------------
# Result JSON adapter (schema benchgate.result/1, read tolerantly)
# --------------------------------------------------------------------------

#: Other spellings seen in results (vLLM's bench output among them).
_ALIASES = {
    "output_tokens_per_s": ("output_throughput", "output_tok_per_s", "tokens_per_s"),
    "request_throughput": ("requests_per_s", "req_per_s"),
    "total_tokens_per_s": ("total_token_throughput",),
    "ttft_ms": ("ttft",),
    "tpot_ms": ("tpot",),
    "itl_ms": ("itl",),
    "e2el_ms": ("e2el", "e2e_latency_ms"),
}


def _metric_value(metrics: Mapping[str, Any], metric: str, stat: str) -> Any:
    value: Any = None
    for key in (metric, *_ALIASES.get(metric, ())):
        if key in metrics:
            value = metrics[key]
            break
    else:
        # vLLM bench flat style: median_ttft_ms, p99_tpot_ms, ...
        flat = f"{stat}_{metric}"
        if flat in metrics:
            value = metrics[flat]
    if isinstance(value, Mapping):
        order = [stat]
        if stat == "median":
            order.append("p50")
        elif stat == "p50":
            order.append("median")
        for key in order:
            if key in value:
                return value[key]
        return None
    return value


def _trial_valid(trial: Mapping[str, Any]) -> bool:
    valid = trial.get("valid")
    if valid is None:
        # No flag: valid unless the trial says it failed.
        return not trial.get("error") and not trial.get("errors")
    return valid is True


def _trials(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    trials = result.get("trials")
    if isinstance(trials, list):
        return [t for t in trials if isinstance(t, Mapping)]
    # A single-run result with metrics at the top level counts as one trial.
    if isinstance(result.get("metrics"), Mapping):
        return [result]
    return []


def samples_and_runs(
    result: Mapping[str, Any], metric: str, stat: str = "median"
) -> tuple[list[float], list[int]]:
    """:func:`samples_from_result` and the measurement run of each value
    (``merge_results`` marks each trial with its run; 0 when unmarked)."""
    values: list[float] = []
    runs: list[int] = []
    for trial in _trials(result):
        if not _trial_valid(trial):
            continue
        metrics = trial.get("metrics")
        if not isinstance(metrics, Mapping):
            continue
        value = _metric_value(metrics, metric, stat)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        values.append(float(value))
        run = trial.get("run", 0)
        runs.append(run if isinstance(run, int) else 0)
    return values, runs


def paired_samples(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], metric: str, stat: str = "median"
) -> tuple[list[float], list[float], list[int]]:
    """The values of trials that ran as pairs (side by side): the baseline's and
    the candidate's trial with the same run and index, both valid with a
    positive, finite value; and each pair's run. In the order run."""

    def by_key(result: Mapping[str, Any]) -> dict[tuple[int, int], float]:
        out: dict[tuple[int, int], float] = {}
        for trial in _trials(result):
            metrics = trial.get("metrics")
            if not _trial_valid(trial) or not isinstance(metrics, Mapping):
                continue
            value = _metric_value(metrics, metric, stat)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not (math.isfinite(value) and value > 0):
                continue
            run = trial.get("run", 0)
            key = (run if isinstance(run, int) else 0, int(trial.get("index", -1)))
            out[key] = float(value)
        return out

    b, c = by_key(baseline), by_key(candidate)
    keys = sorted(set(b) & set(c))
    return [b[k] for k in keys], [c[k] for k in keys], [k[0] for k in keys]


def samples_from_result(
    result: Mapping[str, Any], metric: str, stat: str = "median"
) -> list[float]:
    """Per-trial values of ``metric`` from a result dict; invalid trials are skipped.

    A metric may be a number (throughput) or a dict of statistics (latency:
    ``median``/``mean``/``p90``/``p99``; ``stat`` picks one). Trials without the
    metric, with ``valid: false``, or with non-numeric values are skipped:
    they never count as evidence for a PASS.
    """
    return samples_and_runs(result, metric, stat)[0]


def count_trials(result: Mapping[str, Any]) -> tuple[int, int]:
    """(valid, invalid) trial counts of a result dict."""
    trials = _trials(result)
    valid = sum(1 for t in trials if _trial_valid(t))
    return valid, len(trials) - valid


def judge_results(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    specs: Sequence[MetricSpec] | None = None,
    config: GateConfig | None = None,
) -> Verdict:
    """Judge two ``benchgate.result/1`` dicts."""
    cfg = config or GateConfig()
    specs = list(specs) if specs is not None else make_specs()
    b_valid, b_invalid = count_trials(baseline)
    c_valid, c_invalid = count_trials(candidate)
    results = []
    for spec in specs:
        stat = "median" if spec.resolved_direction() is Direction.HIGHER else cfg.latency_stat
        if cfg.paired:
            b_values, c_values, b_runs = paired_samples(baseline, candidate, spec.name, stat)
            c_runs = b_runs
        else:
            b_values, b_runs = samples_and_runs(baseline, spec.name, stat)
            c_values, c_runs = samples_and_runs(candidate, spec.name, stat)
        results.append(
            judge_metric(
                spec,
                b_values,
                c_values,
                cfg,
                invalid_baseline=b_invalid,
                invalid_candidate=c_invalid,
                baseline_runs=b_runs,
                candidate_runs=c_runs,
            )
        )
    verdict = combine(results, cfg)
    mismatch = _prompt_fit_mismatch(baseline, candidate)
    if mismatch:
        verdict = replace(verdict, warnings=[*verdict.warnings, mismatch])
    return _invalid_trials_rule(verdict, (b_valid, b_invalid), (c_valid, c_invalid))


def _prompt_fit_mismatch(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """A warning when the two sides' synthetic prompts were sized differently.

    A release that drops ``/tokenize`` gets word-count prompts, whose token
    count can differ from the fitted ones: the comparison still runs, but
    the input lengths may not be the same.
    """

    def method(result: Mapping[str, Any]) -> str | None:
        fit = result.get("prompt_fit")
        return fit.get("method") if isinstance(fit, Mapping) else None

    b, c = method(baseline), method(candidate)
    if b == c:
        return None
    return (
        f"synthetic prompts were sized differently (baseline: {b or 'not recorded'}, "
        f"candidate: {c or 'not recorded'}): their token counts may differ"
    )


def _invalid_trials_rule(
    verdict: Verdict, baseline: tuple[int, int], candidate: tuple[int, int]
) -> Verdict:
    """An invalid trial never lets a gate pass.

    A trial is invalid when its error rate exceeded the workload's limit (a
    server that crashed, hung or refused requests). The metrics judge the valid
    trials only, so a server that dies in its last trials could pass on the
    trials before: with any invalid trial on either side, a PASS becomes
    INCONCLUSIVE (which blocks by default), with the count as the first reason.
    """
    if verdict.verdict != PASS:
        return verdict
    reasons = [
        f"{side}: {invalid} of {valid + invalid} trials invalid (errors beyond the "
        "workload's max_error_rate), so the valid trials alone cannot pass it"
        for side, (valid, invalid) in (("candidate", candidate), ("baseline", baseline))
        if invalid
    ]
    if not reasons:
        return verdict
    return replace(verdict, verdict=INCONCLUSIVE, reasons=[*reasons, *verdict.reasons])


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One result from several measurements of the same server and workload.

    Used when an INCONCLUSIVE verdict asks for more trials: the trials are
    concatenated (re-indexed), the summary's per-metric samples joined and
    their medians recomputed; everything else is the first result's.
    """
    if not results:
        raise ValueError("merge_results needs at least one result")
    if len(results) == 1:
        return dict(results[0])
    merged: dict[str, Any] = dict(results[0])
    trials: list[Any] = []
    samples: dict[str, list[float]] = {}
    better: dict[str, Any] = {}
    total = valid = 0
    for run, result in enumerate(results):
        for trial in _trials(result):
            trials.append({**trial, "index": len(trials), "run": run})
        summary = result.get("summary") or {}
        total += int(summary.get("total_trials", 0) or 0)
        valid += int(summary.get("valid_trials", 0) or 0)
        for name, metric in (summary.get("metrics") or {}).items():
            if isinstance(metric, Mapping):
                samples.setdefault(name, []).extend(
                    float(v) for v in metric.get("samples") or [] if isinstance(v, (int, float))
                )
                better.setdefault(name, metric.get("better"))
    merged["trials"] = trials
    merged["summary"] = {
        **(results[0].get("summary") or {}),
        "total_trials": total,
        "valid_trials": valid,
        "metrics": {
            name: {
                "samples": values,
                "median": _median(values) if values else None,
                "better": better[name],
            }
            for name, values in samples.items()
        },
    }
    merged["merged_from"] = len(results)
    return merged


def side_by_side(
    baselines: Sequence[Mapping[str, Any]], candidates: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether every measurement of both sides is half of a side-by-side pair
    (``bench.run_side_by_side_async``) whose other half is on the other side.

    Then the two sides' trials alternated in one window of time: a level of
    the machine that moves between runs moved both alike, so the run-to-run
    spread is left out of the comparison; the trials' own spread, drift
    within the window included, is all the interval needs.
    """

    def ids(results: Sequence[Mapping[str, Any]], side: str) -> list[str] | None:
        out = []
        for result in results:
            mark = result.get("interleaved")
            if not isinstance(mark, Mapping) or mark.get("side") != side or not mark.get("id"):
                return None
            out.append(str(mark["id"]))
        return out

    b = ids(baselines, "reference")
    c = ids(candidates, "candidate")
    return bool(b) and b is not None and c is not None and sorted(b) == sorted(c)


def config_for(
    config: GateConfig,
    baselines: Sequence[Mapping[str, Any]],
    candidates: Sequence[Mapping[str, Any]],
) -> GateConfig:
    """``config`` as the gate applies it to these results: judged as pairs, without
    the run-to-run spread, when they are side by side (:func:`side_by_side`)."""
    if side_by_side(baselines, candidates):
        return replace(config, run_spread_pct=0.0, paired=True)
    return config


def needs_more_trials(verdict: Verdict | str, trials_done: int, budget: int) -> bool:
    """Whether to run more trials before acting on ``verdict``.

    True only for INCONCLUSIVE while ``trials_done < budget``. PASS and FAIL are
    final; an INCONCLUSIVE verdict with the budget spent is for the caller's
    policy (default: block the rollout).
    """
    name = verdict.verdict if isinstance(verdict, Verdict) else str(verdict).upper()
    return name == INCONCLUSIVE and trials_done < budget


# --------------------------------------------------------------------------
# The naive rule, for comparison
# --------------------------------------------------------------------------


def naive_verdict(
    baseline: float, candidate: float, direction: Direction | str, max_regression_pct: float = 5.0
) -> str:
    """One run each: FAIL when the candidate is ``max_regression_pct`` % or more worse.

    This is what most upgrade scripts do; the decision-quality benchmark shows
    how often it blocks identical releases and misses real regressions.
    """
    d = Direction(direction)
    if baseline <= 0:
        raise ValueError("baseline must be positive")
    change = (candidate - baseline) / baseline * 100.0
    regression = -change if d is Direction.HIGHER else change
    return FAIL if regression >= max_regression_pct else PASS


def interval_pct(alpha: float) -> str:
    """The two-sided level of the gate's interval at ``alpha``, in %: "90" at 0.05."""
    return f"{round((1 - 2 * alpha) * 100, 1):g}"


def render_table(verdict: Verdict, alpha: float | None = None) -> str:
    """A plain-text table of the per-metric outcome plus the reasons.

    The change column is the estimate that the reasons give (Hodges-Lehmann,
    with its interval, in words: better or worse for that metric); ``alpha``
    (the judging one) names the interval's level in its heading.
    """
    level = f"{interval_pct(alpha)}% interval" if alpha is not None else "interval"
    header = (
        "metric",
        "baseline median",
        "candidate median",
        f"change ({level})",
        "p",
        "limit",
        "verdict",
    )
    rows: list[tuple[str, ...]] = [header]
    for m in verdict.metrics:
        rows.append(
            (
                m.metric + (" *" if m.critical else ""),
                f"{numfmt.figure(m.baseline_median)} (n={m.n_baseline})",
                f"{numfmt.figure(m.candidate_median)} (n={m.n_candidate})",
                numfmt.change_interval(
                    m.change_pct, m.change_lo_pct, m.change_hi_pct, m.direction != "lower"
                ),
                numfmt.MISSING if m.p_value is None else f"{m.p_value:.3g}",
                f"{m.max_regression_pct:g}%",
                m.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        "medians: of each side's trials; change: the Hodges-Lehmann estimate of the "
        "change and its interval, as in the reasons (the medians can point the other way)"
    )
    lines.append(f"verdict: {verdict.verdict}   (* critical)")
    lines.extend(f"  - {r}" for r in verdict.reasons)
    lines.extend(f"  ! {w}" for w in verdict.warnings)
    return "\n".join(lines)
