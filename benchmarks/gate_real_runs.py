"""The gate's false-block and detection rates on real runs in sequence.

Runs ``playbooks/upgrade.yml`` again and again on a real host (by default the
demo host of ``scripts/demo-host.sh``), the whole playbook path each time:
baseline, candidate, restart, gate, keep or roll back. Two modes:

* ``--mode aa``: the serving release upgraded to itself (A/A: the playbook
  restarts it and measures it as its own candidate). Every block is a false
  block.
* ``--mode quota``: the same, with the candidate's unit capped at
  ``--quota`` of one CPU (``vllm_service_cpu_quota``): a real regression of
  known size on a server pinned to one CPU (85% = 15% less CPU time). Every
  PASS is a miss; after one, ``deploy.yml`` puts the unit without the cap back.
  Needs a host whose systemd can enforce ``CPUQuota=`` (cgroup v2, or the cpu
  controller delegated): the podman demo host on a cgroup v1 machine cannot,
  and ``vllm_service`` then fails its verify step (so each run is a rollback,
  not a measurement of the cap).

Each run's verdict and estimate come from the ledger (its own file,
``--ledger``); the baseline and candidate trials stay there in the order they
ran, so ``benchmarks/gate_replay.py`` can replay them. Prints one line per run
and, at the end, the rates with exact (Clopper-Pearson) 95% intervals.

    .venv/bin/python benchmarks/gate_real_runs.py --mode aa --runs 10 \
        --ledger benchmarks/data/real-runs.sqlite
    .venv/bin/python benchmarks/gate_real_runs.py --mode quota --runs 5 \
        --ledger benchmarks/data/real-runs.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scipy.stats import beta

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchgate import ledger  # noqa: E402


def interval(k: int, n: int) -> tuple[float, float]:
    """Exact two-sided 95% interval of a rate k/n (Clopper-Pearson)."""
    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def playbook(args: argparse.Namespace, name: str, extra: Sequence[str], log: Path) -> int:
    cmd = [
        str(ROOT / ".venv/bin/ansible-playbook"),
        f"playbooks/{name}",
        "-e",
        f"vllm_version={args.version}",
        "-e",
        f"benchgate_ledger={args.ledger.resolve()}",
        *extra,
        *args.ansible_args,
    ]
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    with log.open("ab") as out:
        return subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode


def throughput(details: dict[str, Any]) -> dict[str, Any]:
    for metric in details.get("metrics", []):
        if metric.get("metric") == "output_tokens_per_s":
            return dict(metric)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mode", choices=("aa", "quota"), required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--version", default="0.32.0", help="the release that serves on the host")
    ap.add_argument("--quota", default="85%", help="--mode quota: the candidate's CPUQuota=")
    ap.add_argument("--ledger", type=Path, default=ROOT / "benchmarks/data/real-runs.sqlite")
    ap.add_argument("--log", type=Path, default=Path("/tmp/gate_real_runs.log"))
    ap.add_argument("--json", type=Path, help="append one JSON line per run here")
    ap.add_argument("ansible_args", nargs="*", help="more ansible-playbook arguments, after --")
    args = ap.parse_args(argv)

    extra = ["-e", f"vllm_service_cpu_quota={args.quota}"] if args.mode == "quota" else []
    verdicts: Counter[str] = Counter()
    minutes: list[float] = []
    for i in range(1, args.runs + 1):
        started = time.monotonic()
        rc = playbook(args, "upgrade.yml", extra, args.log)
        took = (time.monotonic() - started) / 60
        minutes.append(took)
        latest = ledger.latest_verdicts(args.ledger)
        record = max(latest.values(), key=lambda v: v.id) if latest else None
        verdict = record.verdict if record else "ERROR"
        verdicts[verdict] += 1
        tok = throughput(record.details if record else {})
        print(
            f"run {i:2d}: {verdict:12s} rc={rc} {took:4.1f} min  "
            f"tok/s {tok.get('baseline_median', float('nan')):.1f} -> "
            f"{tok.get('candidate_median', float('nan')):.1f}  change "
            f"{tok.get('change_pct', float('nan')):+.1f}% "
            f"[{tok.get('change_lo_pct', float('nan')):+.1f}%, "
            f"{tok.get('change_hi_pct', float('nan')):+.1f}%]  "
            f"trials {tok.get('n_baseline')}+{tok.get('n_candidate')}",
            flush=True,
        )
        if args.json:
            with args.json.open("a") as out:
                row = {"mode": args.mode, "run": i, "rc": rc, "minutes": took, "verdict": verdict}
                out.write(json.dumps({**row, "throughput": tok}) + "\n")
        if args.mode == "quota" and verdict == "PASS":
            # A missed regression stays on the host: put the uncapped unit back.
            playbook(args, "deploy.yml", [], args.log)

    n = sum(verdicts.values())
    blocked = n - verdicts["PASS"]
    what = "false blocks" if args.mode == "aa" else "detected"
    lo, hi = interval(blocked, n)
    print(
        f"\n{args.mode}: {n} runs, {dict(verdicts)}; {what} {blocked}/{n} = "
        f"{100 * blocked / n:.1f}% (95% interval {100 * lo:.1f}-{100 * hi:.1f}%); "
        f"median {sorted(minutes)[len(minutes) // 2]:.1f} min per run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
