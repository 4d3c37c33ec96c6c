"""Goodput under per-request SLOs: workload ``slo``, per-trial goodput, summary."""

from __future__ import annotations

import pytest

from benchgate.client import RequestRecord
from benchgate.results import build_trial, meets_slo, summarize
from benchgate.workload import WorkloadError, load_workload, parse_workload

BASE = {
    "name": "g",
    "version": 1,
    "input_len": 8,
    "output_len": 8,
    "concurrency": 2,
    "num_requests": 4,
    "trials": 1,
}


def rec(i, ttft, itl, out, error=None):
    r = RequestRecord(index=i, start_s=0.0, ttft_s=ttft, itl_s=list(itl))
    r.prompt_tokens, r.output_tokens, r.usage_reported = 8, out, True
    r.e2el_s = ttft + sum(itl)
    if error:
        r.fail(error)
    return r


def test_workload_slo_is_validated_and_hashed_only_when_set():
    plain = parse_workload(BASE)
    assert plain.slo is None and "slo" not in plain.params() and "slo" not in plain.to_dict()
    with_slo = parse_workload({**BASE, "slo": {"ttft_ms": 500, "tpot_ms": 50}})
    assert with_slo.slo == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert with_slo.hash != plain.hash
    assert parse_workload(with_slo.to_dict()).hash == with_slo.hash
    assert plain.with_overrides(slo={"ttft_ms": 500, "tpot_ms": 50}).hash == with_slo.hash
    assert plain.with_overrides(slo=None).hash == plain.hash
    for bad, field in (
        ({"ttft": 1}, "slo.ttft"),
        ({"ttft_ms": 0}, "slo.ttft_ms"),
        ({"tpot_ms": "fast"}, "slo.tpot_ms"),
        ({}, "slo"),
        ([1], "slo"),
    ):
        with pytest.raises(WorkloadError) as info:
            parse_workload({**BASE, "slo": bad})
        assert info.value.field == field


def test_existing_workloads_keep_their_hash():
    # The demo workload has no slo: adding the field must not change its identity.
    demo = load_workload("demo")
    assert demo.slo is None
    assert "slo" not in demo.params()


def test_meets_slo_like_vllm():
    fast = rec(0, 0.1, [0.01] * 7, 8)  # TTFT 100 ms, TPOT 10 ms, e2el 170 ms
    assert meets_slo(fast, {"ttft_ms": 100, "tpot_ms": 10})  # limits are inclusive
    assert not meets_slo(fast, {"ttft_ms": 99})
    assert not meets_slo(fast, {"tpot_ms": 9.9})
    assert not meets_slo(fast, {"e2el_ms": 160})
    one_token = rec(1, 0.05, [], 1)  # no TPOT: meets a TPOT objective
    assert meets_slo(one_token, {"tpot_ms": 1})
    assert not meets_slo(rec(2, 0.01, [0.001], 2, error="timeout"), {"ttft_ms": 1000})


def test_goodput_per_trial_and_in_the_summary():
    records = [
        rec(0, 0.1, [0.01] * 7, 8),  # meets both
        rec(1, 0.6, [0.01] * 7, 8),  # TTFT too slow
        rec(2, 0.1, [0.06] * 7, 8),  # TPOT too slow
        rec(3, 0.2, [0.02] * 7, 8),  # meets both
    ]
    slo = {"ttft_ms": 500, "tpot_ms": 50}
    trial = build_trial(0, records, 2.0, 0.0, 0.0, {"ok": False}, slo=slo)
    assert trial.metrics.slo_met == 2
    assert trial.metrics.goodput == pytest.approx(1.0)  # 2 requests / 2 s
    assert trial.metrics.request_throughput == pytest.approx(2.0)
    second = build_trial(1, records[:1], 0.5, 0.0, 0.0, {"ok": False}, slo=slo)
    summary = summarize([trial, second])
    assert summary.metrics["goodput"].samples == pytest.approx([1.0, 2.0])
    assert summary.metrics["goodput"].better == "higher"
    plain = build_trial(0, records, 2.0, 0.0, 0.0, {"ok": False})
    assert plain.metrics.goodput is None and plain.metrics.slo_met is None
    assert "goodput" not in summarize([plain]).metrics


def test_the_gate_reads_goodput_from_a_result():
    from benchgate.results import Result, Summary, Target, WorkloadInfo
    from benchgate.rules import Direction, direction_of
    from benchgate.samples import samples_from_result

    slo = {"ttft_ms": 500}
    trials = [
        build_trial(i, [rec(0, 0.1, [0.01], 2), rec(1, 0.9, [0.01], 2)], 1.0, 0.0, 0.0, {}, slo=slo)
        for i in range(3)
    ]
    result = Result(
        target=Target("http://x", "m", None),
        workload=WorkloadInfo("g", 1, "h", {}),
        trials=trials,
        summary=summarize(trials),
        created_at="now",
        client={},
    )
    data = result.to_dict()
    assert samples_from_result(data, "goodput") == [1.0, 1.0, 1.0]
    assert direction_of("goodput") is Direction.HIGHER
    assert isinstance(result.summary, Summary)
    # Host blocks default to null: results from a bare run_benchmark carry them as null.
    assert data["roofline"] is None and data["service_memory"] is None
