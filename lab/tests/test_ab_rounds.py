"""lab/gpu/ab_rounds.py on a synthetic spread.py folder (2 rounds x 3 servers x 3 loads)
and on the recorded spread run in lab/calibration/h200-vllm-6."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from _load import load_file
from benchgate.results import summarize_dicts

ROOT = Path(__file__).resolve().parents[2]
rounds = load_file(ROOT / "lab" / "gpu" / "ab_rounds.py", "benchgate_ab_rounds")

OFF, ARM, COMPOSED = "v26-off", "v26-d4b-k3", "v26-d4b-k3-upto1"
CONCURRENCY = {"sc1": 1, "sc2": 2, "sc64": 64}
# Median tok/s per server and load. The static arm is 50% faster than off at one
# stream and 20% slower at 64; its schedule drafts at one stream only, so it is
# as fast as off at 2 and 64.
GOOD = {
    OFF: {"sc1": 100.0, "sc2": 190.0, "sc64": 5000.0},
    ARM: {"sc1": 150.0, "sc2": 180.0, "sc64": 4000.0},
    COMPOSED: {"sc1": 150.0, "sc2": 190.0, "sc64": 5000.0},
}
# ...and a round where the schedule is 10% slower than off at 64.
BAD = {**GOOD, COMPOSED: {**GOOD[COMPOSED], "sc64": 4500.0}}


def bench_result(load: str, center: float) -> dict[str, Any]:
    """A result shaped like spread.py's bench-<load>.json: 5 trials about ``center``."""
    c = CONCURRENCY[load]
    trials = []
    for i in range(5):
        tok_s = center * (1 + 0.002 * i)
        trials.append(
            {
                "index": i,
                "valid": True,
                "duration_s": 128 * 4 * c / tok_s,
                "num_requests": 4 * c,
                "completed": 4 * c,
                "failed": 0,
                "output_tokens": 512 * c,
                "metrics": {
                    "request_throughput": tok_s / 128,
                    "output_tokens_per_s": tok_s,
                    "ttft_ms": {"mean": 20.0, "median": 20.0, "p90": 22.0, "p99": 23.0},
                    "tpot_ms": {"mean": 1e3 * c / tok_s, "median": 1e3 * c / tok_s},
                },
            }
        )
    params = {"name": f"spread-c{c}", "concurrency": c, "request_rate": None, "trials": 5}
    return {
        "schema": "benchgate.result/1",
        "target": {"base_url": "http://127.0.0.1:8001", "model": "qwen3-14b"},
        "workload": {"name": f"spread-c{c}", "version": 1, "params": params},
        "trials": trials,
        "summary": dataclasses.asdict(summarize_dicts(trials)),
        "stages": None,
        "server_config": None,
    }


def spread_folder(tmp: Path, *plan: dict[str, dict[str, float]]) -> Path:
    """spread.py's folder: one round per plan, each starting off, arm, composed in turn;
    a server missing from a plan started and measured nothing."""
    n = 0
    for plan_round in plan:
        for name in (OFF, ARM, COMPOSED):
            n += 1
            d = tmp / f"s{n:02d}-{name}"
            d.mkdir(parents=True)
            loads = plan_round.get(name, {})
            (d / "start.json").write_text(json.dumps({"n": n, "name": name, "ok": bool(loads)}))
            for load, center in loads.items():
                (d / f"bench-{load}.json").write_text(json.dumps(bench_result(load, center)))
    return tmp


def run(folder: Path, tmp: Path, *args: str) -> dict[str, Any]:
    out = tmp / "ab.json"
    assert rounds.main([str(folder), "--json", str(out), *args]) == 0
    return json.loads(out.read_text())


