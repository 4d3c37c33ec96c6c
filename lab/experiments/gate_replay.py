"""The gate's decisions on real trial sequences replayed in order (bursts kept).

``gate_decision_quality.py`` resamples trials independently from a pool; a
real machine's slow phases come in bursts that span several trials, and the
baseline and the candidate are measured one after the other. This script
keeps that: it concatenates the recorded trials of one setup in the order
they ran (the joins are server restarts, as between a baseline and its
candidate), picks a random starting trial, and takes the next N trials as the
baseline and the N (+E per extra round) after them as the candidate,
wrapping around at the end (a circular block bootstrap with the block as long
as the whole comparison). Each comparison is judged by ``benchgate.rules``
exactly as ``benchgate_gate`` judges (output tok/s critical, TTFT and TPOT
medians judged too when the records have them), on the playbook's schedule:
while INCONCLUSIVE, one more round of E candidate trials.

Scenarios: A/A (the records as they are: every block is a false block) and a
regression of ``--regression`` percent (the candidate's tok/s times
``1 - r``, its latencies divided by that). Overlapping windows share trials,
so the comparisons are not independent: the rates are estimates from
``len(records)`` distinct starts, and the script prints that number.

``--design`` replays at the level of measurement runs instead (issue 20: the
level of the machine moves between runs, restarted or not): the recorded
runs in the order they ran, ``N`` trials of each, assigned in turn to a
design's letters (``AB+B``: baseline, candidate, and while INCONCLUSIVE one
more candidate run; ``ABA+B``: A-B-A), judged with ``--run-spread`` (the
gate's ``run_spread_pct``) and ``--limit``. Every window of consecutive runs
is one comparison, so the rates come from as many comparisons as there are
runs.

Inputs: ``lab/experiments/noise_floor.py --json`` files (``--setup NAME`` picks a
placement) or ``benchgate.result/1`` files in the order they ran.

    .venv/bin/python lab/experiments/gate_replay.py lab/data/noise-floor-2core.json \
        --setup shared --setup split --schedule 16+16 --schedule 8+8
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from benchgate import ranks, rules  # noqa: E402

Trial = dict[str, float]


def _figures(metrics: dict[str, Any]) -> Trial:
    return {
        "output_tokens_per_s": float(metrics["output_tokens_per_s"]),
        "ttft_ms": float(metrics["ttft_ms"]["median"]),
        "tpot_ms": float(metrics["tpot_ms"]["median"]),
    }


def ledger_runs(path: Path) -> list[tuple[str, list[Trial]]]:
    """(phase, valid trials) of every distinct measurement in a ledger, in the order it ran.

    The gate records its baseline again at every look; a merged candidate
    (the extra trials) holds the first look's trials too: both are counted once.
    """
    conn = sqlite3.connect(path)
    out: list[tuple[str, list[Trial]]] = []
    seen: set[str] = set()
    previous: list[Trial] = []
    for run_id, phase, sha in conn.execute("SELECT id, phase, result_sha256 FROM runs ORDER BY id"):
        if sha in seen:
            continue
        seen.add(sha)
        trials = [
            _figures(json.loads(m))
            for (m,) in conn.execute(
                "SELECT metrics_json FROM trials WHERE run_id = ? AND valid ORDER BY idx", (run_id,)
            )
        ]
        if phase.startswith("candidate") and previous and trials[: len(previous)] == previous:
            out.append((phase + "-more", trials[len(previous) :]))
        else:
            out.append((phase, trials))
        previous = trials if phase.startswith("candidate") else []
    return out


def load(paths: Sequence[Path], setup: str) -> list[Trial]:
    """Every recorded trial of ``setup`` in the order it ran.

    For a ledger (``.sqlite``), ``setup`` is a phase: ``baseline`` takes every
    baseline measurement (the serving release, through the playbook's path).
    """
    out: list[Trial] = []
    for path in paths:
        if path.suffix == ".sqlite":
            out += [t for phase, trials in ledger_runs(path) if phase == setup for t in trials]
            continue
        data = json.loads(path.read_text())
        if "runs" in data:  # noise_floor.py
            for run in data["runs"].get(setup, []):
                for t in run:
                    out.append(t if isinstance(t, dict) else {"output_tokens_per_s": float(t)})
        elif "trials" in data:  # a benchgate result
            out += [_figures(t["metrics"]) for t in data["trials"] if t.get("valid", True)]
    return out


def load_runs(paths: Sequence[Path], trials: int) -> list[list[Trial]]:
    """Every recorded measurement run, in the order it ran, cut to its first ``trials``.

    Ledger: every distinct measurement (A-B-A's two baselines, recorded as one,
    split again; the candidate's extra trials are a run of their own).
    ``noise_floor.py --json``: every run of every placement, round by round.
    """
    out: list[list[Trial]] = []
    for path in paths:
        if path.suffix == ".sqlite":
            for phase, run in ledger_runs(path):
                if phase.startswith("baseline:a-b-a"):
                    half = len(run) // 2
                    out += [run[:half], run[half:]]
                else:
                    out.append(run)
            continue
        data = json.loads(path.read_text())
        names = list(data["runs"])
        for r in range(max(len(v) for v in data["runs"].values())):
            out += [data["runs"][name][r] for name in names if r < len(data["runs"][name])]
    short = [run for run in out if len(run) < trials]
    if short:
        raise SystemExit(f"{len(short)} runs have fewer than {trials} trials: lower --trials")
    return [run[:trials] for run in out]


def replay_design(
    runs: list[list[Trial]],
    design: str,
    factor: float,
    limit: float,
    spread: float,
) -> dict[str, float]:
    """Every window of consecutive runs judged with ``design`` (e.g. ``ABA+B``)."""
    first, _, more = design.partition("+")
    counts = {rules.PASS: 0, rules.FAIL: 0, rules.INCONCLUSIVE: 0}
    used = 0
    metrics = [m for m in ("output_tokens_per_s", "ttft_ms", "tpot_ms") if m in runs[0][0]]
    specs = rules.make_specs(metrics, max_regression_pct=limit)
    config = rules.GateConfig(run_spread_pct=spread)
    for start in range(len(runs)):
        sides: dict[str, list[tuple[int, Trial]]] = {"A": [], "B": []}

        def take(
            letters: str,
            offset: int,
            sides: dict[str, list[tuple[int, Trial]]],
            start: int = start,
        ) -> None:
            for i, letter in enumerate(letters):
                run = runs[(start + offset + i) % len(runs)]
                label = len({r for r, _ in sides[letter]})
                f = factor if letter == "B" else 1.0
                sides[letter] += [(label, slowed(t, f)) for t in run]

        def verdict(sides: dict[str, list[tuple[int, Trial]]]) -> str:
            return rules.judge(
                {m: [t[m] for _, t in sides["A"]] for m in metrics},
                {m: [t[m] for _, t in sides["B"]] for m in metrics},
                specs,
                config,
                baseline_runs=[r for r, _ in sides["A"]],
                candidate_runs=[r for r, _ in sides["B"]],
            ).verdict

        take(first, 0, sides)
        result = verdict(sides)
        runs_used = len(first)
        if result == rules.INCONCLUSIVE and more:
            take(more, len(first), sides)
            result = verdict(sides)
            runs_used += len(more)
        counts[result] += 1
        used += runs_used
    total = len(runs)
    return {
        "fail_pct": 100 * counts[rules.FAIL] / total,
        "inconclusive_pct": 100 * counts[rules.INCONCLUSIVE] / total,
        "blocked_pct": 100 * (counts[rules.FAIL] + counts[rules.INCONCLUSIVE]) / total,
        "runs": used / total,
    }


def slowed(trial: Trial, factor: float) -> Trial:
    """The same trial on a server ``factor`` times as fast (factor < 1: slower)."""
    return {k: v * factor if k == "output_tokens_per_s" else v / factor for k, v in trial.items()}


def judge(
    base: list[Trial],
    cand: list[Trial],
    limit: float,
    aside: float,
    runs: tuple[list[int], list[int]] | None = None,
) -> str:
    """The gate's verdict; ``runs``: the measurement run of each trial of each side."""
    metrics = [m for m in ("output_tokens_per_s", "ttft_ms", "tpot_ms") if m in base[0]]
    specs = rules.make_specs(metrics, max_regression_pct=limit)
    base_runs, cand_runs = runs or (None, None)
    return rules.judge(
        {m: [t[m] for t in base] for m in metrics},
        {m: [t[m] for t in cand] for m in metrics},
        specs,
        rules.GateConfig(set_aside_slowest=aside),
        baseline_runs=base_runs,
        candidate_runs=cand_runs,
    ).verdict


def replay(
    seq: list[Trial],
    n: int,
    extra: int,
    factor: float,
    limit: float,
    aside: float,
    aba: bool,
    comparisons: int,
    rng: random.Random,
) -> dict[str, float]:
    counts = {rules.PASS: 0, rules.FAIL: 0, rules.INCONCLUSIVE: 0}
    trials = 0
    size = len(seq)
    for _ in range(comparisons):
        start = rng.randrange(size)

        def window(offset: int, length: int, s: int = start) -> list[Trial]:
            return [seq[(s + offset + i) % size] for i in range(length)]

        base = window(0, n)
        cand = [slowed(t, factor) for t in window(n, n)]
        runs = ([0] * n, [0] * n)
        if aba:  # benchgate_interleave: the serving release again after the candidate
            base += window(2 * n, n)
            runs[0].extend([1] * n)
        verdict = judge(base, cand, limit, aside, runs)
        used = n
        if verdict == rules.INCONCLUSIVE and extra > 0:
            cand += [slowed(t, factor) for t in window((3 if aba else 2) * n, extra)]
            runs[1].extend([1] * extra)
            verdict = judge(base, cand, limit, aside, runs)
            used += extra
        counts[verdict] += 1
        trials += used
    total = comparisons
    return {
        "pass_pct": 100 * counts[rules.PASS] / total,
        "fail_pct": 100 * counts[rules.FAIL] / total,
        "inconclusive_pct": 100 * counts[rules.INCONCLUSIVE] / total,
        "blocked_pct": 100 * (counts[rules.FAIL] + counts[rules.INCONCLUSIVE]) / total,
        "candidate_trials": trials / total,
    }


def parse_schedule(text: str) -> tuple[int, int, float, bool]:
    """``N+E[/share][:aba]``: N trials per side, E more candidate trials, the share of
    each side's slowest trials set aside, A-B-A (the baseline measured again after)."""
    text, _, mode = text.partition(":")
    head, _, aside = text.partition("/")
    n, _, extra = head.partition("+")
    return int(n), int(extra or 0), float(aside or 0), mode == "aba"


def rejudge(
    path: Path, labels: list[str], schedules: list[tuple[int, int, float, bool]], limit: float
) -> None:
    """Each real run of a ledger judged again, as the playbook would, with each set-aside share.

    A real run is a baseline and the candidate measurements after it (the first
    look, then the extra trials while INCONCLUSIVE); ``labels`` (e.g. the
    ``mode`` of each line of gate_real_runs.py's ``--json``) name them in order.
    """
    groups: list[dict[str, list[Trial]]] = []
    for phase, trials in ledger_runs(path):
        if phase == "baseline":
            groups.append({"baseline": trials})
        elif groups and phase in ("candidate", "candidate-more"):
            groups[-1][phase] = trials
    print("| real runs | set aside | PASS | FAIL | INCONCLUSIVE |")
    print("|---|---|---|---|---|")
    for label in sorted(set(labels)):
        chosen = [g for g, lab in zip(groups, labels, strict=False) if lab == label]
        for aside in sorted({sch[2] for sch in schedules}):
            counts = {rules.PASS: 0, rules.FAIL: 0, rules.INCONCLUSIVE: 0}
            for g in chosen:
                if "candidate" not in g:
                    continue
                verdict = judge(g["baseline"], g["candidate"], limit, aside)
                more = g.get("candidate-more")
                if verdict == rules.INCONCLUSIVE and more:
                    runs = ([0] * len(g["baseline"]), [0] * len(g["candidate"]) + [1] * len(more))
                    verdict = judge(g["baseline"], g["candidate"] + more, limit, aside, runs)
                counts[verdict] += 1
            print(
                f"| {label} ({len(chosen)}) | {aside:.0%} | {counts[rules.PASS]} | "
                f"{counts[rules.FAIL]} | {counts[rules.INCONCLUSIVE]} |"
            )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("records", nargs="*", type=Path)
    ap.add_argument("--setup", action="append", default=[], help="noise_floor placement")
    ap.add_argument("--schedule", action="append", default=[], help="N+E[/share] (default 16+16)")
    ap.add_argument("--limit", type=float, default=5.0)
    ap.add_argument("--regression", type=float, default=15.0)
    ap.add_argument("--comparisons", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rejudge",
        type=Path,
        help="a ledger of real runs: judge each again with every schedule's set-aside share",
    )
    ap.add_argument(
        "--labels", type=Path, help="with --rejudge: gate_real_runs.py --json, naming each run"
    )
    ap.add_argument(
        "--design",
        action="append",
        default=[],
        help="replay runs, not trials: e.g. AB+B, ABA+B (see above)",
    )
    ap.add_argument("--trials", type=int, default=16, help="with --design: trials per run")
    ap.add_argument(
        "--run-spread",
        action="append",
        type=float,
        default=[],
        help="with --design: the gate's run_spread_pct (repeatable; default 0)",
    )
    args = ap.parse_args(argv)

    if args.design:
        runs = load_runs(args.records, args.trials)
        slow = 1 - args.regression / 100
        print(f"{len(runs)} runs of {args.trials} trials, limit {args.limit:g}%")
        print(
            "| design | run spread | decidable limit | A/A blocked (FAIL, INCONCL.) "
            f"| {args.regression:g}% slower detected | runs (A/A) |"
        )
        print("|---|---|---|---|---|---|")
        for design in args.design:
            first = design.partition("+")[0]
            k = (first.count("A"), first.count("B"))
            for spread in args.run_spread or [0.0]:
                aa = replay_design(runs, design, 1.0, args.limit, spread)
                reg = replay_design(runs, design, slow, args.limit, spread)
                print(
                    f"| {design} | {spread:g}% | {ranks.decidable_limit_pct(spread, k):.1f}% "
                    f"| **{aa['blocked_pct']:.1f}%** ({aa['fail_pct']:.1f}%, "
                    f"{aa['inconclusive_pct']:.1f}%) | **{reg['blocked_pct']:.1f}%** "
                    f"| {aa['runs']:.2f} |"
                )
        return 0

    setups = args.setup or ["result"]
    schedules = [parse_schedule(text) for text in args.schedule or ["16+16"]]
    if args.rejudge:
        labels = [json.loads(line)["mode"] for line in args.labels.read_text().splitlines()]
        rejudge(args.rejudge, labels, schedules, args.limit)
        return 0
    print(
        "| records | trials in order | schedule | A/A blocked (FAIL, INCONCL.) "
        f"| {args.regression:g}% slower detected | cand. trials (A/A) |"
    )
    print("|---|---|---|---|---|---|")
    for setup in setups:
        seq = load(args.records, setup)
        if len(seq) < 8:
            raise SystemExit(f"{setup}: only {len(seq)} trials recorded")
        for n, extra, aside, aba in schedules:
            slow = 1 - args.regression / 100
            aa = replay(
                seq,
                n,
                extra,
                1.0,
                args.limit,
                aside,
                aba,
                args.comparisons,
                random.Random(args.seed),
            )
            reg = replay(
                seq,
                n,
                extra,
                slow,
                args.limit,
                aside,
                aba,
                args.comparisons,
                random.Random(args.seed),
            )
            label = f"{n}+{n}, +{extra} cand."
            label += f", slowest {aside:.0%} set aside" if aside else ""
            label += ", A-B-A" if aba else ""
            print(
                f"| {setup} | {len(seq)} | {label} | **{aa['blocked_pct']:.1f}%** "
                f"({aa['fail_pct']:.1f}%, {aa['inconclusive_pct']:.1f}%) | "
                f"**{reg['blocked_pct']:.1f}%** | {aa['candidate_trials']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
