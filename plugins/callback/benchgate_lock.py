# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)
# Ansible reads DOCUMENTATION before the imports.
# ruff: noqa: E402
"""One rollout at a time, for plain ansible-playbook runs too.

``benchgate rollout`` locks; this callback takes the same lock when a playbook
that changes hosts (upgrade, rollback, deploy, speculative_ab) is started with
``ansible-playbook`` directly, so a rollout from a shell never overlaps one
from the scheduler.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: benchgate_lock
type: aggregate
short_description: Refuse a second rollout while one runs
description:
  - When a playbook that changes vLLM hosts starts (C(upgrade.yml), C(rollback.yml),
    C(deploy.yml), C(speculative_ab.yml)), takes an exclusive lock on the rollout lock
    file for the life of the ansible-playbook process, the same lock C(benchgate rollout)
    takes. When another process holds it, prints who (pid, user, host, start time,
    command) and exits with status 75 before any task runs.
  - The kernel drops the lock when the process ends, however it ends, so a killed
    controller leaves no stale lock; the re-run takes it again. What a killed holder
    started and that still runs keeps it busy, though (an ansible-playbook left running
    by a C(kill -9) of C(benchgate rollout)); the message names that process.
  - A run started by C(benchgate rollout) (the holder is an ancestor of this process)
    goes ahead under that rollout's lock.
  - The processes this run starts (modules on a local connection, ssh) carry the lock's
    token in their environment (C(BENCHGATE_LOCK_TOKEN)), so those still running when
    this process is killed keep the lock busy.
  - In a run started by C(benchgate rollout) (which has the kernel send this process
    SIGTERM when the rollout dies, C(kill -9) included), every worker this process
    forks gets SIGTERM when this process ends (Linux C(PR_SET_PDEATHSIG)), so no task
    goes on after the rollout is gone.
  - "The lock file is C(BENCHGATE_LOCK_FILE) when set (C(benchgate rollout) sets it for
    the runs it starts), else C(artifacts/rollout.lock) in the repository that holds the
    playbook: the default of C(benchgate rollout)."
requirements:
  - enable in ansible.cfg (callbacks_enabled = benchgate_lock)
  - the benchgate package in the controller's Python
"""

import os
import sys
from pathlib import Path

from ansible.plugins.callback import CallbackBase

LOCKED_PLAYBOOKS = frozenset({"upgrade.yml", "rollback.yml", "deploy.yml", "speculative_ab.yml"})
EXIT_LOCKED = 75  # as `benchgate rollout`: EX_TEMPFAIL, try again later


def default_lock_file(playbook_path: str) -> Path:
    env = os.environ.get("BENCHGATE_LOCK_FILE")
    if env:
        return Path(env)
    return Path(playbook_path).resolve().parent.parent / "artifacts" / "rollout.lock"


def _workers_end_with_this_process() -> None:
    """Started by ``benchgate rollout``: it has this process sent SIGTERM when it
    dies; every worker forked from here on gets SIGTERM when this process ends,
    even one forked in the moment Ansible's own SIGTERM handler ran."""
    try:
        from benchgate.rollout import forks_die_with_their_parent
    except ImportError:
        return
    forks_die_with_their_parent()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "benchgate_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._lock = None  # held for the life of this process; the kernel drops it at exit
        if os.environ.get("BENCHGATE_LOCK_TOKEN"):  # started by `benchgate rollout`
            _workers_end_with_this_process()

    def v2_playbook_on_start(self, playbook) -> None:  # type: ignore[no-untyped-def]
        path = playbook._file_name
        if os.path.basename(path) not in LOCKED_PLAYBOOKS or self._lock is not None:
            return
        try:
            from benchgate.rollout import (
                TOKEN_VARIABLE,
                LockBusy,
                RolloutLock,
                ancestors,
                describe_holder,
            )
        except ImportError:
            self._display.warning(
                "benchgate_lock: the benchgate package is not importable in this Python, "
                "so this run is not locked against another rollout; install it "
                "(pip install -e '.[controller]')."
            )
            return
        lock_file = default_lock_file(path)
        lock = RolloutLock(lock_file, sys.argv)
        try:
            lock.acquire()
        except LockBusy as busy:
            above = ancestors(os.getpid())
            started_by = [busy.holder.get("pid")]
            started_by += [p.get("pid") for p in busy.holder.get("survivors") or []]
            if any(pid in above for pid in started_by):
                return  # started by `benchgate rollout` (or its playbook), which holds the lock
            self._display.error(
                f"another rollout is running: {describe_holder(busy.holder)} "
                f"(lock file {busy.path}); this run changed nothing. "
                "Wait for it to finish, or stop it."
            )
            # SystemExit passes Ansible's callback error handling: nothing runs.
            raise SystemExit(EXIT_LOCKED) from None
        except OSError as exc:
            self._display.error(f"benchgate_lock: cannot open the lock file {lock_file}: {exc}")
            raise SystemExit(EXIT_LOCKED) from None
        self._lock = lock
        # What this run starts carries the token: still running after a kill -9
        # of this process, it keeps the lock busy.
        os.environ[TOKEN_VARIABLE] = lock.token
