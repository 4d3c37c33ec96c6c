"""lab/experiments/gate_decision_quality_staged.py on small synthetic staged pools (seconds)."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from _load import load_file
from benchgate import ranks, rules, stages

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lab" / "experiments" / "gate_decision_quality_staged.py"
WORKLOAD = str(ROOT / "workloads" / "demo-staged.yml")
TPUT = "output_tokens_per_s"


@pytest.fixture(scope="module")
def mod() -> Any:
    return load_file(SCRIPT, "benchgate_dq_staged", register=True)  # dataclasses


def quiet_pools(mod: Any) -> Any:
    """demo-staged's stages with requests that vary by 2%: A/A should pass, 15% fail."""
    pools = mod.synthetic_pools(WORKLOAD, seed=0)
    rng = random.Random(1)
    requests = [
        mod.dq.Request(64, 0.02 * 64 * (1 + rng.gauss(0, 0.02)), 0.05 * (1 + rng.gauss(0, 0.02)))
        for _ in range(400)
    ]
    return mod.StagedPools(
        {n: mod.dq.Pool(requests, p.concurrency, 8, n) for n, p in pools.pools.items()},
        pools.workload,
        pools.params,
        "quiet",
    )


def judge(mod: Any, limit: float = 5.0) -> Any:
    return mod.Judge(tuple(rules.make_specs(None, limit)), rules.GateConfig())


def test_a_regression_in_one_stage_is_detected_far_more_often_than_aa_blocks(mod):
    pools = quiet_pools(mod)
    plan = mod.dq.parse_plan("6+6", 0.05)
    noise = mod.dq.Noise(0.01, 0.0)
    aa = mod.resampled(pools, plan, judge(mod), noise, 0.0, None, 0.0, False, 30, 0)
    for stage in ("single", "busy"):
        slow = mod.resampled(pools, plan, judge(mod), noise, 0.0, stage, 0.15, False, 30, 1)
        assert slow.blocked / slow.comparisons >= 0.9, stage
        assert slow.failed_elsewhere == 0  # the stage that was not slowed never FAILs
        assert slow.blocked_by[stage] == slow.blocked
    assert aa.blocked / aa.comparisons <= 0.2
    assert aa.comparisons == 30


def _verdict(per_stage: dict[str, str]) -> rules.Verdict:
    out = [
        rules.Stage(name, rules.Verdict(v, [], [], 0.025), 0.025) for name, v in per_stage.items()
    ]
    worst = rules.FAIL if rules.FAIL in per_stage.values() else rules.INCONCLUSIVE
    if all(v == rules.PASS for v in per_stage.values()):
        worst = rules.PASS
    return rules.Verdict(worst, [], stages=out)


def test_the_aa_rate_counts_the_whole_staged_verdict_not_each_stage(mod):
    tally = mod.StagedTally()
    tally.add(_verdict({"single": rules.FAIL, "busy": rules.PASS}), 6)
    tally.add(_verdict({"single": rules.PASS, "busy": rules.INCONCLUSIVE}), 12)
    tally.add(_verdict({"single": rules.INCONCLUSIVE, "busy": rules.FAIL}), 6)
    tally.add(_verdict({"single": rules.PASS, "busy": rules.PASS}), 6)
    # 3 of 4 comparisons blocked the host, though each stage blocked only 2 of 4.
    assert (tally.blocked, tally.comparisons) == (3, 4)
    assert (tally.fail, tally.inconclusive) == (2, 1)
    assert tally.blocked_by == {"single": 2, "busy": 2}
    assert tally.trials == 30


def test_failed_elsewhere_counts_fails_of_the_stages_not_slowed(mod):
    tally = mod.StagedTally()
    tally.add(_verdict({"single": rules.FAIL, "busy": rules.PASS}), 6, "single")
    tally.add(_verdict({"single": rules.FAIL, "busy": rules.FAIL}), 6, "single")
    tally.add(_verdict({"single": rules.PASS, "busy": rules.INCONCLUSIVE}), 6, "single")
    assert tally.failed_elsewhere == 1


def test_the_regression_slows_one_stage_and_leaves_the_other_as_it_was(mod):
    pools = mod.synthetic_pools(WORKLOAD, seed=0)
    noise = mod.dq.Noise(0.03, 0.1)
    same = mod.measure(pools, 4, random.Random(7), noise, 0.04, {}, False)
    slow = mod.measure(pools, 4, random.Random(7), noise, 0.04, {"busy": 0.15}, False)
    for a, b in zip(same["trials"], slow["trials"], strict=True):
        assert a["stage"] == b["stage"]
        if a["stage"] == "single":
            assert a == b
        else:
            assert b["metrics"][TPUT] == pytest.approx(0.85 * a["metrics"][TPUT])
            assert b["metrics"]["ttft_ms"]["median"] == pytest.approx(
                a["metrics"]["ttft_ms"]["median"] / 0.85
            )
    assert stages.stage_names(same) == ["single", "busy"]


