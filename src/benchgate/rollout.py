"""Scheduled rollouts: ``playbooks/upgrade.yml`` through ansible-runner, one at a time.

One rollout is one or more *phases*; a phase is one ``ansible_runner.run`` of the
upgrade playbook with one target release (``vllm_version``), over the whole
inventory or ``--limit``-ed to one group when the versions file gives a release
per group. Phases run in the file's order and the rollout stops at the first
phase in which a host was blocked or failed.

Every phase gets its own runner artifact folder
(``<private data dir>/artifacts/<run id>/``, the run id is also the playbook's
``benchgate_run_id``) and, beside runner's own files, a ``benchgate/`` folder:
``summary.json`` (the ``benchgate_summary`` callback's per-host summary),
``results/`` (a copy of the run's benchmark results and verdicts,
``<artifacts dir>/<run id>/``) and ``ledger.json`` (the ledger rows recorded
while the phase ran).

Two rollouts never overlap: :class:`RolloutLock` holds an exclusive POSIX
record lock (``lockf``) on a lock file for the whole rollout, and writes who
holds it into the file. Plain ``ansible-playbook`` runs take the same lock
through the ``benchgate_lock`` callback.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import getpass
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import yaml

from . import ledger

#: Exit statuses of ``benchgate rollout`` (2 is argparse's usage error).
EXIT_OK = 0
EXIT_BLOCKED = 1  # a host was blocked (rolled back) or failed: the rollout stopped
EXIT_ERROR = 3  # the rollout could not run: bad input, runner error, timeout, cancel
EXIT_LOCKED = 75  # another rollout holds the lock (EX_TEMPFAIL: try again later)

PASSING_VERDICTS = ("PASS",)


class RolloutError(Exception):
    """Input or set-up the user has to fix; the rollout did not start."""


# --------------------------------------------------------------------------- lock


class LockBusy(Exception):
    """Another process holds the rollout lock; ``holder`` is what it wrote."""

    def __init__(self, path: Path, holder: Mapping[str, Any]) -> None:
        self.path = path
        self.holder = dict(holder)
        super().__init__(f"{path} is held by {describe_holder(holder)}")


def describe_holder(holder: Mapping[str, Any]) -> str:
    """``pid 123 (alice@ctl, since ..., command: ...)``; tolerant of a partial record.

    A holder that is gone while what it started still runs (``survivors``):
    ``ansible-playbook pid 456 (...) is still running, started by pid 123 (...), which is gone``.
    """
    if not holder:
        return "another process (it has not written its name yet)"
    who = f"{holder.get('user', '?')}@{holder.get('host', '?')}"
    command = f", command: {holder['command']}" if holder.get("command") else ""
    text = f"pid {holder.get('pid', '?')} ({who}, since {holder.get('started_at', '?')}{command})"
    survivors = holder.get("survivors") or []
    if survivors:
        first = survivors[0]
        more = f" and {len(survivors) - 1} more of its processes" if len(survivors) > 1 else ""
        pids = " ".join(str(s["pid"]) for s in survivors if isinstance(s.get("pid"), int))
        text = (
            f"pid {first.get('pid', '?')} ({first.get('command', '?')}){more} is still running, "
            f"started by {text}, which is gone; wait for it to finish, or stop it: "
            f"kill {pids or '<pid>'} (on SIGTERM ansible-playbook stops its workers and ends; "
            "a host it left mid-upgrade is restored by the next rollout)"
        )
    return text


#: Short options of ansible-playbook and ``benchgate rollout`` that take a value:
#: in a cluster (``-vvve K=V``, ``-ihosts``) the rest of the cluster, or the next
#: argument, is that value. Every other letter is taken for a flag.
_SHORT_WITH_VALUE = frozenset("eifMtuclT")


def _is_extra_vars_option(name: str) -> bool:
    """``--extra-vars`` or a prefix argparse accepts for it (``--e``, ``--extra``, ...)."""
    return len(name) >= 3 and "--extra-vars".startswith(name)


def redact_extra_vars(argv: Sequence[str]) -> list[str]:
    """``argv`` without the values of ``-e``/``--extra-vars``, which may hold secrets.

    Parsed the way argparse parses ansible-playbook's (and ``benchgate rollout``'s)
    command line: ``-e`` at the end of a cluster of short flags (``-vvve K=V``,
    ``-vvveK=V``) and any prefix of ``--extra-vars`` (``--extra K=V``,
    ``--extra-var=K=V``). Nothing after ``--`` is an option.
    """
    out: list[str] = []
    hide_next = False
    options_end = False
    for arg in argv:
        if hide_next:
            out.append("<hidden>")
            hide_next = False
        elif options_end or not arg.startswith("-") or arg == "-":
            out.append(arg)
        elif arg == "--":
            options_end = True
            out.append(arg)
        elif arg.startswith("--"):
            name, sep, _ = arg.partition("=")
            if _is_extra_vars_option(name):
                if sep:
                    out.append(f"{name}=<hidden>")
                else:
                    out.append(arg)
                    hide_next = True
            else:
                out.append(arg)
        else:
            out.append(_redact_short_cluster(arg))
            hide_next = _cluster_wants_extra_vars(arg)
    return out


def _cluster_value_at(arg: str) -> tuple[str, int] | None:
    """The first option in ``-abc...`` that takes a value, and its index."""
    for index, letter in enumerate(arg[1:], start=1):
        if letter in _SHORT_WITH_VALUE:
            return letter, index
    return None


def _cluster_wants_extra_vars(arg: str) -> bool:
    """``-vvve``: the next argument is the extra vars."""
    found = _cluster_value_at(arg)
    return found is not None and found[0] == "e" and found[1] == len(arg) - 1


def _redact_short_cluster(arg: str) -> str:
    found = _cluster_value_at(arg)
    if found is None or found[0] != "e" or found[1] == len(arg) - 1:
        return arg
    return arg[: found[1] + 1] + "<hidden>"


#: Set for every process a lock holder starts (``RolloutLock.environment``): how
#: the processes of a run are told apart from any other on the controller.
TOKEN_VARIABLE = "BENCHGATE_LOCK_TOKEN"


class RolloutLock:
    """An exclusive, non-blocking ``lockf`` on ``path`` for the life of the rollout.

    The kernel drops the lock when the holder exits, however it exits; the
    file's content (who held it last) is read while the lock is held by
    someone else. A POSIX lock belongs to the process: a second acquire in the
    same process does not block, and children do not inherit it.

    What the holder starts can outlive it: runner starts ansible-playbook in a
    session of its own, so a ``kill -9`` of ``benchgate rollout`` does not reach
    it. :func:`playbook_dies_with_this_process` has the kernel send it SIGTERM
    then, but it may take a while to stop (or not stop: no ``prctl``, a
    plain ansible-playbook's modules). So the record also holds a random
    ``token``, which the holder puts into the environment of what it starts
    (:attr:`environment`, a new one per run: :meth:`new_run`), and the
    ``session`` of its ansible-playbook
    (:meth:`record_session`). A free lock whose last record has a live process
    carrying the token (in that session, once it is known) is busy:
    :class:`LockBusy` with those processes as ``survivors``. Processes that
    carry the token but left for a session of their own (an ssh ControlPersist
    master, a container monitor) do not hold it. Linux only (``/proc``);
    elsewhere only the lock itself counts.
    """

    def __init__(self, path: str | Path, command: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self.command = " ".join(redact_extra_vars(command if command is not None else sys.argv))
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"
        self._handle: TextIO | None = None
        self._record: dict[str, Any] = {}

    @property
    def environment(self) -> dict[str, str]:
        """For the environment of what the holder starts (ansible-playbook)."""
        return {"BENCHGATE_LOCK_FILE": str(self.path), TOKEN_VARIABLE: self.token}

    def acquire(self) -> dict[str, Any]:
        """Take the lock or raise :class:`LockBusy`; return the record written."""
        private_dir(self.path.parent)
        # No O_TRUNC: opening must not wipe what the current holder wrote. 0600:
        # the record names who runs what.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        handle = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.lockf(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):  # not "held by another process"
                handle.close()
                raise
            holder = _read_record(handle)
            handle.close()
            raise LockBusy(self.path, holder) from None
        last = _read_record(handle)
        survivors = _survivors(last)
        if survivors:
            fcntl.lockf(handle.fileno(), fcntl.LOCK_UN)
            handle.close()
            raise LockBusy(self.path, {**last, "survivors": survivors})
        self._record = {
            "pid": os.getpid(),
            "user": _user(),
            "host": socket.gethostname(),
            "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": self.command,
            "token": self.token,
            "session": os.getsid(0),
        }
        self._handle = handle
        self._write()
        return dict(self._record)

    def new_run(self) -> dict[str, str]:
        """Before starting a run (one ansible-playbook): a new token, the session not
        known yet. Return the environment to start it with.

        Until :meth:`record_session` names its session, every live process that
        carries the new token holds the lock: a ``kill -9`` of the holder right
        after it started the run still leaves the lock busy.
        """
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"
        if self._handle is not None:
            self._record.update(token=self.token, session=None, child=None)
            self._write()
        return self.environment

    def record_session(self, pid: int) -> None:
        """``pid`` (ansible-playbook) was started in a session of its own: it and
        the processes of its session that carry the token hold the lock too."""
        if self._handle is None:
            return
        try:
            self._record["session"] = os.getsid(pid)
        except OSError:  # gone already
            return
        self._record["child"] = pid
        self._write()

    def _write(self) -> None:
        assert self._handle is not None
        text = json.dumps(self._record, sort_keys=True) + "\n"
        # Over the old record, then cut: a reader never finds the file empty.
        self._handle.seek(0)
        self._handle.write(text)
        self._handle.flush()
        self._handle.truncate()
        self._handle.flush()

    def release(self) -> None:
        if self._handle is not None:
            fcntl.lockf(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> RolloutLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_record(handle: TextIO) -> dict[str, Any]:
    """The record in the lock file; tolerant of a record being rewritten or cut."""
    text = ""
    for _ in range(20):
        handle.seek(0)
        text = handle.read()
        if not text.strip():
            return {}
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            time.sleep(0.05)  # being rewritten: read it again
            continue
        return record if isinstance(record, dict) else {}
    return {"command": text.strip()[:200]}


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session) of ``pid`` from ``/proc``; None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return fields[0], int(fields[1]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _carries(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's
        return False
    return f"{TOKEN_VARIABLE}={token}".encode() in environ.split(b"\0")


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    text = " ".join(" ".join(redact_extra_vars(argv)).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _survivors(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Live processes that carry ``record``'s token, in its session when it names one."""
    token, session = record.get("token"), record.get("session")
    if not isinstance(token, str):
        return []
    mine = {os.getpid(), *ancestors(os.getpid())}
    found = []
    for pid in _pids():
        info = _proc_stat(pid)
        if pid in mine or info is None or info[0] == "Z":
            continue
        if isinstance(session, int) and info[2] != session:
            continue
        if _carries(pid, token):
            found.append({"pid": pid, "command": _command_of(pid)})
    child = record.get("child")
    found.sort(key=lambda item: (item["pid"] != child, item["pid"]))
    return found


def ancestors(pid: int) -> set[int]:
    """The pids above ``pid`` (its parent, the parent's parent, ...), from /proc."""
    found: set[int] = set()
    while pid > 1 and pid not in found:
        info = _proc_stat(pid)
        ppid = info[1] if info else 0
        if ppid:
            found.add(ppid)
        pid = ppid
    if not found:  # no /proc: at least the parent
        found.add(os.getppid())
    return found


class ChildWatch:
    """While a phase runs: find the ansible-playbook runner starts (a child of this
    process that carries the lock's token) and note its session in the lock.

    Polls every ``interval`` seconds until it is found, then stops: runner
    starts one ansible-playbook per run. Runner execs it within milliseconds of
    forking it; until its session is noted, the token alone keeps the lock busy
    (:meth:`RolloutLock.new_run`).
    """

    def __init__(self, lock: RolloutLock, interval: float = 0.05) -> None:
        self.lock = lock
        self.interval = interval
        self.found: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="benchgate-child-watch", daemon=True)

    def _run(self) -> None:
        while self.found is None and not self._stop.wait(self.interval):
            for pid in _children():
                if _carries(pid, self.lock.token):
                    self.found = pid
                    self.lock.record_session(pid)
                    break

    def __enter__(self) -> ChildWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _children() -> list[int]:
    """This process's children (``/proc/<pid>/task/<tid>/children``, else a scan)."""
    me = os.getpid()
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            text = Path(f"/proc/{me}/task/{tid}/children").read_text(encoding="ascii")
            found.extend(int(pid) for pid in text.split())
        return found
    except (OSError, ValueError):
        pass
    return [pid for pid in _pids() if (info := _proc_stat(pid)) is not None and info[1] == me]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Phase:
    """One runner run: a release for the whole inventory (group None) or one group."""

    version: str
    group: str | None = None


