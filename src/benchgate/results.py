"""Typed benchmark results and their versioned JSON schema (``benchgate.result/1``).

Metric definitions follow vLLM's ``vllm/benchmarks/serve.py``:

* request throughput = completed requests / trial duration
* output tokens/s = sum of output tokens (from usage) / trial duration
* total tokens/s = (prompt + output tokens) / trial duration
* TTFT = time from sending the request to the first streamed token chunk
* TPOT = (e2el - ttft) / (output_tokens - 1), per request with > 1 token
* ITL = gaps between consecutive token chunks, pooled over all requests
* e2el = time from sending to the last token chunk

Percentiles are linear interpolation between order statistics (numpy's
default, ``statistics.quantiles(method="inclusive")``).  Failed requests count
in ``errors_by_reason`` and in the error rate, never in the latency figures.

Target-side code: keep it Python 3.9 compatible (no numpy needed).
"""

from __future__ import annotations

import datetime as _dt
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import RequestRecord

SCHEMA = "benchgate.result/1"

# Which way is better, per metric family (for the judge and for tables).
HIGHER_IS_BETTER = ("request_throughput", "output_tokens_per_s", "total_tokens_per_s", "goodput")
# Service-level objectives a workload may set (``slo``), per request, in ms.
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
STATS = ("mean", "median", "p90", "p99")


class ResultSchemaError(ValueError):
    pass


@dataclass
class Dist:
    mean: float
    median: float
    p90: float
    p99: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float], scale: float = 1.0) -> Dist | None:
        if not values:
            return None
        data = [v * scale for v in values]
        return cls(
            mean=statistics.fmean(data),
            median=statistics.median(data),
            p90=percentile(data, 90),
            p99=percentile(data, 99),
            count=len(data),
        )


