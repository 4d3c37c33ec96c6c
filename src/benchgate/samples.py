"""The samples the judge reads from results (schema ``benchgate.result/1``, read tolerantly).

Per-trial values of a metric, which trials are valid, the pairs of a side-by-side
measurement, and one result merged from several measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .ranks import median

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
                "median": median(values) if values else None,
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
