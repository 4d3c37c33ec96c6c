#!/usr/bin/env python3
"""How good are the gate's decisions? A/A false blocks and detection of a real regression.

Trials are built by resampling per-request records (output tokens and
end-to-end latency) into benchmark trials, then each comparison is judged
twice: by the gate (``benchgate.stats.judge_metric``, N trials per side) and
by the naive rule (one run each, block when >= X% slower).

Scenarios:

* A/A: baseline and candidate come from the same request pool, so every block
  is a false block.
* within-limit: the candidate is 3% slower (under the 5% limit); blocking it is
  also a wrong decision, though a forgivable one.
* regression: the candidate's requests are 15% slower (latencies / 0.85); every
  comparison that is not blocked is a miss.

A trial's output tokens/s is ``C * sum(output_tokens) / sum(e2el)``, where
``C`` is the effective concurrency (``sum(e2el) / duration`` of the measured
trials; exact for the trial it came from). Resampling alone only models
request-mix noise; real hosts also drift between trials (clocks, neighbours,
caches), so every trial is multiplied by a trial-level factor: lognormal with
``--trial-noise`` (default 3%) and, with probability ``--hiccup-rate``, a
heavy-tailed slow-down (Pareto).

Without ``--from`` the request pool is synthetic (seeded). With
``--from result.json`` it is the per-request records (``trials[].requests[]``)
of a ``benchgate.result/1`` file, failed requests excluded.

    .venv/bin/python benchmarks/gate_decision_quality.py
    .venv/bin/python benchmarks/gate_decision_quality.py --from artifacts/result.json
    .venv/bin/python benchmarks/gate_decision_quality.py --write-docs docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import benchgate.stats as stats

SECTION = "## Gate decision quality"


@dataclass(frozen=True)
class Request:
    output_tokens: int
    e2el_s: float


@dataclass(frozen=True)
class Pool:
    requests: list[Request]
    concurrency: float
    requests_per_trial: int
    source: str


def synthetic_pool(seed: int, size: int = 4000, concurrency: float = 8.0) -> Pool:
    """A request mix like a chat workload: varied lengths, a heavy TTFT tail."""
    rng = random.Random(seed)
    out = []
    for _ in range(size):
        tokens = rng.randint(32, 256)
        ttft = 0.05 * math.exp(rng.gauss(0, 0.4))
        if rng.random() < 0.03:  # queueing behind a long prefill
            ttft *= 1 + rng.paretovariate(1.2)
        tpot = 0.020 * math.exp(rng.gauss(0, 0.1))
        out.append(Request(tokens, ttft + tpot * (tokens - 1)))
    return Pool(out, concurrency, 64, f"synthetic (seed {seed}, {size} requests)")


def pool_from_result(path: Path, requests_per_trial: int | None) -> Pool:
    """Per-request records of a benchgate.result/1 file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    reqs: list[Request] = []
    conc: list[float] = []
    per_trial: list[int] = []
    for trial in data.get("trials") or []:
        ok = [
            r
            for r in trial.get("requests") or []
            if not r.get("error") and r.get("e2el_ms") and r.get("output_tokens")
        ]
        if not ok:
            continue
        trial_reqs = [Request(int(r["output_tokens"]), float(r["e2el_ms"]) / 1000.0) for r in ok]
        reqs.extend(trial_reqs)
        per_trial.append(len(trial_reqs))
        duration = trial.get("duration_s")
        if isinstance(duration, (int, float)) and duration > 0:
            conc.append(sum(r.e2el_s for r in trial_reqs) / duration)
    if len(reqs) < 10:
        raise SystemExit(
            f"{path}: fewer than 10 successful per-request records in trials[].requests[]; "
            "record the result with per-request data"
        )
    concurrency = sorted(conc)[len(conc) // 2] if conc else 1.0
    n = requests_per_trial or sorted(per_trial)[len(per_trial) // 2]
    return Pool(reqs, concurrency, n, f"{path} ({len(reqs)} requests, C≈{concurrency:.1f})")


@dataclass(frozen=True)
class Noise:
    trial_sigma: float
    hiccup_rate: float


def make_trial(
    pool: Pool, rng: random.Random, noise: Noise, slowdown: float, n: int | None = None
) -> float:
    """Output tokens/s of one resampled trial; ``slowdown`` 0.15 = 15% fewer tok/s."""
    picks = rng.choices(pool.requests, k=n or pool.requests_per_trial)
    tokens = sum(r.output_tokens for r in picks)
    busy = sum(r.e2el_s for r in picks) / (1.0 - slowdown)
    tput = pool.concurrency * tokens / busy
    factor = math.exp(rng.gauss(0.0, noise.trial_sigma))
    if rng.random() < noise.hiccup_rate:
        factor /= 1.0 + 0.05 * rng.paretovariate(1.5)
    return tput * factor


@dataclass
class Tally:
    comparisons: int = 0
    fail: int = 0
    inconclusive: int = 0
    trials: int = 0  # trials run per side, summed over comparisons

    def add(self, verdict: str, trials: int = 1) -> None:
        self.comparisons += 1
        self.trials += trials
        if verdict == stats.FAIL:
            self.fail += 1
        elif verdict == stats.INCONCLUSIVE:
            self.inconclusive += 1

    @property
    def blocked(self) -> int:  # default policy: INCONCLUSIVE blocks
        return self.fail + self.inconclusive

    def cell(self) -> str:
        n = self.comparisons
        text = f"**{pct(self.blocked, n)}**"
        if self.fail != self.blocked:
            text += f" (FAIL {pct(self.fail, n)}, INCONCL. {pct(self.inconclusive, n)})"
        return text


@dataclass(frozen=True)
class Plan:
    trials: int  # first batch per side
    budget: int  # most trials per side while INCONCLUSIVE
    step: int  # trials added per side per extra round
    limit: float


def run_scenario(
    pool: Pool, slowdown: float, comparisons: int, plan: Plan, noise: Noise, seed: int
) -> tuple[Tally, Tally, Tally]:
    """(naive, gate with the first batch only, gate with re-runs) for one scenario."""
    rng = random.Random(seed)
    spec = stats.MetricSpec("output_tokens_per_s", max_regression_pct=plan.limit, critical=True)
    naive, fixed, sequential = Tally(), Tally(), Tally()
    for _ in range(comparisons):
        base = [make_trial(pool, rng, noise, 0.0) for _ in range(plan.trials)]
        cand = [make_trial(pool, rng, noise, slowdown) for _ in range(plan.trials)]
        # The naive rule sees one run each: the first trial of each side.
        naive.add(stats.naive_verdict(base[0], cand[0], stats.Direction.HIGHER, plan.limit))
        verdict = stats.judge_metric(spec, base, cand).verdict
        fixed.add(verdict, len(base))
        while stats.needs_more_trials(verdict, len(base), plan.budget):
            more = min(plan.step, plan.budget - len(base))
            base += [make_trial(pool, rng, noise, 0.0) for _ in range(more)]
            cand += [make_trial(pool, rng, noise, slowdown) for _ in range(more)]
            verdict = stats.judge_metric(spec, base, cand).verdict
        sequential.add(verdict, len(base))
    return naive, fixed, sequential


def pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def report(args: argparse.Namespace, pool: Pool, command: str) -> str:
    noise = Noise(args.trial_noise, args.hiccup_rate)
    plan = Plan(args.trials, args.budget, args.step, args.limit)
    scenarios = (
        ("A/A: identical", 0.0, "false block"),
        (f"{args.within:g}% slower (within the limit)", args.within / 100.0, "false block"),
        (f"{args.regression:g}% slower (regression)", args.regression / 100.0, "detection"),
    )
    seq = f"gate, {plan.trials}→{plan.budget} trials"
    lines = [
        SECTION,
        "",
        f"Command: `{command}`",
        "",
        f"- Request pool: {pool.source}; {pool.requests_per_trial} requests per trial, "
        "resampled with replacement.",
        f"- Host noise per trial: {args.trial_noise:.0%} lognormal plus "
        f"{args.hiccup_rate:.0%} heavy-tailed (Pareto) slow-downs; "
        f"{args.comparisons} comparisons per scenario; seed {args.seed}; limit {args.limit:g}%.",
        f"- naive: one run each, block when >= {args.limit:g}% slower.",
        f"- gate, {plan.trials} trials: `benchgate.stats` (one-sided Mann-Whitney U + "
        f"Hodges-Lehmann bounds) on {plan.trials} trials per side; INCONCLUSIVE blocks.",
        f"- {seq}: the same, adding {plan.step} trials per side while "
        f"`needs_more_trials()` (INCONCLUSIVE, budget {plan.budget}); then INCONCLUSIVE blocks.",
        "",
        f"| scenario | cell = | naive | gate, {plan.trials} trials | {seq} | mean trials/side |",
        "|---|---|---|---|---|---|",
    ]
    for i, (label, slowdown, measure) in enumerate(scenarios):
        naive, fixed, sequential = run_scenario(
            pool, slowdown, args.comparisons, plan, noise, args.seed + i
        )
        mean_trials = sequential.trials / sequential.comparisons
        lines.append(
            f"| {label} | {measure} rate | {naive.cell()} | {fixed.cell()} | "
            f"{sequential.cell()} | {mean_trials:.1f} |"
        )
    lines += [
        "",
        "Blocked = FAIL + INCONCLUSIVE (the default policy). In the first two rows "
        "every block rolls back a good release; in the last row every unblocked "
        "comparison ships a 15% regression.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace our section in ``path`` (or append it); other sections stay as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(SECTION)
    if start == -1:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(SECTION))
        tail = "" if nxt == -1 else text[nxt + 1 :]
        new = text[:start] + section + ("\n" + tail if tail else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path, help="benchgate.result/1 JSON")
    p.add_argument("--comparisons", type=int, default=200, help="per scenario (>= 20)")
    p.add_argument("--trials", type=int, default=5, help="gate trials per side, first batch")
    p.add_argument("--budget", type=int, default=15, help="most trials per side")
    p.add_argument("--step", type=int, default=5, help="trials added per re-run")
    p.add_argument("--requests-per-trial", type=int, help="default: as in the source")
    p.add_argument("--limit", type=float, default=5.0, help="max regression percent")
    p.add_argument("--regression", type=float, default=15.0, help="injected slowdown percent")
    p.add_argument("--within", type=float, default=3.0, help="acceptable slowdown percent")
    p.add_argument("--trial-noise", type=float, default=0.03, help="trial-level sigma")
    p.add_argument("--hiccup-rate", type=float, default=0.1, help="share of slowed trials")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-docs", type=Path, help="replace/append the section in this file")
    args = p.parse_args(argv)
    if args.comparisons < 20:
        p.error("--comparisons must be at least 20")
    if args.trials < 3:
        p.error("--trials must be at least 3 (the gate's minimum)")
    if args.budget < args.trials or args.step < 1:
        p.error("--budget must be >= --trials and --step >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.source:
        pool = pool_from_result(args.source, args.requests_per_trial)
    else:
        pool = synthetic_pool(args.seed)
        if args.requests_per_trial:
            pool = Pool(pool.requests, pool.concurrency, args.requests_per_trial, pool.source)
    raw = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join([".venv/bin/python", "benchmarks/gate_decision_quality.py", *raw])
    t0 = time.perf_counter()
    section = report(args, pool, command)
    print(section)
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.write_docs:
        write_section(args.write_docs, section)
        print(f"wrote the section to {args.write_docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
