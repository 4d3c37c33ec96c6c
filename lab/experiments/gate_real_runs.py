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
* ``--mode hog``: A/A, but whenever the candidate serves, a second process on
  the server's CPU (``--hog-cpu``) burns ``--hog-duty`` of that CPU's time
  (it counts its own CPU time, so it takes that share however busy the server
  is): a regression of about that size that needs no cgroup. The script
  follows the server's process (the demo container's processes are visible in
  this machine's /proc, and its CPUs are this machine's): the first start in
  a run is the candidate, A-B-A's second start the serving release, the third
  the candidate again, a fourth (the rollback) the serving release. Every
  PASS is a miss. Without speculative arms (pass
  ``-e '{"benchgate_speculative_candidates": []}'``): each arm is a start too.
* ``--mode slowstep``: A/A, but the candidate's unit runs vLLM with the plugin
  of ``lab/experiments/inject/`` (copied to the host's ``--inject-dir`` first):
  every engine step sleeps ``--slow-step`` times its own duration, so a
  server kept busy serves ``1 / (1 + f)`` of its throughput (0.1765: 15%
  slower). It scales vLLM's own work, not the CPU it gets, so its size does
  not hang on how busy the server is (``--mode hog`` did: 15% of the CPU cost
  0-11% of throughput). A-B-A's second baseline run and a rollback use the
  serving unit, without it. Every PASS is a miss; after one, ``deploy.yml``
  puts the plain unit back.

* ``--mode demo`` / ``--mode demo-slow``: the quick start's first command as
  a newcomer runs it, again and again: the demo host removed, then
  ``scripts/demo.sh`` (``--slow-candidate`` for ``demo-slow``): a new demo
  host, 0.31.0 deployed, ``upgrade.yml`` to 0.32.0 with the demo's settings
  (the speculative A/B, A-B-A). ``--ledger`` must be the demo's own
  (``artifacts/ledger.sqlite``). ``demo``: every verdict other than PASS or
  FAIL is undecided; ``demo-slow``: every PASS is a miss. Set
  ``BENCHGATE_IMAGE=localhost/benchgate-releases:bookworm`` to start the host
  with both releases installed (the measurement is the same; the installs
  are skipped).

Each run's verdict and estimate come from the ledger (its own file,
``--ledger``); the baseline and candidate trials stay there in the order they
ran, so ``lab/experiments/gate_replay.py`` can replay them. Prints one line per run
and, at the end, the rates with exact (Clopper-Pearson) 95% intervals.

    .venv/bin/python lab/experiments/gate_real_runs.py --mode aa --runs 10 \
        --ledger lab/data/real-runs.sqlite
    .venv/bin/python lab/experiments/gate_real_runs.py --mode hog --hog-duty 0.15 --runs 5 \
        --ledger lab/data/real-runs.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scipy.stats import beta

ROOT = Path(__file__).resolve().parents[2]

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


# Pinned to the server's CPU: every period, burn DUTY of it in this process's
# own CPU time, then sleep to the period's end.
HOG = """
import sys, time
duty, period = float(sys.argv[1]), 0.01
while True:
    start, cpu = time.monotonic(), time.thread_time()
    while time.thread_time() - cpu < duty * period:
        pass
    time.sleep(max(0.0, period - (time.monotonic() - start)))
"""


