"""Staged results: split them by stage, merge them, judge every stage.

A staged workload (``stages:`` in the workload file, ``benchgate.workload``)
measures several load points in one result: every trial carries its
``stage`` and the result a ``stages`` block (each stage's load and summary).
Nothing here changes how one comparison is judged: each stage's trials are
cut out as an ordinary result (:func:`split_result`) and handed to
:func:`benchgate.rules.judge_results`, the same judge an unstaged workload
gets. What this module adds is the verdict over the stages.

Rule
----
* Every stage is judged with its own metric specs: the judge's (the command
  line's, the module's) unless the stage's ``gate`` block in the workload
  says otherwise (:func:`stage_specs`: its ``metrics``, ``critical``,
  ``max_regression_pct``, per-metric ``thresholds`` and ``latency_stat``;
  the stage's own settings win).
* The host passes only when every stage passes: FAIL beats INCONCLUSIVE
  beats PASS over the stages, as over the metrics within one. A stage that
  one side did not measure is INCONCLUSIVE (it never passes).

Multiple comparisons
--------------------
With ``k`` stages, each stage is judged at ``alpha / k`` (Bonferroni,
``correction="bonferroni"``, the default). Each stage's FAIL needs its
one-sided bound beyond the limit at level ``1 - alpha/k``, so an identical
release is falsely failed at any of the ``k`` stages with probability at most
``k * alpha/k = alpha`` per metric: the staged verdict's A/A false-FAIL rate
keeps the single-stage bound, whatever the dependence between stages (the
stages run on the same server, so their noise is correlated; Bonferroni needs
no independence). Symmetrically, the ``k`` upper bounds hold together with
probability at least ``1 - alpha``, so a regression beyond the limit at any
stage is passed with probability at most ``alpha``. Within a stage the
metrics are treated as :mod:`benchgate.rules` treats them (no split: the
bound rule already keeps false FAILs far below ``alpha``; see "Re-runs and
false blocks" there). The price is wider intervals: more INCONCLUSIVE at the
same trials, and a floor on the trials per stage (at ``alpha/k = 0.025``,
4 + 4 trials are the fewest whose bound exists; 3 + 3 can never decide).
``correction="none"`` judges every stage at ``alpha`` (for comparisons in
``lab/experiments/``; its A/A false-FAIL rate grows with the number of stages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .results import summarize_dicts
from .rules import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    GateConfig,
    MetricSpec,
    Stage,
    Verdict,
    direction_of,
    judge_results,
    make_specs,
)
from .samples import merge_results

CORRECTIONS = ("bonferroni", "none")


# --------------------------------------------------------------------------
# Reading staged results
# --------------------------------------------------------------------------


def _trial_dicts(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    trials = result.get("trials")
    return [t for t in trials if isinstance(t, Mapping)] if isinstance(trials, list) else []


def is_staged(result: Mapping[str, Any]) -> bool:
    """Whether a result dict comes from a staged workload."""
    return bool(result.get("stages")) or any(
        isinstance(t.get("stage"), str) for t in _trial_dicts(result)
    )


def stage_names(result: Mapping[str, Any]) -> list[str]:
    """The stages of a result, in the order they ran ([] when unstaged)."""
    names: list[str] = []
    for entry in result.get("stages") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            names.append(entry["name"])
    for trial in _trial_dicts(result):
        stage = trial.get("stage")
        if isinstance(stage, str) and stage not in names:
            names.append(stage)
    return names


def stage_params(result: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The load a stage measured (its workload params), {} when not recorded."""
    for entry in result.get("stages") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            params = entry.get("params")
            return dict(params) if isinstance(params, Mapping) else {}
    return {}


def split_result(result: Mapping[str, Any]) -> dict[str | None, dict[str, Any]]:
    """One ordinary result per stage, in order: ``{name: result}``.

    Each holds the stage's trials only (their ``run`` labels kept), a summary
    computed from them (so a merged result's stages are summarized right) and
    ``stage``: its name. An unstaged result is one stage: ``{None: result}``.
    """
    if not is_staged(result):
        return {None: dict(result)}
    top = {k: v for k, v in result.items() if k != "stages"}
    out: dict[str | None, dict[str, Any]] = {}
    for name in stage_names(result):
        trials = [t for t in _trial_dicts(result) if t.get("stage") == name]
        out[name] = {
            **top,
            "stage": name,
            "stage_params": stage_params(result, name),
            "trials": trials,
            "summary": dataclasses.asdict(summarize_dicts(trials)),
        }
    return out


