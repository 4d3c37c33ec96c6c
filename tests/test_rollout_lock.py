"""The rollout lock: a real POSIX lock between real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchgate.rollout import LockBusy, RolloutLock, describe_holder, redact_extra_vars

HOLDER = textwrap.dedent(
    """
    import sys
    from benchgate.rollout import RolloutLock
    lock = RolloutLock(sys.argv[1], ["benchgate", "rollout", "--versions-file", "v.yml"])
    lock.acquire()
    print("locked", flush=True)
    sys.stdin.read()  # hold the lock until the test closes stdin
    lock.release()
    """
)


def _hold(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_process_is_refused_and_told_who_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "state" / "rollout.lock"
    holder = _hold(path)
    try:
        with pytest.raises(LockBusy) as busy:
            RolloutLock(path).acquire()
        assert busy.value.holder["pid"] == holder.pid
        assert busy.value.holder["command"] == "benchgate rollout --versions-file v.yml"
        assert busy.value.holder["user"]
        assert busy.value.holder["host"]
        assert busy.value.holder["started_at"].endswith("Z")
        text = describe_holder(busy.value.holder)
        assert f"pid {holder.pid}" in text and "--versions-file v.yml" in text
        # The refused attempt must not have wiped the holder's record.
        assert json.loads(path.read_text())["pid"] == holder.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # Released: the next rollout gets it and writes its own record.
    lock = RolloutLock(path, ["second"])
    record = lock.acquire()
    try:
        assert record["pid"] == os.getpid()
        assert json.loads(path.read_text())["command"] == "second"
    finally:
        lock.release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "rollout.lock"
    holder = _hold(path)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    # Its record is still in the file, but the kernel dropped its lock.
    assert json.loads(path.read_text())["pid"] == holder.pid
    with RolloutLock(path, ["after the crash"]):
        assert json.loads(path.read_text())["command"] == "after the crash"


def test_context_manager_releases(tmp_path: Path) -> None:
    path = tmp_path / "rollout.lock"
    with RolloutLock(path, ["one"]):
        assert json.loads(path.read_text())["command"] == "one"
    # Released on leaving the block: another process takes it at once.
    holder = _hold(path)
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=30)
    assert json.loads(path.read_text())["pid"] == holder.pid


def test_extra_vars_are_not_written_into_the_lock_file(tmp_path: Path) -> None:
    argv = [
        "ansible-playbook",
        "-e",
        "api_key=s3cret",
        "--extra-vars=tok=s3cret",
        "-etok=s3cret",
        "up.yml",
    ]
    assert redact_extra_vars(argv) == [
        "ansible-playbook",
        "-e",
        "<hidden>",
        "--extra-vars=<hidden>",
        "-e<hidden>",
        "up.yml",
    ]
    path = tmp_path / "rollout.lock"
    with RolloutLock(path, argv):
        assert "s3cret" not in path.read_text()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # -e combined with flags before it, the value apart or attached.
        (["-vvve", "k=s3cret"], ["-vvve", "<hidden>"]),
        (["-vvvek=s3cret"], ["-vvve<hidden>"]),
        (["-Cbe", "k=s3cret"], ["-Cbe", "<hidden>"]),
        # argparse takes any unambiguous prefix of --extra-vars.
        (["--extra", "k=s3cret"], ["--extra", "<hidden>"]),
        (["--extra-var=k=s3cret"], ["--extra-var=<hidden>"]),
        (["--ex", "k=s3cret"], ["--ex", "<hidden>"]),
        (["--e=k=s3cret"], ["--e=<hidden>"]),
        # A short option that takes a value ends the cluster: "-ihosts-e" is -i.
        (["-ihosts-e", "up.yml"], ["-ihosts-e", "up.yml"]),
        (["--limit", "web", "--", "-e"], ["--limit", "web", "--", "-e"]),
    ],
)
def test_every_spelling_of_extra_vars_is_redacted(argv: list[str], expected: list[str]) -> None:
    assert redact_extra_vars(["ansible-playbook", *argv]) == ["ansible-playbook", *expected]


# Holds the lock, starts a "playbook" that carries the lock's environment in a
# session of its own (as runner's pexpect does), notes it in the lock, and a
# "daemon" that carries the environment too but left for yet another session
# (as an ssh ControlPersist master does); then waits to be killed.
SPAWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from benchgate.rollout import RolloutLock
    lock = RolloutLock(sys.argv[1], ["benchgate", "rollout", "-e", "vllm_version=1.0.0"])
    lock.acquire()
    env = {**os.environ, **lock.environment}
    wait = [sys.executable, "-c", "import os, sys, time\\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.05)", sys.argv[2]]
    playbook = subprocess.Popen(wait, env=env, start_new_session=True)
    lock.record_session(playbook.pid)
    daemon = subprocess.Popen(wait[:-1] + [sys.argv[3]], env=env, start_new_session=True)
    print(playbook.pid, daemon.pid, flush=True)
    time.sleep(600)
    """
)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_lock_stays_busy_while_what_a_killed_holder_started_runs(tmp_path: Path) -> None:
    path = tmp_path / "rollout.lock"
    playbook_done, daemon_done = tmp_path / "playbook-done", tmp_path / "daemon-done"
    spawner = subprocess.Popen(
        [sys.executable, "-c", SPAWNER, str(path), str(playbook_done), str(daemon_done)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert spawner.stdout is not None
        playbook, daemon = (int(x) for x in spawner.stdout.readline().split())
        spawner.kill()
        spawner.wait(timeout=30)
        assert _running(playbook) and _running(daemon)

        with pytest.raises(LockBusy) as busy:
            RolloutLock(path, ["second"]).acquire()
        text = describe_holder(busy.value.holder)
        assert f"pid {playbook}" in text and "still running" in text
        assert f"pid {spawner.pid}" in text  # the rollout that started it
        assert f"or stop it: kill {playbook} (" in text  # and how to stop it
        assert f"pid {daemon}" not in text  # another session: not the playbook
        assert json.loads(path.read_text())["pid"] == spawner.pid  # record untouched

        playbook_done.touch()
        deadline = time.monotonic() + 30
        while _running(playbook):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # Only the daemon is left: it does not hold the lock.
        assert _running(daemon)
        with RolloutLock(path, ["third"]):
            assert json.loads(path.read_text())["command"] == "third"
    finally:
        playbook_done.touch()
        daemon_done.touch()
        spawner.kill()
