"""``benchgate rollout`` through a real ansible-runner, on localhost with a local connection.

The project is a tiny stand-in for benchgate's (same layout: ansible.cfg,
playbooks/upgrade.yml, the real benchgate_summary callback): its playbook
writes a result file, records a verdict in the ledger and adds the host to
the summary the way playbooks/upgrade.yml does, and blocks release 9.9.9.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate import ledger, rollout
from benchgate.cli import main

pytest.importorskip("ansible_runner")

REPO = Path(__file__).resolve().parent.parent
BAD = "9.9.9"

PLAYBOOK = """\
---
- name: Tiny upgrade
  hosts: vllm_hosts
  gather_facts: false
  tasks:
    - name: Check the extra vars arrived (the test gives their sha1)
      ansible.builtin.assert:
        that: api_key | hash('sha1') == expect_api_key_sha1
      when: expect_api_key_sha1 is defined

    - name: Wait for the go file
      ansible.builtin.wait_for:
        path: "{{ wait_for_file }}"
        timeout: 120
      when: wait_for_file is defined

    - name: Create the result folder
      ansible.builtin.file:
        path: "{{ vllm_benchmark_artifacts_dir }}/{{ benchgate_run_id }}/{{ inventory_hostname }}"
        state: directory
        mode: "0755"

    - name: Write the candidate's result
      ansible.builtin.copy:
        content: '{"release": "{{ vllm_version }}"}'
        dest: "{{ vllm_benchmark_artifacts_dir }}/{{ benchgate_run_id }}/{{ inventory_hostname
          }}/candidate.json"
        mode: "0644"

    - name: Record the verdict in the ledger
      ansible.builtin.command:
        argv:
          - "{{ ansible_playbook_python }}"
          - -c
          - >-
            import sys; from benchgate import ledger;
            ledger.record_verdict(sys.argv[1], {"verdict": sys.argv[2], "reasons": ["tiny"]},
            host=sys.argv[3], release=sys.argv[4])
          - "{{ benchgate_ledger }}"
          - "{{ 'FAIL' if vllm_version == '9.9.9' else 'PASS' }}"
          - "{{ inventory_hostname }}"
          - "{{ vllm_version }}"
      changed_when: true

    - name: Add the host to the run summary
      ansible.builtin.set_stats:
        data:
          benchgate_summary: "{{ {inventory_hostname: line} }}"
        per_host: false
        aggregate: true
      vars:
        line:
          from: "1.0.0"
          to: "{{ vllm_version }}"
          before_tok_s: 100.0
          after_tok_s: "{{ 50.0 if vllm_version == '9.9.9' else 101.0 }}"
          verdict: "{{ 'FAIL' if vllm_version == '9.9.9' else 'PASS' }}"
          rolled_back: "{{ vllm_version == '9.9.9' }}"
          reasons: []

    - name: Stop the rollout
      ansible.builtin.fail:
        msg: "BLOCKED on {{ inventory_hostname }}"
      when: vllm_version == '9.9.9'
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "playbooks" / "upgrade.yml").write_text(PLAYBOOK)
    shutil.copytree(REPO / "plugins" / "callback", root / "plugins" / "callback")
    (root / "ansible.cfg").write_text(
        "[defaults]\ninventory = inventory.yml\ncallbacks_enabled = benchgate_summary\n"
        "retry_files_enabled = false\n"
    )
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "vllm_hosts": {"children": {"g1": {}, "g2": {}, "g3": {}}},
                "g1": {"hosts": {"alpha": local}},
                "g2": {"hosts": {"beta": local}},
                "g3": {"hosts": {"gamma": local}},
            }
        }
    }
    (root / "inventory.yml").write_text(yaml.safe_dump(inventory))
    shutil.copytree(REPO / "runner" / "env", root / "runner" / "env")
    return root


def _rollout(project: Path, *args: str) -> list[str]:
    return ["rollout", "--project-dir", str(project), *args]


def _runs(project: Path) -> list[Path]:
    return sorted((project / "runner" / "artifacts").iterdir())