def merge_staged(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`benchgate.samples.merge_results`, with the ``stages`` block redone.

    The trials keep their stage; each stage's summary is recomputed from the
    merged trials (``merge_results`` leaves the first result's). For unstaged
    results this is ``merge_results`` itself.
    """
    merged = merge_results(results)
    # Every stage any of them measured, in the order first seen (a later
    # measurement may add a stage: off at a composed arm's threshold, say).
    entries: dict[Any, Mapping[str, Any]] = {}
    for result in results:
        for entry in result.get("stages") or []:
            if isinstance(entry, Mapping):
                entries.setdefault(entry.get("name"), entry)
    if not entries:
        return merged
    trials = _trial_dicts(merged)
    merged["stages"] = [
        {
            **entry,
            "summary": dataclasses.asdict(
                summarize_dicts([t for t in trials if t.get("stage") == name])
            ),
        }
        for name, entry in entries.items()
    ]
    return merged


def stage_gates(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``gate`` block of every stage, as the workload carried into the result."""
    workload = result.get("workload")
    params = workload.get("params") if isinstance(workload, Mapping) else None
    stages = params.get("stages") if isinstance(params, Mapping) else None
    gates: dict[str, dict[str, Any]] = {}
    for entry in stages or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("gate"), Mapping):
            gates[str(entry.get("name"))] = dict(entry["gate"])
    return gates


# --------------------------------------------------------------------------
# Judging every stage
# --------------------------------------------------------------------------


def stage_specs(
    specs: Sequence[MetricSpec],
    gate: Mapping[str, Any] | None,
    default_limit: float = 5.0,
) -> list[MetricSpec]:
    """The metric specs of a stage: ``specs`` with the stage's ``gate`` applied.

    ``gate`` (the stage's block in the workload): ``metrics`` replaces the
    judged metrics; ``critical`` the critical ones (and is judged);
    ``thresholds`` sets a metric's limit (and is judged);
    ``max_regression_pct`` every other metric's limit. What the gate does not
    say comes from ``specs``; a metric new to them gets ``default_limit``.
    Raises ValueError for a metric whose direction is unknown.
    """
    if not gate:
        return list(specs)
    by_name = {s.name: s for s in specs}
    names = list(gate.get("metrics") or by_name)
    critical = gate.get("critical")
    thresholds = dict(gate.get("thresholds") or {})
    for extra in [*(critical or []), *thresholds]:
        if extra not in names:
            names.append(extra)
    critical_set = set(critical) if critical is not None else {s.name for s in specs if s.critical}
    out: list[MetricSpec] = []
    for name in names:
        base = by_name.get(name)
        if name in thresholds:
            limit = float(thresholds[name])
        elif gate.get("max_regression_pct") is not None:
            limit = float(gate["max_regression_pct"])
        else:
            limit = base.max_regression_pct if base is not None else float(default_limit)
        direction = base.resolved_direction() if base is not None else direction_of(name)
        out.append(MetricSpec(name, limit, direction, name in critical_set))
    return out


def _worst(verdicts: Sequence[str]) -> str:
    for name in (FAIL, INCONCLUSIVE):
        if name in verdicts:
            return name
    return PASS if verdicts else INCONCLUSIVE


def judge_staged(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    specs: Sequence[MetricSpec] | None = None,
    config: GateConfig | None = None,
    *,
    gates: Mapping[str, Mapping[str, Any]] | None = None,
    correction: str = "bonferroni",
    default_limit: float = 5.0,
) -> Verdict:
    """Judge every stage of two staged results; the host passes when all pass.

    ``specs`` and ``config`` are the judge's settings for every stage;
    ``gates`` (stage name -> gate block) override the ones the results carry
    (the candidate's workload, else the baseline's). Raises ValueError when
    one result is staged and the other is not, or for a bad gate or correction.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    cfg = config or GateConfig()
    base_specs = list(specs) if specs is not None else make_specs()
    if is_staged(baseline) != is_staged(candidate):
        which, staged = ("baseline", baseline) if is_staged(baseline) else ("candidate", candidate)
        raise ValueError(
            f"only the {which} has stages ({', '.join(stage_names(staged))}): "
            "measure both with the same workload"
        )
    b_parts, c_parts = split_result(baseline), split_result(candidate)
    names = list(c_parts) + [n for n in b_parts if n not in c_parts]
    all_gates = {**stage_gates(baseline), **stage_gates(candidate), **dict(gates or {})}
    alpha = cfg.alpha / len(names) if correction == "bonferroni" else cfg.alpha
    out: list[Stage] = []
    for name in names:
        label = name or "all"
        gate = all_gates.get(name) if name is not None else None
        try:
            specs_here = stage_specs(base_specs, gate, default_limit)
            cfg_here = replace(
                cfg,
                alpha=alpha,
                latency_stat=(gate or {}).get("latency_stat") or cfg.latency_stat,
            )
        except ValueError as exc:
            raise ValueError(f"stage {label}: {exc}") from exc
        params = (stage_params(candidate, name) or stage_params(baseline, name)) if name else {}
        if name not in b_parts or name not in c_parts:
            side = "baseline" if name not in b_parts else "candidate"
            why = f"not measured on the {side}, so it cannot pass"
            verdict = Verdict(INCONCLUSIVE, [why], [], alpha=alpha)
        else:
            verdict = judge_results(b_parts[name], c_parts[name], specs_here, cfg_here)
        out.append(Stage(label, verdict, alpha, params))
    overall = _worst([s.verdict.verdict for s in out])
    reasons = [
        f"stage {s.stage}: {reason}"
        for s in out
        if s.verdict.verdict == overall
        for reason in s.verdict.reasons
    ]
    warnings = [f"stage {s.stage}: {w}" for s in out for w in s.verdict.warnings]
    metrics = [replace(m, stage=s.stage) for s in out for m in s.verdict.metrics]
    return Verdict(overall, reasons, metrics, warnings, cfg.alpha, out, correction)