def _check_version(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RolloutError(f'{where}: expected a release such as "0.32.0", got {value!r}')
    if not isinstance(value, str):
        raise RolloutError(
            f'{where}: {value!r} was read as a number; quote the release ("{value}") '
            "so that YAML keeps it exactly as written"
        )
    text = value.strip()
    if not text or any(c in text for c in " <>=!~*,") or text.lower() == "latest":
        raise RolloutError(f'{where}: {value!r} is not one exact release (e.g. "0.32.0")')
    return text


def load_versions_file(path: str | Path) -> list[Phase]:
    """Read a versions file: ``version: X`` (every host) or ``groups: {group: X, ...}``.

    Groups are upgraded in the order the file lists them.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RolloutError(f"cannot read the versions file {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise RolloutError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or set(data) - {"version", "groups"}:
        raise RolloutError(
            f"{path}: expected a mapping with 'version: <release>' or "
            "'groups: {<group>: <release>, ...}'"
        )
    if ("version" in data) == ("groups" in data):
        raise RolloutError(f"{path}: give exactly one of 'version' and 'groups'")
    if "version" in data:
        return [Phase(_check_version(data["version"], f"{path}: version"))]
    groups = data["groups"]
    if not isinstance(groups, dict) or not groups:
        raise RolloutError(f"{path}: 'groups' must map group names to releases")
    return [
        Phase(_check_version(version, f"{path}: groups.{group}"), str(group))
        for group, version in groups.items()
    ]


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, without the text around it (which may hold a secret)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{exc.problem}{where}"
    return type(exc).__name__


def parse_extra_vars(items: Sequence[str]) -> dict[str, Any]:
    """``-e`` values: ``KEY=VALUE`` (a string), ``@file.yml`` or a JSON/YAML mapping.

    Errors name the ``-e`` by its place (or its file), never quote its value:
    it may hold a secret.
    """
    out: dict[str, Any] = {}
    for number, item in enumerate(items, start=1):
        where = f"-e {item}" if item.startswith("@") else f"-e value #{number}"
        if item.startswith("@"):
            try:
                data = yaml.safe_load(Path(item[1:]).read_text(encoding="utf-8"))
            except OSError as exc:
                raise RolloutError(f"{where}: {exc.strerror or exc}") from None
            except yaml.YAMLError as exc:
                raise RolloutError(f"{where}: not valid YAML: {_yaml_problem(exc)}") from None
        elif item.lstrip().startswith("{"):
            try:
                data = yaml.safe_load(item)
            except yaml.YAMLError as exc:
                raise RolloutError(f"{where}: not valid YAML: {_yaml_problem(exc)}") from None
        else:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise RolloutError(f"{where}: expected KEY=VALUE, @FILE or a mapping")
            data = {key.strip(): value}
        if not isinstance(data, dict):
            raise RolloutError(f"{where}: must give a mapping of variables")
        out.update(data)
    return out


def new_run_id(now: datetime | None = None) -> str:
    """The playbook's own run id format (UTC, to the second)."""
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


# --------------------------------------------------------------------------- run


@dataclass
class Settings:
    """Everything one rollout needs; paths are resolved by :func:`settings_from`."""

    project_dir: Path
    private_data_dir: Path
    artifacts_dir: Path
    ledger: Path
    playbook: str = "playbooks/upgrade.yml"
    inventory: list[str] = field(default_factory=list)
    limit: str | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    rotate_artifacts: int = 0
    show_ansible_output: bool = False
    # The lock this rollout holds; told to the benchgate_lock callback of the
    # ansible-playbook runs it starts (they go ahead under it).
    lock_file: Path | None = None
    # Held: its environment goes to ansible-playbook, which keeps the lock busy
    # while it runs, even when this process is killed.
    lock: RolloutLock | None = None


@dataclass
class PhaseResult:
    phase: Phase
    run_id: str
    status: str
    rc: int | None
    artifact_dir: Path
    summary: dict[str, Any]
    blocked: list[str]
    failed: list[str]

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0 and not self.blocked and not self.failed


def blocked_hosts(summary: Mapping[str, Any]) -> list[str]:
    """Hosts whose verdict in the callback's summary is not PASS, or that were rolled back."""
    out = []
    for host, item in summary.items():
        item = item if isinstance(item, Mapping) else {}
        rolled_back = item.get("rolled_back") in (True, "True", "true")
        if rolled_back or str(item.get("verdict", "")).upper() not in PASSING_VERDICTS:
            out.append(str(host))
    return sorted(out)


def failed_hosts(stats: Mapping[str, Any] | None) -> list[str]:
    """Hosts with failures or unreachable in ansible's final stats (rescued ones too)."""
    if not stats:
        return []
    hosts: set[str] = set()
    for key in ("failures", "dark"):
        hosts.update(h for h, n in (stats.get(key) or {}).items() if n)
    return sorted(hosts)


EventSink = Callable[[Mapping[str, Any]], None]


def check_ledger(path: Path) -> None:
    """Before anything runs: ``path`` must be a ledger this benchgate can use (or none yet)."""
    try:
        ledger.check(path, thorough=True)
    except ledger.LedgerError as exc:
        raise RolloutError(
            f"{exc} (the rollout's ledger is --ledger, default <artifacts dir>/ledger.sqlite); "
            "nothing was started"
        ) from exc


def _ledger_rows(path: Path, since: str) -> dict[str, Any]:
    rows: dict[str, Any] = {"ledger": str(path), "since": since, "verdicts": [], "runs": []}
    if not path.is_file():
        return rows
    try:
        rows["verdicts"] = [v.to_dict() for v in ledger.history(path, since=since, limit=None)]
        rows["runs"] = [r.to_dict() for r in ledger.runs(path, since=since, limit=None)]
    except (ledger.LedgerError, sqlite3.Error) as exc:  # broken while the playbook ran
        rows["error"] = str(exc)
    return rows


#: Values of the controller's environment that runner's ``command`` file keeps;
#: every other inherited variable keeps its name only.
KEPT_ENVIRONMENT = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PWD"}
)
HIDDEN = "<hidden>"