def percentile(data: Sequence[float], p: float) -> float:
    """Linear-interpolation percentile (same as ``numpy.percentile``'s default)."""
    if not data:
        raise ValueError("percentile of no data")
    if len(data) == 1:
        return float(data[0])
    ordered = sorted(data)
    pos = (len(ordered) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class TrialMetrics:
    request_throughput: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft_ms: Dist | None
    tpot_ms: Dist | None
    itl_ms: Dist | None
    e2el_ms: Dist | None
    # With a workload ``slo``: completed requests meeting every SLO per second of
    # the trial, and how many met them; None without an SLO.
    goodput: float | None = None
    slo_met: int | None = None


@dataclass
class Agreement:
    """Client-side output tokens/s against the server's generation-token counter."""

    client_output_tokens: int
    server_generation_tokens: float | None
    client_output_tokens_per_s: float
    server_generation_tokens_per_s: float | None
    # 100 * (client - server) / server; None when the server figure is missing.
    tokens_per_s_diff_pct: float | None
    tokens_diff_pct: float | None


@dataclass
class Trial:
    index: int
    valid: bool
    invalid_reason: str | None
    started_at: str
    duration_s: float
    num_requests: int
    completed: int
    failed: int
    error_rate: float
    errors_by_reason: dict[str, int]
    prompt_tokens: int
    output_tokens: int
    metrics: TrialMetrics | None
    server: dict[str, Any]
    agreement: Agreement | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    # The workload stage this trial measured; None for an unstaged workload.
    stage: str | None = None


@dataclass
class Target:
    base_url: str
    model: str
    server_version: str | None


@dataclass
class WorkloadInfo:
    name: str
    version: int
    hash: str
    params: dict[str, Any]


@dataclass
class SummaryMetric:
    samples: list[float]
    median: float | None
    better: str  # "higher" or "lower"


@dataclass
class Summary:
    total_trials: int
    valid_trials: int
    metrics: dict[str, SummaryMetric]


@dataclass
class StageResult:
    """One stage of a staged result: its load (the stage's workload params,
    without ``stages``) and the summary of its trials alone."""

    name: str
    params: dict[str, Any]
    summary: Summary
    prompt_fit: dict[str, Any] | None = None


@dataclass
class Result:
    target: Target
    workload: WorkloadInfo
    trials: list[Trial]
    summary: Summary
    created_at: str
    client: dict[str, Any]
    schema: str = SCHEMA
    # Host figures (benchgate.hostprobe): each {"available": bool, "reason": ..., ...}.
    # Added to benchgate.result/1 compatibly: older results lack them.
    roofline: dict[str, Any] | None = None
    service_memory: dict[str, Any] | None = None
    cold_start: dict[str, Any] | None = None
    # Synthetic prompts: how they were fitted to input_len (benchgate.tokenfit);
    # null for file/sharegpt prompts and in older results.
    prompt_fit: dict[str, Any] | None = None
    # Staged workloads: one entry per stage, in the order run; null when the
    # workload is unstaged (and in older results). ``summary`` then covers
    # the trials of every stage together, which only the counts make sense of:
    # per-stage figures are in ``stages[*].summary`` (each trial has ``stage``).
    stages: list[StageResult] | None = None
    # Side by side (bench.run_side_by_side_async): this result's trials
    # alternated with another server's, {"id", "side", "with", "order"}; the
    # gate leaves the run-to-run spread out of a comparison of such a pair.
    interleaved: dict[str, Any] | None = None
    # The serving configuration measured (benchgate.serverconfig: the server's
    # argv, environment and CPUs); null when unknown, and in older results.
    server_config: dict[str, Any] | None = None

    def to_dict(self, include_requests: bool = True) -> dict[str, Any]:
        data = asdict(self)
        # Schema first, for humans reading the file.
        ordered = {"schema": data.pop("schema")}
        ordered.update(data)
        if not include_requests:
            for trial in ordered["trials"]:
                trial.pop("requests", None)
        return ordered

    @property
    def all_valid(self) -> bool:
        return bool(self.trials) and all(t.valid for t in self.trials)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def iso_from_epoch(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def request_to_dict(rec: RequestRecord) -> dict[str, Any]:
    """Compact per-request record (milliseconds, microsecond precision)."""
    return {
        "index": rec.index,
        "start_ms": _r(rec.start_s * 1000.0),
        "ttft_ms": _r(rec.ttft_s * 1000.0) if rec.ttft_s is not None else None,
        "e2el_ms": _r(rec.e2el_s * 1000.0) if rec.e2el_s is not None else None,
        "itl_ms": [round(v * 1000.0, 3) for v in rec.itl_s],
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "usage_reported": rec.usage_reported,
        "error": rec.error,
        "detail": rec.detail,
    }


def request_tpot_s(rec: RequestRecord) -> float | None:
    """(e2el - ttft) / (output tokens - 1); None with fewer than 2 tokens."""
    n = rec.output_tokens or 0
    if n > 1 and rec.e2el_s is not None and rec.ttft_s is not None:
        return (rec.e2el_s - rec.ttft_s) / (n - 1)
    return None


def meets_slo(rec: RequestRecord, slo: Mapping[str, float]) -> bool:
    """Whether a completed request meets every SLO (as vLLM's benchmark counts goodput).

    A request with one output token has no TPOT and meets a TPOT objective
    (vLLM counts its TPOT as 0); a missing TTFT or e2el fails its objective.
    """
    if not rec.ok:
        return False
    limits_s = {key: float(value) / 1000.0 for key, value in slo.items()}
    if "ttft_ms" in limits_s and (rec.ttft_s is None or rec.ttft_s > limits_s["ttft_ms"]):
        return False
    if "e2el_ms" in limits_s and (rec.e2el_s is None or rec.e2el_s > limits_s["e2el_ms"]):
        return False
    if "tpot_ms" in limits_s:
        tpot = request_tpot_s(rec)
        if tpot is not None and tpot > limits_s["tpot_ms"]:
            return False
    return True


def trial_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: Mapping[str, float] | None = None,
) -> TrialMetrics | None:
    done = [r for r in records if r.ok]
    if not done or duration_s <= 0:
        return None
    ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
    e2els = [r.e2el_s for r in done if r.e2el_s is not None]
    itls = [gap for r in done for gap in r.itl_s]
    tpots = [t for t in (request_tpot_s(r) for r in done) if t is not None]
    slo_met = sum(1 for r in done if meets_slo(r, slo)) if slo else None
    output_tokens = sum(r.output_tokens or 0 for r in done)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    return TrialMetrics(
        request_throughput=len(done) / duration_s,
        output_tokens_per_s=output_tokens / duration_s,
        total_tokens_per_s=(prompt_tokens + output_tokens) / duration_s,
        ttft_ms=Dist.of(ttfts, 1000.0),
        tpot_ms=Dist.of(tpots, 1000.0),
        itl_ms=Dist.of(itls, 1000.0),
        e2el_ms=Dist.of(e2els, 1000.0),
        goodput=slo_met / duration_s if slo_met is not None else None,
        slo_met=slo_met,
    )


def _pct_diff(client: float | None, server: float | None) -> float | None:
    if client is None or not server:
        return None
    return 100.0 * (client - server) / server


def build_trial(
    index: int,
    records: Sequence[RequestRecord],
    duration_s: float,
    started_at: float,
    max_error_rate: float,
    server: Mapping[str, Any],
    slo: Mapping[str, float] | None = None,
) -> Trial:
    """Aggregate one trial; decide validity from the error rate."""
    n = len(records)
    failed = [r for r in records if not r.ok]
    done = [r for r in records if r.ok]
    errors = dict(sorted(Counter(r.error or "" for r in failed).items()))
    error_rate = len(failed) / n if n else 1.0
    metrics = trial_metrics(records, duration_s, slo)
    invalid_reason = None
    if not done:
        invalid_reason = "no request completed"
    elif error_rate > max_error_rate:
        summary = ", ".join(f"{k}={v}" for k, v in errors.items())
        invalid_reason = (
            f"error rate {error_rate:.1%} ({len(failed)}/{n}: {summary}) "
            f"above max_error_rate {max_error_rate:.1%}"
        )
    output_tokens = sum(r.output_tokens or 0 for r in done)
    agreement = None
    if metrics is not None:
        server_tokens = server.get("generation_tokens") if server.get("ok") else None
        server_rate = server.get("generation_tokens_per_s") if server.get("ok") else None
        agreement = Agreement(
            client_output_tokens=output_tokens,
            server_generation_tokens=server_tokens,
            client_output_tokens_per_s=metrics.output_tokens_per_s,
            server_generation_tokens_per_s=server_rate,
            tokens_per_s_diff_pct=_pct_diff(metrics.output_tokens_per_s, server_rate),
            tokens_diff_pct=_pct_diff(float(output_tokens), server_tokens),
        )
    return Trial(
        index=index,
        valid=invalid_reason is None,
        invalid_reason=invalid_reason,
        started_at=iso_from_epoch(started_at),
        duration_s=duration_s,
        num_requests=n,
        completed=len(done),
        failed=len(failed),
        error_rate=error_rate,
        errors_by_reason=errors,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in done),
        output_tokens=output_tokens,
        metrics=metrics,
        server=dict(server),
        agreement=agreement,
        requests=[request_to_dict(r) for r in records],
    )


