"""Prompt fitting against a real server: how many synthetic prompts come out exact.

For each input length, builds the seeded synthetic prompts of a workload,
fits them with ``benchgate.tokenfit`` against the server's ``/tokenize``, and
prints how many are exact, the ``/tokenize`` calls per prompt and the time.
Prints figures; it is not a test.

    .venv/bin/python lab/experiments/prompt_fit.py --base-url http://127.0.0.1:8101 --model tiny
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp

from benchgate import tokenfit
from benchgate.workload import build_prompts, parse_workload


async def measure(args: argparse.Namespace) -> None:
    calls = 0
    count_tokens = tokenfit.count_tokens

    async def counting(*a, **k):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await count_tokens(*a, **k)

    tokenfit.count_tokens = counting  # type: ignore[assignment]
    print("| input_len | prompts | exact | min–max tokens | /tokenize calls per prompt | seconds |")
    print("|---:|---:|---:|---|---:|---:|")
    async with aiohttp.ClientSession() as client:
        for length in args.lengths:
            wl = parse_workload(
                {"name": "fit", "version": 1, "input_len": length, "output_len": 1,
                 "concurrency": args.parallel, "num_requests": args.prompts, "trials": 1}
            )  # fmt: skip
            prompts = build_prompts(wl, args.prompts)
            calls = 0
            start = time.monotonic()
            _, report = await tokenfit.fit_prompts(
                client, args.base_url, args.model, prompts, length, wl.prompts.seed,
                args.api_key, parallel=args.parallel,
            )  # fmt: skip
            took = time.monotonic() - start
            print(f"| {length} | {report.prompts} | {report.exact} | "
                  f"{report.min_tokens}–{report.max_tokens} | {calls / len(prompts):.2f} | "
                  f"{took:.1f} |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--base-url", required=True, help="the server's root, e.g. http://127.0.0.1:8101"
    )
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--api-key")
    p.add_argument("--lengths", type=int, nargs="+", default=[8, 32, 64, 256])
    p.add_argument("--prompts", type=int, default=300)
    p.add_argument("--parallel", type=int, default=8)
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
