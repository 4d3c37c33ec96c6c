"""The gate: judge a candidate's results against the baseline's, record, render.

One entry for every caller: the Ansible module ``benchgate_gate``, the
``benchgate judge`` command and the lab scripts call :func:`run_gate`, which

* merges each side's results (more trials after an INCONCLUSIVE verdict,
  A-B-A's second baseline, a second side-by-side measurement),
* judges them as pairs when they were measured side by side
  (:func:`benchgate.rules.config_for`), stage by stage when the workload is
  staged (:mod:`benchgate.stages`), else as one comparison
  (:func:`benchgate.rules.judge_results`),
* records both results and the verdict in the ledger when one is named,

and returns a :class:`Gate`: the :class:`~benchgate.rules.Verdict`, its
table, its one summary line and the module's result.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import ledger as bg_ledger
from .rules import (
    DEFAULT_MAX_REGRESSION_PCT,
    GateConfig,
    MetricSpec,
    Verdict,
    config_for,
    judge_results,
    make_specs,
)
from .stages import is_staged, judge_staged, merge_staged
from .table import render_table


def load_result(value: Any, name: str) -> dict[str, Any]:
    """A result given as a dict, a JSON string, or a path to a JSON file."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            loaded = json.loads(text)
        else:
            path = os.path.expanduser(text)
            if not os.path.isfile(path):
                raise ValueError(f"{name}: no such result file on the controller: {path}")
            with open(path, encoding="utf-8") as fh:
                loaded = json.load(fh)
        if isinstance(loaded, dict):
            return loaded
    raise ValueError(f"{name} must be a result dict or the path of a result JSON file")


def load_results(value: Any, name: str) -> list[dict[str, Any]]:
    """Every result of one side: one, or a list, whose trials are all judged
    (merged): more trials measured after an INCONCLUSIVE verdict, A-B-A's
    second baseline, a second side-by-side measurement."""
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{name}: an empty list of results")
        return [load_result(item, f"{name}[{i}]") for i, item in enumerate(value)]
    return [load_result(value, name)]


def settings(
    metrics: Sequence[str] | None = None,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    thresholds: Mapping[str, Any] | None = None,
    critical_metrics: Sequence[str] | None = None,
    **config: Any,
) -> tuple[list[MetricSpec], GateConfig]:
    """The metric specs and judge settings from the gate's options.

    ``config`` holds :class:`~benchgate.rules.GateConfig`'s fields; one that
    is None takes its default. Raises ValueError for a bad setting.
    """
    specs = make_specs(
        metrics=metrics,
        max_regression_pct=max_regression_pct,
        thresholds={str(k): float(v) for k, v in (thresholds or {}).items()},
        critical=critical_metrics,
    )
    return specs, GateConfig(**{k: v for k, v in config.items() if v is not None})


def judge(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    specs: Sequence[MetricSpec],
    config: GateConfig,
    *,
    correction: str = "bonferroni",
    default_limit: float = DEFAULT_MAX_REGRESSION_PCT,
) -> Verdict:
    """One comparison: stage by stage when either result is staged (``correction``
    splits alpha over the stages; ``default_limit`` is the limit of a metric
    that only a stage's gate names), else as one."""
    if is_staged(baseline) or is_staged(candidate):
        return judge_staged(
            baseline, candidate, specs, config, correction=correction, default_limit=default_limit
        )
    return judge_results(baseline, candidate, specs, config)


