"""Staged results: split, merge, per-stage verdicts, the Bonferroni split, `benchgate judge`."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from benchgate import gate, rules, samples, stages
from benchgate.cli import main

TPUT = "output_tokens_per_s"


def staged(
    levels: dict[str, float],
    n: int = 8,
    seed: int = 0,
    noise: float = 0.02,
    ttft: dict[str, float] | None = None,
    gates: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A staged result: ``n`` trials per stage around each stage's tok/s level."""
    rng = random.Random(seed)
    trials = []
    for name, level in levels.items():
        for _ in range(n):
            trials.append(
                {
                    "index": len(trials),
                    "valid": True,
                    "stage": name,
                    "metrics": {
                        TPUT: level * (1 + rng.gauss(0, noise)),
                        "ttft_ms": {
                            "median": (ttft or {}).get(name, 50.0) * (1 + rng.gauss(0, noise))
                        },
                    },
                    "server": {"ok": False},
                }
            )
    stage_list = [
        {"name": name, **({"gate": gates[name]} if gates and name in gates else {})}
        for name in levels
    ]
    return {
        "schema": "benchgate.result/1",
        "workload": {"name": "w", "version": 1, "hash": "h", "params": {"stages": stage_list}},
        "trials": trials,
        "summary": {"total_trials": len(trials), "valid_trials": len(trials), "metrics": {}},
        "stages": [
            {"name": name, "params": {"concurrency": c}, "summary": {}}
            for c, name in enumerate(levels, start=1)
        ],
    }


def unstaged(level: float, n: int = 8, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "schema": "benchgate.result/1",
        "trials": [
            {"index": i, "valid": True, "metrics": {TPUT: level * (1 + rng.gauss(0, 0.02))}}
            for i in range(n)
        ],
    }


SPECS = rules.make_specs(metrics=[TPUT])


# --------------------------------------------------------------------------- reading


def test_split_gives_one_ordinary_result_per_stage_in_order():
    result = staged({"single": 100.0, "busy": 400.0}, n=3)
    result["trials"][1]["valid"] = False
    parts = stages.split_result(result)
    assert list(parts) == ["single", "busy"]
    single = parts["single"]
    assert [t["index"] for t in single["trials"]] == [0, 1, 2]
    assert single["summary"]["total_trials"] == 3 and single["summary"]["valid_trials"] == 2
    assert single["summary"]["metrics"][TPUT]["samples"] == samples.samples_from_result(
        single, TPUT
    )
    assert single["stage_params"] == {"concurrency": 1} and "stages" not in single
    assert samples.samples_from_result(parts["busy"], TPUT) == pytest.approx([400.0] * 3, rel=0.1)
    # An old result without stages is one stage, untouched.
    old = unstaged(100.0)
    assert not stages.is_staged(old) and stages.split_result(old) == {None: old}


def test_merged_staged_results_keep_stages_and_resummarize_them():
    first = staged({"single": 100.0, "busy": 400.0}, n=3, seed=1)
    more = staged({"single": 100.0, "busy": 400.0}, n=2, seed=2)
    merged = stages.merge_staged([first, more])
    assert [t["stage"] for t in merged["trials"]] == ["single"] * 3 + ["busy"] * 3 + [
        "single"
    ] * 2 + ["busy"] * 2
    assert [t["run"] for t in merged["trials"]] == [0] * 6 + [1] * 4
    assert [s["summary"]["valid_trials"] for s in merged["stages"]] == [5, 5]
    parts = stages.split_result(merged)
    assert len(samples.samples_from_result(parts["busy"], TPUT)) == 5


# --------------------------------------------------------------------------- verdicts


