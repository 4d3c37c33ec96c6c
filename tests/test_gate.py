"""benchgate.gate: the module, the CLI and the package give one verdict for the same inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from _load import load_file
from benchgate import cli_gate, gate
from benchgate import ledger as bg_ledger
from test_stages import staged, unstaged

MODULE = load_file(
    Path(__file__).resolve().parents[1] / "plugins" / "modules" / "benchgate_gate.py",
    "benchgate_gate_entry",
)


class _Exit(Exception):
    pass


def _module(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]) -> dict[str, Any]:
    def leave(self: Any, **kwargs: Any) -> None:
        raise _Exit(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", leave)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", leave)
    with patch_module_args(args), pytest.raises(_Exit) as exc:
        MODULE.main()
    out: dict[str, Any] = exc.value.args[0]
    return out


def _cli(capsys: pytest.CaptureFixture[str], files: list[Path], *flags: str) -> tuple[int, str]:
    argv = ["judge", "--baseline", str(files[0]), "--candidate", str(files[1]), *flags]
    code = cli_gate.main(argv)
    return code, capsys.readouterr().out


@pytest.mark.parametrize(
    ("baseline", "candidate", "expected"),
    [
        (unstaged(100.0, seed=1), unstaged(100.0, seed=2), "PASS"),
        (unstaged(100.0, seed=1), unstaged(70.0, seed=2), "FAIL"),
        (
            staged({"single": 100.0, "busy": 400.0}, seed=1),
            staged({"single": 100.0, "busy": 320.0}, seed=2),
            "FAIL",
        ),
    ],
    ids=["unstaged-pass", "unstaged-fail", "staged-fail"],
)
def test_module_cli_and_package_agree(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = [tmp_path / "baseline.json", tmp_path / "candidate.json"]
    for path, result in zip(files, (baseline, candidate)):
        path.write_text(json.dumps(result), encoding="utf-8")

    judged = gate.run_gate(baseline, candidate, metrics=["output_tokens_per_s"])
    module = _module(
        monkeypatch,
        {"baseline": str(files[0]), "candidate": str(files[1]), "metrics": ["output_tokens_per_s"]},
    )
    code, table = _cli(capsys, files, "--metric", "output_tokens_per_s")
    _, as_json = _cli(capsys, files, "--metric", "output_tokens_per_s", "--json")
    from_cli = json.loads(as_json)

    assert judged.verdict.verdict == module["verdict"] == from_cli["verdict"] == expected
    assert judged.verdict.reasons == module["reasons"] == from_cli["reasons"]
    assert judged.table == module["table"] == table.rstrip("\n")
    assert code == cli_gate.EXIT_CODES[expected]
    summary = f"{module['verdict']}: {'; '.join(module['reasons'])}"
    assert judged.summary == summary
    # The module's result is the package's, key for key.
    assert module == {**judged.result(), "changed": False}
    # One verdict type: a staged verdict lists its stages, an unstaged one none.
    assert judged.verdict.staged == bool(from_cli.get("stages"))
    if judged.verdict.staged:
        assert "== stage busy (concurrency 2): FAIL" in judged.table
        assert all(m["reason"].startswith("stage ") for m in module["metrics"])


def test_package_records_what_it_judged(tmp_path: Path) -> None:
    from benchgate import ledger

    db = tmp_path / "ledger.sqlite"
    judged = gate.run_gate(
        unstaged(100.0, seed=1), unstaged(70.0, seed=2), ledger=str(db), host="h", release="2"
    )
    assert judged.ledger_ids is not None and judged.result()["changed"]
    assert [(v.host, v.verdict) for v in ledger.history(db)] == [("h", "FAIL")]
    checked = gate.run_gate(
        unstaged(100.0, seed=1), unstaged(70.0, seed=2), ledger=str(db), host="h", check_mode=True
    )
    assert checked.ledger_ids is None and len(ledger.history(db)) == 1


def _sbs(side: str, values: list[float]) -> dict[str, Any]:
    """One half of a side-by-side measurement: its trials ran alternately with the other's."""
    return {
        "schema": "benchgate.result/1",
        "interleaved": {"id": "m1", "side": side},
        "trials": [
            {"index": i, "valid": True, "metrics": {"output_tokens_per_s": v}}
            for i, v in enumerate(values)
        ],
    }


def test_side_by_side_every_place_gives_the_pairs_ratio_and_says_why_the_medians_fall(
    tmp_path: Path,
) -> None:
    """Issue 35, 1: each side's median fell (200 -> 198) while the pairs' estimate
    rose (the pairs ran at two levels of the machine). The reason (the ledger's first),
    the gate's table and the metric line give the figure the estimate is computed
    from, the median of the pairs' ratios, and say why the medians differ, in the
    same words."""
    base = [100.0, 100.0, 100.0, 200.0, 200.0, 200.0, 200.0]
    cand = [110.0, 110.0, 110.0, 198.0, 198.0, 198.0, 300.0]
    db = tmp_path / "ledger.sqlite"
    result = gate.run_gate(
        _sbs("reference", base),
        _sbs("candidate", cand),
        metrics=["output_tokens_per_s"],
        ledger=str(db),
        host="h",
    )
    [m] = result.verdict.metrics
    assert m.baseline_median == 200.0 and m.candidate_median == 198.0
    assert m.change_pct is not None and m.change_pct > 0
    assert m.pairs_change_pct == pytest.approx(10.0)
    note = (
        "the pairs' median ratio: 10.0% better; each side's median: 1.0% worse, "
        "but the pairs compare trials that ran together"
    )
    assert m.note() == note
    assert f"7 pairs, side by side; {note})" in m.reason
    assert f"output_tokens_per_s: {note}" in result.table
    [line] = result.result()["metrics"]
    assert line["pairs_change_pct"] == pytest.approx(10.0)
    [recorded] = bg_ledger.history(db)
    assert note in recorded.reasons[0]
