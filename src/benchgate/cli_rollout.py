"""``benchgate rollout``: the upgrade playbook through ansible-runner, one rollout at a time.

Exit status: 0 every host kept its candidate (or there was nothing to do);
1 a host was blocked (rolled back) or failed, so the rollout stopped;
2 usage error; 3 the rollout could not run (bad versions file, runner error,
timeout, cancelled); 75 another rollout holds the lock (its holder is printed).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import rollout
from .numfmt import MISSING, number
from .rollout import Phase, PhaseResult, RolloutError, Settings


def _add_rollout(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "rollout",
        help="run playbooks/upgrade.yml through ansible-runner (scheduled rollouts)",
        description=(
            "Run the upgrade playbook through ansible-runner with the project as "
            "ansible-runner's project dir, one rollout at a time (a lock file), "
            "and keep benchgate's summary, results and ledger rows with runner's artifacts."
        ),
        epilog=(
            "exit status: 0 passed or nothing to do, 1 a host was blocked or failed, "
            "2 usage, 3 could not run, 75 another rollout holds the lock"
        ),
    )
    p.add_argument(
        "--project-dir",
        type=Path,
        default=Path("."),
        help="the benchgate project (playbooks/, roles/, ansible.cfg); default: .",
    )
    p.add_argument(
        "--private-data-dir",
        type=Path,
        help="ansible-runner's private data dir (env/settings, artifacts/); "
        "default: <project>/runner",
    )
    p.add_argument(
        "--playbook", default="playbooks/upgrade.yml", help="relative to the project dir"
    )
    p.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=[],
        help="inventory file or folder (repeatable); default: ansible.cfg's",
    )
    p.add_argument("-l", "--limit", help="only these hosts (an Ansible host pattern)")
    p.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="KEY=VALUE, @FILE or a YAML/JSON mapping (repeatable), e.g. -e vllm_version=0.32.0",
    )
    p.add_argument(
        "--versions-file",
        type=Path,
        help="YAML: 'version: <release>' for every host, or 'groups: {<group>: <release>}' "
        "upgraded group by group in the file's order",
    )
    p.add_argument(
        "--artifacts-dir",
        type=Path,
        help="benchmark results per run (vllm_benchmark_artifacts_dir); "
        "default: <project>/artifacts",
    )
    p.add_argument(
        "--ledger", type=Path, help="SQLite ledger; default: <artifacts dir>/ledger.sqlite"
    )
    p.add_argument("--lock-file", type=Path, help="default: <artifacts dir>/rollout.lock")
    p.add_argument(
        "--keep-artifacts",
        type=int,
        default=0,
        metavar="N",
        help="keep only the newest N runner artifact folders (0: keep all)",
    )
    p.add_argument(
        "--ansible-output",
        action="store_true",
        help="show ansible-playbook's own output instead of benchgate's progress lines",
    )
    p.set_defaults(_run=run, command_name="rollout")


def register(subparsers: Any) -> None:
    """Add ``rollout`` to an ``add_subparsers()`` object."""
    _add_rollout(subparsers)


def settings_from(args: argparse.Namespace) -> Settings:
    """Resolve paths and the plan from the arguments; raise RolloutError on bad input."""
    project = args.project_dir.resolve()
    if not (project / args.playbook).is_file():
        raise RolloutError(
            f"{project / args.playbook} does not exist: give --project-dir (the benchgate "
            "checkout) or --playbook"
        )
    artifacts = (args.artifacts_dir or project / "artifacts").resolve()
    extravars = rollout.parse_extra_vars(args.extra_vars)
    version = extravars.pop("vllm_version", None)
    if args.versions_file is not None:
        if version is not None:
            raise RolloutError("give the release with -e vllm_version or --versions-file, not both")
        phases = rollout.load_versions_file(args.versions_file)
    elif version is not None:
        phases = [Phase(rollout._check_version(str(version), "-e vllm_version"))]
    else:
        raise RolloutError("no target release: give -e vllm_version=<release> or --versions-file")
    return Settings(
        project_dir=project,
        private_data_dir=(args.private_data_dir or project / "runner").resolve(),
        artifacts_dir=artifacts,
        ledger=(args.ledger or artifacts / "ledger.sqlite").resolve(),
        playbook=args.playbook,
        inventory=[str(Path(i).resolve()) for i in args.inventory],
        limit=args.limit,
        extravars=extravars,
        phases=phases,
        rotate_artifacts=max(0, args.keep_artifacts),
        show_ansible_output=args.ansible_output,
    )


class Progress:
    """One line per play, task and host result, from ansible-runner's events."""

    def __init__(self, console: Any) -> None:
        self.console = console

    def __call__(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host", "")
        res: Mapping[str, Any] = data["res"] if isinstance(data.get("res"), Mapping) else {}
        if kind == "playbook_on_play_start":
            self._line(f"[bold]PLAY[/] {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            self._line(f"  [bold]TASK[/] {data.get('task', '')}")
        elif kind == "playbook_on_no_hosts_matched":
            self._line("  [yellow]no hosts matched[/]")
        elif kind == "runner_on_ok":
            state = "[yellow]changed[/]" if res.get("changed") else "[green]ok[/]"
            self._line(f"    {state} {host}")
        elif kind == "runner_on_skipped":
            self._line(f"    [cyan]skipped[/] {host}")
        elif kind == "runner_on_failed":
            label = "failed (ignored)" if data.get("ignore_errors") else "FAILED"
            self._line(f"    [red]{label}[/] {host}: {self._msg(res)}")
        elif kind == "runner_on_unreachable":
            self._line(f"    [red]UNREACHABLE[/] {host}: {self._msg(res)}")

    @staticmethod
    def _msg(res: Mapping[str, Any]) -> str:
        msg = str(res.get("msg") or res.get("stderr") or "").strip().replace("\n", " ")
        return msg[:300] + ("..." if len(msg) > 300 else "")

    def _line(self, text: str) -> None:
        self.console.print(text, highlight=False)


def _tok_s(value: object) -> str:
    """Tokens/s for the table: one decimal, MISSING when not measured."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value, 1)
    return MISSING if value in (None, "") else str(value)


def _print_phase(console: Any, result: PhaseResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    if result.summary:
        table = Table(title=f"benchgate {result.run_id}")
        for col in ("host", "release", "tok/s before", "tok/s after", "verdict"):
            table.add_column(col)
        for host in sorted(result.summary):
            item = result.summary[host] or {}
            verdict = str(item.get("verdict", "?"))
            if host in result.blocked:
                verdict = f"[red]{verdict} (blocked)[/]"
            table.add_row(
                escape(str(host)),
                escape(f"{item.get('from', '?')} -> {item.get('to', '?')}"),
                _tok_s(item.get("before_tok_s")),
                _tok_s(item.get("after_tok_s")),
                verdict,
            )
        console.print(table)
    where = f"group {result.phase.group}" if result.phase.group else "all hosts"
    state = "passed" if result.ok else f"[red]{result.status}[/] (rc {result.rc})"
    console.print(
        f"{result.run_id}: {where} -> {result.phase.version}: {state}; "
        f"artifacts in {escape(str(result.artifact_dir))}",
        highlight=False,
    )
    if result.blocked:
        console.print(f"[red]blocked[/]: {', '.join(result.blocked)}", highlight=False)
    if result.failed:
        console.print(f"[red]failed[/]: {', '.join(result.failed)}", highlight=False)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    # soft_wrap: whole lines in the journal and in CI logs, whatever the width.
    console = Console(stderr=False, soft_wrap=True)
    err = sys.stderr
    try:
        settings = settings_from(args)
        rollout.check_ledger(settings.ledger)
    except RolloutError as exc:
        print(f"benchgate rollout: {exc}", file=err)
        return rollout.EXIT_ERROR
    settings.lock_file = (args.lock_file or settings.artifacts_dir / "rollout.lock").resolve()
    lock = rollout.RolloutLock(settings.lock_file)
    try:
        lock.acquire()
    except rollout.LockBusy as busy:
        print(
            f"benchgate rollout: another rollout is running: {rollout.describe_holder(busy.holder)}"
            f" (lock file {busy.path})",
            file=err,
        )
        return rollout.EXIT_LOCKED
    except OSError as exc:
        print(f"benchgate rollout: cannot open the lock file: {exc}", file=err)
        return rollout.EXIT_ERROR
    settings.lock = lock

    stop = {"requested": False}

    def on_term(signum: int, _frame: Any) -> None:
        stop["requested"] = True
        print(f"benchgate rollout: signal {signum}: stopping ansible-playbook", file=err)

    previous = signal.signal(signal.SIGTERM, on_term)
    results: list[PhaseResult] = []
    try:
        base = rollout.new_run_id()
        progress = None if settings.show_ansible_output else Progress(console)
        total = len(settings.phases)
        for index, phase in enumerate(settings.phases):
            run_id = rollout.phase_run_id(base, index, phase, total)
            target = f"group {phase.group}" if phase.group else "vllm_hosts"
            console.print(f"[bold]rollout {run_id}[/]: {target} -> vLLM {phase.version}")
            result = rollout.run_phase(
                settings, phase, run_id, on_event=progress, cancelled=lambda: stop["requested"]
            )
            results.append(result)
            _print_phase(console, result)
            if not result.ok:
                if index + 1 < total:
                    left = ", ".join(str(p.group) for p in settings.phases[index + 1 :])
                    console.print(f"rollout stopped; not started: {left}", highlight=False)
                break
    except RolloutError as exc:
        print(f"benchgate rollout: {exc}", file=err)
        return rollout.EXIT_ERROR
    finally:
        signal.signal(signal.SIGTERM, previous)
        lock.release()
    return rollout.exit_status(results)
