"""``benchgate judge``, ``benchgate record`` and ``benchgate history``.

Staged results (a workload with ``stages``) are judged stage by stage
(``benchgate.stages``): a table per stage, then the verdict over them.

The judge's exit status is the verdict, for shell and CI use:
0 PASS, 1 FAIL, 2 INCONCLUSIVE, 3 bad input (unreadable file, unknown metric).
argparse's own usage errors also exit 2, so a mistyped command never reads as
a pass.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from . import gate, ledger, rules, stages
from .serverconfig import config_text, fingerprint

EXIT_CODES = {rules.PASS: 0, rules.FAIL: 1, rules.INCONCLUSIVE: 2}
EXIT_BAD_INPUT = 3


class InputError(Exception):
    """A file or argument the user has to fix."""


def load_json(path: str | Path) -> dict[str, Any]:
    """Read a JSON object from ``path`` (``-`` for stdin)."""
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object")
    return data


def _threshold(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected METRIC=PCT (e.g. ttft_ms=10), got {text!r}"
        ) from None


def _split_metrics(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (InputError, ValueError, sqlite3.Error, RuntimeError) as exc:
            print(f"benchgate {args.command_name}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


@_guard
def cmd_judge(args: argparse.Namespace) -> int:
    """Judge candidate vs baseline; print the table; exit with the verdict."""
    judged = gate.run_gate(
        load_json(args.baseline),
        load_json(args.candidate),
        metrics=_split_metrics(args.metric),
        max_regression_pct=args.max_regression_pct,
        thresholds=dict(args.threshold or []),
        critical_metrics=_split_metrics(args.critical),
        noncritical_fail=args.noncritical,
        alpha=args.alpha,
        min_trials=args.min_trials,
        latency_stat=args.latency_stat,
        fail_requires_bound=args.fail_requires_bound,
        set_aside_slowest=args.set_aside_slowest,
        run_spread_pct=args.run_spread_pct,
        correction=args.stage_correction,
        default_limit=args.max_regression_pct,
    )
    verdict = judged.verdict
    data = verdict.to_dict()
    if args.output:
        Path(args.output).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=2) if args.json else judged.table)
    return EXIT_CODES[verdict.verdict]


@_guard
def cmd_record(args: argparse.Namespace) -> int:
    """Store a result (and optionally its verdict) in the ledger."""
    result = load_json(args.result)
    run_id = ledger.record_result(
        args.db, result, host=args.host, phase=args.phase, release=args.release
    )
    out: dict[str, Any] = {"run_id": run_id}
    if args.verdict:
        verdict = load_json(args.verdict)
        out["verdict_id"] = ledger.record_verdict(
            args.db,
            verdict,
            host=args.host,
            release=args.release,
            phase=args.phase,
            candidate_run_id=run_id,
        )
    print(json.dumps(out))
    return 0


def _history_table(
    records: Sequence[ledger.VerdictRecord], configs: Mapping[int, Mapping[str, Any]] | None = None
) -> str:
    """The verdicts, one row each with the fingerprints of the serving configurations
    judged (baseline -> candidate, :mod:`benchgate.serverconfig`), its first reason
    whole beneath it (the words the ledger, the report and the summary give), then
    the legend of the fingerprints."""
    if not records:
        return "no verdicts recorded"
    configs = configs or {}

    def config(run_id: int | None) -> str:
        return (fingerprint(configs.get(run_id)) if run_id is not None else None) or "-"

    rows = [("when (UTC)", "host", "release", "from", "config", "phase", "verdict")]
    reasons = []
    for r in records:
        rows.append(
            (
                r.recorded_at[:19].replace("T", " "),
                r.host,
                r.release or "-",
                r.baseline_release or "-",
                f"{config(r.baseline_run_id)} -> {config(r.candidate_run_id)}",
                r.phase or "-",
                r.verdict,
            )
        )
        reasons.append(r.reasons[0] if r.reasons else "")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(rows[0], widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row, reason in zip(rows[1:], reasons):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if reason:
            lines.append(f"    {reason}")
    legend = {fingerprint(c): config_text(c) for c in configs.values() if fingerprint(c)}
    if legend:
        lines.append("")
        lines.append("config: the serving configurations judged (baseline -> candidate):")
        lines.extend(f"  {fp}: {text}" for fp, text in legend.items())
    return "\n".join(lines)


@_guard
def cmd_history(args: argparse.Namespace) -> int:
    """List recorded verdicts, newest first (or the latest per host)."""
    if not Path(args.db).exists():
        raise InputError(f"no ledger at {args.db}")
    if args.latest:
        latest = ledger.latest_verdicts(args.db, [args.host] if args.host else None)
        records = list(latest.values())
    else:
        records = ledger.history(
            args.db, host=args.host, release=args.release, since=args.since, limit=args.limit
        )
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
    else:
        ids = [i for r in records for i in (r.baseline_run_id, r.candidate_run_id) if i]
        print(_history_table(records, ledger.server_configs(args.db, ids)))
        events = [
            e
            for e in ledger.host_events(args.db, args.host)
            if not args.since or e["recorded_at"] >= args.since
        ][: args.limit]
        if events:
            print("\nhosts lost during a rollout (host_events):")
            for e in events:
                when = e["recorded_at"][:19].replace("T", " ")
                run = e["run_name"] or "-"
                print(f"  {when}  {e['host']}  {e['event']}  run {run}: {e['reason']}")
    return 0


def _add_judge(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "judge",
        help="judge a candidate result against a baseline result",
        description=(
            "Judge a candidate benchmark result against a baseline. Exit status: "
            "0 PASS, 1 FAIL, 2 INCONCLUSIVE, 3 bad input."
        ),
    )
    p.add_argument("--baseline", required=True, help="baseline result JSON (- for stdin)")
    p.add_argument("--candidate", required=True, help="candidate result JSON")
    p.add_argument(
        "--max-regression-pct",
        type=float,
        default=rules.DEFAULT_MAX_REGRESSION_PCT,
        help="largest tolerated regression in percent (default: %(default)s)",
    )
    p.add_argument(
        "--metric",
        action="append",
        help="metric to judge; repeat or comma-separate "
        f"(default: {', '.join(rules.DEFAULT_METRICS)})",
    )
    p.add_argument(
        "--threshold",
        action="append",
        type=_threshold,
        metavar="METRIC=PCT",
        help="per-metric limit, e.g. ttft_ms=10 (repeatable)",
    )
    p.add_argument(
        "--critical",
        action="append",
        help=f"critical metric (repeatable; default: {', '.join(rules.DEFAULT_CRITICAL)})",
    )
    p.add_argument(
        "--noncritical",
        choices=("fail", "warn"),
        default="fail",
        help="what a FAIL of a non-critical metric does (default: %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=rules.GateConfig.alpha,
        help="significance (default: %(default)s)",
    )
    p.add_argument(
        "--stage-correction",
        choices=stages.CORRECTIONS,
        default="bonferroni",
        help="staged results: split alpha over the stages, so that the staged verdict "
        "falsely fails no more often than one stage would (default: %(default)s)",
    )
    p.add_argument(
        "--min-trials",
        type=int,
        default=rules.GateConfig.min_trials,
        help="valid trials per side (default: %(default)s)",
    )
    p.add_argument("--latency-stat", choices=rules.LATENCY_STATS, default="median")
    p.add_argument(
        "--fail-requires-bound",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="FAIL only when the whole confidence interval is beyond the limit (default); "
        "--no-fail-requires-bound: a significant point estimate beyond it suffices",
    )
    p.add_argument(
        "--set-aside-slowest",
        type=float,
        default=rules.GateConfig.set_aside_slowest,
        help="share of each side's trials set aside at the slow end (default: %(default)s)",
    )
    p.add_argument(
        "--run-spread-pct",
        type=float,
        default=rules.GateConfig.run_spread_pct,
        help="standard deviation of a measurement run's level on the host, percent; widens "
        "the interval by it, less with more runs per side (default: %(default)s)",
    )
    p.add_argument("--output", help="write the verdict JSON here")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(_run=cmd_judge, command_name="judge")


def _add_record(subparsers: Any) -> None:
    p = subparsers.add_parser("record", help="store a result (and its verdict) in the ledger")
    p.add_argument("--db", required=True, help="SQLite ledger path (created if missing)")
    p.add_argument("--host", required=True)
    p.add_argument("--phase", required=True, help="arm label: baseline, candidate, arm:<name>, ...")
    p.add_argument("--result", required=True, help="result JSON")
    p.add_argument("--verdict", help="verdict JSON from 'benchgate judge --output'")
    p.add_argument("--release", help="vLLM release (default: read from the result)")
    p.set_defaults(_run=cmd_record, command_name="record")


def _add_history(subparsers: Any) -> None:
    p = subparsers.add_parser("history", help="list recorded verdicts")
    p.add_argument("--db", required=True, help="SQLite ledger path")
    p.add_argument("--host")
    p.add_argument("--release")
    p.add_argument("--since", help="ISO-8601 UTC time, e.g. 2025-01-31 or 2025-01-31T12:00")
    p.add_argument("--limit", type=int, default=20, help="at most N rows (default: 20)")
    p.add_argument("--latest", action="store_true", help="only the latest verdict per host")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(_run=cmd_history, command_name="history")


def register(subparsers: Any) -> None:
    """Add ``judge``, ``record`` and ``history`` to a ``add_subparsers()`` object.

    Each sub-parser sets ``_run`` (``args -> exit status``, as ``benchgate.cli``
    dispatches) and ``command_name``.
    """
    _add_judge(subparsers)
    _add_record(subparsers)
    _add_history(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m benchgate.cli_gate``), same commands."""
    parser = argparse.ArgumentParser(prog="benchgate")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args._run(args))


if __name__ == "__main__":
    sys.exit(main())