def scrub_command_file(artifact_dir: Path, own_env: Mapping[str, str]) -> None:
    """Hide the controller's environment in runner's ``artifacts/<run>/command``.

    Runner records the whole environment it gave ansible-playbook there: the
    controller's own (tokens, cloud keys, ``SSH_AUTH_SOCK``, ...) plus what runner
    and ``env/envvars`` add. Inherited values become ``<hidden>`` (names stay, and
    the values of :data:`KEPT_ENVIRONMENT`); what runner and benchgate set stays,
    so the file still says how the playbook ran.
    """
    path = artifact_dir / "command"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return
    for key, value in env.items():
        inherited = key in os.environ and os.environ[key] == value
        if inherited and key not in own_env and key not in KEPT_ENVIRONMENT:
            env[key] = HIDDEN
    tmp = path.with_name("command.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, ensure_ascii=False)
    os.replace(tmp, path)


class _Events:
    """Runner's event handler: shows each event (``sink``), and once ansible-playbook
    has started (it read its extra vars: ``playbook_on_start``) removes the extra
    vars file and scrubs runner's ``command`` file. Returns True so runner keeps
    the event."""

    def __init__(
        self,
        sink: EventSink | None,
        artifact_dir: Path,
        own_env: Mapping[str, str],
        extra_file: Path | None,
    ) -> None:
        self.sink = sink
        self.artifact_dir = artifact_dir
        self.own_env = own_env
        self.extra_file = extra_file
        self.scrubbed = False

    def done(self) -> None:
        """After the run (or when it could not start): the same clean-up, for sure."""
        self._scrub()
        self._remove_extra_file()

    def _scrub(self) -> None:
        if not self.scrubbed:
            scrub_command_file(self.artifact_dir, self.own_env)
            self.scrubbed = True

    def _remove_extra_file(self) -> None:
        if self.extra_file is not None:
            shutil.rmtree(self.extra_file.parent, ignore_errors=True)
            self.extra_file = None

    def __call__(self, event: Mapping[str, Any]) -> bool:
        self._scrub()  # runner wrote the command file before it started the playbook
        if event.get("event") == "playbook_on_start":
            self._remove_extra_file()
        if self.sink is not None:
            self.sink(event)
        return True


def _write_extra_vars(extravars: Mapping[str, Any]) -> Path | None:
    """The user's ``-e`` values in a 0600 file of a 0700 temporary folder (None: none).

    Given to ansible-playbook as ``-e @file``, so that no secret is on its
    command line (``ps``, ``/proc/<pid>/cmdline``, runner's ``command`` file).
    """
    if not extravars:
        return None
    folder = Path(tempfile.mkdtemp(prefix="benchgate-rollout-"))  # mode 0700
    path = folder / "extravars.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(extravars), handle, default=str)
    return path


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents mode 0700 (existing ones are left as they are)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)


