"""The benchgate_lock callback: plain ansible-playbook runs take the rollout lock.

Real ansible-playbook processes against an empty inventory (no host is touched),
a real POSIX lock held by another process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")

# Holds the lock, optionally runs a command under it, then waits for stdin to close.
HOLDER = textwrap.dedent(
    """
    import json, subprocess, sys
    from benchgate.rollout import RolloutLock
    lock = RolloutLock(sys.argv[1], ["benchgate", "rollout", "--versions-file", "v.yml"])
    lock.acquire()
    print("locked", flush=True)
    if len(sys.argv) > 2:
        done = subprocess.run(sys.argv[2:], capture_output=True, text=True)
        print(json.dumps({"rc": done.returncode, "out": done.stdout + done.stderr}), flush=True)
    sys.stdin.read()
    lock.release()
    """
)


def _env(lock: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), BENCHGATE_LOCK_FILE=str(lock), ANSIBLE_NOCOLOR="1"
    )
    return env


def _playbook(name: str) -> list[str]:
    assert ANSIBLE_PLAYBOOK is not None
    # An inventory without vllm_hosts: the play matches no host and changes nothing.
    return [ANSIBLE_PLAYBOOK, "-i", "localhost,", str(ROOT / "playbooks" / name)]


def _hold(lock: Path, *command: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(lock),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)


def _run(lock: Path, playbook: str) -> tuple[int, str]:
    done = subprocess.run(
        _playbook(playbook), capture_output=True, text=True, env=_env(lock), cwd=ROOT
    )
    return done.returncode, done.stdout + done.stderr


def _run_while_held(lock: Path, playbook: str) -> tuple[int, int, str]:
    """(holder's pid, rc, output) of ``playbook`` run while another process holds the lock."""
    holder = _hold(lock)
    try:
        rc, out = _run(lock, playbook)
    finally:
        _release(holder)
    return holder.pid, rc, out


def test_a_second_rollout_is_refused_before_any_task(tmp_path: Path) -> None:
    holder_pid, rc, out = _run_while_held(tmp_path / "rollout.lock", "rollback.yml")
    assert rc == 75, out
    assert f"another rollout is running: pid {holder_pid}" in out
    assert "benchgate rollout --versions-file v.yml" in out
    assert "PLAY [" not in out  # refused before the first play


def test_a_free_lock_is_taken_and_the_run_recorded(tmp_path: Path) -> None:
    lock = tmp_path / "rollout.lock"
    rc, out = _run(lock, "rollback.yml")
    assert rc == 0, out
    record = json.loads(lock.read_text())
    assert "rollback.yml" in record["command"]
    assert record["pid"] != os.getpid()
    # Released at exit: another process takes it at once.
    _release(_hold(lock))


def test_a_run_started_by_the_holder_goes_ahead(tmp_path: Path) -> None:
    lock = tmp_path / "rollout.lock"
    holder = _hold(lock, *_playbook("upgrade.yml"))
    try:
        assert holder.stdout is not None
        result = json.loads(holder.stdout.readline())
    finally:
        _release(holder)
    assert "another rollout is running" not in result["out"]
    assert "PLAY [" in result["out"], result["out"]


def test_playbooks_that_change_nothing_are_not_locked(tmp_path: Path) -> None:
    _, rc, out = _run_while_held(tmp_path / "rollout.lock", "benchmark.yml")
    assert rc == 0, out
    assert "another rollout is running" not in out


def test_the_lock_record_holds_no_extra_vars_in_any_spelling(tmp_path: Path) -> None:
    lock = tmp_path / "rollout.lock"
    spellings = ["-vvve", "a=s3cret-a", "--extra", "b=s3cret-b", "--extra-var=c=s3cret-c"]
    spellings += ["-Cesecret_d=s3cret-d"]  # check mode, and -e with its value attached
    check = tmp_path / "check.yml"
    # ansible-playbook takes every spelling as extra vars: the play sees all four.
    check.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.assert:\n"
        "        that: [a == 's3cret-a', b == 's3cret-b', c == 's3cret-c',\n"
        "               secret_d == 's3cret-d']\n"
    )
    rollback = _playbook("rollback.yml")
    done = subprocess.run(
        [*rollback, str(check), *spellings, "-c", "local"],
        capture_output=True,
        text=True,
        env=_env(lock),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(lock.read_text())
    assert "rollback.yml" in record["command"]
    assert "s3cret" not in lock.read_text(), record["command"]