def test_composed_arm_wins_and_holds_in_the_second_round(tmp_path: Path, capsys: Any) -> None:
    report = run(spread_folder(tmp_path / "spread", GOOD, GOOD), tmp_path)
    text = capsys.readouterr().out
    first = report["rounds"][0]
    assert first["starts"] == {OFF: 1, ARM: 2, COMPOSED: 3}
    assert first["missing"] == []
    # The module's first look would compose exactly the measured schedule.
    (hint,) = first["first_look_by_load"]
    assert hint["name"] == COMPOSED and hint["up_to"] == 1
    assert hint["threshold"] == {"name": "threshold", "concurrency": 2}
    choice = first["choice"]
    assert choice["winner"] == COMPOSED
    verdicts = {a["name"]: a["status"] for a in choice["arms"]}
    assert verdicts[ARM] == "more than 5% slower at busy"
    assert verdicts[COMPOSED] == "chosen"
    assert [s["stage"] for s in choice["stages"]] == ["single", "busy", "threshold"]
    assert {a["name"] for a in choice["stages"][2]["arms"]} == {"off", COMPOSED}
    assert report["across"]["winners"] == [COMPOSED, COMPOSED] and report["across"]["same"]
    confirmed = report["across"]["confirmed"]
    assert confirmed["winner"] == COMPOSED
    assert confirmed["reason"].endswith("it held in 2 server starts")
    assert [s["held"] for s in confirmed["starts"]] == [True]
    assert set(confirmed["starts"][0]["gains"]) == {"single", "busy"}
    assert report["spread"][COMPOSED]["sc64"]["ratios_to_round1"] == [pytest.approx(1.0)]
    assert "winners by round: v26-d4b-k3-upto1, v26-d4b-k3-upto1: same" in text
    assert "composed: v26-d4b-k3-upto1 is v26-d4b-k3 with" in text


def test_a_second_round_slower_at_busy_sends_it_back_to_off(tmp_path: Path) -> None:
    report = run(spread_folder(tmp_path / "spread", GOOD, BAD), tmp_path)
    assert report["across"]["winners"] == [COMPOSED, "off"]
    assert not report["across"]["same"]
    second = report["rounds"][1]["choice"]
    assert {a["name"]: a["status"] for a in second["arms"]}[COMPOSED] == (
        "more than 5% slower at busy"
    )
    confirmed = report["across"]["confirmed"]
    assert confirmed["winner"] == "off"
    assert "not decided across starts" in confirmed["reason"]
    (check,) = confirmed["starts"]
    assert (check["start"], check["winner"], check["held"]) == (2, "off", False)
    assert check["gains"]["busy"] == pytest.approx(-10.0, abs=0.5)
    ratio = report["spread"][COMPOSED]["sc64"]["ratios_to_round1"][0]
    assert ratio == pytest.approx(0.9)


def test_a_failed_start_is_said_and_what_is_there_judged(tmp_path: Path, capsys: Any) -> None:
    failed = {OFF: GOOD[OFF], ARM: GOOD[ARM]}  # the schedule's second start measured nothing
    report = run(spread_folder(tmp_path / "spread", GOOD, failed), tmp_path)
    text = capsys.readouterr().out
    second = report["rounds"][1]
    assert second["missing"] == [
        f"{COMPOSED} s06: no {load} result" for load in ("sc1", "sc64", "sc2")
    ]
    assert "missing: v26-d4b-k3-upto1 s06: no sc1 result" in text
    assert second["choice"]["winner"] == "off"
    assert {a["name"]: a["status"] for a in second["choice"]["arms"]}[COMPOSED].startswith(
        "failed at"
    )
    confirmed = report["across"]["confirmed"]
    assert confirmed["winner"] == "off" and not confirmed["starts"][0]["held"]
    assert report["spread"][COMPOSED]["sc1"]["medians"][1] is None


def test_recorded_spread_run(tmp_path: Path) -> None:
    """The 2026-12-06 H200 run (sc1, sc64 only; 0.6B draft at k=3 as the arm). At busy
    spread-c64.yml's 3 + 3 trials have no bound at alpha 0.025, so never_slower keeps off;
    with the single stage deciding, the arm wins every round and holds."""
    folder = ROOT / "lab" / "calibration" / "h200-vllm-6"
    report = run(folder, tmp_path, "--arm", "v26-d06b-k3")
    assert report["across"]["winners"] == ["off", "off", "off"]
    verdicts = {a["name"]: a["status"] for a in report["rounds"][0]["choice"]["arms"]}
    assert verdicts["v26-d06b-k3"] == "not shown within 5% of off at busy"
    assert report["across"]["confirmed"] is None
    assert report["spread"]["v26-d06b-k3"]["sc64"]["ratios_to_round1"][0] == pytest.approx(
        1.050, abs=0.001
    )
    report = run(folder, tmp_path, "--arm", "v26-d06b-k3", "--rule", "stage:single")
    assert report["across"]["winners"] == ["v26-d06b-k3"] * 3
    assert [s["held"] for s in report["across"]["confirmed"]["starts"]] == [True, True]