#: prctl(2): the signal a process gets when the thread that started it ends.
PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's ``prctl`` (looked up before any fork), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent ``signum`` when this process dies
    (Linux's ``PR_SET_PDEATHSIG``); None where there is no ``prctl``.

    The setting survives the child's ``exec`` (not a set-user-ID one). It fires
    when the *thread* that forked the child ends: start the child from the
    thread that waits for it (``ansible_runner.run`` does). A parent that died
    between the fork and the ``prctl`` is caught by the parent pid check.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # gone already: the signal will not come
            os._exit(1)

    return preexec


_FORKS_ARMED: list[bool] = []


def forks_die_with_their_parent(signum: int = signal.SIGTERM) -> bool:
    """From now on, every process this one forks (``os.fork``, multiprocessing)
    gets ``signum`` when the thread that forked it ends; False where that cannot
    be arranged. Idempotent.

    For ansible-playbook started by ``benchgate rollout`` (the ``benchgate_lock``
    callback calls it): on SIGTERM ansible-playbook signals the workers it
    knows, then ends, but a worker forked in that very moment is not known yet
    (its pid is set after the fork) and would finish its task, orphaned. With
    this, it gets SIGTERM when ansible-playbook ends, and stops what it runs.
    """
    if _FORKS_ARMED:
        return True
    prctl = _prctl()
    if prctl is None or not hasattr(os, "register_at_fork"):
        return False
    forking = [0]

    def before() -> None:
        forking[0] = os.getpid()

    def after_in_child() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0 and os.getppid() != forking[0]:
            os._exit(1)  # the parent is gone already: the signal will not come

    os.register_at_fork(before=before, after_in_child=after_in_child)
    _FORKS_ARMED.append(True)
    return True


class _PexpectWithPreexec:
    """ansible-runner's ``pexpect`` module, whose ``spawn`` runs ``preexec`` in the
    child before ``exec`` (pexpect takes a ``preexec_fn``; runner passes none)."""

    def __init__(self, real: Any, preexec: Callable[[], None]) -> None:
        self._real = real
        self._preexec = preexec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def spawn(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("preexec_fn", self._preexec)
        return self._real.spawn(*args, **kwargs)


@contextlib.contextmanager
def playbook_dies_with_this_process() -> Iterator[bool]:
    """While runner starts ansible-playbook: its child gets SIGTERM when this
    process dies, however it dies (``kill -9`` included), and ansible-playbook
    stops its workers on SIGTERM. Yields whether that could be arranged (Linux,
    runner's pexpect mode)."""
    import ansible_runner.runner as runner_module

    preexec = die_with_parent()
    real = getattr(runner_module, "pexpect", None)
    if preexec is None or real is None or not hasattr(real, "spawn"):
        yield False
        return
    runner_module.pexpect = _PexpectWithPreexec(real, preexec)
    try:
        yield True
    finally:
        runner_module.pexpect = real


def _run_runner(
    settings: Settings,
    run_id: str,
    limit: str | None,
    extravars: dict[str, Any],
    envvars: dict[str, str],
    events: _Events,
    cancelled: Callable[[], bool] | None,
) -> Any:
    import ansible_runner

    cmdline = None
    if events.extra_file is not None:
        cmdline = shlex.join(["-e", f"@{events.extra_file}"])
    # A kill -9 of benchgate must not leave a playbook changing hosts unseen.
    with playbook_dies_with_this_process():
        return ansible_runner.run(
            private_data_dir=str(settings.private_data_dir),
            project_dir=str(settings.project_dir),
            playbook=settings.playbook,
            inventory=settings.inventory or None,
            limit=limit,
            # The user's -e values come first (a file), benchgate's own after them.
            cmdline=cmdline,
            extravars=extravars,
            envvars=envvars,
            ident=run_id,
            quiet=not settings.show_ansible_output,
            event_handler=events,
            cancel_callback=cancelled,
            rotate_artifacts=settings.rotate_artifacts,
            # Keep -e and the environment in memory: written into env/, a later
            # run would read them back (runner only writes those files once).
            suppress_env_files=True,
        )


def run_phase(
    settings: Settings,
    phase: Phase,
    run_id: str,
    on_event: EventSink | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> PhaseResult:
    """Run the playbook once through ansible-runner and collect benchgate's outputs."""
    import ansible_runner.exceptions

    artifact_dir = settings.private_data_dir / "artifacts" / run_id
    own = artifact_dir / "benchgate"
    private_dir(own)
    # The run's benchmark results: private even where <artifacts dir> already was not.
    private_dir(settings.artifacts_dir / run_id)
    summary_file = own / "summary.json"
    # benchgate's own variables: no secret, on the command line (ps shows the release).
    extravars = dict(
        vllm_version=phase.version,
        benchgate_run_id=run_id,
        benchgate_ledger=str(settings.ledger),
        vllm_benchmark_artifacts_dir=str(settings.artifacts_dir),
    )
    envvars = {"BENCHGATE_SUMMARY_FILE": str(summary_file)}
    if settings.lock_file is not None:
        envvars["BENCHGATE_LOCK_FILE"] = str(settings.lock_file)
    if settings.lock is not None:
        envvars.update(settings.lock.new_run())
    callbacks = settings.project_dir / "plugins" / "callback"
    if callbacks.is_dir():
        # ansible-runner sets ANSIBLE_CALLBACK_PLUGINS to its own folder, which
        # hides ansible.cfg's callback_plugins: name the project's again.
        envvars["ANSIBLE_CALLBACK_PLUGINS"] = str(callbacks)
    limit = phase.group if phase.group is not None else settings.limit
    if phase.group is not None and settings.limit:
        limit = f"{phase.group}:&{settings.limit}"
    since = ledger.utcnow()
    events = _Events(on_event, artifact_dir, envvars, _write_extra_vars(settings.extravars))
    watch = ChildWatch(settings.lock) if settings.lock is not None else contextlib.nullcontext()
    try:
        with watch:
            runner = _run_runner(settings, run_id, limit, extravars, envvars, events, cancelled)
    except (OSError, ansible_runner.exceptions.AnsibleRunnerException) as exc:
        raise RolloutError(f"ansible-runner could not start the playbook: {exc}") from exc
    finally:
        events.done()

    summary: dict[str, Any] = {}
    if summary_file.is_file():
        try:
            loaded = json.loads(summary_file.read_text(encoding="utf-8"))
            summary = loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            summary = {}
    results = settings.artifacts_dir / run_id
    if results.is_dir():
        shutil.copytree(results, own / "results", dirs_exist_ok=True)
    (own / "ledger.json").write_text(
        json.dumps(_ledger_rows(settings.ledger, since), indent=1, default=str) + "\n",
        encoding="utf-8",
    )
    return PhaseResult(
        phase=phase,
        run_id=run_id,
        status=str(runner.status),
        rc=runner.rc,
        artifact_dir=artifact_dir,
        summary=summary,
        blocked=blocked_hosts(summary),
        failed=failed_hosts(runner.stats),
    )


def phase_run_id(base: str, index: int, phase: Phase, total: int) -> str:
    """``<base>`` for a one-phase rollout, ``<base>-<n>-<group>`` per group otherwise."""
    if total == 1 and phase.group is None:
        return base
    return f"{base}-{index + 1}-{phase.group or 'all'}"


def exit_status(results: Sequence[PhaseResult]) -> int:
    """0 all phases passed; 1 a host was blocked or failed; 3 runner could not finish."""
    for result in results:
        if result.blocked or result.failed:
            return EXIT_BLOCKED
        if result.status in ("timeout", "canceled", "error") or result.rc is None:
            return EXIT_ERROR
        if result.status != "successful" or result.rc != 0:
            # ansible-playbook failed before any host did (syntax, no hosts matched, ...).
            return EXIT_ERROR
    return EXIT_OK
