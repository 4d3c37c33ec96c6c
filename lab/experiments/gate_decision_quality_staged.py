#!/usr/bin/env python3
"""Decision quality of STAGED verdicts: A/A false blocks of the whole verdict, detection per stage.

A staged workload is judged stage by stage and the host passes only when
every stage passes (``benchgate.stages.judge_staged``, alpha split over the
stages). With several stages and several metrics per stage there are many
chances to block an identical release, so this script measures (issue 19):

* A/A: baseline and candidate from the same pools; a block of the *whole*
  staged verdict (any stage FAIL or INCONCLUSIVE) is a false block. Target:
  <= 5%.
* ``--regression`` percent (15) slower in ONE stage, the others unchanged,
  for each stage in turn: a block is a detection. Target: >= 95% for every
  stage. The row also counts FAILs of the stages that were *not* slowed
  ("elsewhere"): each of those is a false alarm about the wrong load.

Each comparison is judged the way ``benchgate_gate`` judges a staged result
on the schedule of ``playbooks/upgrade.yml``: each measurement run is one
staged result (N trials per stage, stages in the workload's order); a side
measured more than once (A-B-A's second baseline, the extra candidate
trials) is merged with ``benchgate.stages.merge_staged`` (each measurement
keeps its ``run``); ``stages.judge_staged`` with the module's defaults (metrics
output_tokens_per_s, ttft_ms, tpot_ms; output_tokens_per_s critical;
``fail_requires_bound``), ``--limit`` as ``max_regression_pct``,
``--run-spread`` as ``run_spread_pct`` and every stage's ``gate`` block of
the workload (demo-staged: ``busy`` has ``critical: [output_tokens_per_s,
ttft_ms]``). While INCONCLUSIVE, E more candidate trials *per stage* (the
playbook's ``trials`` override applies to every stage), judged again;
INCONCLUSIVE then blocks. ``--schedule`` is ``gate_decision_quality.py``'s
``N+E[xROUNDS][:bound|:point][:aba]``.

Two methods, on the same records:

* resampling (every ``--comparisons``): each trial is resampled from its
  stage's pool of per-request records as in ``gate_decision_quality.py``
  (``--resample requests`` or ``trials``). ``--run-noise`` percent adds a
  level per measurement run shared by all its stages (the 2-core host's
  run-to-run spread is about 4%: lab/notes/benchmarks.md, "Runs, not trials");
  synthetic pools also get that script's trial noise.
* replay (``--replay AB+B``, ``--replay ABA+B``, needs ``--from`` in the
  order the runs were made): every recorded run is one measurement with
  its real trials in their real order and level; every window of
  consecutive runs (wrapping around) is one comparison, the runs taken in
  turn as the design's letters (A baseline, B candidate, after ``+``: the
  runs measured only while INCONCLUSIVE). A regression scales the candidate
  runs' trials of one stage. Windows overlap, so the comparisons are not
  independent: the intervals printed for replay are too narrow.
  ``--replay pairs:N+E`` replays side by side (``benchgate_side_by_side``)
  instead: from the first trial of every recorded run on, each stage's
  consecutive trials in the order they ran are cut into N ABBA pairs (E more
  while INCONCLUSIVE) and judged as the gate judges pairs. One server's
  trials a few seconds apart: A/A with the machine's own noise.

With ``--from``, the report also gives each stage's run-to-run spread per
metric and the limit it lets A-B-A decide. ``--gates-from WORKLOAD`` judges
every stage with that workload's ``gate`` blocks instead of the ones the
records were measured with (a gate changed after the runs).

Rates carry a 95% Wilson interval (scipy) and the number of comparisons.

Development (synthetic pools from the workload's stages; seconds):

    .venv/bin/python lab/experiments/gate_decision_quality_staged.py --comparisons 200

Real records (later, on a quiet machine: vLLM on CPU 1, the client on CPU 0
as the demo host places them; 20 runs of demo-staged, about 1 min each):

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=1 taskset -c 1 \\
        /var/tmp/vllm-0.32.0/bin/vllm serve .cache/models/tiny-llama \\
        --host 127.0.0.1 --port 8101 --max-model-len 512 --dtype float32 --enforce-eager &
    mkdir -p artifacts/staged-dq
    for i in $(seq -w 1 20); do
        taskset -c 0 .venv/bin/benchgate bench --base-url http://127.0.0.1:8101 \\
            --workload workloads/demo-staged.yml -q -o artifacts/staged-dq/run-$i.json
    done
    .venv/bin/python lab/experiments/gate_decision_quality_staged.py \\
        $(printf -- '--from %s ' artifacts/staged-dq/run-*.json) \\
        --comparisons 1000 --schedule 6+16 --schedule 6+16:aba --limit 12 --run-spread 4 \\
        --replay AB+B --replay ABA+B

(the demo inventory's settings: A-B-A, limit 12%, run spread 4%; a GPU host's
defaults are ``--schedule 6+16 --limit 5``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gate_decision_quality as dq  # noqa: E402
from scipy.stats import binomtest

from benchgate import ranks, rules, stages  # noqa: E402
from benchgate.workload import load_workload  # noqa: E402

TPUT = "output_tokens_per_s"
#: What the issue asks of a staged verdict.
TARGET_AA = 0.05
TARGET_DETECTION = 0.95


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class StagedPools:
    """Per stage (in the order they run): its request pool and its load."""

    pools: dict[str, dq.Pool]
    workload: dict[str, Any]  # the result's ``workload`` block (params.stages carry the gates)
    params: dict[str, dict[str, Any]]  # each stage's load, as in a result's ``stages``
    source: str

    @property
    def names(self) -> list[str]:
        return list(self.pools)


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not stages.is_staged(data):
        raise SystemExit(f"{path}: not a staged benchgate.result/1 (no trial carries a stage)")
    return data


def pools_from_results(paths: Sequence[Path], requests_per_trial: int | None) -> StagedPools:
    """One pool per stage from the per-request records of staged result files."""
    results = [_read(p) for p in paths]
    names = stages.stage_names(results[0])
    by_stage: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for path, result in zip(paths, results, strict=True):
        if stages.stage_names(result) != names:
            raise SystemExit(f"{path}: stages {stages.stage_names(result)}, expected {names}")
        for name, part in stages.split_result(result).items():
            by_stage[str(name)] += part["trials"]
    files = f"{len(paths)} files" if len(paths) > 3 else ", ".join(f"`{p}`" for p in paths)
    pools = {
        n: dq.pool_from_trials(t, requests_per_trial, f"{files}, stage {n}")
        for n, t in by_stage.items()
    }
    return StagedPools(
        pools,
        dict(results[0].get("workload") or {}),
        {n: stages.stage_params(results[0], n) for n in names},
        "; ".join(p.source for p in pools.values()),
    )


def synthetic_pools(workload_path: str, seed: int) -> StagedPools:
    """``gate_decision_quality``'s synthetic request mix, one pool per stage of a workload,
    each with the stage's concurrency and requests per trial."""
    workload = load_workload(workload_path)
    if not workload.staged:
        raise SystemExit(f"{workload_path}: not a staged workload (no stages:)")
    pools: dict[str, dq.Pool] = {}
    params: dict[str, dict[str, Any]] = {}
    for i, (name, stage) in enumerate(workload.stage_workloads()):
        base = dq.synthetic_pool(seed + i, concurrency=float(stage.concurrency))
        pools[str(name)] = dq.Pool(
            base.requests, base.concurrency, stage.num_requests, f"stage {name}: {base.source}"
        )
        params[str(name)] = {"concurrency": stage.concurrency}
    block = {"name": workload.name, "version": workload.version, "params": workload.to_dict()}
    return StagedPools(pools, block, params, f"synthetic, `{workload_path}`")


