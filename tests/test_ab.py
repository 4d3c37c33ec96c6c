"""Speculative decoding A/B: arms, the choice rule, the module and the ledger."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from benchgate import ab, ledger

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
DRAFT = {"model": "/srv/models/draft", "num_speculative_tokens": 2}


def arm_result(
    tok_s: float, n: int = 5, seed: int = 0, per_pos: list[float] | None = None
) -> dict[str, Any]:
    """A benchgate.result-shaped dict with ``n`` trials around ``tok_s`` (1% noise)."""
    rng = random.Random(seed)
    trials = []
    values = []
    for i in range(n):
        value = tok_s * (1 + rng.gauss(0, 0.01))
        values.append(value)
        server: dict[str, Any] = {"ok": True}
        if per_pos:
            drafts = 100.0 * (i + 1)  # uneven weights: the aggregate must weight by drafts
            accepted = [p * drafts for p in per_pos]
            server["spec_decode"] = {
                "drafts": drafts,
                "draft_tokens": drafts * len(per_pos),
                "accepted_tokens": sum(accepted),
                "per_position_acceptance": list(per_pos),
            }
        trials.append(
            {
                "index": i,
                "valid": True,
                "metrics": {"output_tokens_per_s": value, "ttft_ms": {"median": 50.0}},
                "server": server,
            }
        )
    values.sort()
    return {
        "schema": "benchgate.result/1",
        "trials": trials,
        "summary": {
            "metrics": {
                "output_tokens_per_s": {"median": values[n // 2], "samples": values},
                "ttft_ms.median": {"median": 50.0},
            }
        },
    }


def test_expand_arms_off_first_sweep_and_names() -> None:
    arms = ab.expand_arms([NGRAM, DRAFT], k_sweep=[1, 2])
    assert [a.name for a in arms] == ["off", "ngram-k1", "ngram-k2", "draft-k1", "draft-k2"]
    assert arms[0].config == {}
    assert arms[2].config["num_speculative_tokens"] == 2
    assert arms[3].config["method"] == "draft_model"  # normalized


def test_expand_arms_dedupes_and_names_given() -> None:
    arms = ab.expand_arms([NGRAM, dict(NGRAM), {}, {"name": "mine", "config": DRAFT}])
    assert [a.name for a in arms] == ["off", "ngram-k3", "mine"]


@pytest.mark.parametrize("bad", [[0], [-1], ["3"], [True]])
def test_expand_arms_rejects_bad_k(bad: list[Any]) -> None:
    with pytest.raises(ValueError, match="whole number"):
        ab.expand_arms([NGRAM], k_sweep=bad)


def test_off_wins_when_speculation_is_slower() -> None:
    """The field report's case: 51.3 tok/s plain, 32.5 with the draft."""
    arms = ab.expand_arms([DRAFT])
    choice = ab.choose(
        arms,
        {"off": arm_result(51.3), "draft-k2": arm_result(32.5, seed=1, per_pos=[0.793, 0.651])},
    )
    assert choice.winner == "off" and choice.config == {}
    draft = next(a for a in choice.arms if a.name == "draft-k2")
    assert draft.status == "slower"
    assert draft.gain_pct is not None and draft.gain_pct == pytest.approx(-36.6, abs=2)
    assert draft.per_position_acceptance == pytest.approx([0.793, 0.651])
    assert draft.mean_acceptance_length == pytest.approx(1 + 0.793 + 0.651)
    assert "off serves" in choice.reason


def test_faster_arm_wins_only_when_proven() -> None:
    arms = ab.expand_arms([NGRAM], k_sweep=[2, 3])
    results = {
        "off": arm_result(100.0),
        "ngram-k2": arm_result(130.0, seed=2),
        "ngram-k3": arm_result(120.0, seed=3),
    }
    choice = ab.choose(arms, results)
    assert choice.winner == "ngram-k2"
    assert choice.config["num_speculative_tokens"] == 2
    statuses = {a.name: a.status for a in choice.arms}
    assert statuses == {"off": "reference", "ngram-k2": "winner", "ngram-k3": "beaten"}
    # Asking for more than the arm can prove keeps plain decoding.
    strict = ab.choose(arms, results, min_gain_pct=40.0)
    assert strict.winner == "off"


def test_a_tie_keeps_plain_decoding() -> None:
    arms = ab.expand_arms([NGRAM])
    # Same distribution (same noise): no gain can be proven.
    choice = ab.choose(arms, {"off": arm_result(100.0), "ngram-k3": arm_result(100.0)})
    assert choice.winner == "off"
    assert {a.name: a.status for a in choice.arms}["ngram-k3"] == "not proven faster"


