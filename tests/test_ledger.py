"""The SQLite ledger: round trip, queries, migrations, atomic writes; record/history CLI."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from benchgate import cli_gate, ledger


def make_result(tput: list[float], valid: list[bool] | None = None) -> dict[str, Any]:
    valid = valid or [True] * len(tput)
    return {
        "schema": "benchgate.result/1",
        "created_at": "2025-03-01T10:00:00+00:00",
        "target": {
            "base_url": "http://gpu-1:8000",
            "model": "tiny-llama",
            "server_version": "0.9.2",
        },
        "workload": {"name": "chat-short", "version": 1, "hash": "sha256:abc", "params": {}},
        "summary": {"total_trials": len(tput), "valid_trials": sum(valid)},
        "trials": [
            {
                "index": i,
                "valid": ok,
                "metrics": {"output_tokens_per_s": v, "ttft_ms": {"median": 50.0}} if ok else None,
            }
            for i, (v, ok) in enumerate(zip(tput, valid))
        ],
    }


PASS_VERDICT = {"verdict": "PASS", "passed": True, "reasons": ["fine"], "metrics": []}
FAIL_VERDICT = {"verdict": "FAIL", "passed": False, "reasons": ["slower", "also ttft"]}


def test_result_round_trip_reads_metadata_from_the_result(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "ledger.sqlite"
    run_id = ledger.record_result(
        db, make_result([400.0, 401.0, 0.0], [True, True, False]), host="gpu-1", phase="baseline"
    )
    [run] = ledger.runs(db)
    assert run.id == run_id
    assert (run.host, run.phase, run.model, run.release) == (
        "gpu-1",
        "baseline",
        "tiny-llama",
        "0.9.2",
    )
    assert (run.workload_name, run.workload_hash) == ("chat-short", "sha256:abc")
    assert [t["valid"] for t in run.trials] == [True, True, False]
    assert run.trials[0]["metrics"]["output_tokens_per_s"] == 400.0
    assert run.trials[2]["metrics"] == {}
    assert run.summary == {"total_trials": 3, "valid_trials": 2}


def test_explicit_arguments_win_over_the_result(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    ledger.record_result(
        db,
        make_result([400.0]),
        host="gpu-2",
        phase="arm:ngram-k3",
        release="0.10.0",
        hardware={"gpu": "L4", "count": 1},
        unit_hash="u123",
    )
    [run] = ledger.runs(db, phase="arm:ngram-k3")
    assert run.release == "0.10.0"
    assert run.hardware == {"gpu": "L4", "count": 1}
    assert run.unit_hash == "u123"


def test_record_result_needs_host_and_phase(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host"):
        ledger.record_result(tmp_path / "l.sqlite", make_result([1.0]), phase="baseline")
    with pytest.raises(ValueError, match="phase"):
        ledger.record_result(tmp_path / "l.sqlite", make_result([1.0]), host="h", phase="")


def test_history_filters_and_orders_newest_first(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    rows = [
        ("gpu-1", "0.9.2", PASS_VERDICT, "2025-03-01T10:00:00.000000Z"),
        ("gpu-1", "0.10.0", FAIL_VERDICT, "2025-03-02T10:00:00.000000Z"),
        ("gpu-2", "0.10.0", PASS_VERDICT, "2025-03-03T10:00:00.000000Z"),
        ("gpu-2", "0.10.1", PASS_VERDICT, "2025-03-04T10:00:00.000000Z"),
    ]
    for host, release, verdict, when in rows:
        ledger.record_verdict(db, verdict, host=host, release=release, recorded_at=when)

    assert [(r.host, r.release) for r in ledger.history(db)] == [
        ("gpu-2", "0.10.1"),
        ("gpu-2", "0.10.0"),
        ("gpu-1", "0.10.0"),
        ("gpu-1", "0.9.2"),
    ]
    assert [r.release for r in ledger.history(db, host="gpu-1")] == ["0.10.0", "0.9.2"]
    assert [r.host for r in ledger.history(db, release="0.10.0")] == ["gpu-2", "gpu-1"]
    assert len(ledger.history(db, since="2025-03-02")) == 3
    assert len(ledger.history(db, since="2025-03-02 12:00")) == 2
    assert len(ledger.history(db, limit=1)) == 1
    failed = ledger.history(db, host="gpu-1", release="0.10.0")[0]
    assert failed.verdict == "FAIL"
    assert failed.reasons == ["slower", "also ttft"]
    assert failed.details["passed"] is False


def test_latest_verdict_per_host(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    ledger.record_verdict(db, FAIL_VERDICT, host="a", release="1", recorded_at="2025-01-02T00:00Z")
    ledger.record_verdict(db, PASS_VERDICT, host="a", release="0", recorded_at="2025-01-01T00:00Z")
    ledger.record_verdict(db, PASS_VERDICT, host="b", release="2", recorded_at="2025-01-01T00:00Z")
    latest = ledger.latest_verdicts(db)
    assert {h: (v.verdict, v.release) for h, v in latest.items()} == {
        "a": ("FAIL", "1"),
        "b": ("PASS", "2"),
    }
    assert list(ledger.latest_verdicts(db, ["b"])) == ["b"]


def test_verdict_links_runs_and_rejects_unknown_verdicts(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    b = ledger.record_result(db, make_result([1.0]), host="h", phase="baseline")
    c = ledger.record_result(db, make_result([1.0]), host="h", phase="candidate")
    vid = ledger.record_verdict(db, PASS_VERDICT, host="h", baseline_run_id=b, candidate_run_id=c)
    [rec] = ledger.history(db)
    assert (rec.id, rec.baseline_run_id, rec.candidate_run_id) == (vid, b, c)
    with pytest.raises(ValueError, match="PASS, FAIL or INCONCLUSIVE"):
        ledger.record_verdict(db, {"verdict": "MAYBE"}, host="h")
    with pytest.raises(sqlite3.IntegrityError):
        ledger.record_verdict(db, PASS_VERDICT, host="h", candidate_run_id=999)


def test_migrations_apply_once_and_refuse_a_newer_ledger(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite"
    ledger.connect(db).close()
    conn = ledger.connect(db)  # second open: nothing re-applied
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, ledger.SCHEMA_VERSION + 1))
    conn.execute("INSERT INTO schema_version VALUES (?, 'x')", (ledger.SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(RuntimeError, match="newer than this benchgate"):
        ledger.connect(db)


def test_a_failed_write_leaves_no_half_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "l.sqlite"

    def broken(result: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ledger, "_trial_rows", broken)
    with pytest.raises(RuntimeError):
        ledger.record_result(db, make_result([1.0]), host="h", phase="baseline")
    assert ledger.runs(db) == []


def test_shared_connection_is_used_as_is() -> None:
    conn = ledger.connect(":memory:")
    ledger.record_result(conn, make_result([1.0, 2.0]), host="h", phase="baseline")
    assert len(ledger.runs(conn)[0].trials) == 2


# --------------------------------------------------------------------------
# benchgate record / history
# --------------------------------------------------------------------------


def test_record_and_history_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "l.sqlite"
    res = tmp_path / "r.json"
    ver = tmp_path / "v.json"
    res.write_text(json.dumps(make_result([400.0, 401.0, 402.0])))
    ver.write_text(json.dumps(FAIL_VERDICT))
    argv = ["record", "--db", str(db), "--host", "gpu-9", "--phase", "candidate"]
    argv += ["--result", str(res), "--verdict", str(ver), "--release", "0.11.0"]
    assert cli_gate.main(argv) == 0
    ids = json.loads(capsys.readouterr().out)
    assert set(ids) == {"run_id", "verdict_id"}

    assert cli_gate.main(["history", "--db", str(db), "--host", "gpu-9", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["host"], row["release"], row["verdict"]) == ("gpu-9", "0.11.0", "FAIL")
    assert row["candidate_run_id"] == ids["run_id"]

    assert cli_gate.main(["history", "--db", str(db), "--latest"]) == 0
    table = capsys.readouterr().out
    assert "gpu-9" in table and "FAIL" in table and "slower" in table

    assert cli_gate.main(["history", "--db", str(tmp_path / "none.sqlite")]) == 3
    assert not (tmp_path / "none.sqlite").exists()


# --------------------------------------------------------------------------
# A file that is not a ledger, or not one this benchgate can use
# --------------------------------------------------------------------------


def _bad_ledgers(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    text = tmp_path / "text.sqlite"
    text.write_text("id,name\n1,cat\n" * 200)
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    unversioned = tmp_path / "unversioned.sqlite"
    conn = sqlite3.connect(unversioned)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.close()
    # Says schema 2, but the speculative column of migration 2 is missing.
    mismatched = tmp_path / "mismatched.sqlite"
    conn = sqlite3.connect(mismatched)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_version VALUES (1, 'x'), (2, 'x')")
    conn.commit()
    conn.close()
    return {
        "text": (text, "is not an SQLite database"),
        "foreign": (foreign, "is not a benchgate ledger"),
        "unversioned": (unversioned, "is not a benchgate ledger"),
        "mismatched": (mismatched, "does not have the tables of schema version 2"),
    }


@pytest.mark.parametrize("kind", ["text", "foreign", "unversioned", "mismatched"])
def test_a_file_that_is_no_ledger_is_refused_and_left_as_it_was(tmp_path: Path, kind: str) -> None:
    path, words = _bad_ledgers(tmp_path)[kind]
    before = path.read_bytes()
    for attempt in (
        lambda: ledger.check(path),
        lambda: ledger.connect(path),
        lambda: ledger.record_verdict(path, PASS_VERDICT, host="h"),
        lambda: ledger.history(path),
    ):
        with pytest.raises(ledger.LedgerError) as err:
            attempt()
        assert f"the ledger {path} {words}" in str(err.value)
    assert path.read_bytes() == before
    assert not Path(f"{path}-journal").exists()


def test_an_older_ledger_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_version VALUES (1, 'x')")
    conn.commit()
    conn.close()
    assert ledger.check(db) == 1
    ledger.record_verdict(db, PASS_VERDICT, host="h")
    assert ledger.check(db) == ledger.SCHEMA_VERSION
    assert [v.host for v in ledger.history(db)] == ["h"]


def test_a_missing_or_empty_file_is_a_new_ledger(tmp_path: Path) -> None:
    assert ledger.check(tmp_path / "none.sqlite") == 0
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert ledger.check(empty) == 0
    ledger.record_verdict(empty, PASS_VERDICT, host="h")
    assert ledger.check(empty) == ledger.SCHEMA_VERSION


def test_history_command_says_which_file_is_no_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _bad_ledgers(tmp_path)["foreign"]
    assert cli_gate.main(["history", "--db", str(path)]) == 3
    err = capsys.readouterr().err
    assert f"{path} is not a benchgate ledger" in err and "Traceback" not in err


def test_a_new_ledger_and_its_journal_are_private(tmp_path: Path) -> None:
    db = tmp_path / "new" / "ledger.sqlite"
    conn = ledger.connect(db)
    try:
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        conn.execute("BEGIN IMMEDIATE")
        ledger.record_verdict(conn, PASS_VERDICT, host="h")
        journal = Path(f"{db}-journal")  # SQLite's rollback journal, while writing
        assert journal.exists()
        assert stat.S_IMODE(journal.stat().st_mode) == 0o600
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_staged_result_keeps_the_stage_of_every_trial(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    staged = make_result([100.0, 101.0, 400.0, 401.0])
    for trial, stage in zip(staged["trials"], ["single", "single", "busy", "busy"]):
        trial["stage"] = stage
    staged["stages"] = [
        {"name": "single", "params": {"concurrency": 1}, "summary": {"valid_trials": 2}},
        {"name": "busy", "params": {"concurrency": 4}, "summary": {"valid_trials": 2}},
    ]
    ledger.record_result(db, staged, host="gpu-1", phase="candidate")
    ledger.record_result(db, make_result([1.0, 2.0]), host="gpu-1", phase="baseline")
    plain, run = ledger.runs(db)
    assert [t["stage"] for t in run.trials] == ["single", "single", "busy", "busy"]
    assert [s["name"] for s in run.stages or []] == ["single", "busy"]
    # An unstaged result reads back as before: no stage key, no stages block.
    assert plain.stages is None and all("stage" not in t for t in plain.trials)


def test_a_version_2_ledger_gains_the_stage_columns(tmp_path: Path) -> None:
    db = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.executescript(ledger.MIGRATIONS[1])
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_version VALUES (1, 'x'), (2, 'x')")
    conn.execute(
        "INSERT INTO runs (recorded_at, host, phase, result_sha256) VALUES ('t', 'old', 'b', 'x')"
    )
    conn.execute("INSERT INTO trials (run_id, idx, valid, metrics_json) VALUES (1, 0, 1, '{}')")
    conn.commit()
    conn.close()
    assert ledger.check(db) == 2
    [old] = ledger.runs(db)
    assert ledger.check(db) == ledger.SCHEMA_VERSION == 5
    assert old.stages is None and old.trials == [{"index": 0, "valid": True, "metrics": {}}]


def test_a_lost_host_is_kept_and_shown_by_history(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "ledger.sqlite"
    ledger.record_verdict(db, {"verdict": "PASS", "reasons": ["ok"]}, host="b", release="0.32.0")
    ledger.record_host_event(
        db,
        host="a",
        event="lost",
        reason="lost: it stopped answering",
        run_name="r1",
        release="0.32.0",
    )
    with pytest.raises(ValueError, match="event must be one of lost"):
        ledger.record_host_event(db, host="a", event="gone", reason="?")
    [event] = ledger.host_events(db, "a")
    assert (event["host"], event["event"], event["run_name"]) == ("a", "lost", "r1")
    assert ledger.host_events(db, "b") == []
    assert cli_gate.main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "hosts lost during a rollout" in out
    assert "a  lost  run r1: lost: it stopped answering" in out


def test_a_version_4_ledger_gains_the_server_configuration_and_history_shows_it(
    tmp_path: Path, capsys: Any
) -> None:
    """Issue 35, 3: runs keep the serving configuration (migration 5); an older
    ledger's runs load without one, and history names each side's configuration by
    its fingerprint, with the legend."""
    from benchgate import serverconfig

    db = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(db)
    for script in ledger.MIGRATIONS[:4]:
        conn.executescript(script)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_version VALUES (1, 'x'), (2, 'x'), (3, 'x'), (4, 'x')")
    conn.execute(
        "INSERT INTO runs (recorded_at, host, phase, result_sha256) VALUES ('t', 'old', 'b', 'x')"
    )
    conn.commit()
    conn.close()
    [old] = ledger.runs(db)
    assert ledger.check(db) == 5 and old.server_config is None
    starved = {"argv": ["vllm", "serve", "tiny", "--max-num-seqs", "1"], "env": {}, "cpus": "0-1"}
    b = ledger.record_result(db, {"trials": []}, host="old", phase="baseline")
    c = ledger.record_result(
        db, {"trials": [], "server_config": starved}, host="old", phase="candidate"
    )
    assert ledger.runs(db, phase="candidate")[0].server_config == starved
    ledger.record_verdict(
        db,
        {"verdict": "FAIL", "reasons": ["output_tokens_per_s: 43× slower"]},
        host="old",
        baseline_run_id=b,
        candidate_run_id=c,
    )
    assert cli_gate.main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    fp = serverconfig.fingerprint(starved)
    assert f"- -> {fp}" in out
    assert "\n    output_tokens_per_s: 43× slower\n" in out  # the first reason, whole
    assert f"  {fp}: tiny --max-num-seqs 1 cpus=0-1" in out