# --------------------------------------------------------------------------- one measurement


def trial_dict(figures: Mapping[str, float], stage: str) -> dict[str, Any]:
    """``make_trial``'s figures as a result trial (latencies as per-trial medians)."""
    metrics: dict[str, Any] = {k: (v if k == TPUT else {"median": v}) for k, v in figures.items()}
    return {"valid": True, "stage": stage, "metrics": metrics}


def staged_result(pools: StagedPools, trials: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A staged ``benchgate.result/1`` from (stage, trial) pairs in the order they ran."""
    return {
        "schema": "benchgate.result/1",
        "workload": pools.workload,
        "trials": [{**t, "index": i, "stage": s} for i, (s, t) in enumerate(trials)],
        "stages": [{"name": n, "params": pools.params.get(n, {})} for n in pools.names],
    }


def measure(
    pools: StagedPools,
    n: int,
    rng: random.Random,
    noise: dq.Noise,
    run_sigma: float,
    slowdowns: Mapping[str, float],
    by_trial: bool,
) -> dict[str, Any]:
    """One measurement run: ``n`` resampled trials of every stage, one run level for all."""
    level = math.exp(rng.gauss(0.0, run_sigma)) if run_sigma else 1.0
    trials = []
    for name, pool in pools.pools.items():
        slow = 1.0 - (1.0 - slowdowns.get(name, 0.0)) * level
        for _ in range(n):
            trials.append((name, trial_dict(dq.make_trial(pool, rng, noise, slow, by_trial), name)))
    return staged_result(pools, trials)


# --------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judge:
    """``benchgate_gate``'s settings for a staged result."""

    specs: tuple[rules.MetricSpec, ...]
    config: rules.GateConfig
    correction: str = "bonferroni"
    # stage -> gate block, over the ones the results carry (``--gates-from``)
    gates: Mapping[str, Mapping[str, Any]] | None = None

    def __call__(
        self, baselines: Sequence[dict[str, Any]], candidates: Sequence[dict[str, Any]]
    ) -> rules.Verdict:
        # What the gate does with a list per side: merge_staged, then judge the stages.
        return stages.judge_staged(
            stages.merge_staged(baselines),
            stages.merge_staged(candidates),
            list(self.specs),
            self.config,
            correction=self.correction,
            gates=self.gates,
        )


@dataclass
class StagedTally:
    """Verdicts of the whole staged result, and which stages blocked."""

    comparisons: int = 0
    fail: int = 0
    inconclusive: int = 0
    trials: float = 0.0  # candidate trials per stage, summed over comparisons
    blocked_by: Counter[str] = field(default_factory=Counter)  # stage not PASS
    failed_elsewhere: int = 0  # a stage other than the slowed one FAILed

    def add(self, verdict: rules.Verdict, trials: float, slowed: str | None = None) -> None:
        self.comparisons += 1
        self.trials += trials
        self.fail += verdict.verdict == rules.FAIL
        self.inconclusive += verdict.verdict == rules.INCONCLUSIVE
        for s in verdict.stages:
            if s.verdict.verdict != rules.PASS:
                self.blocked_by[s.stage] += 1
        if slowed is not None:
            self.failed_elsewhere += any(
                s.verdict.verdict == rules.FAIL for s in verdict.stages if s.stage != slowed
            )

    @property
    def blocked(self) -> int:  # the default policy: INCONCLUSIVE blocks
        return self.fail + self.inconclusive


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson interval of a rate k/n."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"**{100.0 * k / n:.1f}%** ({100 * lo:.1f}-{100 * hi:.1f}%)"


def resampled(
    pools: StagedPools,
    plan: dq.Plan,
    judge: Judge,
    noise: dq.Noise,
    run_sigma: float,
    slowed_stage: str | None,
    slowdown: float,
    by_trial: bool,
    comparisons: int,
    seed: int,
) -> StagedTally:
    """``comparisons`` staged comparisons on the playbook's schedule (``plan``), the
    candidate ``slowdown`` slower at ``slowed_stage`` (None: A/A)."""
    rng = random.Random(seed)
    tally = StagedTally()
    slowdowns = {slowed_stage: slowdown} if slowed_stage is not None else {}

    def run(slow: Mapping[str, float], n: int) -> dict[str, Any]:
        return measure(pools, n, rng, noise, run_sigma, slow, by_trial)

    for _ in range(comparisons):
        base = [run({}, plan.trials)]
        cand = [run(slowdowns, plan.trials)]
        if plan.aba:  # benchgate_interleave: the serving release again after the candidate
            base.append(run({}, plan.trials))
        verdict = judge(base, cand)
        used = plan.trials
        for _round in range(plan.rounds if plan.extra else 0):
            if verdict.verdict != rules.INCONCLUSIVE:
                break
            cand.append(run(slowdowns, plan.extra))
            used += plan.extra
            verdict = judge(base, cand)
        tally.add(verdict, used, slowed_stage)
    return tally


# --------------------------------------------------------------------------- replay


def slowed(trial: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """A recorded trial on a server ``factor`` times as fast (0.85: 15% slower)."""
    metrics: dict[str, Any] = {}
    for name, value in (trial.get("metrics") or {}).items():
        try:
            scale = factor if rules.direction_of(name) is rules.Direction.HIGHER else 1 / factor
        except ValueError:
            scale = 1.0
        if isinstance(value, Mapping):
            metrics[name] = {
                k: v * scale if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                for k, v in value.items()
            }
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[name] = value * scale
        else:
            metrics[name] = value
    return {k: v for k, v in trial.items() if k != "requests"} | {"metrics": metrics}


def slowed_run(result: Mapping[str, Any], stage: str, factor: float) -> dict[str, Any]:
    """A recorded staged run with one stage's trials slowed."""
    return {
        **result,
        "trials": [
            slowed(t, factor) if t.get("stage") == stage else t for t in result.get("trials") or []
        ],
    }


def replay(
    runs: Sequence[dict[str, Any]],
    design: str,
    judge: Judge,
    stage: str | None,
    factor: float,
) -> StagedTally:
    """Every window of consecutive recorded runs judged with ``design`` (``AB+B``, ``ABA+B``)."""
    first, _, more = design.partition("+")
    tally = StagedTally()
    for start in range(len(runs)):
        sides: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}

        def take(
            letters: str,
            offset: int,
            sides: dict[str, list[dict[str, Any]]] = sides,
            start: int = start,
        ) -> None:
            for i, letter in enumerate(letters):
                run = runs[(start + offset + i) % len(runs)]
                if letter == "B" and stage is not None:
                    run = slowed_run(run, stage, factor)
                sides[letter].append(run)

        take(first, 0)
        verdict = judge(sides["A"], sides["B"])
        if verdict.verdict == rules.INCONCLUSIVE and more:
            take(more, len(first))
            verdict = judge(sides["A"], sides["B"])
        per_stage = sum(len(r.get("trials") or []) for r in sides["B"]) / len(
            stages.stage_names(runs[0])
        )
        tally.add(verdict, per_stage, stage)
    return tally


def _pairs(
    seq: Sequence[Mapping[str, Any]], stage: str, slow: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Consecutive trials as side by side makes them: pair i is trials 2i and
    2i+1, the reference first on even pairs and the candidate first on odd
    ones (ABBA); the candidate's slowed by ``slow`` (1.0: A/A)."""
    a: list[dict[str, Any]] = []
    b: list[dict[str, Any]] = []
    for i in range(len(seq) // 2):
        first, second = seq[2 * i], seq[2 * i + 1]
        ref, cand = (first, second) if i % 2 == 0 else (second, first)
        a.append({**ref, "index": i, "stage": stage})
        b.append({**slowed(cand, slow), "index": i, "stage": stage})
    return a, b


def replay_pairs(
    runs: Sequence[dict[str, Any]],
    trials: int,
    extra: int,
    judge: Judge,
    stage: str | None,
    factor: float,
) -> StagedTally:
    """Side by side on recorded runs of one server: each stage's trials in the
    order they ran, from the first trial of each recorded run on (wrapping
    around), cut into ABBA pairs as ``_pairs`` does: ``trials`` pairs per
    stage, while INCONCLUSIVE ``extra`` more; judged as pairs (the gate's
    ``paired``, no run spread). Every pair is two of one server's trials a
    few seconds apart, so this is A/A with the server's own noise; a
    regression slows the candidate's trials of one stage."""
    names = stages.stage_names(runs[0])
    seqs = {
        n: [t for r in runs for t in r.get("trials") or [] if t.get("stage") == n] for n in names
    }
    starts = {n: [0] for n in names}
    for n in names:
        for r in runs[:-1]:
            starts[n].append(starts[n][-1] + sum(1 for t in r["trials"] if t.get("stage") == n))
    config = replace(judge.config, paired=True, run_spread_pct=0.0)
    paired_judge = replace(judge, config=config)
    tally = StagedTally()

    def measurement(start: int, offset: int, count: int, run: int) -> tuple[dict, dict]:
        a_trials: list[dict[str, Any]] = []
        b_trials: list[dict[str, Any]] = []
        for n in names:
            seq = seqs[n]
            window = [seq[(starts[n][start] + offset + j) % len(seq)] for j in range(2 * count)]
            a, b = _pairs(window, n, factor if n == stage else 1.0)
            a_trials += a
            b_trials += b
        mark = {"id": f"{start}-{run}"}
        head = {"schema": "benchgate.result/1", "workload": runs[0].get("workload")}
        head["stages"] = [{"name": n} for n in names]
        return (
            {**head, "trials": a_trials, "interleaved": {**mark, "side": "reference"}},
            {**head, "trials": b_trials, "interleaved": {**mark, "side": "candidate"}},
        )

    for start in range(len(runs)):
        a, b = measurement(start, 0, trials, 0)
        sides = ([a], [b])
        verdict = paired_judge(*sides)
        per_stage = float(trials)
        if verdict.verdict == rules.INCONCLUSIVE and extra:
            a2, b2 = measurement(start, 2 * trials, extra, 1)
            verdict = paired_judge([a, a2], [b, b2])
            per_stage += extra
        tally.add(verdict, per_stage, stage)
    return tally


def check_design(text: str) -> str:
    if text.startswith("pairs"):
        _, _, counts = text.partition(":")
        n, _, e = (counts or "8+16").partition("+")
        if not (n.isdigit() and int(n) >= 3 and (not e or e.isdigit())):
            raise argparse.ArgumentTypeError(
                f"design {text!r}: pairs or pairs:N+E, e.g. pairs:8+16"
            )
        return f"pairs:{int(n)}+{int(e or 0)}"
    first, _, more = text.partition("+")
    if not first or set(first + more) - {"A", "B"} or "A" not in first or "B" not in first:
        raise argparse.ArgumentTypeError(
            f"design {text!r}: letters A and B, e.g. AB+B or ABA+B (after +: while INCONCLUSIVE)"
        )
    return text


# --------------------------------------------------------------------------- report


def verdict_line(aa: StagedTally, detections: Mapping[str, StagedTally]) -> str:
    """Whether the issue's targets are met: by the interval, by the estimate only, or not."""
    n = aa.comparisons
    lo, hi = wilson(aa.blocked, n)
    if hi <= TARGET_AA:
        aa_text = "A/A <= 5%: met (the whole interval)"
    elif aa.blocked / n <= TARGET_AA:
        aa_text = f"A/A <= 5%: estimate only (interval up to {100 * hi:.1f}%)"
    else:
        aa_text = "A/A <= 5%: **not met**"
    parts = [aa_text]
    for name, tally in detections.items():
        lo, _hi = wilson(tally.blocked, tally.comparisons)
        est = tally.blocked / tally.comparisons
        if lo >= TARGET_DETECTION:
            parts.append(f"detection at {name} >= 95%: met (the whole interval)")
        elif est >= TARGET_DETECTION:
            parts.append(f"detection at {name} >= 95%: estimate only (from {100 * lo:.1f}%)")
        else:
            parts.append(f"detection at {name} >= 95%: **not met**")
    return "; ".join(parts)


def run_level(result: Mapping[str, Any], stage: str, metric: str) -> float:
    """One recorded run's level of ``metric`` at ``stage``: the median of its valid trials
    (a latency's per-trial median, as the gate reads it)."""
    values = []
    for trial in result.get("trials") or []:
        if trial.get("stage") != stage or not trial.get("valid", True):
            continue
        value = (trial.get("metrics") or {}).get(metric)
        value = value.get("median") if isinstance(value, Mapping) else value
        if isinstance(value, (int, float)) and value > 0:
            values.append(float(value))
    if not values:
        raise SystemExit(f"stage {stage}: no valid trial with {metric}")
    return statistics.median(values)


def spread_table(
    runs: Sequence[Mapping[str, Any]], names: Sequence[str], metrics: Sequence[str], alpha: float
) -> list[str]:
    """The run-to-run spread of the recorded runs, per stage and metric, two ways, and the
    limit it lets A-B-A decide at the stage's alpha (``ranks.decidable_limit_pct``).

    ``consecutive``: sd(log(m[i+1] / m[i])) / sqrt(2), the estimate lab/notes/benchmarks.md uses
    ("Runs, not trials"). ``A-B-A``: sd(log m[i+1] - (log m[i] + log m[i+2]) / 2) /
    sqrt(1.5), what the spread looks like to an A-B-A contrast, where a drift that is
    steady over three runs cancels."""
    k_alpha = alpha / len(names)
    lines = [
        f"**Run-to-run spread of the {len(runs)} recorded runs** (per stage and metric; "
        f"decidable limit at alpha {k_alpha:g} a stage for A-B-A's 2+1 runs and, after the "
        "extra candidate run, 2+2)",
        "",
        "| stage | metric | run medians | consecutive | A-B-A | decidable limit 2+1, 2+2 |",
        "|---|---|---|---:|---:|---|",
    ]
    for stage in names:
        for metric in metrics:
            levels = [math.log(run_level(r, stage, metric)) for r in runs]
            steps = [b - a for a, b in zip(levels, levels[1:], strict=False)]
            aba = [levels[i + 1] - (levels[i] + levels[i + 2]) / 2 for i in range(len(levels) - 2)]
            consecutive = 100 * statistics.stdev(steps) / math.sqrt(2) if len(steps) > 1 else 0.0
            contrast = 100 * statistics.stdev(aba) / math.sqrt(1.5) if len(aba) > 1 else 0.0
            limits = ", ".join(
                f"{ranks.decidable_limit_pct(consecutive, k, k_alpha):.1f}%"
                for k in ((2, 1), (2, 2))
            )
            medians = " ".join(f"{math.exp(v):.4g}" for v in levels)
            lines.append(
                f"| {stage} | {metric} | {medians} | {consecutive:.1f}% | {contrast:.1f}% "
                f"| {limits} |"
            )
    return lines


def table(
    rows: Sequence[tuple[str, str, StagedTally, str | None]], names: Sequence[str]
) -> list[str]:
    """One markdown table: every row a scenario of one method and setting."""
    lines = [
        "| method | scenario | comparisons | blocked (95% interval) | FAIL, INCONCL. "
        "| blocked by stage | FAIL elsewhere | cand. trials/stage |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, label, t, stage in rows:
        n = t.comparisons
        by = ", ".join(f"{s} {dq.pct(t.blocked_by[s], n)}" for s in names)
        elsewhere = dq.pct(t.failed_elsewhere, n) if stage else "-"
        lines.append(
            f"| {method} | {label} | {n} | {rate(t.blocked, n)} | {dq.pct(t.fail, n)}, "
            f"{dq.pct(t.inconclusive, n)} | {by} | {elsewhere} | {t.trials / n:.1f} |"
        )
    return lines


def report(args: argparse.Namespace, pools: StagedPools, command: str) -> str:
    synthetic = not args.sources
    noise = dq.Noise(
        args.trial_noise if args.trial_noise is not None else (0.03 if synthetic else 0.0),
        args.hiccup_rate if args.hiccup_rate is not None else (0.1 if synthetic else 0.0),
    )
    metrics = args.metrics.split(",")
    config_kw = {"run_spread_pct": args.run_spread} if args.run_spread else {}
    slow = args.regression / 100.0
    by_trial = args.resample == "trials"
    schedules = args.schedule or [f"{default_trials(pools)}+16"]
    gates = stage_gates_of(args.gates_from) if args.gates_from else None
    gates_text = (
        f"`{args.gates_from}`: {json.dumps(gates)}" if args.gates_from else "the records' own"
    )
    lines = [
        f"Command: `{command}`",
        "",
        f"- Stages: {', '.join(pools.names)}; pools: {pools.source}.",
        f"- Resampling: {args.resample}; trial noise {noise.trial_sigma:.0%} lognormal, "
        f"{noise.hiccup_rate:.0%} heavy-tailed; run level {args.run_noise:g}% per measurement "
        f"run (shared by its stages); seed {args.seed}.",
        f"- Judge: `benchgate.stages.judge_staged` as `benchgate_gate` calls it: "
        f"{', '.join(metrics)}"
        f", output_tokens_per_s critical, the workload's stage gates, limit {args.limit:g}%, "
        f"run_spread_pct {args.run_spread:g}, alpha {args.alpha:g} split over "
        f"{len(pools.names)} stages ({args.correction}); INCONCLUSIVE blocks.",
        f"- Stage gates: {gates_text}.",
        "",
    ]
    summaries = []
    for text in schedules:
        plan = dq.parse_plan(text, args.alpha)
        config = rules.GateConfig(
            alpha=args.alpha, fail_requires_bound=plan.config.fail_requires_bound, **config_kw
        )
        judge = Judge(tuple(rules.make_specs(metrics, args.limit)), config, args.correction, gates)
        aa = resampled(
            pools,
            plan,
            judge,
            noise,
            args.run_noise / 100,
            None,
            0.0,
            by_trial,
            args.comparisons,
            args.seed,
        )
        rows: list[tuple[str, str, StagedTally, str | None]] = [("resampled", "A/A", aa, None)]
        found: dict[str, StagedTally] = {}
        for i, name in enumerate(pools.names, start=1):
            t = resampled(
                pools,
                plan,
                judge,
                noise,
                args.run_noise / 100,
                name,
                slow,
                by_trial,
                args.comparisons,
                args.seed + i,
            )
            found[name] = t
            rows.append(("resampled", f"{args.regression:g}% slower at {name}", t, name))
        lines += [f"**{plan.label}**", "", *table(rows, pools.names), ""]
        summaries.append(f"- {plan.label}, resampled: {verdict_line(aa, found)}.")
    if args.replay:
        runs = [_read(p) for p in args.sources]
        config = rules.GateConfig(alpha=args.alpha, **config_kw)
        judge = Judge(tuple(rules.make_specs(metrics, args.limit)), config, args.correction, gates)
        rows = []
        for design in args.replay:

            def one(stage: str | None, factor: float, design: str = design) -> StagedTally:
                if design.startswith("pairs:"):
                    n, _, e = design.partition(":")[2].partition("+")
                    return replay_pairs(runs, int(n), int(e), judge, stage, factor)
                return replay(runs, design, judge, stage, factor)

            aa = one(None, 1.0)
            rows.append((f"replay {design}", "A/A", aa, None))
            found = {}
            for name in pools.names:
                found[name] = one(name, 1.0 - slow)
                rows.append(
                    (
                        f"replay {design}",
                        f"{args.regression:g}% slower at {name}",
                        found[name],
                        name,
                    )
                )
            summaries.append(f"- replay {design}: {verdict_line(aa, found)}.")
        lines += [*spread_table(runs, pools.names, metrics, args.alpha), ""]
        lines += [
            f"**Replay of {len(runs)} recorded runs in order** (each window of consecutive "
            "runs one comparison; windows overlap, so the intervals are too narrow; "
            "a candidate run has its recorded trials per stage)",
            "",
            *table(rows, pools.names),
            "",
        ]
    lines += [
        "Blocked: the whole staged verdict FAIL or INCONCLUSIVE. blocked by stage: how often "
        "each stage was not PASS. FAIL elsewhere: a stage that was not slowed FAILed.",
        "",
        "Targets (issue 19: A/A <= 5% for the whole staged verdict, >= 95% detection of "
        f"a {args.regression:g}% regression at any single stage):",
        *summaries,
        "",
    ]
    return "\n".join(lines)


def stage_gates_of(path: str) -> dict[str, dict[str, Any]]:
    """The ``gate`` block of every stage of a workload file (judge recorded runs with a
    workload's current gates rather than the ones they were measured with)."""
    workload = load_workload(path)
    if not workload.staged:
        raise SystemExit(f"{path}: not a staged workload (no stages:)")
    return {str(st.name): dict(st.gate) for st in workload.stages if st.gate}


def default_trials(pools: StagedPools) -> int:
    params = pools.workload.get("params") or {}
    trials = params.get("trials") if isinstance(params, Mapping) else None
    return int(trials) if isinstance(trials, int) and trials >= 3 else 6


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--from",
        dest="sources",
        type=Path,
        action="append",
        help="staged benchgate.result/1 with per-request records (repeatable; replay: in order)",
    )
    p.add_argument(
        "--workload",
        default="workloads/demo-staged.yml",
        help="without --from: the staged workload whose stages the synthetic pools follow",
    )
    p.add_argument("--resample", choices=("requests", "trials"), default="requests")
    p.add_argument("--comparisons", type=int, default=200, help="per scenario (>= 20)")
    p.add_argument(
        "--schedule",
        action="append",
        help="TRIALS+EXTRA[xROUNDS][:bound|:point][:aba] per stage, repeatable "
        "(default: the workload's trials + 16, the playbook's benchgate_extra_trials)",
    )
    p.add_argument(
        "--replay",
        action="append",
        type=check_design,
        help="AB+B, ABA+B, or pairs[:N+E] (side by side; --from)",
    )
    p.add_argument(
        "--gates-from",
        metavar="WORKLOAD",
        help="judge every stage with this workload's gate blocks (default: the records' own)",
    )
    p.add_argument("--metrics", default=",".join(rules.DEFAULT_METRICS))
    p.add_argument("--alpha", type=float, default=rules.GateConfig.alpha)
    p.add_argument("--correction", choices=stages.CORRECTIONS, default="bonferroni")
    p.add_argument("--limit", type=float, default=5.0, help="max_regression_pct")
    p.add_argument("--run-spread", type=float, default=0.0, help="run_spread_pct (default 0)")
    p.add_argument("--run-noise", type=float, default=0.0, help="percent level per run")
    p.add_argument("--regression", type=float, default=15.0, help="percent, in one stage")
    p.add_argument("--requests-per-trial", type=int, help="default: as in the source")
    p.add_argument("--trial-noise", type=float, help="synthetic: 0.03, --from: 0")
    p.add_argument("--hiccup-rate", type=float, help="synthetic: 0.1, --from: 0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-docs", type=Path, help="replace/append the table in this file")
    p.add_argument("--docs-tag", default="staged-synthetic")
    args = p.parse_args(argv)
    if args.comparisons < 20:
        p.error("--comparisons must be at least 20")
    for text in args.schedule or ():
        try:
            dq.parse_plan(text, args.alpha)
        except ValueError as exc:
            p.error(str(exc))
    if (args.replay or args.resample == "trials") and not args.sources:
        p.error("--replay and --resample trials need --from")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sources:
        pools = pools_from_results(args.sources, args.requests_per_trial)
        if args.resample == "trials" and not all(p.trials for p in pools.pools.values()):
            raise SystemExit("--resample trials: a stage has no trial with a duration_s")
    else:
        pools = synthetic_pools(args.workload, args.seed)
    raw = list(sys.argv[1:] if argv is None else argv)
    script = "lab/experiments/gate_decision_quality_staged.py"
    command = shlex.join([".venv/bin/python", script, *raw])
    t0 = time.perf_counter()
    block = report(args, pools, command)
    print(block)
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.write_docs:
        dq.write_block(args.write_docs, block, args.docs_tag)
        print(f"wrote the table to {args.write_docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
