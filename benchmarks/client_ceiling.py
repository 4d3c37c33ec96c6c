"""Client ceiling: how many streamed tokens/s can the client ingest?

Starts the fake server in fast mode (no delays) in its own process, then
measures benchgate and `vllm bench serve` against it, alternating: output
tokens/s, errors, and (for benchgate) client CPU seconds per 1000 tokens.  A
second part holds 256 concurrent streams and checks that none fails.  On a
small machine the server shares the CPUs, so the figures are a lower bound of
the client's ceiling.  Prints figures; it is not a test.

    .venv/bin/python benchmarks/client_ceiling.py --vllm /var/tmp/vllm-0.32.0/bin/vllm \\
        --tokenizer .cache/models/tiny-llama --runs 3
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
from benchgate.workload import parse_workload


def start_fake(port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "benchgate.testing.fakeserver", "--port", str(port), "--fast"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("fake server did not start")


def run_benchgate(url: str, concurrency: int, n: int, out_len: int) -> dict[str, float]:
    wl = parse_workload(
        {"name": "ceiling", "version": 1, "input_len": 16, "output_len": out_len,
         "concurrency": concurrency, "num_requests": n, "trials": 1, "warmup": concurrency}
    )  # fmt: skip
    cpu = time.process_time()
    result = run_benchmark(url, wl)
    cpu = time.process_time() - cpu
    t = result.trials[0]
    tokens = t.output_tokens
    return {
        "tok_s": t.metrics.output_tokens_per_s if t.metrics else 0.0,
        "errors": float(t.failed),
        "completed": float(t.completed),
        # CPU of warm-up + trial over the tokens of both.
        "cpu_ms_per_1k": 1000.0 * cpu / ((tokens + concurrency * out_len) / 1000.0),
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
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
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
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    args = p.parse_args()

    url = f"http://127.0.0.1:{args.port}"
    fake = start_fake(args.port)
    bg: list[dict[str, float]] = []
    vb: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                bg.append(run_benchgate(url, args.concurrency, args.num_requests, args.output_len))
                print(f"run {i + 1} benchgate {bg[-1]['tok_s']:9.0f} tok/s", file=sys.stderr)
                if args.vllm and args.tokenizer:
                    vb.append(run_vllm_bench(args, url, Path(tmp), i))
                    print(f"run {i + 1} vllm bench {vb[-1]['tok_s']:8.0f} tok/s", file=sys.stderr)
        streams = run_benchgate(url, 256, 256, 64)
    finally:
        fake.terminate()
        fake.wait(10)

    print(f"\nClient ceiling against the fake server in fast mode ({os.cpu_count()} CPUs shared "
          f"with the server): {args.num_requests} requests x {args.output_len} tokens, "
          f"concurrency {args.concurrency}, median of {args.runs} alternating runs\n")  # fmt: skip
    print("| client | output tok/s (median) | runs | errors |")
    print("|---|---:|---|---:|")
    for label, rows in (("benchgate (httpx)", bg), ("vllm bench serve (aiohttp)", vb)):
        if rows:
            med = statistics.median(r["tok_s"] for r in rows)
            runs = ", ".join(f"{r['tok_s']:.0f}" for r in rows)
            print(f"| {label} | {med:.0f} | {runs} | {sum(r['errors'] for r in rows):.0f} |")
    cpu = statistics.median(r["cpu_ms_per_1k"] for r in bg)
    print(f"\nbenchgate client CPU: {cpu:.1f} ms per 1000 streamed tokens "
          f"(~{1e6 / cpu:.0f} tokens per CPU-second)")  # fmt: skip
    print(f"256 concurrent streams x 64 tokens: {streams['completed']:.0f} completed, "
          f"{streams['errors']:.0f} errors, {streams['tok_s']:.0f} tok/s")  # fmt: skip


if __name__ == "__main__":
    main()