def server_pid(match: str) -> int | None:
    """The oldest process whose command line holds ``match`` (the API server: the
    demo container's processes are this machine's, in its own /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if match in cmdline:
            pids.append(int(entry.name))
    return min(pids) if pids else None


class CandidateHog:
    """Burns ``duty`` of ``cpu`` whenever the candidate serves (see ``--mode hog``)."""

    def __init__(self, match: str, cpu: str, duty: float) -> None:
        self.match, self.cpu, self.duty = match, cpu, duty
        self.stop = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.starts = 0

    def _set(self, on: bool) -> None:
        if on and self.proc is None:
            self.proc = subprocess.Popen(
                ["taskset", "-c", self.cpu, sys.executable, "-c", HOG, str(self.duty)]
            )
        elif not on and self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _follow(self) -> None:
        last = server_pid(self.match)
        while not self.stop.wait(1.0):
            pid = server_pid(self.match)
            if pid is not None and pid != last:
                self.starts += 1
                self._set(self.starts % 2 == 1)  # odd starts: the candidate
            if pid is not None:
                last = pid

    def __enter__(self) -> CandidateHog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._set(False)


def slow_step_environment(args: argparse.Namespace) -> dict[str, str]:
    """Copies the plugin to the host; the candidate's environment: the
    inventory's own ``vllm_service_environment`` plus the plugin's two."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    hosts: dict[str, dict[str, Any]] = json.loads(
        subprocess.run(
            ["ansible-inventory", "--list"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )["_meta"]["hostvars"]
    first: dict[str, Any] = next(iter(hosts.values()), {})
    base = first.get("vllm_service_environment") or {}
    subprocess.run(
        [
            "ansible",
            "all",
            "-b",
            "-m",
            "ansible.builtin.copy",
            "-a",
            f"src={ROOT / 'lab/experiments/inject'}/ dest={args.inject_dir}/ mode=u=rwX,go=rX",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return {**base, "PYTHONPATH": args.inject_dir, "BENCHGATE_SLOW_STEP": str(args.slow_step)}


def demo(slow: bool, log: Path) -> int:
    """The quick start's first command on a new demo host (see ``--mode demo``)."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    with log.open("ab") as out:
        subprocess.run(
            ["scripts/demo-host.sh", "--rm"], cwd=ROOT, env=env, stdout=out, stderr=out, check=True
        )
        cmd = ["scripts/demo.sh", *(["--slow-candidate"] if slow else [])]
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        return done.returncode


def throughputs(details: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict's output tok/s comparison: one, or one per stage (each has "stage")."""
    return [dict(m) for m in details.get("metrics", []) if m.get("metric") == "output_tokens_per_s"]


def describe(tok: dict[str, Any]) -> str:
    nan = float("nan")
    stage = f"{tok['stage']}: " if tok.get("stage") else ""
    return (
        f"{stage}tok/s {tok.get('baseline_median', nan):.1f} -> "
        f"{tok.get('candidate_median', nan):.1f}  change {tok.get('change_pct', nan):+.1f}% "
        f"[{tok.get('change_lo_pct', nan):+.1f}%, {tok.get('change_hi_pct', nan):+.1f}%]  "
        f"trials {tok.get('n_baseline')}+{tok.get('n_candidate')}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--mode", choices=("aa", "quota", "hog", "slowstep", "demo", "demo-slow"), required=True
    )
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--version", default="0.32.0", help="the release that serves on the host")
    ap.add_argument("--quota", default="85%", help="--mode quota: the candidate's CPUQuota=")
    ap.add_argument("--hog-duty", type=float, default=0.15, help="--mode hog: CPU share taken")
    ap.add_argument("--hog-cpu", default="1", help="--mode hog: the server's CPU")
    ap.add_argument(
        "--server-match",
        default="bin/vllm serve",
        help="--mode hog: a string of the server's command line",
    )
    ap.add_argument(
        "--slow-step", type=float, default=0.1765, help="--mode slowstep: the sleep per step"
    )
    ap.add_argument(
        "--inject-dir", default="/opt/benchgate-inject", help="--mode slowstep: on the host"
    )
    ap.add_argument("--ledger", type=Path, default=ROOT / "lab/data/real-runs.sqlite")
    ap.add_argument("--log", type=Path, default=Path("/tmp/gate_real_runs.log"))
    ap.add_argument("--json", type=Path, help="append one JSON line per run here")
    ap.add_argument("ansible_args", nargs="*", help="more ansible-playbook arguments, after --")
    args = ap.parse_args(argv)

    extra = ["-e", f"vllm_service_cpu_quota={args.quota}"] if args.mode == "quota" else []
    if args.mode == "slowstep":
        extra = ["-e", json.dumps({"vllm_service_environment": slow_step_environment(args)})]
    verdicts: Counter[str] = Counter()
    minutes: list[float] = []
    for i in range(1, args.runs + 1):
        started = time.monotonic()
        latest = ledger.latest_verdicts(args.ledger) if args.ledger.exists() else {}
        before = max((v.id for v in latest.values()), default=0)
        if args.mode in ("demo", "demo-slow"):
            rc = demo(args.mode == "demo-slow", args.log)
        elif args.mode == "hog":
            with CandidateHog(args.server_match, args.hog_cpu, args.hog_duty):
                rc = playbook(args, "upgrade.yml", extra, args.log)
        else:
            rc = playbook(args, "upgrade.yml", extra, args.log)
        took = (time.monotonic() - started) / 60
        minutes.append(took)
        latest = ledger.latest_verdicts(args.ledger) if args.ledger.exists() else {}
        record = max(latest.values(), key=lambda v: v.id) if latest else None
        if record is not None and record.id <= before:
            record = None  # this run recorded no verdict
        verdict = record.verdict if record else "ERROR"
        verdicts[verdict] += 1
        toks = throughputs(record.details if record else {})
        figures = "; ".join(describe(tok) for tok in toks) or describe({})
        print(f"run {i:2d}: {verdict:12s} rc={rc} {took:4.1f} min  {figures}", flush=True)
        if args.json:
            with args.json.open("a") as out:
                row = {"mode": args.mode, "run": i, "rc": rc, "minutes": took, "verdict": verdict}
                # Staged verdicts: "throughput" is the first stage's, "stages" has each.
                first = toks[0] if toks else {}
                staged = {"stages": toks} if any(t.get("stage") for t in toks) else {}
                out.write(json.dumps({**row, "throughput": first, **staged}) + "\n")
        if args.mode in ("quota", "slowstep") and verdict == "PASS":
            # A missed regression stays on the host: put the uncapped unit back.
            playbook(args, "deploy.yml", [], args.log)

    n = sum(verdicts.values())
    blocked = n - verdicts["PASS"]
    what = "false blocks" if args.mode == "aa" else "detected"
    if args.mode == "demo":
        blocked = n - verdicts["PASS"] - verdicts["FAIL"]
        what = "undecided"
    if args.mode == "slowstep":
        print(f"(each engine step of the candidate slept {args.slow_step} of its duration)")
    if args.mode == "hog":
        print(
            f"(the hog took {args.hog_duty:.0%} of CPU {args.hog_cpu} while the candidate served)"
        )
    lo, hi = interval(blocked, n)
    print(
        f"\n{args.mode}: {n} runs, {dict(verdicts)}; {what} {blocked}/{n} = "
        f"{100 * blocked / n:.1f}% (95% interval {100 * lo:.1f}-{100 * hi:.1f}%); "
        f"median {sorted(minutes)[len(minutes) // 2]:.1f} min per run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
