"""Client ceiling: how many streamed tokens/s can the client ingest?

Starts the fake server in fast mode (no delays) in its own process, then
measures benchgate and `vllm bench serve` against it, alternating, in the same
run: output tokens/s, errors, the ratio of the two, and (for benchgate) client
CPU per streamed token.  A second part holds 256 concurrent streams and checks
that none fails and that the server really had 256 open at once.  On a small
machine the server shares the CPUs with the client (and with whatever else
runs), so the figures are a lower bound of the client's ceiling; the load of
the machine is printed with them.  Prints figures; it is not a test.

    .venv/bin/python lab/experiments/client_ceiling.py --vllm /var/tmp/vllm-0.32.0/bin/vllm \\
        --tokenizer .cache/models/tiny-llama --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

from benchgate.client import make_client, run_requests
from benchgate.workload import build_prompts, parse_workload


def start_fake(port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "benchgate.testing.fakeserver", "--port", str(port), "--fast"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("fake server did not start")


def fake_max_running(url: str) -> float:
    """The most streams the fake server had open at once (since it started)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("fake:max_requests_running"):
                return float(line.rsplit(" ", 1)[1])
    return float("nan")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


def run_benchgate(url: str, concurrency: int, n: int, out_len: int) -> dict[str, float]:
    """One warm-up of ``concurrency`` requests, then ``n`` measured ones, on one client."""
    wl = parse_workload(
        {"name": "ceiling", "version": 1, "input_len": 16, "output_len": out_len,
         "concurrency": concurrency, "num_requests": n, "trials": 1, "warmup": 0,
         "timeout_s": 120}
    )  # fmt: skip

    async def go() -> tuple[float, float, int, int]:
        async with make_client(concurrency, wl.timeout_s) as client:
            await run_requests(client, url, "fake", wl, build_prompts(wl, concurrency))
            prompts = build_prompts(wl, n, offset=concurrency)
            cpu = time.process_time()
            run = await run_requests(client, url, "fake", wl, prompts)
            cpu = time.process_time() - cpu
        tokens = sum(r.output_tokens or 0 for r in run.records if r.ok)
        failed = sum(1 for r in run.records if not r.ok)
        return run.duration_s, cpu, tokens, failed

    duration, cpu, tokens, failed = asyncio.run(go())
    return {
        "tok_s": tokens / duration,
        "errors": float(failed),
        "completed": float(n - failed),
        "cpu_us_per_token": 1e6 * cpu / max(1, tokens),  # the measured requests only
    }


def run_vllm_bench(args: argparse.Namespace, url: str, out: Path, i: int) -> dict[str, float]:
    name = f"ceiling-{i}.json"
    cmd = [
        args.vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", "fake",
        "--tokenizer", args.tokenizer, "--dataset-name", "random", "--random-input-len", "16",
        "--random-output-len", str(args.output_len), "--num-prompts", str(args.num_requests),
        "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--ignore-eos",
        "--disable-tqdm", "--save-result", "--result-dir", str(out), "--result-filename", name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{proc.stderr[-3000:]}")
    data = json.loads((out / name).read_text())
    return {
        "tok_s": float(data["output_throughput"]),
        "errors": float(data["num_prompts"] - data["completed"]),
        "completed": float(data["completed"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", help="vllm executable for the `vllm bench serve` comparison")
    p.add_argument("--tokenizer", help="model directory (vllm bench needs a tokenizer)")
    p.add_argument("--port", type=int, default=8198)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--num-requests", type=int, default=1024)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--streams", type=int, default=256, help="concurrent streams to hold")
    args = p.parse_args()

    url = f"http://127.0.0.1:{args.port}"
    load_before = os.getloadavg()
    busy0, total0 = machine_busy()
    own0 = time.process_time()
    fake = start_fake(args.port)
    bg: list[dict[str, float]] = []
    vb: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                bg.append(run_benchgate(url, args.concurrency, args.num_requests, args.output_len))
                print(f"run {i + 1} benchgate  {bg[-1]['tok_s']:9.0f} tok/s", file=sys.stderr)
                if args.vllm and args.tokenizer:
                    vb.append(run_vllm_bench(args, url, Path(tmp), i))
                    print(f"run {i + 1} vllm bench {vb[-1]['tok_s']:9.0f} tok/s", file=sys.stderr)
        streams = run_benchgate(url, args.streams, args.streams, 64)
        held = fake_max_running(url)
    finally:
        fake.terminate()
        fake.wait(10)
    busy1, total1 = machine_busy()
    load_after = os.getloadavg()
    children = os.times()
    ours = (time.process_time() - own0) + children.children_user + children.children_system

    print(f"\nClient ceiling against the fake server in fast mode ({os.cpu_count()} CPUs shared "
          f"with the server): {args.num_requests} requests x {args.output_len} tokens, "
          f"concurrency {args.concurrency}, median of {args.runs} alternating runs\n")  # fmt: skip
    print("| client | output tok/s (median) | runs | errors |")
    print("|---|---:|---|---:|")
    med: dict[str, float] = {}
    for label, rows in (
        (f"benchgate (aiohttp {aiohttp.__version__})", bg),
        ("vllm bench serve (aiohttp)", vb),
    ):
        if rows:
            med[label] = statistics.median(r["tok_s"] for r in rows)
            runs = ", ".join(f"{r['tok_s']:.0f}" for r in rows)
            print(f"| {label} | {med[label]:.0f} | {runs} | {sum(r['errors'] for r in rows):.0f} |")
    if vb:
        ratio = statistics.median(r["tok_s"] for r in bg) / statistics.median(
            r["tok_s"] for r in vb
        )
        pairs = ", ".join(f"{a['tok_s'] / b['tok_s']:.2f}" for a, b in zip(bg, vb))
        print(f"\nratio benchgate / vllm bench: {ratio:.2f} (of the medians); per run: {pairs}")
    cpu = statistics.median(r["cpu_us_per_token"] for r in bg)
    print(f"benchgate client CPU: {cpu:.2f} us per streamed token "
          f"(~{1e6 / cpu:.0f} tokens per CPU-second), median of the measured requests")  # fmt: skip
    print(f"{args.streams} concurrent streams x 64 tokens: {streams['completed']:.0f} completed, "
          f"{streams['errors']:.0f} errors, {streams['tok_s']:.0f} tok/s; "
          f"the server held at most {held:.0f} streams open at once")  # fmt: skip
    # How loaded the machine was: everything busy on it, minus this benchmark's own processes.
    cpus = os.cpu_count() or 1
    wall = (total1 - total0) / cpus
    others = max(0.0, (busy1 - busy0) - ours)  # ours: this script, the fake server, vllm bench
    print(f"machine: load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"over {wall:.0f} s the CPUs were {100 * (busy1 - busy0) / (total1 - total0):.0f}% busy, "
          f"{others / wall:.2f} CPUs of it by other work (not this benchmark)")  # fmt: skip


if __name__ == "__main__":
    main()
