"""Timing accuracy: does the client read the TTFT and ITL that the server injects?

Starts the fake server in its own process with an injected time to first
token and inter-token latency (50 ms and 10 ms by default, on an absolute
schedule from when the server got each request) and measures it with
benchgate's full benchmark path (`run_benchmark`) at a few concurrencies.
Prints the medians the client measured, their error against the injected
values, and whether each is within the tolerance (±1 ms).

The client's TTFT clock starts as the request goes to the socket, so the TTFT
error includes what the request costs from there until the server's handler
starts its clock (loopback, the server parsing the request) and the fake
server's own lateness: an upper bound of the client's own error; the last column sets the
client's mean TTFT beside the server's own (its handler start to its first
write, from its ``/metrics``): the gap is the request's way in plus the
first chunk's way out.  Prints figures; it is not a
test (tests/test_client.py holds a looser sanity bound).

    .venv/bin/python lab/experiments/timing_accuracy.py
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

from benchgate.bench import run_benchmark
from benchgate.client import build_payload, make_client, send_request
from benchgate.workload import Prompt, parse_workload


def start_fake(port: int, ttft_ms: float, itl_ms: float) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "benchgate.testing.fakeserver", "--port", str(port),
        "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
    ]  # fmt: skip
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


def measure(url: str, concurrency: int, n: int, out_len: int) -> dict[str, float]:
    wl = parse_workload(
        {
            "name": "timing",
            "version": 1,
            "input_len": 16,
            "output_len": out_len,
            "concurrency": concurrency,
            "num_requests": n,
            "trials": 1,
            "warmup": concurrency,
        }
    )
    trial = run_benchmark(url, wl).trials[0]
    if trial.metrics is None or trial.failed:
        raise SystemExit(f"trial failed: {trial.errors_by_reason}")
    m = trial.metrics
    return {
        "ttft": m.ttft_ms.median,
        "itl": m.itl_ms.median,
        "tpot": m.tpot_ms.median,
        "itl_p99": m.itl_ms.p99,
        "ttft_mean": m.ttft_ms.mean,
        # The server's own TTFT (handler start to first token written), from its /metrics.
        "server_ttft_mean": float(trial.server.get("ttft_mean_ms") or float("nan")),
    }


def decompose(url: str, n: int, out_len: int) -> dict[str, float]:
    """One request at a time: where the TTFT the client reads comes from (medians, ms).

    The server reports when each handler started and wrote its first token
    (``perf_counter``, one clock for every process on Linux), so each
    request's TTFT splits into: the way in (client sends -> handler starts),
    the server's own TTFT (injected value plus its timer's lateness) and the
    way out (first token written -> client has read and parsed it).
    """
    wl = parse_workload(
        {"name": "timing", "version": 1, "input_len": 16, "output_len": out_len,
         "concurrency": 1, "num_requests": n, "trials": 1, "warmup": 0}
    )  # fmt: skip
    with urllib.request.urlopen(f"{url}/fake/timings", timeout=10) as resp:
        skip = len(json.loads(resp.read())["first_token"])

    async def go() -> list[tuple[float, float]]:
        payload = build_payload(wl, "fake", Prompt("a b c d", 4))
        out = []
        async with make_client(1, 30.0) as client:
            await send_request(client, f"{url}/v1/completions", payload, {}, timeout_s=30.0)
            for _ in range(n):
                rec = await send_request(
                    client, f"{url}/v1/completions", payload, {}, timeout_s=30.0
                )
                if not rec.ok or rec.ttft_s is None:
                    raise SystemExit(f"request failed: {rec.error} {rec.detail}")
                out.append((rec.sent_at, rec.ttft_s))
        return out

    records = asyncio.run(go())
    with urllib.request.urlopen(f"{url}/fake/timings", timeout=10) as resp:
        t = json.loads(resp.read())
    starts, firsts = t["handler_start"][skip + 1 :], t["first_token"][skip + 1 :]
    if len(starts) != len(records) or len(firsts) != len(records):
        raise SystemExit("server and client disagree on the number of requests")
    ms = 1000.0
    return {
        "client_ttft": statistics.median(ttft * ms for _, ttft in records),
        "way_in": statistics.median((h - sent) * ms for (sent, _), h in zip(records, starts)),
        "server_ttft": statistics.median((f - h) * ms for h, f in zip(starts, firsts)),
        "way_out": statistics.median(
            (sent + ttft - f) * ms for (sent, ttft), f in zip(records, firsts)
        ),
    }


def measure_vllm(args: argparse.Namespace, url: str, concurrency: int, n: int) -> dict[str, float]:
    """The same shape measured by `vllm bench serve` (the reference client)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            args.vllm, "bench", "serve", "--backend", "vllm", "--base-url", url,
            "--model", "fake", "--tokenizer", args.tokenizer, "--dataset-name", "random",
            "--random-input-len", "16", "--random-output-len", str(args.output_len),
            "--num-prompts", str(n), "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--save-result",
            "--result-dir", tmp, "--result-filename", "t.json",
        ]  # fmt: skip
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"vllm bench serve failed:\n{proc.stderr[-3000:]}")
        data = json.loads((Path(tmp) / "t.json").read_text())
    return {"ttft": float(data["median_ttft_ms"]), "itl": float(data["median_itl_ms"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8193)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tolerance-ms", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--num-requests", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--vllm", help="vllm executable: also measure with `vllm bench serve`")
    p.add_argument("--tokenizer", help="model directory (vllm bench needs a tokenizer)")
    args = p.parse_args()

    url = f"http://127.0.0.1:{args.port}"
    load_before = os.getloadavg()
    fake = start_fake(args.port, args.ttft_ms, args.itl_ms)
    rows: dict[int, list[dict[str, float]]] = {}
    ref: dict[int, list[dict[str, float]]] = {}
    try:
        for _ in range(args.runs):
            for c in args.concurrency:
                n = max(args.num_requests, c)
                rows.setdefault(c, []).append(measure(url, c, n, args.output_len))
                r = rows[c][-1]
                print(
                    f"concurrency {c}: TTFT {r['ttft']:.2f} ms, ITL {r['itl']:.2f} ms",
                    file=sys.stderr,
                )
                if args.vllm and args.tokenizer:
                    ref.setdefault(c, []).append(measure_vllm(args, url, c, n))
        parts = decompose(url, args.num_requests, args.output_len)
    finally:
        fake.terminate()
        fake.wait(10)
    load_after = os.getloadavg()

    tol = args.tolerance_ms
    print(
        f"\nTiming accuracy against the fake server (own process) with injected TTFT "
        f"{args.ttft_ms:g} ms and ITL {args.itl_ms:g} ms: {args.output_len} output tokens, "
        f"median over {args.runs} runs of each run's median, ±{tol:g} ms tolerance\n"
    )
    print(
        "| concurrency | TTFT median ms | error | ITL median ms | error | TPOT median ms "
        "| ITL p99 ms | within ±1 ms | TTFT mean ms: client / server's own |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    all_ok = True
    for c, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        e_ttft = med["ttft"] - args.ttft_ms
        e_itl = med["itl"] - args.itl_ms
        ok = abs(e_ttft) <= tol and abs(e_itl) <= tol
        all_ok = all_ok and ok
        print(
            f"| {c} | {med['ttft']:.2f} | {e_ttft:+.2f} | {med['itl']:.2f} | {e_itl:+.2f} "
            f"| {med['tpot']:.2f} | {med['itl_p99']:.2f} | {'yes' if ok else 'NO'} "
            f"| {med['ttft_mean']:.2f} / {med['server_ttft_mean']:.2f} |"
        )
    if ref:
        print("\nThe same shape measured by `vllm bench serve` in the same run (medians):\n")
        print("| concurrency | TTFT median ms | ITL median ms |")
        print("|---:|---:|---:|")
        for c, runs in ref.items():
            ttft = statistics.median(r["ttft"] for r in runs)
            itl = statistics.median(r["itl"] for r in runs)
            print(f"| {c} | {ttft:.2f} | {itl:.2f} |")
    print(
        f"\nWhere the TTFT comes from, one request at a time ({args.num_requests} requests, "
        f"medians): client reads {parts['client_ttft']:.2f} ms = way in "
        f"{parts['way_in']:.2f} ms (client sends -> server handler starts) + server's own "
        f"{parts['server_ttft']:.2f} ms (injected {args.ttft_ms:g} ms + its timer's lateness) + "
        f"way out {parts['way_out']:.2f} ms (server writes the first token -> client has read it)"
    )
    print(
        f"\nall within ±{tol:g} ms: {'yes' if all_ok else 'NO'}; machine load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
