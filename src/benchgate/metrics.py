"""Scrape vLLM's Prometheus ``/metrics`` around a trial and derive server-side figures.

The text is parsed with ``prometheus_client``; counters are read by *sample*
name (``vllm:generation_tokens_total``), because the parser strips ``_total``
from counter family names.  Names that changed across releases are looked up
through candidate lists, first match wins.  Samples with the same name and
different labels (several engines, models, finish reasons) are summed, except
where a label is the point (speculative acceptance per position).

A missing or garbled ``/metrics`` is recorded as an error reason, never raised.

Target-side code: keep it Python 3.9 compatible.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .client import FetchError, fetch

# Canonical key -> sample names across releases (first present wins).
COUNTERS: dict[str, tuple[str, ...]] = {
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "request_success": ("vllm:request_success_total", "vllm:request_success"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    "spec_emitted_tokens": ("vllm:spec_decode_num_emitted_tokens_total",),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "itl_sum": ("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"),
    "itl_count": (
        "vllm:inter_token_latency_seconds_count",
        "vllm:time_per_output_token_seconds_count",
    ),
    "e2el_sum": ("vllm:e2e_request_latency_seconds_sum",),
    "e2el_count": ("vllm:e2e_request_latency_seconds_count",),
}
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    # prometheus_client's process collector (the API server process): tells
    # one server start from the next (issue 20: each start has its own level).
    "process_start_time": ("process_start_time_seconds",),
}
SPEC_PER_POS = (
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)

ERROR_METRICS_UNAVAILABLE = "metrics_unavailable"
ERROR_METRICS_MALFORMED = "metrics_malformed"
ERROR_METRICS_RESET = "metrics_counter_reset"


@dataclass
class Snapshot:
    """The figures benchgate reads from one scrape (canonical keys)."""

    time_s: float = 0.0  # perf_counter at the scrape
    values: dict[str, float] = field(default_factory=dict)
    spec_per_pos: dict[int, float] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # canonical key -> sample name found
    error: str | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_metrics_text(text: str) -> Snapshot:
    """Parse Prometheus exposition text into a :class:`Snapshot` (never raises)."""
    snap = Snapshot()
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
                if sample.name in SPEC_PER_POS and "position" in sample.labels:
                    pos = int(sample.labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + float(sample.value)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        snap.error = ERROR_METRICS_MALFORMED
        snap.detail = f"{type(exc).__name__}: {exc}"[:300]
        return snap
    if not sums:
        snap.error = ERROR_METRICS_MALFORMED
        snap.detail = "no samples in /metrics"
        return snap
    for table in (COUNTERS, GAUGES):
        for key, candidates in table.items():
            for name in candidates:
                if name in sums:
                    snap.values[key] = sums[name]
                    snap.names[key] = name
                    break
    if "generation_tokens" not in snap.values:
        snap.error = ERROR_METRICS_MALFORMED
        snap.detail = "no vllm:generation_tokens counter in /metrics"
    snap.spec_per_pos = dict(sorted(per_pos.items()))
    return snap


async def scrape(client: aiohttp.ClientSession, base_url: str) -> Snapshot:
    """GET ``/metrics`` and parse it; failures become ``snap.error``.

    ``time_s`` is the midpoint of the HTTP exchange (``time.perf_counter``),
    the best estimate of when the server read its counters; parsing the text
    afterwards does not count.
    """
    url = base_url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    sent = time.perf_counter()
    try:
        status, text = await fetch(client, f"{url}/metrics", timeout_s=10.0)
    except FetchError as exc:
        return Snapshot(time_s=sent, error=ERROR_METRICS_UNAVAILABLE, detail=str(exc))
    perf_time = (sent + time.perf_counter()) / 2.0
    if status != 200:
        return Snapshot(time_s=perf_time, error=ERROR_METRICS_UNAVAILABLE, detail=f"HTTP {status}")
    snap = parse_metrics_text(text)
    snap.time_s = perf_time
    return snap


@dataclass
class ServerMetrics:
    """What the server says happened during a trial (deltas between two scrapes)."""

    ok: bool
    error: str | None = None
    detail: str | None = None
    window_s: float | None = None
    generation_tokens: float | None = None
    generation_tokens_per_s: float | None = None
    prompt_tokens: float | None = None
    requests: float | None = None
    preemptions: float | None = None
    ttft_mean_ms: float | None = None
    itl_mean_ms: float | None = None
    e2el_mean_ms: float | None = None
    kv_cache_usage: float | None = None  # gauge at the end of the trial (0..1)
    process_start_time_s: float | None = None  # the API server's start (unix time)
    spec_decode: dict[str, Any] | None = None
    metric_names: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _delta(before: Snapshot, after: Snapshot, key: str) -> float | None:
    if key in before.values and key in after.values:
        return after.values[key] - before.values[key]
    return None


def _mean_ms(total: float | None, count: float | None) -> float | None:
    if total is None or not count:
        return None
    return total / count * 1000.0


def spec_decode_figures(
    drafts: float, draft_tokens: float, accepted: float, per_pos: Sequence[float]
) -> dict[str, Any]:
    """Acceptance figures as vLLM's ``SpecDecodingLogging`` reports them.

    acceptance rate = accepted / draft tokens; mean acceptance length =
    1 + accepted / drafts (tokens per step, the bonus token included);
    per-position acceptance = accepted at position i / drafts.
    """
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else [],
    }


def diff(before: Snapshot, after: Snapshot) -> ServerMetrics:
    """Server-side figures for the window between two scrapes."""
    for snap in (before, after):
        if not snap.ok:
            return ServerMetrics(ok=False, error=snap.error, detail=snap.detail)
    window = after.time_s - before.time_s
    deltas = {key: _delta(before, after, key) for key in COUNTERS}
    if any(v is not None and v < 0 for v in deltas.values()):
        return ServerMetrics(
            ok=False,
            error=ERROR_METRICS_RESET,
            detail="a counter went down between scrapes (server restarted?)",
        )
    gen = deltas["generation_tokens"]
    out = ServerMetrics(
        ok=True,
        window_s=window,
        generation_tokens=gen,
        generation_tokens_per_s=gen / window if gen is not None and window > 0 else None,
        prompt_tokens=deltas["prompt_tokens"],
        requests=deltas["request_success"],
        preemptions=deltas["preemptions"],
        ttft_mean_ms=_mean_ms(deltas["ttft_sum"], deltas["ttft_count"]),
        itl_mean_ms=_mean_ms(deltas["itl_sum"], deltas["itl_count"]),
        e2el_mean_ms=_mean_ms(deltas["e2el_sum"], deltas["e2el_count"]),
        kv_cache_usage=after.values.get("kv_cache_usage"),
        process_start_time_s=after.values.get("process_start_time"),
        metric_names=dict(after.names),
    )
    drafts = deltas["spec_drafts"]
    draft_tokens = deltas["spec_draft_tokens"]
    accepted = deltas["spec_accepted_tokens"]
    if drafts is not None and draft_tokens is not None and accepted is not None:
        positions = sorted(set(before.spec_per_pos) & set(after.spec_per_pos))
        per_pos = [after.spec_per_pos[p] - before.spec_per_pos[p] for p in positions]
        out.spec_decode = spec_decode_figures(drafts, draft_tokens, accepted, per_pos)
    return out
