"""The regression judge's rules: is the candidate release slower than the baseline?

Pure functions; no I/O. The gate (:mod:`benchgate.gate`: the Ansible module
``benchgate_gate``, ``benchgate judge``, the lab) judges results with
:func:`judge_results`, or samples already extracted with :func:`judge`. The
test and its interval are in :mod:`benchgate.ranks` ("Method"); the samples
come from :mod:`benchgate.samples`.

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
machine"). The rank statistics (:mod:`benchgate.ranks`) already resist a short burst: 4 slow
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

Reasons
-------
Every reason tells one story: the Hodges-Lehmann estimate of the change and
its two-sided ``2*confidence - 1`` interval, in words ("4.1% worse than the
baseline's 369.1 tok/s (90% interval 8.6% worse to 13.0% better)"). Side by
side it adds the median of the pairs' ratios, which the estimate is computed
from; and where each side's median points the other way than the estimate,
it says so and why (:func:`benchgate.numfmt.medians_note`), in the words that
every other place showing a verdict uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from . import numfmt
from .ranks import (
    count_outliers,
    decidable_limit_pct,
    hodges_lehmann,
    median,
    signed_rank_shift,
    widen_for_runs,
)
from .samples import clean_samples, count_trials, paired_samples, samples_and_runs, side_by_side

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
    # in benchgate.ranks); 0 = the trials of one run suffice.
    run_spread_pct: float = 0.0
    # Side by side (see "Pairs" in benchgate.ranks): trial i of the
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
    # Side by side: the median of the pairs' ratios as a change in % (None: two
    # samples), which the reasons give beside the estimate.
    pairs_change_pct: float | None = None
    # The stage this line judges, in the flat list of a staged verdict.
    stage: str | None = None

    def note(self) -> str:
        """What the estimate is computed from, and why the medians can point the
        other way (:func:`benchgate.numfmt.medians_note`); "" when nothing to add."""
        return numfmt.medians_note(
            self.baseline_median,
            self.candidate_median,
            self.change_pct,
            self.direction != Direction.LOWER.value,
            self.pairs_change_pct,
        )

    def to_dict(self) -> dict[str, Any]:
        figures = {k: _json_number(v) for k, v in asdict(self).items() if k != "stage"}
        return figures if self.stage is None else {"stage": self.stage, **figures}


@dataclass(frozen=True)
class Stage:
    """One stage of a staged verdict: its name, its own verdict, the load it measured."""

    stage: str
    verdict: Verdict
    alpha: float
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "alpha": self.alpha, "params": self.params} | (
            self.verdict.to_dict()
        )


@dataclass(frozen=True)
class Verdict:
    """The gate's verdict, over the metrics of one comparison or over stages.

    An unstaged comparison has no ``stages``: its ``metrics`` are the judged
    ones, its ``alpha`` the level they were judged at. A staged one
    (:mod:`benchgate.stages`) has one :class:`Stage` per stage, each with the
    stage's own verdict; its ``metrics`` are every stage's, each naming its
    stage, and ``alpha`` is the judge's, before the split over the stages
    (``correction``).
    """

    verdict: str
    reasons: list[str]
    metrics: list[MetricVerdict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alpha: float = 0.05
    stages: list[Stage] = field(default_factory=list)
    correction: str = "bonferroni"

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def staged(self) -> bool:
        return bool(self.stages)

    @property
    def schema(self) -> str:
        return "benchgate.staged_verdict/1" if self.staged else "benchgate.verdict/1"

    def metric(self, name: str) -> MetricVerdict:
        """The line of metric ``name`` (a staged verdict's first stage that judged it)."""
        for m in self.metrics:
            if m.metric == name:
                return m
        raise KeyError(name)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)

    def interval_alpha(self, stage: str | None) -> float:
        """The alpha a metric line was judged at: its stage's, else the verdict's."""
        return next((s.alpha for s in self.stages if s.stage == stage), self.alpha)

    def to_dict(self) -> dict[str, Any]:
        """JSON form; a staged verdict adds its correction and every stage's verdict."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "verdict": self.verdict,
            "passed": self.passed,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
        }
        if self.staged:
            out |= {
                "alpha": self.alpha,
                "correction": self.correction,
                "stages": [s.to_dict() for s in self.stages],
            }
        return out | {"metrics": [m.to_dict() for m in self.metrics]}


def _json_number(value: Any) -> Any:
    """JSON has no infinities: unattainable bounds become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
        "baseline_median": median(full_b) if full_b else None,
        "candidate_median": median(full_c) if full_c else None,
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
    pairs_change = None
    if cfg.paired:
        est = signed_rank_shift(b, c, cfg.alpha)
        pairs_change = (median([y / x for x, y in zip(b, c, strict=True)]) - 1.0) * 100.0
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
    note = numfmt.medians_note(
        common["baseline_median"],
        common["candidate_median"],
        change,
        direction is Direction.HIGHER,
        pairs_change,
    )
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
        + (f"; {note}" if note else "")
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
        pairs_change_pct=pairs_change,
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
        return Verdict(INCONCLUSIVE, ["no metrics were judged"], [], alpha=cfg.alpha)
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
        return Verdict(FAIL, blocking_fail, list(metric_verdicts), warnings, cfg.alpha)
    if blocking_open:
        return Verdict(INCONCLUSIVE, blocking_open, list(metric_verdicts), warnings, cfg.alpha)
    return Verdict(PASS, passed, list(metric_verdicts), warnings, cfg.alpha)


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