def test_the_workloads_stage_gates_are_applied_as_the_module_applies_them(mod):
    pools = mod.synthetic_pools(WORKLOAD, seed=0)
    rng = random.Random(0)
    run = mod.measure(pools, 6, rng, mod.dq.Noise(0.0, 0.0), 0.0, {}, False)
    verdict = judge(mod)([run], [run])
    critical = {
        s.stage: {m.metric for m in s.verdict.metrics if m.critical} for s in verdict.stages
    }
    assert critical == {"single": {TPUT}, "busy": {TPUT, "ttft_ms"}}  # demo-staged's busy gate
    limits = {
        (s.stage, m.metric): m.max_regression_pct for s in verdict.stages for m in s.verdict.metrics
    }
    assert limits[("busy", "ttft_ms")] == 20.0  # decidable on the 2-core host
    assert limits[("busy", TPUT)] == limits[("single", "ttft_ms")] == 5.0  # the judge's limit
    assert [s.alpha for s in verdict.stages] == [0.025, 0.025]  # Bonferroni over 2 stages


def test_replay_keeps_the_recorded_runs_and_slows_one_stage(mod):
    pools = quiet_pools(mod)
    rng = random.Random(3)
    noise = mod.dq.Noise(0.01, 0.0)
    runs = [mod.measure(pools, 6, rng, noise, 0.0, {}, False) for _ in range(8)]
    aa = mod.replay(runs, "AB+B", judge(mod), None, 1.0)
    slow = mod.replay(runs, "ABA+B", judge(mod), "single", 0.85)
    assert aa.comparisons == slow.comparisons == 8  # one per window start
    assert aa.blocked <= 2
    assert slow.fail == 8 and slow.failed_elsewhere == 0
    kept = mod.slowed_run(runs[0], "single", 0.85)
    assert [t for t in kept["trials"] if t["stage"] == "busy"] == [
        t for t in runs[0]["trials"] if t["stage"] == "busy"
    ]


def test_pairs_replay_cuts_each_stage_into_abba_pairs_judged_as_pairs(mod):
    # Runs whose level drifts by 20% from run to run: as pairs, that cancels.
    pools = quiet_pools(mod)
    rng = random.Random(5)
    noise = mod.dq.Noise(0.01, 0.0)
    runs = [mod.measure(pools, 6, rng, noise, 0.2, {}, False) for _ in range(10)]
    aa = mod.replay_pairs(runs, 8, 16, judge(mod), None, 1.0)
    slow = mod.replay_pairs(runs, 8, 16, judge(mod), "busy", 0.85)
    assert aa.comparisons == slow.comparisons == 10
    assert aa.blocked == 0 and aa.trials == 10 * 8  # decided at the first 8 pairs
    assert slow.fail == 10 and slow.blocked_by["busy"] == 10 and slow.failed_elsewhere == 0
    seq = [{"metrics": {TPUT: float(i)}} for i in range(8)]
    a, b = mod._pairs(seq, "busy", 1.0)
    # ABBA: reference first, then candidate first, and so on.
    assert [t["metrics"][TPUT] for t in a] == [0.0, 3.0, 4.0, 7.0]
    assert [t["metrics"][TPUT] for t in b] == [1.0, 2.0, 5.0, 6.0]
    assert [t["index"] for t in a] == [t["index"] for t in b] == [0, 1, 2, 3]
    assert mod.check_design("pairs") == "pairs:8+16"


