#!/usr/bin/env python3
"""Here: a spread.py run as the product's speculative A/B, round by round (issue 36).

    python lab/gpu/ab_rounds.py SPREAD_DIR [--json PATH] [--rounds N]

SPREAD_DIR is spread.py's folder (sNN-<name>/bench-<load>.json) or
spread_summary.py's (results/sNN-<name>-<load>.json). Round r is the r-th
start of each server (spread.py --batches 48,49,50,48,49,50 --loads
sc1,sc2,sc64: two rounds). Each load is a one-stage result named as the
product names stages: sc1 -> single, sc64 -> busy (the staged workload's,
workloads/demo-staged.yml), sc2 -> ab.THRESHOLD_STAGE.

Each round is judged as benchgate_speculative_ab judges a first start: off
and the static arm at single and busy, off's threshold merged into off's
result (its extra_results), the composed arm at all three; ab.choose_any and
ab.render_staged_table. Across rounds: do they choose the same arm, and does
round 1's speculative winner hold when the later rounds are its later server
starts (ab.confirm_across_starts; off and the winner at single and busy, as
speculative_starts.yml measures them)? Last, per server and load: each
round's median tok/s and its ratio to round 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment as ex  # noqa: E402

from benchgate import ab, confounds, stages  # noqa: E402
from benchgate.samples import samples_from_result  # noqa: E402

# ac64: c64 with 5 trials (workloads/ab-c64.yml); sc64's 3 trials bound nothing at 0.025
STAGE_OF = {"sc1": "single", "sc64": "busy", "ac64": "busy", "sc2": ab.THRESHOLD_STAGE}
WORKLOAD = ["sc1", "sc64"]  # the staged workload's loads (busy: ac64 where measured)
RAW_DIR = re.compile(r"s(\d+)-(.+)")
COMPACT = re.compile(r"s(\d+)-(.+)-([as]c\d+)\.json")
COMPACT_START = re.compile(r"s(\d+)-(.+)\.start\.json")

Starts = dict[str, list[tuple[int, dict[str, Any]]]]  # server -> [(n, {load: result})]


def read_starts(folder: Path) -> Starts:
    """Every start in the folder, per server in start order, with its results by load."""
    found: dict[tuple[int, str], dict[str, Any]] = {}
    configs: dict[tuple[int, str], dict[str, Any]] = {}
    for base in (folder, folder / "results"):
        for p in sorted(base.iterdir()) if base.is_dir() else []:
            if p.is_dir() and (m := RAW_DIR.fullmatch(p.name)):
                loads = found.setdefault((int(m[1]), m[2]), {})
                for load in STAGE_OF:
                    if (p / f"bench-{load}.json").exists():
                        loads[load] = json.loads((p / f"bench-{load}.json").read_text())
                if (p / "start.json").exists():
                    configs[(int(m[1]), m[2])] = server_config(p / "start.json", p)
            elif (m := COMPACT.fullmatch(p.name)) and m[3] in STAGE_OF:
                found.setdefault((int(m[1]), m[2]), {})[m[3]] = json.loads(p.read_text())
            elif m := COMPACT_START.fullmatch(p.name):
                found.setdefault((int(m[1]), m[2]), {})
                configs[(int(m[1]), m[2])] = server_config(p, None)
    out: Starts = {}
    for (n, name), loads in sorted(found.items()):
        if config := configs.get((n, name)):
            loads = {load: {**r, "server_config": config} for load, r in loads.items()}
        out.setdefault(name, []).append((n, loads))
    return out


def server_config(start_json: Path, raw_dir: Path | None) -> dict[str, Any]:
    """The start's configuration as the product's results carry it (server_config):
    the server's argv from start.json and what vLLM said about itself at start-up,
    read by benchgate.confounds from the server's log (raw_dir) or taken from the
    compact start.json (spread_summary.py put it there). No environment was set."""
    rec = json.loads(start_json.read_text())
    engine = rec.get("engine")
    log = raw_dir / "server.log.gz" if raw_dir else None
    if log is not None and log.exists():
        with gzip.open(log, "rt", errors="replace") as f:
            engine = confounds.engine_facts(f.read())
    return {"argv": rec.get("argv") or [], "env": {}, "engine": engine}


def as_stage(result: dict[str, Any], stage: str) -> dict[str, Any]:
    """A single-load result as a one-stage staged result (what a staged bench writes)."""
    params = {k: v for k, v in result["workload"]["params"].items() if k != "description"}
    return {
        **result,
        "trials": [{**t, "stage": stage} for t in result["trials"]],
        "stages": [{"name": stage, "params": params, "summary": result["summary"]}],
    }


def staged(loads: dict[str, Any], wanted: tuple[str, ...]) -> dict[str, Any] | None:
    parts = [as_stage(loads[load], STAGE_OF[load]) for load in wanted if load in loads]
    return stages.merge_staged(parts) if parts else None


class Round:
    """One round's results per arm, as the module gets them for a first start."""

    def __init__(self, r: int, arms: list[ab.Arm], server: dict[str, str], starts: Starts):
        self.r, self.arms, self.server = r, arms, server
        self.starts: dict[str, int] = {}
        self.loads: dict[str, dict[str, Any]] = {}
        self.missing: list[str] = []
        self.errors: dict[str, str] = {}
        for arm in arms:
            name = server[arm.name]
            mine = starts.get(name, [])
            if len(mine) < r:
                self.missing.append(f"{name}: no start {r}")
                self.errors[arm.name] = f"{name} has no start {r} in this folder"
                continue
            n, loads = mine[r - 1]
            self.starts[arm.name], self.loads[arm.name] = n, loads
            needs = self.wanted(arm.name)
            self.missing += [
                f"{name} s{n:02d}: no {load} result" for load in needs if load not in loads
            ]
            if not loads:
                self.errors[arm.name] = f"start s{n:02d} of {name} measured nothing"

    def wanted(self, arm: str, threshold: bool = True) -> tuple[str, ...]:
        """The workload's loads, and the threshold for off and a composed arm."""
        composed = ab.composed_from(self.arms) if threshold else {}
        return tuple(WORKLOAD) + (("sc2",) if composed and arm in (ab.OFF, *composed) else ())

    def results(self, threshold: bool = True) -> dict[str, dict[str, Any] | None]:
        """Per arm its staged result (off's threshold merged in, as extra_results is)."""
        return {
            arm.name: staged(self.loads.get(arm.name, {}), self.wanted(arm.name, threshold))
            for arm in self.arms
        }

    def choose(self, rule: str) -> ab.Choice | ab.StagedChoice:
        return ab.choose_any(self.arms, self.results(), self.errors, rule=rule)

    def first_look(self, rule: str) -> list[ab.LoadSchedule]:
        """What the module's first look (off and the static arms) would compose."""
        plain = [a for a in self.arms if ab.SCHEDULE_KEY not in a.config]
        results = self.results(threshold=False)
        first = ab.choose_any(
            plain, {a.name: results[a.name] for a in plain}, self.errors, rule=rule
        )
        return ab.drafting_by_load(first) if isinstance(first, ab.StagedChoice) else []