@dataclass(frozen=True)
class Gate:
    """What the gate judged, and where it recorded it."""

    verdict: Verdict
    # Whether the sides were measured side by side (judged as pairs).
    side_by_side: bool
    ledger_ids: dict[str, int] | None = field(default=None)

    @property
    def table(self) -> str:
        return render_table(self.verdict)

    @property
    def summary(self) -> str:
        """The verdict in one line: ``FAIL: reason; reason``."""
        return f"{self.verdict.verdict}: {'; '.join(self.verdict.reasons)}"

    def metric_lines(self) -> list[dict[str, Any]]:
        """Every judged metric as a dict. A staged workload's line names its
        stage in its reason, as the overall reasons do ("stage busy:
        output_tokens_per_s: ..."); every line carries the level of its
        two-sided interval, from the alpha it was judged at (a stage's share
        of it: 95% for each of two)."""
        return [
            {
                **m,
                "reason": f"stage {m['stage']}: {m['reason']}" if m.get("stage") else m["reason"],
                "interval_pct": round(
                    100 * (1 - 2 * self.verdict.interval_alpha(m.get("stage"))), 2
                ),
            }
            for m in self.verdict.to_dict()["metrics"]
        ]

    def result(self) -> dict[str, Any]:
        """The ``benchgate_gate`` module's result (its RETURN documents every key)."""
        out: dict[str, Any] = {
            "changed": self.ledger_ids is not None,
            "verdict": self.verdict.verdict,
            "passed": self.verdict.passed,
            "reasons": list(self.verdict.reasons),
            "gate_warnings": list(self.verdict.warnings),
            "side_by_side": self.side_by_side,
            "metrics": self.metric_lines(),
            "table": self.table,
        }
        if self.ledger_ids is not None:
            out["ledger_ids"] = self.ledger_ids
        return out


def run_gate(
    baseline: Any,
    candidate: Any,
    *,
    metrics: Sequence[str] | None = None,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    thresholds: Mapping[str, Any] | None = None,
    critical_metrics: Sequence[str] | None = None,
    noncritical_fail: str = "fail",
    alpha: float | None = None,
    min_trials: int | None = None,
    latency_stat: str = "median",
    fail_requires_bound: bool = True,
    set_aside_slowest: float | None = None,
    run_spread_pct: float | None = None,
    correction: str = "bonferroni",
    default_limit: float = DEFAULT_MAX_REGRESSION_PCT,
    ledger: str | None = None,
    host: str | None = None,
    release: str | None = None,
    baseline_release: str | None = None,
    phase: str = "candidate",
    baseline_phase: str = "baseline",
    check_mode: bool = False,
) -> Gate:
    """Judge ``candidate`` against ``baseline``, and record unless ``check_mode``.

    Each side is a result (a dict, a JSON string or the path of a JSON file)
    or a list of them, merged. The options are the ``benchgate_gate``
    module's (its DOCUMENTATION says what each does); None takes the
    default of :class:`~benchgate.rules.GateConfig`. With ``ledger`` both
    results and the verdict are recorded for ``host``. Raises ValueError for
    bad input, OSError or sqlite3.Error when the ledger cannot be written.
    """
    baselines = load_results(baseline, "baseline")
    candidates = load_results(candidate, "candidate")
    specs, config = settings(
        metrics,
        max_regression_pct,
        thresholds,
        critical_metrics,
        alpha=alpha,
        min_trials=min_trials,
        noncritical_fail=noncritical_fail,
        fail_requires_bound=fail_requires_bound,
        latency_stat=latency_stat,
        set_aside_slowest=set_aside_slowest,
        run_spread_pct=run_spread_pct,
    )
    # Side by side: both releases' trials alternated, so they are judged as
    # pairs, and the run-to-run spread (which A-B-A needs) is not added.
    config = config_for(config, baselines, candidates)
    merged_baseline = merge_staged(baselines)
    merged_candidate = merge_staged(candidates)
    verdict = judge(
        merged_baseline,
        merged_candidate,
        specs,
        config,
        correction=correction,
        default_limit=default_limit,
    )
    if not ledger or check_mode:
        return Gate(verdict, config.paired)
    if not host:
        raise ValueError("host is required to record in the ledger")
    b_id = bg_ledger.record_result(
        ledger, merged_baseline, host=host, phase=baseline_phase, release=baseline_release
    )
    c_id = bg_ledger.record_result(
        ledger, merged_candidate, host=host, phase=phase, release=release
    )
    v_id = bg_ledger.record_verdict(
        ledger,
        verdict.to_dict(),
        host=host,
        release=release,
        baseline_release=baseline_release,
        phase=phase,
        baseline_run_id=b_id,
        candidate_run_id=c_id,
    )
    ids = {"baseline_run_id": b_id, "candidate_run_id": c_id, "verdict_id": v_id}
    return Gate(verdict, config.paired, ids)