def test_passing_run_keeps_summary_results_and_ledger_rows(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = project / "artifacts" / "ledger.sqlite"
    ledger.record_verdict(db, {"verdict": "PASS", "reasons": ["older"]}, host="old")
    time.sleep(0.01)

    assert main(_rollout(project, "-e", "vllm_version=1.0.0")) == rollout.EXIT_OK

    out = capsys.readouterr().out
    assert "TASK Record the verdict in the ledger" in out
    assert "changed alpha" in out and "changed gamma" in out
    [run] = _runs(project)
    assert (run / "status").read_text() == "successful"
    own = run / "benchgate"
    summary = json.loads((own / "summary.json").read_text())
    assert set(summary) == {"alpha", "beta", "gamma"}
    assert {item["verdict"] for item in summary.values()} == {"PASS"}
    # The run id the rollout chose is the playbook's benchgate_run_id.
    result = json.loads((own / "results" / "beta" / "candidate.json").read_text())
    assert result == {"release": "1.0.0"}
    assert (project / "artifacts" / run.name / "beta" / "candidate.json").is_file()
    rows = json.loads((own / "ledger.json").read_text())
    assert sorted(v["host"] for v in rows["verdicts"]) == ["alpha", "beta", "gamma"]
    assert all(v["release"] == "1.0.0" for v in rows["verdicts"])
    # The runner was given the extra vars on its command line, not in env/ files.
    assert sorted(p.name for p in (project / "runner" / "env").iterdir()) == [
        "envvars",
        "settings",
    ]


def test_a_blocked_host_makes_the_exit_status_non_zero(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(_rollout(project, "-e", f"vllm_version={BAD}", "--limit", "beta"))

    assert status == rollout.EXIT_BLOCKED
    out = capsys.readouterr().out
    assert "FAILED beta: BLOCKED on beta" in out
    assert "blocked: beta" in out
    [run] = _runs(project)
    assert (run / "status").read_text() == "failed"
    summary = json.loads((run / "benchgate" / "summary.json").read_text())
    assert summary["beta"]["verdict"] == "FAIL"
    rows = json.loads((run / "benchgate" / "ledger.json").read_text())
    assert [(v["host"], v["verdict"]) for v in rows["verdicts"]] == [("beta", "FAIL")]


def test_groups_run_in_order_and_stop_at_the_first_blocked_one(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    versions = tmp_path / "versions.yml"
    versions.write_text('groups:\n  g1: "1.0.0"\n  g2: "9.9.9"\n  g3: "1.0.0"\n')

    status = main(_rollout(project, "--versions-file", str(versions)))

    assert status == rollout.EXIT_BLOCKED
    runs = _runs(project)
    assert [p.name.split("-", 1)[1] for p in runs] == ["1-g1", "2-g2"]
    first = json.loads((runs[0] / "benchgate" / "summary.json").read_text())
    second = json.loads((runs[1] / "benchgate" / "summary.json").read_text())
    assert set(first) == {"alpha"} and first["alpha"]["to"] == "1.0.0"
    assert set(second) == {"beta"} and second["beta"]["verdict"] == "FAIL"
    assert "not started: g3" in capsys.readouterr().out
    db = project / "artifacts" / "ledger.sqlite"
    assert "gamma" not in {v.host for v in ledger.history(db, limit=None)}


def test_a_second_rollout_waits_for_nobody_and_says_who_runs(project: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    lock_file = tmp_path / "rollout.lock"
    cmd = [sys.executable, "-m", "benchgate.cli", "rollout", "--project-dir", str(project)]
    cmd += ["--lock-file", str(lock_file)]
    first = subprocess.Popen(
        [*cmd, "-e", "vllm_version=1.0.0", "-e", f"wait_for_file={go}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert first.stdout is not None
        # The first holds the lock once it prints its first progress line.
        assert "rollout" in first.stdout.readline()
        second = subprocess.run(
            [*cmd, "-e", "vllm_version=1.0.0"], capture_output=True, text=True, timeout=120
        )
        assert second.returncode == rollout.EXIT_LOCKED
        assert f"pid {first.pid}" in second.stderr
        assert "another rollout is running" in second.stderr
    finally:
        go.touch()
        rest, _ = first.communicate(timeout=180)
    assert first.returncode == rollout.EXIT_OK, rest
    assert len(_runs(project)) == 1  # the refused rollout started no run
    # The rollout noted the session of the ansible-playbook it started (runner
    # gives it one of its own): what keeps the lock busy if the rollout is killed.
    record = json.loads(lock_file.read_text())
    assert record["pid"] == first.pid
    assert isinstance(record["child"], int) and record["session"] == record["child"]


def test_no_release_is_an_error_before_anything_runs(project: Path) -> None:
    assert main(_rollout(project)) == rollout.EXIT_ERROR
    assert not (project / "runner" / "artifacts").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 0.32\n", "quote the release"),
        ('version: ">=0.31"\n', "not one exact release"),
        ('version: "0.32.0"\ngroups: {a: "0.32.0"}\n', "exactly one of"),
        ("groups: []\n", "must map group names"),
        ("- 0.32.0\n", "expected a mapping"),
    ],
)
def test_versions_file_errors_say_what_to_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "v.yml"
    path.write_text(text)
    with pytest.raises(rollout.RolloutError, match=message):
        rollout.load_versions_file(path)


def test_versions_file_keeps_the_group_order(tmp_path: Path) -> None:
    path = tmp_path / "v.yml"
    path.write_text('groups:\n  canary: "0.32.0"\n  l4: "0.32.0"\n  h200: "0.33.0"\n')
    assert rollout.load_versions_file(path) == [
        rollout.Phase("0.32.0", "canary"),
        rollout.Phase("0.32.0", "l4"),
        rollout.Phase("0.33.0", "h200"),
    ]


def _result(status: str, rc: int | None, summary: dict, stats: dict | None) -> rollout.PhaseResult:
    return rollout.PhaseResult(
        phase=rollout.Phase("1.0.0"),
        run_id="r",
        status=status,
        rc=rc,
        artifact_dir=Path("."),
        summary=summary,
        blocked=rollout.blocked_hosts(summary),
        failed=rollout.failed_hosts(stats),
    )


@pytest.mark.parametrize(
    ("status", "rc", "summary", "stats", "expected"),
    [
        ("successful", 0, {"a": {"verdict": "PASS", "rolled_back": False}}, {}, 0),
        # INCONCLUSIVE blocks like FAIL; the callback writes booleans as strings.
        ("failed", 2, {"a": {"verdict": "INCONCLUSIVE", "rolled_back": "True"}}, {}, 1),
        # A host that failed before any verdict (preflight, unreachable) stops it too.
        ("failed", 4, {}, {"dark": {"b": 1}, "failures": {}}, 1),
        ("failed", 2, {}, {"failures": {"c": 1}}, 1),
        # ansible-playbook failed without any host failing (syntax, bad --limit).
        ("failed", 1, {}, {}, 3),
        ("timeout", 254, {}, {}, 3),
    ],
)
def test_exit_status(status: str, rc: int, summary: dict, stats: dict, expected: int) -> None:
    assert rollout.exit_status([_result(status, rc, summary, stats)]) == expected


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO photos (name) VALUES ('cat.jpg')")
    conn.commit()
    conn.close()


def _unversioned_ledger(path: Path) -> None:
    # The tables of schema 1, but no schema_version: not written by benchgate.
    conn = sqlite3.connect(path)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.close()


def _damaged_ledger(path: Path) -> None:
    ledger.record_verdict(path, {"verdict": "PASS", "reasons": ["x"]}, host="h")
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the first page's b-tree
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.write_text("not a database\n" * 100), "is not an SQLite database"),
        (_foreign_sqlite, "is not a benchgate ledger"),
        (_unversioned_ledger, "is not a benchgate ledger"),
        (_damaged_ledger, "is damaged"),
    ],
    ids=["text", "foreign", "unversioned", "damaged"],
)
def test_a_corrupt_or_foreign_ledger_stops_the_rollout_before_anything(
    project: Path, capsys: pytest.CaptureFixture[str], make: Any, words: str
) -> None:
    db = project / "artifacts" / "ledger.sqlite"
    db.parent.mkdir(parents=True)
    make(db)
    before = db.read_bytes()

    assert main(_rollout(project, "-e", "vllm_version=1.0.0")) == rollout.EXIT_ERROR

    err = capsys.readouterr().err
    assert f"benchgate rollout: the ledger {db} {words}" in err, err
    assert "--ledger" in err  # says what to do
    assert "Traceback" not in err
    # Nothing ran and nothing changed.
    assert not (project / "runner" / "artifacts").exists()
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["ledger.sqlite"]


def test_a_newer_ledger_stops_the_rollout_before_anything(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = project / "artifacts" / "ledger.sqlite"
    ledger.connect(db).close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_version VALUES (?, 'x')", (ledger.SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()

    assert main(_rollout(project, "-e", "vllm_version=1.0.0")) == rollout.EXIT_ERROR
    assert "newer than this benchgate" in capsys.readouterr().err
    assert not (project / "runner" / "artifacts").exists()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secrets_stay_out_of_runner_files_and_state_is_private(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cret-api-key"
    monkeypatch.setenv("CONTROLLER_TOKEN", "s3cret-from-the-environment")
    sha1 = hashlib.sha1(secret.encode()).hexdigest()
    args = ["-e", "vllm_version=1.0.0", "-e", f"api_key={secret}"]
    args += ["-e", f"expect_api_key_sha1={sha1}"]

    assert main(_rollout(project, *args)) == rollout.EXIT_OK

    [run] = _runs(project)
    # ansible-playbook's command line (runner's `command` file, and what `ps`
    # showed) and the environment runner recorded hold no secret.
    command = json.loads((run / "command").read_text())
    assert "s3cret" not in json.dumps(command)
    assert command["env"]["CONTROLLER_TOKEN"] == "<hidden>"
    assert command["env"]["BENCHGATE_SUMMARY_FILE"] == str(run / "benchgate" / "summary.json")
    assert "vllm_version" in " ".join(command["command"])
    leaks = [p for p in project.rglob("*") if p.is_file() and b"s3cret" in p.read_bytes()]
    assert leaks == []
    # The extra vars file is gone once the run is over.
    [extra] = [a[1:] for a in command["command"] if a.startswith("@")]
    assert not Path(extra).exists()
    # State only the rollout's user can read.
    artifacts = project / "artifacts"
    for folder in (artifacts, artifacts / run.name, project / "runner" / "artifacts", run):
        assert _mode(folder) == 0o700, folder
    assert _mode(run / "benchgate") == 0o700
    assert _mode(artifacts / "ledger.sqlite") == 0o600
    assert _mode(artifacts / "rollout.lock") == 0o600


FAKE_PLAYBOOK = """#!/bin/sh
# A stand-in for ansible-playbook that keeps "changing hosts" until told to stop,
# and is slow to stop: it notes each SIGTERM and ends at the second.
echo $$ > "$FAKE_PID_FILE"
terms="$FAKE_PID_FILE.term"
trap 'echo TERM >> "$terms"; [ $(wc -l < "$terms") -lt 2 ] || exit 143' TERM
while [ ! -e "$FAKE_GO_FILE" ]; do sleep 0.1; done
"""


def _alive(pid: int) -> bool:
    """Running (a zombie has exited; no reaper may be around to collect it)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_killed_rollout_keeps_the_lock_while_its_playbook_runs(
    project: Path, tmp_path: Path
) -> None:
    """A playbook that does not stop at once when its rollout is killed (here: it
    ignores the first SIGTERM) keeps the lock, and the next rollout says which
    process holds it and how to stop it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ansible-playbook"
    fake.write_text(FAKE_PLAYBOOK)
    fake.chmod(0o755)
    lock_file = tmp_path / "rollout.lock"
    go = tmp_path / "go"
    cmd = [sys.executable, "-m", "benchgate.cli", "rollout", "--project-dir", str(project)]
    cmd += ["--lock-file", str(lock_file), "-e", "vllm_version=1.0.0"]

    now = tmp_path / "now"
    now.touch()

    def env(pid_file: Path, go_file: Path = now) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_PID_FILE": str(pid_file),
            "FAKE_GO_FILE": str(go_file),
        }

    first_child = tmp_path / "first.pid"
    first = subprocess.Popen(cmd, env=env(first_child, go), stdout=subprocess.DEVNULL)
    child = 0
    try:
        _wait_for(lambda: first_child.is_file() and first_child.read_text().strip(), "the child")
        child = int(first_child.read_text())
        first.kill()  # SIGKILL: no clean-up of any kind
        first.wait(timeout=30)
        # The kernel told the playbook its rollout died (PR_SET_PDEATHSIG) ...
        _wait_for(lambda: Path(f"{first_child}.term").is_file(), "the parent-death signal")
        assert _alive(child)  # ... and this one is slow to stop

        # The playbook still runs: a second rollout is refused and says why.
        second_child = tmp_path / "second.pid"
        second = subprocess.run(
            cmd, env=env(second_child), capture_output=True, text=True, timeout=120
        )
        assert second.returncode == rollout.EXIT_LOCKED, second.stdout + second.stderr
        assert "another rollout is running" in second.stderr
        assert f"pid {child}" in second.stderr and "still running" in second.stderr
        assert f"pid {first.pid}" in second.stderr  # the rollout that started it
        assert f"stop it: kill {child} " in second.stderr  # how
        assert not second_child.exists()  # it started nothing
        assert _alive(child)
        # What the message says stops it.
        os.kill(child, signal.SIGTERM)
        _wait_for(lambda: not _alive(child), "the child to stop", timeout=10)
    finally:
        go.touch()
        if child:
            _wait_for(lambda: not _alive(child), "the child to finish")
    # The playbook ended: the next rollout goes ahead.
    third_child = tmp_path / "third.pid"
    third = subprocess.run(cmd, env=env(third_child), capture_output=True, text=True, timeout=120)
    assert third.returncode == rollout.EXIT_OK, third.stdout + third.stderr
    assert third_child.is_file()


def _carriers(token: str) -> list[int]:
    """Live processes that carry a run's lock token (what that run started)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not _alive(int(name)):
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{rollout.TOKEN_VARIABLE}={token}".encode() in environ:
            found.append(int(name))
    return found


def _who(pid: int) -> str:
    """``pid``, its parent, session and command line: what a failure shows."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return f"{pid} (gone)"
    words = " ".join(a.decode(errors="replace") for a in argv)
    return f"{pid} (parent {fields[1]}, session {fields[3]}): {words[-80:]}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_rollout_takes_its_playbook_with_it(project: Path, tmp_path: Path) -> None:
    """Issue 32: ``kill -9`` of ``benchgate rollout`` left its ansible-playbook
    changing hosts. Now the playbook gets SIGTERM when its rollout dies and
    stops its workers, and every worker gets SIGTERM when the playbook ends
    (the benchgate_lock callback, enabled as in benchgate's ansible.cfg): a
    real ansible-playbook, killed while it starts a task on three hosts."""
    cfg = project / "ansible.cfg"
    cfg.write_text(
        cfg.read_text().replace(
            "callbacks_enabled = benchgate_summary",
            "callbacks_enabled = benchgate_summary, benchgate_lock",
        )
    )
    lock_file = tmp_path / "rollout.lock"
    go = tmp_path / "go"
    cmd = [sys.executable, "-m", "benchgate.cli", "rollout", "--project-dir", str(project)]
    cmd += ["--lock-file", str(lock_file), "-e", "vllm_version=1.0.0"]
    first = subprocess.Popen([*cmd, "-e", f"wait_for_file={go}"], stdout=subprocess.PIPE, text=True)
    token = ""
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if "Wait for the go file" in line:
                break
        _wait_for(lambda: isinstance(json.loads(lock_file.read_text()).get("child"), int), "child")
        record = json.loads(lock_file.read_text())
        token, child = record["token"], record["child"]
        # ansible-playbook and the first worker that runs wait_for.
        _wait_for(lambda: len(_carriers(token)) >= 2, "the task's worker")
        assert _alive(child)

        first.kill()  # SIGKILL: benchgate gets no chance to stop anything
        first.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _carriers(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _carriers(token), [_who(pid) for pid in _carriers(token)]
    finally:
        go.touch()
        for pid in _carriers(token) if token else []:
            os.kill(pid, signal.SIGKILL)
    # Nothing of that run holds the lock: the next rollout goes ahead.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert again.returncode == rollout.EXIT_OK, again.stdout + again.stderr