def test_identical_stages_pass_and_every_stage_is_judged():
    base = staged({"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged({"single": 100.0, "busy": 400.0}, seed=2)
    verdict = stages.judge_staged(base, cand, SPECS)
    assert verdict.verdict == rules.PASS
    assert [s.stage for s in verdict.stages] == ["single", "busy"]
    assert all(s.alpha == pytest.approx(0.025) for s in verdict.stages)
    data = verdict.to_dict()
    assert data["schema"] == "benchgate.staged_verdict/1" and data["passed"] is True
    assert [(m["stage"], m["metric"]) for m in data["metrics"]] == [
        ("single", TPUT),
        ("busy", TPUT),
    ]


def test_a_regression_at_one_stage_fails_the_host_and_names_the_stage():
    base = staged({"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged({"single": 100.0, "busy": 320.0}, seed=2)  # 20% slower under load only
    verdict = stages.judge_staged(base, cand, SPECS)
    assert verdict.verdict == rules.FAIL
    assert verdict.stage("single").verdict.verdict == rules.PASS
    assert verdict.stage("busy").verdict.verdict == rules.FAIL
    assert verdict.reasons and all(r.startswith("stage busy: ") for r in verdict.reasons)


def test_fail_beats_inconclusive_beats_pass_over_stages():
    base = staged({"a": 100.0, "b": 100.0, "c": 100.0}, seed=1)
    cand = staged({"a": 100.0, "b": 100.0, "c": 100.0}, seed=2)
    # b: two valid candidate trials only -> INCONCLUSIVE
    for t in cand["trials"]:
        if t["stage"] == "b" and t["index"] % 8 > 1:
            t["valid"] = False
    assert stages.judge_staged(base, cand, SPECS).verdict == rules.INCONCLUSIVE
    for t in cand["trials"]:
        if t["stage"] == "c":
            t["metrics"][TPUT] *= 0.7
    verdict = stages.judge_staged(base, cand, SPECS)
    assert verdict.verdict == rules.FAIL
    assert [s.verdict.verdict for s in verdict.stages] == [
        rules.PASS,
        rules.INCONCLUSIVE,
        rules.FAIL,
    ]


def test_a_stage_only_one_side_measured_never_passes():
    base = staged({"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged({"single": 100.0}, seed=2)
    verdict = stages.judge_staged(base, cand, SPECS)
    assert verdict.verdict == rules.INCONCLUSIVE
    assert "stage busy: not measured on the candidate" in verdict.reasons[0]
    with pytest.raises(ValueError, match="only the baseline has stages"):
        stages.judge_staged(base, unstaged(100.0), SPECS)


def test_each_stage_may_carry_its_own_limit_and_critical_metrics():
    levels = {"single": 100.0, "busy": 400.0}
    gates = {"busy": {"max_regression_pct": 15, "critical": [TPUT, "ttft_ms"]}}
    base = staged(levels, seed=1, gates=gates)
    # 10% slower under load (within busy's 15%), TTFT 30% worse at both stages.
    cand = staged(
        {"single": 100.0, "busy": 360.0},
        seed=2,
        ttft={"single": 65.0, "busy": 65.0},
        gates=gates,
    )
    specs = rules.make_specs(metrics=[TPUT, "ttft_ms"])
    warn = rules.GateConfig(noncritical_fail="warn")
    verdict = stages.judge_staged(base, cand, specs, warn)
    single, busy = verdict.stages
    # single: TTFT is not critical there, so its FAIL only warns.
    assert single.verdict.verdict == rules.PASS and single.verdict.warnings
    # busy: throughput within its own 15%, but TTFT is critical there.
    assert busy.verdict.metric(TPUT).verdict == rules.PASS
    assert busy.verdict.metric(TPUT).max_regression_pct == 15
    assert busy.verdict.metric("ttft_ms").critical
    assert busy.verdict.verdict == rules.FAIL and verdict.verdict == rules.FAIL
    # The same candidate under the judge's 5% everywhere: throughput fails at busy.
    strict = stages.judge_staged(base, cand, specs, warn, gates={"busy": {"critical": [TPUT]}})
    assert strict.stage("busy").verdict.metric(TPUT).verdict == rules.FAIL


def test_stage_specs_apply_the_gate_over_the_judges_specs():
    specs = rules.make_specs(metrics=[TPUT, "ttft_ms"], thresholds={"ttft_ms": 10})
    assert stages.stage_specs(specs, None) == specs
    out = stages.stage_specs(
        specs, {"metrics": [TPUT], "critical": ["goodput"], "thresholds": {"tpot_ms": 20}}, 7.0
    )
    assert [(s.name, s.max_regression_pct, s.critical) for s in out] == [
        (TPUT, 5.0, False),
        ("goodput", 7.0, True),
        ("tpot_ms", 20.0, False),
    ]
    assert stages.stage_specs(specs, {"max_regression_pct": 12})[1].max_regression_pct == 12
    with pytest.raises(ValueError, match="stage busy: unknown direction"):
        stages.judge_staged(
            staged({"busy": 1.0}),
            staged({"busy": 1.0}),
            SPECS,
            gates={"busy": {"metrics": ["mystery"]}},
        )


def test_a_stage_latency_stat_judges_that_statistic():
    base = staged({"slo": 100.0}, seed=1)
    cand = staged({"slo": 100.0}, seed=2)
    for result, p99 in ((base, 100.0), (cand, 200.0)):
        for t in result["trials"]:
            t["metrics"]["ttft_ms"]["p99"] = p99
    specs = rules.make_specs(metrics=["ttft_ms"])
    assert stages.judge_staged(base, cand, specs).verdict == rules.PASS  # medians agree
    p99 = stages.judge_staged(base, cand, specs, gates={"slo": {"latency_stat": "p99"}})
    assert p99.verdict == rules.FAIL


def _aa_fail_rate(correction: str, runs: int = 200) -> float:
    """A/A: four stages, 8+8 trials, 4% noise, a 0% limit (FAIL = a significant slowdown)."""
    specs = rules.make_specs(metrics=[TPUT], max_regression_pct=0.0)
    levels = {name: 100.0 for name in "abcd"}
    fails = 0
    for seed in range(runs):
        base = staged(levels, seed=2 * seed, noise=0.04)
        cand = staged(levels, seed=2 * seed + 1, noise=0.04)
        fails += stages.judge_staged(base, cand, specs, correction=correction).verdict == rules.FAIL
    return fails / runs


def test_bonferroni_keeps_the_staged_false_fail_rate_at_alpha():
    # Each stage alone falsely fails about alpha (5%) of identical releases
    # here; four uncorrected stages about 1 - 0.95**4 = 19%.
    assert _aa_fail_rate("none") >= 0.11
    assert _aa_fail_rate("bonferroni") <= 0.08


def test_a_15_percent_regression_in_one_stage_of_four_is_caught():
    levels = {name: 100.0 for name in "abcd"}
    caught = 0
    for seed in range(60):
        base = staged(levels, seed=2 * seed, noise=0.04)
        cand = staged({**levels, "c": 85.0}, seed=2 * seed + 1, noise=0.04)
        verdict = stages.judge_staged(base, cand, SPECS)
        caught += verdict.verdict == rules.FAIL and verdict.stage("c").verdict.verdict == "FAIL"
    assert caught >= 54  # 90%


def test_few_trials_cannot_decide_once_alpha_is_split():
    # 3+3 trials reach p = 0.05 at best: enough for one stage, not for two at 0.025.
    one = stages.judge_staged(
        staged({"a": 100.0}, n=3, seed=1), staged({"a": 100.0}, n=3, seed=2), SPECS
    )
    two = stages.judge_staged(
        staged({"a": 100.0, "b": 100.0}, n=3, seed=1),
        staged({"a": 100.0, "b": 100.0}, n=3, seed=2),
        SPECS,
    )
    assert one.verdict == rules.PASS
    assert two.verdict == rules.INCONCLUSIVE
    # No bound exists at 0.025 with 3+3 trials: the interval is unbounded.
    assert math.isinf(two.stage("a").verdict.metric(TPUT).change_lo_pct)


def test_unstaged_results_are_judged_exactly_as_before():
    base, cand = unstaged(100.0, seed=1), unstaged(97.0, seed=2)
    verdict = gate.judge(base, cand, SPECS, rules.GateConfig())
    assert not verdict.staged
    assert verdict == rules.judge_results(base, cand, SPECS)


# --------------------------------------------------------------------------- benchgate judge


def test_judge_command_prints_a_table_per_stage(tmp_path: Path, capsys):
    base = staged({"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged({"single": 100.0, "busy": 320.0}, seed=2)
    files = []
    for name, data in (("b.json", base), ("c.json", cand)):
        (tmp_path / name).write_text(json.dumps(data))
        files.append(str(tmp_path / name))
    out = tmp_path / "verdict.json"
    argv = ["judge", "--baseline", files[0], "--candidate", files[1], "--metric", TPUT]
    assert main([*argv, "--output", str(out)]) == 1
    text = capsys.readouterr().out
    assert "== stage single (concurrency 1): PASS, judged at alpha 0.025 ==" in text
    assert "== stage busy (concurrency 2): FAIL, judged at alpha 0.025 ==" in text
    assert "staged verdict: FAIL (every stage must pass; alpha 0.05 split over 2 stages" in text
    data = json.loads(out.read_text())
    assert data["verdict"] == "FAIL" and [s["verdict"] for s in data["stages"]] == ["PASS", "FAIL"]
    assert main([*argv, "--stage-correction", "none", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["correction"] == "none"
    (tmp_path / "u.json").write_text(json.dumps(unstaged(100.0)))
    assert main(["judge", "--baseline", files[0], "--candidate", str(tmp_path / "u.json")]) == 3
    assert "only the baseline has stages (single, busy)" in capsys.readouterr().err


def test_progress_log_names_the_stage_and_restarts_the_median():
    from benchgate.bench import Progress, progress_logger

    lines: list[str] = []
    on_event = progress_logger("gpu-01 candidate", lines.append)
    on_event(Progress("stage", 0, 0, 2, stage="single"))
    on_event(Progress("trial-done", 0, 1, 2, tokens_per_s=100.0, stage="single"))
    on_event(Progress("stage", 1, 0, 2, stage="busy"))
    on_event(Progress("warmup", -1, 0, 4, stage="busy"))
    on_event(Progress("trial-done", 0, 1, 2, tokens_per_s=400.0, stage="busy"))
    assert lines == [
        "benchgate gpu-01 candidate: stage 1/2: single",
        "benchgate gpu-01 candidate, stage single: trial 1/2: 100.0 output tok/s "
        "(median so far 100.0)",
        "benchgate gpu-01 candidate: stage 2/2: busy",
        "benchgate gpu-01 candidate, stage busy: warm-up, 4 requests",
        "benchgate gpu-01 candidate, stage busy: trial 1/2: 400.0 output tok/s "
        "(median so far 400.0)",
    ]