def table(choice: ab.Choice | ab.StagedChoice) -> str:
    if isinstance(choice, ab.StagedChoice):
        return ab.render_staged_table(choice)
    return ab.render_table(choice)


def median_tok_s(result: dict[str, Any] | None) -> float | None:
    values = samples_from_result(result, "output_tokens_per_s") if result else []
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="spread.py's or spread_summary.py's folder")
    p.add_argument("--json", type=Path, help="write the summary here")
    p.add_argument("--rounds", type=int, help="judge at most this many rounds")
    p.add_argument("--off", default="v26-off", help="the plain server")
    p.add_argument("--arm", default="v26-d4b-k3", help="the static speculative server")
    p.add_argument("--composed", default="v26-d4b-k3-upto1", help="its batch-size schedule")
    p.add_argument("--rule", default=ab.DEFAULT_RULE, help="the A/B rule (ab.RULES)")
    a = p.parse_args(argv)
    starts = read_starts(a.folder)
    if any("ac64" in loads for runs in starts.values() for _, loads in runs):
        WORKLOAD[1] = "ac64"
    server = {ab.OFF: a.off}
    arms = [ab.Arm(ab.OFF, {})]
    for name in (a.arm, a.composed):
        if name not in ex.SERVERS:
            p.error(f"{name} is no server of lab/gpu/experiment.py")
        if name not in starts:
            print(f"{name}: no start in {a.folder}: judged without it")
            continue
        server[name] = name
        arms.append(ab.Arm(name, dict(ex.SERVERS[name]["speculative"] or {})))
    composed = ab.composed_from(arms)
    if len(arms) == 3 and not composed:
        print(
            f"note: {a.composed} is not {a.arm} with {ab.SCHEDULE_KEY}: judged as an arm of its own"
        )
    n_rounds = max(len(starts.get(s, [])) for s in server.values())
    n_rounds = min(n_rounds, a.rounds) if a.rounds else n_rounds
    rounds = [Round(r, arms, server, starts) for r in range(1, n_rounds + 1)]
    report: dict[str, Any] = {
        "folder": str(a.folder),
        "rule": a.rule,
        "arms": [{"name": x.name, "server": server[x.name], "config": x.config} for x in arms],
        "rounds": [],
    }

    choices = []
    for rnd in rounds:
        took = ", ".join(f"{server[k]} s{n:02d}" for k, n in rnd.starts.items())
        print(f"\n=== round {rnd.r} ({took})")
        for line in rnd.missing:
            print(f"missing: {line}")
        hints = rnd.first_look(a.rule)
        for hint in hints:
            here = [x.name for x in arms if x.config == hint.config] or ["not measured here"]
            at = f"concurrency {hint.threshold['concurrency']}" if hint.threshold else "measured"
            print(
                f"first look (off, static arms): would compose {hint.name} "
                f"({hint.arm} drafting up to {hint.up_to}, threshold {at}): {here[0]}"
            )
        if not hints:
            print("first look (off, static arms): no arm to draft by load, nothing to compose")
        choice = rnd.choose(a.rule)
        choices.append(choice)
        print(table(choice))
        report["rounds"].append(
            {
                "round": rnd.r,
                "starts": {server[k]: n for k, n in rnd.starts.items()},
                "missing": rnd.missing,
                "first_look_by_load": [h.to_dict() for h in hints],
                "choice": choice.to_dict(),
                "table": table(choice),
            }
        )

    print("\n=== across rounds")
    winners = [c.winner for c in choices]
    same = len(set(winners)) == 1
    print(f"winners by round: {', '.join(map(str, winners))}: {'same' if same else 'NOT same'}")
    across: dict[str, Any] = {"winners": winners, "same": same, "confirmed": None}
    if len(rounds) < 2:
        print("one round: no later start to confirm with")
    elif choices[0].winner in (None, ab.OFF):
        print(f"round 1 chose {choices[0].winner}: no speculative winner to confirm")
    else:
        first = rounds[0].choose(a.rule)  # confirm_across_starts changes it in place
        later = [rnd.results(threshold=False) for rnd in rounds[1:]]
        later = [{k: r[k] for k in (ab.OFF, first.winner)} for r in later]
        ab.confirm_across_starts(first, arms, later, rule=a.rule)
        for check in first.starts:
            print(check.line())
        print(f"after the later starts: chosen: {first.winner}: {first.reason}")
        across["confirmed"] = {
            "winner": first.winner,
            "reason": first.reason,
            "starts": [c.to_dict() for c in first.starts],
        }
    report["across"] = across

    print("\n=== start-to-start spread: median tok/s per round (ratio to round 1)")
    spread: dict[str, dict[str, Any]] = {}
    for name in server.values():
        for load in STAGE_OF:
            meds = [median_tok_s(loads.get(load)) for _, loads in starts.get(name, [])[:n_rounds]]
            if not any(m is not None for m in meds):
                continue
            ratios = [m / meds[0] if m and meds[0] else None for m in meds[1:]]
            spread.setdefault(name, {})[load] = {"medians": meds, "ratios_to_round1": ratios}
            cells = "  ".join(f"{m:9.1f}" if m else "        -" for m in meds)
            rat = "  ".join(f"x{q:.3f}" if q else "-" for q in ratios)
            print(f"{name:20} {load:5} {cells}  {rat}")
    report["spread"] = spread
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
