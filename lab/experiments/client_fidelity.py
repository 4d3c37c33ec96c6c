"""Client fidelity: benchgate vs `vllm bench serve` against the same real vLLM server.

Runs the two clients in pairs, alternating which goes first (same shape:
fixed input/output lengths, benchgate's synthetic prompts fitted to the same
token count by the server's tokenizer, ignore_eos, closed loop at a fixed
concurrency), takes the median of each
figure per client, and reports how far apart they are.  Also reports
benchgate's agreement with the server's own ``vllm:generation_tokens_total``
counter.  Prints figures; it is not a test.

Needs a running server, e.g.::

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 /var/tmp/vllm-0.32.0/bin/vllm serve \\
        .cache/models/tiny-llama --served-model-name tiny --host 127.0.0.1 --port 8101 \\
        --max-model-len 512 --dtype float32 --enforce-eager

    .venv/bin/python lab/experiments/client_fidelity.py --vllm /var/tmp/vllm-0.32.0/bin/vllm \\
        --tokenizer .cache/models/tiny-llama --base-url http://127.0.0.1:8101 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchgate.bench import run_benchmark
from benchgate.metrics import Snapshot, diff, parse_metrics_text
from benchgate.workload import parse_workload

FIGURES = (
    ("output tok/s", "output_tokens_per_s", "output_throughput"),
    ("request/s", "request_throughput", "request_throughput"),
    ("TTFT mean ms", "ttft_ms.mean", "mean_ttft_ms"),
    ("TTFT median ms", "ttft_ms.median", "median_ttft_ms"),
    ("TTFT p99 ms", "ttft_ms.p99", "p99_ttft_ms"),
    ("TPOT median ms", "tpot_ms.median", "median_tpot_ms"),
    ("ITL median ms", "itl_ms.median", "median_itl_ms"),
    ("e2el median ms", "e2el_ms.median", "median_e2el_ms"),
)


def run_benchgate(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    wl = parse_workload(
        {
            "name": "fidelity",
            "version": 1,
            "input_len": args.benchgate_input_len or args.input_len,
            "output_len": args.output_len,
            "concurrency": args.concurrency,
            "num_requests": args.num_prompts,
            "trials": 1,
            "warmup": args.warmup,
            "prompts": {"source": "synthetic", "seed": int(time.time())},
        }
    )
    result = run_benchmark(args.base_url, wl, model=args.model)
    trial = result.trials[0]
    if not trial.valid:
        raise SystemExit(f"benchgate trial invalid: {trial.invalid_reason}")
    figures = {key: result.summary.metrics[key].median for _, key, _ in FIGURES}
    extra = {
        "prompt_tokens_mean": trial.prompt_tokens / trial.completed,
        "prompt_fit": (result.prompt_fit or {}).get("method"),
        "agreement_pct": trial.agreement.tokens_per_s_diff_pct,
        "tokens_diff_pct": trial.agreement.tokens_diff_pct,
        "server_tok_s": trial.server.get("generation_tokens_per_s"),
        "server_ttft_mean_ms": trial.server.get("ttft_mean_ms"),
    }
    return figures, extra


class Driver:
    """lab/experiments/vllm_bench_driver.py in the vLLM venv: `vllm bench serve` runs,
    one import."""

    def __init__(self, python: str) -> None:
        driver = Path(__file__).with_name("vllm_bench_driver.py")
        self.proc = subprocess.Popen(
            [python, str(driver)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )

    def run(self, argv: list[str]) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        tail: list[str] = []
        for line in self.proc.stdout:
            if line.startswith("driver: done"):
                return
            if line.startswith("driver: error"):
                raise SystemExit(f"vllm bench serve failed: {line.strip()}\n{''.join(tail)}")
            tail = (tail + [line])[-40:]
        raise SystemExit(f"the vllm bench driver exited\n{''.join(tail)}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def run_vllm_bench(
    args: argparse.Namespace, out_dir: Path, i: int, driver: Driver | None = None
) -> dict[str, float]:
    name = f"vllm-bench-{i}.json"
    cmd = [
        args.vllm, "bench", "serve", "--backend", "vllm", "--base-url", args.base_url,
        "--model", args.model, "--tokenizer", args.tokenizer, "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--num-warmups", str(args.warmup),
        "--temperature", "0", "--seed", str(i), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(out_dir), "--result-filename", name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    before = server_snapshot(args.base_url)
    if driver is not None:
        driver.run(cmd[3:])
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(
                f"vllm bench serve failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
    after = server_snapshot(args.base_url)
    data = json.loads((out_dir / name).read_text())
    # The server's own TTFT histogram over the run (warm-ups included).
    server = diff(before, after)
    return {key: float(data[vkey]) for _, key, vkey in FIGURES} | {
        "prompt_tokens_mean": data["total_input_tokens"] / data["completed"],
        "server_ttft_mean_ms": server.ttft_mean_ms or float("nan"),
    }


def print_shift(bg: list[float], vb: list[float]) -> None:
    """benchgate's output tok/s over vllm bench's, with 90% intervals.

    Unpaired: the Hodges-Lehmann shift and its bounds (the gate's estimator).
    Paired: run i of benchgate against run i of vllm bench (run back to back,
    so slow drift of the machine cancels), the median ratio with a bootstrap
    interval.
    """
    import math

    from scipy.stats import bootstrap

    from benchgate.ranks import hodges_lehmann

    hl = hodges_lehmann(vb, bg, alpha=0.05)
    print(f"output tok/s, benchgate vs vllm bench: Hodges-Lehmann shift {100 * hl.change:+.1f}% "
          f"(90% bounds {100 * hl.change_lo:+.1f}…{100 * hl.change_hi:+.1f}%)", end="")  # fmt: skip
    ratios = [math.log(a / b) for a, b in zip(bg, vb)]
    if len(ratios) >= 3:
        ci = bootstrap((ratios,), statistics.median, confidence_level=0.90, random_state=0)
        lo, hi = (100 * math.expm1(v) for v in ci.confidence_interval)
        mid = 100 * math.expm1(statistics.median(ratios))
        print(f"; paired median ratio {mid:+.1f}% (90% bootstrap {lo:+.1f}…{hi:+.1f}%)")
    else:
        print()


def server_snapshot(base_url: str) -> Snapshot:
    return parse_metrics_text(httpx.get(f"{base_url}/metrics", timeout=30).text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", required=True, help="the vllm executable of the server's venv")
    p.add_argument("--tokenizer", required=True, help="model directory (for vllm bench)")
    p.add_argument("--base-url", default="http://127.0.0.1:8101")
    p.add_argument("--model", default="tiny")
    p.add_argument("--runs", type=int, default=3, help="runs per client (alternating)")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--input-len", type=int, default=64, help="prompt tokens (vllm bench)")
    p.add_argument(
        "--benchgate-input-len",
        type=int,
        default=None,
        help="benchgate's input_len if not --input-len (its synthetic prompts are fitted to "
        "it by the server's tokenizer, BOS included, as vllm bench's random prompts)",
    )
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument(
        "--client-cpus",
        help="run both clients on these CPUs only (e.g. 1, with the server started under "
        "`taskset -c 0`): the clients then do not take CPU time from the server",
    )
    p.add_argument(
        "--vllm-python",
        help="the Python of the vLLM venv: run vllm bench serve in one process "
        "(lab/experiments/vllm_bench_driver.py) instead of starting it for every run",
    )
    args = p.parse_args()
    if args.client_cpus:
        # vllm bench serve, a subprocess, inherits the affinity.
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})

    bg: list[dict[str, float]] = []
    bg_extra: list[dict[str, float]] = []
    vb: list[dict[str, float]] = []
    driver = Driver(args.vllm_python) if args.vllm_python else None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            # Pair i: benchgate first on even i, vllm bench first on odd i, so
            # neither client always runs on a server the other has just warmed.
            for client in (
                ("benchgate", "vllm bench") if i % 2 == 0 else ("vllm bench", "benchgate")
            ):
                t = time.monotonic()
                if client == "benchgate":
                    figures, extra = run_benchgate(args)
                    bg.append(figures)
                    bg_extra.append(extra)
                    tok_s = figures["output_tokens_per_s"]
                    note = f", prompts {extra['prompt_fit']}"
                else:
                    vb.append(run_vllm_bench(args, Path(tmp), i, driver))
                    tok_s = vb[-1]["output_tokens_per_s"]
                    note = ""
                print(f"pair {i + 1} {client:<10} {tok_s:7.1f} tok/s "
                      f"({time.monotonic() - t:.0f} s{note})", file=sys.stderr)  # fmt: skip
    if driver is not None:
        driver.close()

    print(
        f"\nClient fidelity: {args.runs} pairs (order alternating), {args.num_prompts} requests, "
        f"concurrency {args.concurrency}, {args.input_len} in / {args.output_len} out tokens, "
        f"server {args.base_url}, clients on CPUs {sorted(os.sched_getaffinity(0))}\n"
    )
    print("| figure | benchgate (median) | vllm bench serve (median) | difference |")
    print("|---|---:|---:|---:|")
    for label, key, _ in FIGURES:
        a = statistics.median(r[key] for r in bg)
        b = statistics.median(r[key] for r in vb)
        print(f"| {label} | {a:.2f} | {b:.2f} | {100 * (a - b) / b:+.1f}% |")
    a = statistics.median(r["prompt_tokens_mean"] for r in bg_extra)
    b = statistics.median(r["prompt_tokens_mean"] for r in vb)
    print(f"| prompt tokens / request | {a:.1f} | {b:.1f} | |")
    a = statistics.median(r["server_ttft_mean_ms"] or float("nan") for r in bg_extra)
    b = statistics.median(r["server_ttft_mean_ms"] for r in vb)
    print(
        f"| server-side TTFT mean ms (vllm:time_to_first_token_seconds) | {a:.2f} | {b:.2f} "
        f"| {100 * (a - b) / b:+.1f}% |"
    )
    print("\nPer run (output tok/s): benchgate "
          + ", ".join(f"{r['output_tokens_per_s']:.1f}" for r in bg)
          + "; vllm bench " + ", ".join(f"{r['output_tokens_per_s']:.1f}" for r in vb))  # fmt: skip
    print_shift([r["output_tokens_per_s"] for r in bg], [r["output_tokens_per_s"] for r in vb])
    agree = [r["agreement_pct"] for r in bg_extra if r["agreement_pct"] is not None]
    tokens = [r["tokens_diff_pct"] for r in bg_extra if r["tokens_diff_pct"] is not None]
    if agree:
        med = statistics.median(agree)
        print(f"benchgate vs server counter: tok/s difference median {med:+.2f}% "
              f"(runs: {', '.join(f'{v:+.2f}' for v in agree)}); "
              f"token count difference {', '.join(f'{v:+.2f}%' for v in tokens)}")  # fmt: skip


if __name__ == "__main__":
    main()