def _staged_file(path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    trials = []
    for stage, conc, n in (("single", 1, 8), ("busy", 4, 16)):
        for _ in range(3):
            reqs = [
                {"output_tokens": 64, "ttft_ms": 50 + rng.random(), "e2el_ms": 1300 + rng.random()}
                for _ in range(n)
            ]
            trials.append(
                {
                    "stage": stage,
                    "valid": True,
                    "duration_s": sum(r["e2el_ms"] for r in reqs) / 1000 / conc,
                    "metrics": {TPUT: 64 * conc / 1.3},
                    "requests": reqs,
                }
            )
    doc = {"schema": "benchgate.result/1", "trials": trials, "stages": [{"name": "single"}]}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_pools_come_per_stage_from_staged_result_files(mod, tmp_path):
    files = [_staged_file(tmp_path / f"run-{i}.json", i) for i in range(2)]
    pools = mod.pools_from_results(files, None)
    assert pools.names == ["single", "busy"]
    assert [len(p.requests) for p in pools.pools.values()] == [48, 96]
    assert [p.requests_per_trial for p in pools.pools.values()] == [8, 16]
    assert [round(p.concurrency) for p in pools.pools.values()] == [1, 4]
    unstaged = tmp_path / "plain.json"
    unstaged.write_text(json.dumps({"trials": [{"metrics": {TPUT: 1.0}}]}), encoding="utf-8")
    with pytest.raises(SystemExit, match="not a staged"):
        mod.pools_from_results([unstaged], None)


def test_the_report_gives_every_stage_an_interval_and_the_targets(mod, capsys):
    assert mod.main(["--workload", WORKLOAD, "--comparisons", "20", "--schedule", "6+6"]) == 0
    out = capsys.readouterr().out
    assert "| resampled | A/A | 20 |" in out
    assert "15% slower at single" in out and "15% slower at busy" in out
    assert "A/A <= 5%:" in out and "detection at busy >= 95%:" in out


def test_wilson_interval_is_scipys(mod):
    lo, hi = mod.wilson(0, 200)
    assert lo == 0.0 and 0.015 < hi < 0.02  # 0 of 200 still allows up to ~1.9%
    lo, hi = mod.wilson(190, 200)
    assert lo < 0.95 < hi


def _levels_run(levels: dict[str, float]) -> dict[str, Any]:
    """A staged run whose three trials per stage sit at one level (tok/s; TTFT as a median)."""
    trials = []
    for stage, level in levels.items():
        for f in (0.99, 1.0, 1.01):
            trials.append(
                {
                    "stage": stage,
                    "valid": True,
                    "metrics": {TPUT: level * f, "ttft_ms": {"median": 1000.0 / (level * f)}},
                }
            )
    return {"trials": trials}


def test_the_spread_table_measures_each_stage_from_its_run_medians(mod):
    # single alternates +-5% around 100 (a spread); busy drifts steadily by 3% a run,
    # which consecutive runs see and an A-B-A contrast cancels.
    runs = [
        _levels_run({"single": 100.0 * (1.05 if i % 2 else 0.95), "busy": 400.0 * 1.03**i})
        for i in range(8)
    ]
    assert mod.run_level(runs[1], "single", TPUT) == pytest.approx(105.0)
    assert mod.run_level(runs[1], "single", "ttft_ms") == pytest.approx(1000.0 / 105.0)
    rows = {
        tuple(line.split(" | ")[:2]): line
        for line in mod.spread_table(runs, ["single", "busy"], [TPUT, "ttft_ms"], 0.05)
        if line.startswith("| single") or line.startswith("| busy")
    }
    single = rows[("| single", TPUT)].split(" | ")
    busy = rows[("| busy", TPUT)].split(" | ")
    # log(1.05/0.95) = 0.100 alternating in sign: sd 0.107 / sqrt(2) = 7.6%
    assert single[3] == "7.6%"
    assert busy[3] == "0.0%" and busy[4] == "0.0%"  # a steady drift: no spread either way
    steps = [math.log(1.05 / 0.95) * (1 if i % 2 == 0 else -1) for i in range(7)]
    spread = 100 * statistics.stdev(steps) / math.sqrt(2)
    two_one = ranks.decidable_limit_pct(spread, (2, 1), 0.025)  # alpha 0.05 over two stages
    assert single[5].startswith(f"{two_one:.1f}%, ")
    assert two_one > 30  # a 7.6% spread leaves nothing a 12% limit could decide


def test_gates_from_a_workload_replace_the_ones_the_records_carry(mod):
    gates = mod.stage_gates_of(WORKLOAD)
    assert gates == {
        "busy": {"critical": [TPUT, "ttft_ms"], "thresholds": {"ttft_ms": 20.0}},
    }
    # A record measured before the threshold existed carries busy's gate without it;
    # judged with --gates-from, busy's TTFT gets the workload's limit all the same.
    pools = mod.synthetic_pools(WORKLOAD, seed=0)
    run = mod.measure(pools, 6, random.Random(0), mod.dq.Noise(0.0, 0.0), 0.0, {}, False)
    for stage in run["workload"]["params"]["stages"]:
        stage.pop("gate", None)
    plain = mod.Judge(tuple(rules.make_specs(None, 12.0)), rules.GateConfig())
    with_gates = mod.Judge(tuple(rules.make_specs(None, 12.0)), rules.GateConfig(), gates=gates)
    assert plain([run], [run]).stage("busy").verdict.metric("ttft_ms").max_regression_pct == 12.0
    busy = with_gates([run], [run]).stage("busy").verdict
    assert busy.metric("ttft_ms").max_regression_pct == 20.0
    assert busy.metric("ttft_ms").critical