def trial_figures(trial: Trial) -> dict[str, float]:
    """Flat per-trial figures: ``output_tokens_per_s``, ``ttft_ms.median``, ..."""
    if trial.metrics is None:
        return {}
    return figures_of(asdict(trial.metrics), trial.server)


def figures_of(metrics: Mapping[str, Any] | None, server: Mapping[str, Any]) -> dict[str, float]:
    """:func:`trial_figures` from a trial's JSON form (``metrics`` and ``server``)."""
    figures: dict[str, float] = {}
    if not isinstance(metrics, Mapping):
        return figures
    for name in HIGHER_IS_BETTER:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[name] = value
    for name in DISTRIBUTIONS:
        dist = metrics.get(name)
        if isinstance(dist, Mapping):
            for stat in STATS:
                if isinstance(dist.get(stat), (int, float)):
                    figures[f"{name}.{stat}"] = dist[stat]
    if server.get("ok") and server.get("generation_tokens_per_s") is not None:
        figures["server.generation_tokens_per_s"] = server["generation_tokens_per_s"]
    spec = server.get("spec_decode") if server.get("ok") else None
    if spec:
        for key in ("acceptance_rate", "mean_acceptance_length"):
            if spec.get(key) is not None:
                figures[f"spec.{key}"] = spec[key]
    return figures


def better_direction(metric: str) -> str:
    if metric in HIGHER_IS_BETTER or metric.startswith(("server.", "spec.")):
        return "higher"
    return "lower"


def summarize(trials: Sequence[Trial]) -> Summary:
    valid = [t for t in trials if t.valid]
    return _summary(len(trials), [trial_figures(t) for t in valid])


def summarize_dicts(trials: Sequence[Mapping[str, Any]]) -> Summary:
    """:func:`summarize` over trials in their JSON form (a stage of a loaded result)."""
    valid = [t for t in trials if _dict_valid(t)]
    figures = [figures_of(t.get("metrics"), t.get("server") or {}) for t in valid]
    return _summary(len(trials), figures)


def _dict_valid(trial: Mapping[str, Any]) -> bool:
    """A trial dict's validity, read as the judge reads it (no flag: valid unless it erred)."""
    valid = trial.get("valid")
    if valid is None:
        return not trial.get("error") and not trial.get("errors")
    return valid is True


def _summary(total: int, per_trial: Sequence[Mapping[str, float]]) -> Summary:
    samples: dict[str, list[float]] = {}
    for figures in per_trial:
        for name, value in figures.items():
            samples.setdefault(name, []).append(value)
    metrics = {
        name: SummaryMetric(
            samples=values,
            median=statistics.median(values) if values else None,
            better=better_direction(name),
        )
        for name, values in samples.items()
    }
    return Summary(total_trials=total, valid_trials=len(per_trial), metrics=metrics)


def check_result_dict(data: Any) -> dict[str, Any]:
    """Check that a loaded JSON document is a benchgate result this code can read."""
    if not isinstance(data, dict):
        raise ResultSchemaError("a result must be a JSON object")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ResultSchemaError(f"unsupported result schema {schema!r}, expected {SCHEMA!r}")
    for key in ("target", "workload", "trials", "summary"):
        if key not in data:
            raise ResultSchemaError(f"result has no {key!r}")
    return data
