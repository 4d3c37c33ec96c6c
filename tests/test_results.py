"""Result aggregation: vLLM's metric definitions, validity, summary, JSON schema."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from benchgate.client import RequestRecord
from benchgate.results import (
    SCHEMA,
    Dist,
    ResultSchemaError,
    build_trial,
    check_result_dict,
    percentile,
    summarize,
)

SERVER_OK = {"ok": True, "generation_tokens": 30.0, "generation_tokens_per_s": 14.0}


def rec(i, ttft, itl, out, prompt=10, error=None):
    r = RequestRecord(index=i, start_s=0.1 * i, ttft_s=ttft, itl_s=list(itl))
    r.prompt_tokens, r.output_tokens, r.usage_reported = prompt, out, True
    r.e2el_s = ttft + sum(itl)
    if error:
        r.fail(error, "boom")
        r.e2el_s = None
    return r


@pytest.mark.parametrize("n", [1, 2, 5, 100, 257])
def test_percentiles_match_numpy(n):
    data = [random.Random(n).expovariate(1.0) for _ in range(n)]
    for p in (50, 90, 99):
        assert percentile(data, p) == pytest.approx(float(np.percentile(data, p)))
    d = Dist.of(data, 1000.0)
    assert d.median == pytest.approx(float(np.median(data)) * 1000.0)
    assert d.count == n


def test_trial_metrics_follow_vllm_definitions():
    records = [
        rec(0, 0.100, [0.010, 0.020], out=3),
        rec(1, 0.200, [0.030], out=2),
        rec(2, 0.300, [], out=1),  # one token: no TPOT
    ]
    t = build_trial(
        0, records, duration_s=2.0, started_at=0.0, max_error_rate=0.0, server=SERVER_OK
    )
    m = t.metrics
    assert t.valid and t.completed == 3 and t.output_tokens == 6 and t.prompt_tokens == 30
    assert m.request_throughput == pytest.approx(1.5)
    assert m.output_tokens_per_s == pytest.approx(3.0)
    assert m.total_tokens_per_s == pytest.approx(18.0)
    assert m.ttft_ms.median == pytest.approx(200.0)
    # TPOT = (e2el - ttft) / (output_tokens - 1): 15 ms and 30 ms.
    assert m.tpot_ms.count == 2 and m.tpot_ms.mean == pytest.approx(22.5)
    # ITL pools every gap of every request.
    assert m.itl_ms.count == 3 and m.itl_ms.median == pytest.approx(20.0)
    assert m.e2el_ms.p99 == pytest.approx(float(np.percentile([130, 230, 300], 99)))
    a = t.agreement
    assert a.client_output_tokens == 6 and a.tokens_diff_pct == pytest.approx(-80.0)
    assert a.tokens_per_s_diff_pct == pytest.approx(100 * (3.0 - 14.0) / 14.0)


def test_failed_requests_count_in_errors_not_latency():
    records = [rec(i, 0.1, [0.01], out=2) for i in range(8)]
    records += [rec(8, 0.1, [], out=0, error="timeout"), rec(9, 0.1, [], out=0, error="http_503")]
    strict = build_trial(0, records, 1.0, 0.0, max_error_rate=0.0, server={"ok": False})
    assert not strict.valid and strict.failed == 2 and strict.error_rate == pytest.approx(0.2)
    assert strict.errors_by_reason == {"http_503": 1, "timeout": 1}
    assert "above max_error_rate" in strict.invalid_reason
    assert strict.metrics.ttft_ms.count == 8
    assert strict.agreement.server_generation_tokens_per_s is None
    lenient = build_trial(1, records, 1.0, 0.0, max_error_rate=0.2, server={"ok": False})
    assert lenient.valid and lenient.invalid_reason is None


def test_summary_uses_valid_trials_only():
    good = [rec(i, 0.1, [0.01], out=2) for i in range(4)]
    bad = good[:3] + [rec(3, 0.1, [], out=0, error="stream_cut")]
    trials = [
        build_trial(0, good, 1.0, 0.0, 0.0, SERVER_OK),
        build_trial(1, bad, 1.0, 0.0, 0.0, SERVER_OK),
        build_trial(2, good, 2.0, 0.0, 0.0, SERVER_OK),
    ]
    s = summarize(trials)
    assert (s.total_trials, s.valid_trials) == (3, 2)
    out = s.metrics["output_tokens_per_s"]
    assert out.samples == [8.0, 4.0] and out.median == 6.0 and out.better == "higher"
    assert s.metrics["ttft_ms.p99"].better == "lower"
    assert s.metrics["server.generation_tokens_per_s"].samples == [14.0, 14.0]


def test_result_json_round_trip_and_schema_check(tmp_path):
    from benchgate.results import Result, Target, WorkloadInfo

    trial = build_trial(0, [rec(0, 0.1, [0.01, 0.012], out=3)], 1.0, 0.0, 0.0, SERVER_OK)
    result = Result(
        target=Target("http://h:1", "m", "0.32.0"),
        workload=WorkloadInfo("w", 1, "ab" * 32, {"x": 1}),
        trials=[trial],
        summary=summarize([trial]),
        created_at="2026-01-01T00:00:00+00:00",
        client={"name": "benchgate"},
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert next(iter(data)) == "schema" and data["schema"] == SCHEMA
    assert check_result_dict(data) is data
    req = data["trials"][0]["requests"][0]
    assert req["itl_ms"] == [10.0, 12.0] and req["ttft_ms"] == 100.0 and req["error"] is None
    assert "requests" not in result.to_dict(include_requests=False)["trials"][0]
    with pytest.raises(ResultSchemaError, match="unsupported result schema"):
        check_result_dict({**data, "schema": "benchgate.result/0"})
    with pytest.raises(ResultSchemaError, match="no 'trials'"):
        check_result_dict({k: v for k, v in data.items() if k != "trials"})


def test_summary_of_trial_dicts_matches_the_summary_of_trials():
    from benchgate.results import summarize_dicts

    trials = [
        build_trial(
            i, [rec(0, 0.1, [0.01, 0.02], 3), rec(1, 0.2, [0.01], 2)], 1.0 + i, 0.0, 0.0, SERVER_OK
        )
        for i in range(3)
    ]
    as_json = [dataclasses.asdict(t) for t in trials]
    assert summarize_dicts(as_json) == summarize(trials)
    as_json[1]["valid"] = False
    assert summarize_dicts(as_json).valid_trials == 2
