"""The benchgate_gate Ansible module: argument handling, check mode, ledger writes."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from _load import load_file
from benchgate import ledger

MODULE_PATH = Path(__file__).resolve().parents[1] / "plugins" / "modules" / "benchgate_gate.py"
GATE_DOC = MODULE_PATH.with_suffix(".yml")  # its documentation, beside it


def _load_module() -> Any:
    return load_file(MODULE_PATH, "benchgate_gate")


gate_module = _load_module()


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def _exit_json(self: Any, **kwargs: Any) -> None:
    raise ExitJson(kwargs)


def _fail_json(self: Any, **kwargs: Any) -> None:
    raise FailJson(kwargs)


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)


def make_result(scale: float, n: int = 5, seed: int = 0, invalid: int = 0) -> dict[str, Any]:
    """A benchgate.result/1-shaped dict; throughput x scale, latencies / scale."""
    rng = random.Random(seed)
    trials: list[dict[str, Any]] = []
    for i in range(n):
        noise = 1 + rng.gauss(0, 0.01)
        trials.append(
            {
                "index": i,
                "valid": True,
                "metrics": {
                    "output_tokens_per_s": 400.0 * scale * noise,
                    "request_throughput": 2.0 * scale * noise,
                    "ttft_ms": {"mean": 55.0, "median": 50.0 / scale * noise, "p90": 80.0},
                    "tpot_ms": {"mean": 21.0, "median": 20.0 / scale * noise, "p90": 30.0},
                },
            }
        )
    for j in range(invalid):
        trials.append(
            {"index": n + j, "valid": False, "invalid_reason": "error rate", "metrics": None}
        )
    return {
        "schema": "benchgate.result/1",
        "target": {"model": "tiny", "server_version": "0.11.0"},
        "workload": {"name": "chat-short", "hash": "abc"},
        "trials": trials,
    }


def run_module(args: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    with patch_module_args(args), pytest.raises((ExitJson, FailJson)) as exc:
        gate_module.main()
    out = exc.value.args[0]
    out["_failed"] = isinstance(exc.value, FailJson)
    return out


def test_slower_candidate_fails_and_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    out = run_module(
        {
            "baseline": make_result(1.0, seed=1),
            "candidate": make_result(0.7, seed=2),
            "ledger": str(db),
            "host": "gpu-1",
            "release": "0.11.1",
            "baseline_release": "0.11.0",
        }
    )
    assert not out["_failed"]
    assert out["verdict"] == "FAIL"
    assert out["passed"] is False
    assert out["changed"] is True
    assert any(
        r.startswith("output_tokens_per_s:") and "beyond the 5% limit" in r for r in out["reasons"]
    )
    tput = next(m for m in out["metrics"] if m["metric"] == "output_tokens_per_s")
    assert tput["regression_pct"] == pytest.approx(30.0, abs=2.0)
    assert tput["interval_pct"] == 90.0 and "stage" not in tput  # one stage, alpha 0.05
    latest = ledger.latest_verdicts(db)["gpu-1"]
    assert latest.verdict == "FAIL"
    assert latest.release == "0.11.1"
    assert latest.id == out["ledger_ids"]["verdict_id"]
    phases = sorted(r.phase for r in ledger.runs(db, host="gpu-1"))
    assert phases == ["baseline", "candidate"]


def test_check_mode_judges_but_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    out = run_module(
        {
            "baseline": make_result(1.0, seed=1),
            "candidate": make_result(1.0, seed=2),
            "ledger": str(db),
            "host": "gpu-1",
        },
        check_mode=True,
    )
    assert out["verdict"] == "PASS"
    assert out["passed"] is True
    assert out["changed"] is False
    assert "ledger_ids" not in out
    assert not db.exists()


def test_no_ledger_means_no_change_and_paths_are_read(tmp_path: Path) -> None:
    b = tmp_path / "b.json"
    c = tmp_path / "c.json"
    b.write_text(json.dumps(make_result(1.0, seed=1)))
    c.write_text(json.dumps(make_result(1.0, seed=3)))
    out = run_module({"baseline": str(b), "candidate": str(c)})
    assert out["verdict"] == "PASS"
    assert out["changed"] is False
    assert "output_tokens_per_s" in out["table"]


def test_invalid_trials_make_it_inconclusive_not_pass() -> None:
    baseline = make_result(1.0, n=5, seed=1)
    candidate = make_result(1.0, n=2, seed=2, invalid=3)  # 5 trials, only 2 valid
    out = run_module({"baseline": baseline, "candidate": candidate})
    assert out["verdict"] == "INCONCLUSIVE"
    assert out["passed"] is False
    assert "too few valid trials" in out["reasons"][0]


def test_per_metric_threshold_and_warn_policy() -> None:
    baseline = make_result(1.0, seed=1)
    candidate = make_result(1.0, seed=2)
    for t in candidate["trials"]:
        t["metrics"]["ttft_ms"]["median"] *= 1.3  # TTFT 30% worse, throughput unchanged
    failing = run_module({"baseline": baseline, "candidate": candidate})
    assert failing["verdict"] == "FAIL"
    assert failing["reasons"][0].startswith("ttft_ms:")
    warned = run_module({"baseline": baseline, "candidate": candidate, "noncritical_fail": "warn"})
    assert warned["verdict"] == "PASS"
    assert any(w.startswith("ttft_ms:") for w in warned["gate_warnings"])
    tolerant = run_module(
        {"baseline": baseline, "candidate": candidate, "thresholds": {"ttft_ms": 40}}
    )
    assert tolerant["verdict"] == "PASS"


def test_ledger_requires_host() -> None:
    out = run_module(
        {"baseline": make_result(1.0), "candidate": make_result(1.0), "ledger": "/tmp/x.db"}
    )
    assert out["_failed"]
    assert "host" in out["msg"]


def test_missing_result_file_is_a_clear_failure(tmp_path: Path) -> None:
    out = run_module({"baseline": str(tmp_path / "nope.json"), "candidate": make_result(1.0)})
    assert out["_failed"]
    assert "no such result file" in out["msg"]


def test_unknown_metric_direction_fails_with_a_message() -> None:
    out = run_module(
        {"baseline": make_result(1.0), "candidate": make_result(1.0), "metrics": ["weird"]}
    )
    assert out["_failed"]
    assert "weird" in out["msg"]


def test_missing_benchgate_fails_with_missing_required_lib(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate_module, "BENCHGATE_IMPORT_ERROR", "Traceback: no benchgate")
    out = run_module({"baseline": make_result(1.0), "candidate": make_result(1.0)})
    assert out["_failed"]
    assert "benchgate" in out["msg"]
    assert "required" in out["msg"]


def test_module_records_three_rows(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    out = run_module(
        {
            "baseline": make_result(1.0, seed=4),
            "candidate": make_result(0.85, seed=5),
            "ledger": str(db),
            "host": "h",
            "release": "0.12.0",
        }
    )
    assert out["verdict"] == "FAIL"
    with sqlite3.connect(db) as conn:
        counts = [
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("runs", "trials", "verdicts")
        ]
    assert counts == [2, 10, 1]


def test_documented_options_match_argument_spec() -> None:
    import yaml

    docs = yaml.safe_load(GATE_DOC.read_text())
    doc = docs["DOCUMENTATION"]
    assert set(doc["options"]) == set(gate_module.ARGUMENT_SPEC)
    for name, spec in gate_module.ARGUMENT_SPEC.items():
        assert doc["options"][name]["type"] == spec["type"], name
        assert doc["options"][name].get("default") == spec.get("default"), name
        assert doc["options"][name].get("choices") == spec.get("choices"), name
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert yaml.safe_load(docs["EXAMPLES"])
    assert docs["RETURN"]["verdict"]["type"] == "str"


def test_a_list_of_baselines_is_judged_as_one_a_b_a_run() -> None:
    # The machine slows down steadily: A before = 1.0, B = 0.9, A after = 0.8.
    # Judged against the first baseline alone, B looks 10% slower: a false
    # FAIL. A-B-A puts the drift on both sides: no change is estimated, and the
    # spread the drift adds to the baseline keeps the verdict from PASS.
    before, candidate = make_result(1.0, seed=1), make_result(0.9, seed=2)
    after = make_result(0.8, seed=3)
    naive = run_module({"baseline": before, "candidate": candidate})
    assert naive["verdict"] == "FAIL"
    aba = run_module({"baseline": [before, after], "candidate": candidate})
    assert aba["verdict"] == "INCONCLUSIVE", aba["reasons"]
    tput = next(m for m in aba["metrics"] if m["metric"] == "output_tokens_per_s")
    assert tput["n_baseline"] == 10
    assert abs(tput["regression_pct"]) < 3.0


def test_an_empty_list_of_results_is_a_clear_failure() -> None:
    out = run_module({"baseline": [], "candidate": make_result(1.0)})
    assert out["_failed"]
    assert "baseline: an empty list of results" in out["msg"]


def test_run_spread_widens_the_interval_less_with_more_runs() -> None:
    # Candidate 3% slower, trials tight (1%): trusted as they are, it PASSes
    # within the 5% limit. With a 4% run-to-run spread and one run per side,
    # a 3% difference between two runs is ordinary: INCONCLUSIVE.
    base = make_result(1.0, n=16, seed=1)
    cand = make_result(0.97, n=16, seed=2)
    plain = run_module({"baseline": base, "candidate": cand})
    assert plain["verdict"] == "PASS", plain["reasons"]
    one = run_module({"baseline": base, "candidate": cand, "run_spread_pct": 4.0})
    assert one["verdict"] == "INCONCLUSIVE", one["reasons"]
    tput = next(m for m in one["metrics"] if m["metric"] == "output_tokens_per_s")
    assert (tput["runs_baseline"], tput["runs_candidate"]) == (1, 1)
    assert "1+1 runs, 4% run-to-run spread included" in tput["reason"]
    # The estimate is the same; only the interval moved.
    plain_tput = next(m for m in plain["metrics"] if m["metric"] == "output_tokens_per_s")
    assert tput["change_pct"] == plain_tput["change_pct"]
    assert tput["change_lo_pct"] < plain_tput["change_lo_pct"] - 4.0

    # The same 32 trials per side as four runs each: a narrower interval.
    many = run_module(
        {
            "baseline": [make_result(1.0, n=8, seed=10 + i) for i in range(4)],
            "candidate": [make_result(1.0, n=8, seed=20 + i) for i in range(4)],
            "run_spread_pct": 4.0,
        }
    )
    many_tput = next(m for m in many["metrics"] if m["metric"] == "output_tokens_per_s")
    assert (many_tput["runs_baseline"], many_tput["runs_candidate"]) == (4, 4)
    single = run_module(
        {
            "baseline": make_result(1.0, n=32, seed=10),
            "candidate": make_result(1.0, n=32, seed=20),
            "run_spread_pct": 4.0,
        }
    )
    one_tput = next(m for m in single["metrics"] if m["metric"] == "output_tokens_per_s")
    width = many_tput["change_hi_pct"] - many_tput["change_lo_pct"]
    assert width < 0.75 * (one_tput["change_hi_pct"] - one_tput["change_lo_pct"])


def test_decidable_limit_follows_the_runs() -> None:
    from benchgate import ranks

    # 2 * 1.645 * ln(1.04) * sqrt(2) = 0.183 on the log scale: about 20%.
    assert ranks.decidable_limit_pct(4.0, (1, 1)) == pytest.approx(20.0, abs=0.2)
    assert ranks.decidable_limit_pct(4.0, (2, 2)) < ranks.decidable_limit_pct(4.0, (2, 1))
    assert ranks.decidable_limit_pct(0.0, (1, 1)) == 0.0


def test_staged_results_are_judged_stage_by_stage_and_recorded(tmp_path: Path) -> None:
    # A staged workload (issue 19): the candidate is 30% slower at the busy
    # stage only. The module judges every stage, FAILs the host on that stage,
    # prints a table per stage and records both results with their stages.
    from test_stages import staged

    db = tmp_path / "ledger.sqlite"
    base = staged({"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged({"single": 100.0, "busy": 280.0}, seed=2)
    out = run_module(
        {
            "baseline": base,
            "candidate": [cand, staged({"single": 100.0, "busy": 280.0}, seed=3)],
            "metrics": ["output_tokens_per_s"],
            "ledger": str(db),
            "host": "h1",
        }
    )
    assert out["verdict"] == "FAIL", out["reasons"]
    assert "== stage busy" in out["table"] and "== stage single" in out["table"]
    by_stage = {m["stage"]: m for m in out["metrics"]}
    assert by_stage["single"]["verdict"] == "PASS"
    assert by_stage["busy"]["verdict"] == "FAIL"
    assert by_stage["busy"]["n_candidate"] == 16  # both candidate results, merged
    # The role shows and records each metric's line: it names its stage.
    assert by_stage["busy"]["reason"].startswith("stage busy: output_tokens_per_s: ")
    assert by_stage["single"]["reason"].startswith("stage single: output_tokens_per_s: ")
    # Two stages share alpha 0.05: each line's interval is a 95% one, as it says.
    assert by_stage["busy"]["interval_pct"] == 95.0
    assert "(95% interval " in by_stage["busy"]["reason"]
    with sqlite3.connect(db) as conn:
        stages = {row[0] for row in conn.execute("SELECT DISTINCT stage FROM trials")}
    assert stages == {"single", "busy"}
