"""Side by side: two servers measured with their trials alternating (ABBA),
and the gate that leaves the run-to-run spread out of such a pair."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from benchgate import ranks, rules, samples
from benchgate.bench import BenchmarkError, module_run, progress_logger, reference_path
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread
from test_gate_module import _patch_exits, make_result, run_module  # noqa: F401 (fixture)

STAGED = {
    "schema": "benchgate.workload/1",
    "name": "pair-staged",
    "version": 1,
    "input_len": 8,
    "output_len": 8,
    "ignore_eos": True,
    "concurrency": 2,
    "num_requests": 4,
    "warmup": 2,
    "trials": 4,
    "prompts": {"source": "synthetic", "seed": 3},
    "stages": [{"name": "single", "concurrency": 1}, {"name": "busy", "concurrency": 2}],
}


def _params(base_url: str, reference: str, out: Path) -> dict[str, Any]:
    return {
        "base_url": base_url,
        "reference_base_url": reference,
        "workload": STAGED,
        "output_path": str(out),
        "tensor_parallel_size": 1,
        "bandwidth_gbs": 0,
        "include_requests": True,
    }


def _start(trial: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(trial["started_at"])


def test_trials_alternate_abba_with_the_same_prompts_and_both_results_are_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run-candidate.json"
    lines: list[str] = []
    # The reference is twice as slow per token: the pair must tell them apart.
    with (
        serve_in_thread(FakeConfig(model="tiny", ttft_s=0.002, itl_s=0.002)) as cand,
        serve_in_thread(FakeConfig(model="tiny", ttft_s=0.002, itl_s=0.004)) as ref,
    ):
        res = module_run(
            _params(cand.base_url, ref.base_url, out), check_mode=False, log=lines.append
        )
        # Warm-ups and trials of both stages on each server, nothing more.
        assert cand.state.requests == ref.state.requests == 2 * (2 + 4 * 4)
    c, r = res["result"], res["reference_result"]
    assert reference_path(out).name == "run-candidate-reference.json"
    assert out.is_file() and reference_path(out).is_file()
    assert c["interleaved"]["id"] == r["interleaved"]["id"]
    assert (c["interleaved"]["side"], r["interleaved"]["side"]) == ("candidate", "reference")
    assert c["interleaved"]["with"] == ref.base_url and r["target"]["base_url"] == ref.base_url
    assert (
        [s["name"] for s in c["stages"]]
        == [s["name"] for s in r["stages"]]
        == [
            "single",
            "busy",
        ]
    )
    # ABBA within each stage: reference first on even trials, candidate first on odd.
    for stage in ("single", "busy"):
        ct = [t for t in c["trials"] if t["stage"] == stage]
        rt = [t for t in r["trials"] if t["stage"] == stage]
        assert len(ct) == len(rt) == 4
        for i, (a, b) in enumerate(zip(rt, ct)):
            first, second = (a, b) if i % 2 == 0 else (b, a)
            assert _start(first) < _start(second), (stage, i)
            assert a["index"] == b["index"]
            # The same prompts on both sides.
            assert [q["prompt_tokens"] for q in a["requests"]] == [
                q["prompt_tokens"] for q in b["requests"]
            ]
        # Every trial of one side lies between trials of the other (one window).
        assert _start(rt[0]) < _start(ct[-1]) and _start(ct[0]) < _start(rt[-1])
    assert c["summary"]["metrics"]["output_tokens_per_s"]["median"] > (
        1.3 * r["summary"]["metrics"]["output_tokens_per_s"]["median"]
    )
    assert "reference 8/8 valid trials" in res["msg"]
    # The journal's lines keep the sides apart.
    assert any(", candidate: trial 4/4" in line for line in lines)
    assert any(", reference: trial 4/4" in line for line in lines)


def test_a_reference_serving_another_model_is_refused_before_any_trial(tmp_path: Path) -> None:
    with (
        serve_in_thread(FakeConfig(model="tiny", fast=True)) as cand,
        serve_in_thread(FakeConfig(model="other", fast=True)) as ref,
    ):
        with pytest.raises(BenchmarkError, match="side by side needs the same model"):
            module_run(_params(cand.base_url, ref.base_url, tmp_path / "r.json"), False)
        assert cand.state.requests == ref.state.requests == 0


def _paired(scale_b: float, scale_c: float, pair: str = "p1") -> tuple[dict, dict]:
    b = make_result(scale_b, n=6, seed=1)
    c = make_result(scale_c, n=6, seed=2)
    b["interleaved"] = {"id": pair, "side": "reference"}
    c["interleaved"] = {"id": pair, "side": "candidate"}
    return b, c


def test_side_by_side_needs_every_result_of_both_sides_paired() -> None:
    b, c = _paired(1.0, 1.0)
    b2, c2 = _paired(1.0, 1.0, "p2")
    assert samples.side_by_side([b], [c])
    assert samples.side_by_side([b, b2], [c2, c])
    assert not samples.side_by_side([b], [c2])  # another pair
    assert not samples.side_by_side([c], [b])  # sides swapped
    assert not samples.side_by_side([b, make_result(1.0)], [c, c2])  # one run not paired
    assert not samples.side_by_side([make_result(1.0)], [make_result(1.0)])


@pytest.mark.usefixtures("_patch_exits")
def test_the_gate_leaves_the_run_spread_out_of_a_side_by_side_pair() -> None:
    args = {"max_regression_pct": 10.0, "run_spread_pct": 4.0}
    b, c = _paired(1.0, 0.97)
    paired = run_module({**args, "baseline": b, "candidate": c})
    plain_b = {k: v for k, v in b.items() if k != "interleaved"}
    plain_c = {k: v for k, v in c.items() if k != "interleaved"}
    apart = run_module({**args, "baseline": plain_b, "candidate": plain_c})
    assert paired["side_by_side"] is True and apart["side_by_side"] is False
    # 3% slower with 1% trial noise: decided within 10% side by side; one run
    # a side with a 4% spread between runs cannot rule out 10%.
    assert paired["verdict"] == "PASS"
    assert apart["verdict"] == "INCONCLUSIVE"
    tput = next(m for m in paired["metrics"] if m["metric"] == "output_tokens_per_s")
    assert "run-to-run spread" not in tput["reason"]
    assert "run-to-run spread" in apart["reasons"][0]
    # A real regression still fails side by side.
    b, c = _paired(1.0, 0.8)
    assert run_module({**args, "baseline": b, "candidate": c})["verdict"] == "FAIL"


def test_the_progress_logger_keeps_one_median_per_side() -> None:
    from benchgate.bench import Progress

    lines: list[str] = []
    log = progress_logger("h candidate", lines.append)
    log(Progress("trial-done", 0, 1, 2, tokens_per_s=10.0, stage="busy", side="reference"))
    log(Progress("trial-done", 0, 1, 2, tokens_per_s=30.0, stage="busy", side="candidate"))
    log(Progress("trial-done", 1, 2, 2, tokens_per_s=20.0, stage="busy", side="reference"))
    assert lines[-1] == (
        "benchgate h candidate, stage busy, reference: trial 2/2: 20.0 output tok/s "
        "(median so far 15.0)"
    )


def test_signed_rank_counts_match_every_sign_pattern() -> None:
    from itertools import product

    for n in range(1, 8):
        brute = [0] * (n * (n + 1) // 2 + 1)
        for signs in product((0, 1), repeat=n):
            brute[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
        assert ranks._signed_rank_counts(n) == brute


def test_pairs_see_through_a_drifting_machine_that_two_samples_cannot() -> None:
    import random

    rng = random.Random(7)
    # The machine's level wanders by +-25% between pairs; within a pair the
    # candidate is 3% slower, give or take 1%.
    level = [400.0 * (1 + 0.25 * rng.uniform(-1, 1)) for _ in range(12)]
    base = [x * (1 + rng.gauss(0, 0.01)) for x in level]
    cand = [x * 0.97 * (1 + rng.gauss(0, 0.01)) for x in level]
    pair = ranks.signed_rank_shift(base, cand, 0.05)
    apart = ranks.hodges_lehmann(base, cand, 0.05)
    assert pair.change == pytest.approx(-0.03, abs=0.01)
    assert -0.06 < pair.change_lo < pair.change < pair.change_hi < 0.0
    assert pair.p_lower < 0.01
    # As two samples, the drift swamps the 3%: an interval over three times as wide.
    assert apart.change_lo < -0.08 and apart.change_hi > 0.04
    assert apart.change_hi - apart.change_lo > 3 * (pair.change_hi - pair.change_lo)
    # Twelve pairs at alpha 0.05: the 18th smallest of 78 Walsh averages
    # (P(T+ <= 17) = 0.0461 <= 0.05 < P(T+ <= 18)).
    counts = ranks._signed_rank_counts(12)
    assert sum(counts[:18]) / 2**12 <= 0.05 < sum(counts[:19]) / 2**12


def test_paired_judging_drops_a_pair_with_an_invalid_trial() -> None:
    b = make_result(1.0, n=6, seed=1)
    c = make_result(1.0, n=6, seed=2)
    c["trials"][2] = {"index": 2, "valid": False, "invalid_reason": "error rate", "metrics": None}
    bv, cv, runs = samples.paired_samples(b, c, "output_tokens_per_s")
    assert len(bv) == len(cv) == 5 and runs == [0] * 5
    assert bv[2] == b["trials"][3]["metrics"]["output_tokens_per_s"]
    verdict = rules.judge_results(b, c, config=rules.GateConfig(paired=True))
    tput = verdict.metric("output_tokens_per_s")
    assert tput.n_baseline == tput.n_candidate == 5
    assert "5 pairs, side by side" in tput.reason