def test_failed_arm_never_wins_and_off_failure_is_explained() -> None:
    arms = ab.expand_arms([NGRAM])
    choice = ab.choose(arms, {"off": arm_result(100.0)}, errors={"ngram-k3": "server never ready"})
    assert choice.winner == "off"
    failed = {a.name: a for a in choice.arms}["ngram-k3"]
    assert failed.status == "failed" and failed.note == "server never ready"

    choice = ab.choose(arms, {"ngram-k3": arm_result(90.0)}, errors={"off": "boom"})
    assert choice.winner == "ngram-k3"
    assert "off failed (boom)" in choice.reason

    none = ab.choose(arms, {}, errors={"off": "a", "ngram-k3": "b"})
    assert none.winner is None and "no arm could be measured" in none.reason


def test_too_few_trials_counts_as_failed() -> None:
    arms = ab.expand_arms([NGRAM])
    choice = ab.choose(arms, {"off": arm_result(100.0), "ngram-k3": arm_result(300.0, n=2)})
    assert choice.winner == "off"
    assert "2 valid trials" in {a.name: a for a in choice.arms}["ngram-k3"].note


def test_table_lists_every_arm_and_positions() -> None:
    arms = ab.expand_arms([DRAFT])
    choice = ab.choose(
        arms, {"off": arm_result(51.3), "draft-k2": arm_result(32.5, per_pos=[0.793, 0.651])}
    )
    table = ab.render_table(choice)
    assert "pos0" in table and "79.3%" in table and "65.1%" in table
    assert table.splitlines()[-1].startswith("chosen: off")


# --- the Ansible module -----------------------------------------------------

MODULE_PATH = (
    Path(__file__).resolve().parents[1] / "plugins" / "modules" / "benchgate_speculative_ab.py"
)


def _load_module() -> Any:
    spec = importlib.util.spec_from_file_location("benchgate_speculative_ab", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def _run_module(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    mod = _load_module()

    def exit_json(self: Any, **kwargs: Any) -> None:
        raise ExitJson(kwargs)

    def fail_json(self: Any, **kwargs: Any) -> None:
        raise FailJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args(args):
        try:
            mod.main()
        except ExitJson as exc:
            return "exit", exc.args[0]
        except FailJson as exc:
            return "fail", exc.args[0]
    raise AssertionError("the module neither exited nor failed")


def test_module_records_every_arm_and_the_choice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.sqlite"
    kind, out = _run_module(
        monkeypatch,
        {
            "arms": [{"name": "off", "config": {}}, {"name": "ngram-k3", "config": NGRAM}],
            "results": {
                "off": arm_result(100.0),
                "ngram-k3": arm_result(60.0, per_pos=[0.7, 0.5, 0.3]),
            },
            "ledger": str(db),
            "host": "h1",
            "release": "0.32.0",
        },
    )
    assert kind == "exit" and out["changed"] is True
    assert out["winner"] == "off"
    runs = {r.phase: r for r in ledger.runs(db, host="h1")}
    assert set(runs) == {"arm:off", "arm:ngram-k3"}
    assert runs["arm:ngram-k3"].speculative == NGRAM
    assert runs["arm:off"].speculative == {}
    choices = ledger.ab_choices(db, host="h1")
    assert len(choices) == 1 and choices[0]["winner"] == "off" and choices[0]["release"] == "0.32.0"
    assert [a["name"] for a in choices[0]["arms"]] == ["off", "ngram-k3"]


def test_module_check_mode_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    kind, out = _run_module(
        monkeypatch,
        {
            "arms": [{"name": "off", "config": {}}, {"name": "ngram-k3", "config": NGRAM}],
            "results": {"off": arm_result(100.0), "ngram-k3": arm_result(60.0)},
            "ledger": str(db),
            "host": "h1",
            "_ansible_check_mode": True,
        },
    )
    assert kind == "exit" and out["changed"] is False and not db.exists()


def test_module_refuses_results_of_unknown_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    kind, out = _run_module(
        monkeypatch,
        {"arms": [{"name": "off", "config": {}}], "results": {"offf": arm_result(1.0)}},
    )
    assert kind == "fail" and "offf" in out["msg"]


def test_old_ledger_is_migrated_in_place(tmp_path: Path) -> None:
    """A ledger written by schema 1 gains the speculative column and the A/B table."""
    import sqlite3

    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    for statement in ledger.MIGRATIONS[0].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1, 'then')")
    conn.execute(
        "INSERT INTO runs (recorded_at, host, phase, result_sha256) "
        "VALUES ('t', 'h', 'baseline', 'x')"
    )
    conn.close()
    old = ledger.runs(db)
    assert len(old) == 1 and old[0].speculative is None
    ledger.record_ab_choice(
        db, {"objective": "output_tokens_per_s", "winner": "off", "reason": "r"}, host="h"
    )
    assert ledger.ab_choices(db)[0]["winner"] == "off"
