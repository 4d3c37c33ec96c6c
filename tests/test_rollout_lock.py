"""The rollout lock: a real POSIX lock between real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
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
