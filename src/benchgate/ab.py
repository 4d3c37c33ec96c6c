"""Speculative decoding A/B: which configuration serves this release best?

The field report's rule: a speculative config that helped on one release can
hurt on the next, so every upgrade measures plain decoding ("off") and each
candidate speculative configuration on the new release, and keeps the winner.

* :func:`expand_arms` turns the configured candidates (plus a sweep of k) into
  named arms, "off" first.
* :func:`choose` compares each speculative arm with "off" on the objective
  metric (per-trial samples, Hodges-Lehmann shift with one-sided bounds, as the
  gate does). A speculative arm wins only when its *lower* bound beats "off" by
  more than ``min_gain_pct``: speculation costs memory and a draft that can
  break on the next release, so it has to prove itself. Among proven arms the
  largest estimated gain wins; otherwise "off" serves.
* :func:`choose_staged` does the same at every stage of a staged workload
  (``benchgate.stages``) and picks the arm by a ``rule`` (:data:`RULES`):

  - ``never_slower`` (the default): an arm wins only when it is proven faster
    than "off" (lower bound above ``min_gain_pct``) at one stage at least
    and proven not slower than ``max_loss_pct`` (default 5%, the gate's
    limit) at every stage: its lower bound at each stage is at least
    ``-max_loss_pct``. Among such arms, the best at its worst stage wins.
    Speculation's gain flips with load (faster at one stream, slower under
    many), and a fleet's load moves: without knowing which stage the fleet
    lives at, an arm must not make any of them slower. With ``k`` stages each
    is judged at ``alpha / k`` (Bonferroni): "faster at one stage at least"
    is a union of ``k`` chances to be wrong, and the split keeps an arm that
    is faster nowhere from winning more often than ``alpha``.
  - ``stage:<name>``: the stage that matters most decides, exactly as
    :func:`choose` decides on one load (at ``alpha``); the other stages are
    shown, not weighed. An arm that failed at any stage never wins.

Pure functions, no I/O: the Ansible module ``benchgate_speculative_ab`` and
the tests call them.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import numfmt, ranks, serve, stages, table
from .samples import clean_samples, count_trials, samples_from_result
from .serverconfig import config_text, context_text, differences, fingerprint

OFF = "off"
OBJECTIVES = ("output_tokens_per_s", "request_throughput", "goodput")
NEVER_SLOWER = "never_slower"
#: The rules :func:`choose_staged` accepts (``stage:<name>`` names a stage).
RULES = (NEVER_SLOWER, "stage:<name>")
DEFAULT_RULE = NEVER_SLOWER

_SHORT_METHOD = {"draft_model": "draft", "ngram": "ngram"}


@dataclass(frozen=True)
class Arm:
    name: str
    config: dict[str, Any]  # {} = off


def arm_name(config: Mapping[str, Any]) -> str:
    """``{}`` → ``off``; ``{method: ngram, num_speculative_tokens: 3}`` → ``ngram-k3``."""
    if not config:
        return OFF
    method = serve.normalize_speculative(config).get("method") or "spec"
    short = _SHORT_METHOD.get(method, method)
    k = config.get("num_speculative_tokens")
    return f"{short}-k{k}" if k is not None else short


def expand_arms(
    candidates: Sequence[Any], k_sweep: Sequence[int] = (), include_off: bool = True
) -> list[Arm]:
    """Named arms from candidate configs, each also tried with every k in ``k_sweep``.

    A candidate is a speculative mapping, or ``{name: ..., config: {...}}`` to
    name it. Duplicates (same normalized config) are dropped; "off" comes first.
    Raises ValueError for anything that is not a mapping or a bad k.
    """
    for k in k_sweep:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"every k in the sweep must be a whole number >= 1, got {k!r}")
    arms: list[Arm] = [Arm(OFF, {})] if include_off else []
    seen: set[str] = {repr([])} if include_off else set()
    names = {arm.name for arm in arms}
    for entry in candidates:
        if not isinstance(entry, Mapping):
            raise ValueError(f"a speculative candidate must be a mapping, got {entry!r}")
        given_name = None
        config: Any = entry
        if "config" in entry and set(entry) <= {"name", "config"}:
            given_name = entry.get("name")
            config = entry["config"]
        base = serve.normalize_speculative(config)
        variants = [base]
        if base and k_sweep:
            variants = [{**base, "num_speculative_tokens": k} for k in k_sweep]
        for variant in variants:
            key = repr(sorted(variant.items()))
            if key in seen:
                continue
            seen.add(key)
            name = arm_name(variant)
            if given_name and (len(variants) == 1):
                name = str(given_name)
            elif given_name:
                name = f"{given_name}-k{variant.get('num_speculative_tokens')}"
            unique, n = name, 2
            while unique in names:
                unique, n = f"{name}-{n}", n + 1
            names.add(unique)
            arms.append(Arm(unique, variant))
    return arms


@dataclass
class ArmOutcome:
    """One arm's figures on this release, and how it compared with "off"."""

    name: str
    config: dict[str, Any]
    valid_trials: int = 0
    objective_median: float | None = None
    output_tokens_per_s: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_acceptance: list[float] = field(default_factory=list)
    gain_pct: float | None = None  # vs off, Hodges-Lehmann estimate
    gain_lo_pct: float | None = None  # one-sided lower bound
    gain_hi_pct: float | None = None  # one-sided upper bound
    status: str = ""  # winner, kept off, slower, not proven faster, failed, reference
    note: str = ""
    # The serving configuration the arm ran (its result's server_config, see
    # benchgate.serverconfig); None when the result does not say.
    server_config: dict[str, Any] | None = None
    # A composed arm (a batch-size schedule, :func:`composed_from`): the static
    # arm it was composed from and its change against it here, as against off.
    composed_from: str | None = None
    versus_static_pct: float | None = None
    versus_static_lo_pct: float | None = None
    versus_static_hi_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out


@dataclass
class StartCheck:
    """One later server start of off and the winner, judged alone by the same rule."""

    start: int  # 2, 3, ...: the first start is the A/B itself
    arm: str  # the winner of the first start
    winner: str | None  # what this start alone chose
    reason: str
    gains: dict[str, float | None]  # the arm's change against off per stage ("" unstaged), %
    seconds: float | None = None  # what the start cost on this host: restarts and measurements

    @property
    def held(self) -> bool:
        return self.winner == self.arm

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "held": self.held}

    def line(self) -> str:
        gains = ", ".join(
            f"{stage + ' ' if stage else ''}{numfmt.change_words(gain)}"
            for stage, gain in self.gains.items()
        )
        what = "held" if self.held else f"did not hold ({self.winner or 'none'} chosen)"
        if self.seconds is not None:
            what += f" (took {self.seconds:.0f} s)"
        return f"start {self.start}: {self.arm} against off: {gains or 'not measured'}: {what}"


@dataclass
class PooledStage:
    """One stage's change of the winner against off over server starts: each start's
    estimate (%), and the interval of their mean on the log scale (Student's t with
    n - 1 degrees of freedom), so that the start-to-start spread is the interval's width."""

    stage: str  # "" unstaged
    gains: list[float]  # each start's estimate, %
    mean_pct: float
    lo_pct: float  # one-sided lower bound at the level of :attr:`PooledStarts.alpha`
    hi_pct: float

    def words(self) -> str:
        each = ", ".join(f"{g:+.1f}%" for g in self.gains)
        where = f"{self.stage}: " if self.stage else ""
        return (
            f"{where}{each} per start, pooled {numfmt.change_words(self.mean_pct)} "
            f"({numfmt.change_words(self.lo_pct)} to {numfmt.change_words(self.hi_pct)})"
        )


@dataclass
class PooledStarts:
    """What decides when later server starts disagree (:func:`confirm_across_starts`)."""

    arm: str
    starts: int
    alpha: float  # one-sided, per stage
    stages: list[PooledStage]
    kept: bool
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        what = "kept" if self.kept else "not decided"
        per_stage = "; ".join(s.words() for s in self.stages) or "not measured"
        return (
            f"pooled over {self.starts} server starts (each start one sample, at alpha "
            f"{self.alpha:.3g} per stage): {self.arm} against off: {per_stage}: {what}, {self.why}"
        )


@dataclass
class Choice:
    winner: str | None
    config: dict[str, Any]
    objective: str
    reason: str
    arms: list[ArmOutcome]
    #: The one-sided level of each arm's bounds against off (the interval is 1 - 2 alpha).
    alpha: float = 0.05
    #: The later server starts that checked a speculative winner (:func:`confirm_across_starts`).
    starts: list[StartCheck] = field(default_factory=list)
    #: The winner's change against off pooled over every start, when the starts disagreed.
    pooled: PooledStarts | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "benchgate.speculative_ab/1",
            "winner": self.winner,
            "config": self.config,
            "objective": self.objective,
            "reason": self.reason,
            "arms": [a.to_dict() for a in self.arms],
            "starts": [c.to_dict() for c in self.starts],
            "pooled": self.pooled.to_dict() if self.pooled else None,
        }


def _median_metric(result: Mapping[str, Any], name: str) -> float | None:
    metric = (result.get("summary") or {}).get("metrics", {}).get(name)
    if isinstance(metric, Mapping) and isinstance(metric.get("median"), (int, float)):
        return float(metric["median"])
    return None


def acceptance_of(result: Mapping[str, Any]) -> tuple[float | None, float | None, list[float]]:
    """Acceptance rate, mean acceptance length and per-position acceptance over all
    valid trials, weighted by each trial's number of drafts (server counters)."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: list[float] = []
    for trial in result.get("trials") or []:
        if not trial.get("valid", False):
            continue
        server = trial.get("server") or {}
        spec = server.get("spec_decode") if server.get("ok") else None
        if not spec or not spec.get("drafts"):
            continue
        d = float(spec["drafts"])
        drafts += d
        draft_tokens += float(spec.get("draft_tokens") or 0.0)
        accepted += float(spec.get("accepted_tokens") or 0.0)
        rates = spec.get("per_position_acceptance") or []
        if len(per_pos) < len(rates):
            per_pos.extend([0.0] * (len(rates) - len(per_pos)))
        for i, rate in enumerate(rates):
            per_pos[i] += float(rate) * d
    if not drafts:
        return None, None, []
    rate = accepted / draft_tokens if draft_tokens else None
    return rate, 1.0 + accepted / drafts, [p / drafts for p in per_pos]


def _outcome(arm: Arm, result: Mapping[str, Any] | None, objective: str) -> ArmOutcome:
    out = ArmOutcome(name=arm.name, config=dict(arm.config))
    if not result:
        return out
    server = result.get("server_config")
    out.server_config = dict(server) if isinstance(server, Mapping) else None
    out.valid_trials, _ = count_trials(result)
    out.objective_median = _median_metric(result, objective)
    out.output_tokens_per_s = _median_metric(result, "output_tokens_per_s")
    out.ttft_ms = _median_metric(result, "ttft_ms.median")
    out.tpot_ms = _median_metric(result, "tpot_ms.median")
    rate, length, per_pos = acceptance_of(result)
    out.acceptance_rate, out.mean_acceptance_length, out.per_position_acceptance = (
        rate,
        length,
        per_pos,
    )
    return out


def _than_off(gain_pct: float | None) -> str:
    """The change in words: "4.0% better than off", or "no change from off" below 0.05%."""
    words = numfmt.change_words(gain_pct)
    return "no change from off" if words == "no change" else f"{words} than off"


def _versus_off(outcome: ArmOutcome, alpha: float) -> str:
    """The arm's change against off in the gate's words: "4.0% better than off (90% interval
    1.0% worse to 9.0% better)"; the objective is one that is better higher."""
    text = _than_off(outcome.gain_pct)
    if outcome.gain_lo_pct is None or outcome.gain_hi_pct is None:
        return text
    return (
        f"{text} ({table.interval_pct(alpha)}% interval {numfmt.change_words(outcome.gain_lo_pct)}"
        f" to {numfmt.change_words(outcome.gain_hi_pct)})"
    )


def choose(
    arms: Sequence[Arm],
    results: Mapping[str, Mapping[str, Any] | None],
    errors: Mapping[str, str] | None = None,
    objective: str = "output_tokens_per_s",
    min_gain_pct: float = 0.0,
    alpha: float = 0.05,
    min_trials: int = 3,
) -> Choice:
    """Pick the arm that serves: see the module docstring for the rule."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    errors = dict(errors or {})
    outcomes = {arm.name: _outcome(arm, results.get(arm.name), objective) for arm in arms}
    samples: dict[str, list[float]] = {}
    for arm in arms:
        measured = results.get(arm.name)
        values = samples_from_result(measured, objective) if measured else []
        samples[arm.name] = clean_samples(values)[0]
    for name, outcome in outcomes.items():
        if name in errors:
            outcome.status, outcome.note = "failed", errors[name]
        elif len(samples[name]) < min_trials:
            outcome.status = "failed"
            outcome.note = f"{len(samples[name])} valid trials with {objective} (need {min_trials})"

    usable = [a for a in arms if outcomes[a.name].status != "failed"]
    if not usable:
        return Choice(
            None,
            {},
            objective,
            "no arm could be measured: " + _failures(outcomes),
            list(outcomes.values()),
            alpha,
        )

    off = outcomes.get(OFF)
    if off is None or off.status == "failed":
        best = max(usable, key=lambda a: statistics.median(samples[a.name]))
        outcomes[best.name].status = "winner"
        why = "plain decoding was not measured" if off is None else f"off failed ({off.note})"
        return Choice(
            best.name,
            dict(best.config),
            objective,
            f"{why}; {best.name} has the highest median {objective} of the arms measured",
            list(outcomes.values()),
            alpha,
        )

    off.status = "reference"
    proven: list[tuple[float, Arm]] = []
    for arm in usable:
        if arm.name == OFF:
            continue
        outcome = outcomes[arm.name]
        shift = ranks.hodges_lehmann(samples[OFF], samples[arm.name], alpha=alpha)
        outcome.gain_pct = shift.change * 100.0
        outcome.gain_lo_pct = shift.change_lo * 100.0
        outcome.gain_hi_pct = shift.change_hi * 100.0
        versus = _versus_off(outcome, alpha)
        if outcome.gain_lo_pct > min_gain_pct:
            proven.append((outcome.gain_pct, arm))
            outcome.note = f"{versus}: proven faster"
        elif outcome.gain_hi_pct < 0:
            outcome.status, outcome.note = "slower", f"{versus}: slower"
        else:
            outcome.status = "not proven faster"
            outcome.note = f"{versus}: not proven faster by more than {min_gain_pct:g}%"

    if not proven:
        off.status = "winner"
        failed = [o.name for o in outcomes.values() if o.status == "failed"]
        tail = f" ({', '.join(failed)} failed)" if failed else ""
        return Choice(
            OFF,
            {},
            objective,
            f"no speculative arm beats plain decoding on {objective}{tail}: off serves",
            list(outcomes.values()),
            alpha,
        )
    _, best = max(proven, key=lambda item: item[0])
    for _, arm in proven:
        outcomes[arm.name].status = "winner" if arm is best else "beaten"
    winner = outcomes[best.name]
    return Choice(
        best.name,
        dict(best.config),
        objective,
        f"{best.name} beats plain decoding on {objective}, "
        f"{_versus_off(winner, alpha)}: {best.name} serves",
        list(outcomes.values()),
        alpha,
    )


def _failures(outcomes: Mapping[str, ArmOutcome]) -> str:
    return "; ".join(f"{o.name}: {o.note}" for o in outcomes.values() if o.status == "failed")


def _change_cell(outcome: ArmOutcome) -> str:
    return numfmt.change_interval(outcome.gain_pct, outcome.gain_lo_pct, outcome.gain_hi_pct)


def _explain(objective: str, level: str) -> str:
    return (
        "median tok/s, TTFT ms, TPOT ms: medians of each arm's trials; vs off: the estimate "
        f"of the change in {objective} that the choice judges, with its {level}% interval"
    )


def _config_lines(arms: Sequence[ArmOutcome]) -> list[str]:
    """The legend of the arms' serving configurations by fingerprint; [] when none is known."""
    legend = {
        fingerprint(a.server_config): config_text(a.server_config)
        for a in arms
        if fingerprint(a.server_config)
    }
    if not legend:
        return []
    off = next((a.server_config for a in arms if a.name == OFF), None)
    apart = [
        f"  {a.name} differs from off in more than speculation: {'; '.join(diff)}"
        for a in arms
        if a.name != OFF and (diff := differences(off, a.server_config, (OFF, a.name)))
    ]
    ran_under: dict[str, list[str]] = {}
    for a in arms:
        if text := context_text(a.server_config):
            ran_under.setdefault(text, []).append(a.name)
    return [
        "config: the server's configuration as each arm ran it:",
        *(f"  {fp}: {text}" for fp, text in legend.items()),
        *(f"  {', '.join(names)} ran under: {text}" for text, names in ran_under.items()),
        *apart,
    ]


def render_table(choice: Choice) -> str:
    """The per-arm table (the field report's, per release): figures and outcome.

    One story per arm: the medians are labelled as such, and "vs off" is the
    estimate that the choice judges, with its interval, better or worse.
    """
    level = table.interval_pct(choice.alpha)
    positions = max((len(a.per_position_acceptance) for a in choice.arms), default=0)
    configs = any(fingerprint(a.server_config) for a in choice.arms)
    header = ["arm", *(["config"] if configs else []), "median tok/s", "TTFT ms", "TPOT ms"]
    header += ["accept", "len"]
    header += [f"pos{i}" for i in range(positions)]
    header += [f"vs off ({level}% interval)", "outcome"]
    rows = [header]
    for a in choice.arms:
        row = [
            a.name,
            *([fingerprint(a.server_config) or numfmt.MISSING] if configs else []),
            numfmt.number(a.output_tokens_per_s, 1),
            numfmt.number(a.ttft_ms, 1),
            numfmt.number(a.tpot_ms, 2),
            _rate(a.acceptance_rate),
            numfmt.number(a.mean_acceptance_length, 2),
        ]
        row += [
            _rate(a.per_position_acceptance[i])
            if i < len(a.per_position_acceptance)
            else numfmt.MISSING
            for i in range(positions)
        ]
        row += [_change_cell(a), a.status]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(
        lines
        + [_explain(choice.objective, level)]
        + _config_lines(choice.arms)
        + [check.line() for check in choice.starts]
        + ([choice.pooled.line()] if choice.pooled else [])
        + [f"chosen: {choice.winner or 'none'}: {choice.reason}"]
    )


def _rate(value: float | None) -> str:
    return numfmt.number(None if value is None else value * 100, 1, "%")


# --------------------------------------------------------------------------
# Staged A/B: every arm at every stage, one rule picks
# --------------------------------------------------------------------------


@dataclass
class StageChoice:
    """The comparison of every arm with "off" at one stage (``choice.arms``)."""

    stage: str
    params: dict[str, Any]
    alpha: float
    choice: Choice

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "params": self.params,
            "alpha": self.alpha,
            "arms": [a.to_dict() for a in self.choice.arms],
        }


@dataclass
class StagedChoice:
    """The arm a rule picked from every stage's comparison."""

    winner: str | None
    config: dict[str, Any]
    objective: str
    rule: str
    reason: str
    stages: list[StageChoice]
    # Per arm: its outcome over the stages ("chosen", "slower at busy", ...).
    verdicts: dict[str, str] = field(default_factory=dict)
    # Composed arm -> the static arm it was composed from (:func:`composed_from`).
    composed: dict[str, str] = field(default_factory=dict)
    # The rule's loss limit (%): how much slower than off an arm may be shown to be.
    max_loss_pct: float = 5.0
    #: The later server starts that checked a speculative winner (:func:`confirm_across_starts`).
    starts: list[StartCheck] = field(default_factory=list)
    #: The winner's change against off pooled over every start, when the starts disagreed.
    pooled: PooledStarts | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form; ``arms`` (one entry per arm, its figures per stage) is
        what the ledger's ``ab_choices`` stores. No arm carries a single
        ``gain_pct``: the gain is a stage's."""
        arms = []
        for name, status in self.verdicts.items():
            per_stage: dict[str, Any] = {}
            config: dict[str, Any] = {}
            for s in self.stages:
                for outcome in s.choice.arms:
                    if outcome.name == name:
                        config = outcome.config
                        per_stage[s.stage] = {
                            k: v
                            for k, v in outcome.to_dict().items()
                            if k not in ("name", "config", "per_position_acceptance")
                        }
            arms.append(
                {
                    "name": name,
                    "config": config,
                    "status": status,
                    "stages": per_stage,
                    **({"composed_from": self.composed[name]} if name in self.composed else {}),
                }
            )
        return {
            "schema": "benchgate.speculative_ab_staged/1",
            "winner": self.winner,
            "config": self.config,
            "objective": self.objective,
            "rule": self.rule,
            "reason": self.reason,
            "arms": arms,
            "stages": [s.to_dict() for s in self.stages],
            "by_load": [hint.to_dict() for hint in drafting_by_load(self)],
            "starts": [c.to_dict() for c in self.starts],
            "pooled": self.pooled.to_dict() if self.pooled else None,
        }


def note_start_seconds(choice: Choice | StagedChoice, seconds: Mapping[str, float]) -> None:
    """Say what the later starts cost: each check's seconds (by start number, as
    strings), and their sum on this host at the end of the choice's reason."""
    for check in choice.starts:
        value = seconds.get(str(check.start))
        check.seconds = float(value) if value is not None else None
    known = [c.seconds for c in choice.starts if c.seconds is not None]
    if known:
        choice.reason += f" (later server starts: {sum(known):.0f} s on this host)"


def parse_rule(rule: str, stage_names: Sequence[str]) -> str | None:
    """The decisive stage of ``rule`` (None for ``never_slower``); ValueError if unknown."""
    if rule == NEVER_SLOWER:
        return None
    if rule.startswith("stage:"):
        name = rule[len("stage:") :]
        if name in stage_names:
            return name
        raise ValueError(
            f"rule {rule!r} names no stage of the workload (stages: {', '.join(stage_names)})"
        )
    raise ValueError(f"rule must be {NEVER_SLOWER!r} or 'stage:<name>', got {rule!r}")


def choose_staged(
    arms: Sequence[Arm],
    results: Mapping[str, Mapping[str, Any] | None],
    errors: Mapping[str, str] | None = None,
    objective: str = "output_tokens_per_s",
    min_gain_pct: float = 0.0,
    alpha: float = 0.05,
    min_trials: int = 3,
    rule: str = DEFAULT_RULE,
    max_loss_pct: float = 5.0,
) -> StagedChoice:
    """Compare every arm with "off" at every stage; pick by ``rule`` (module docstring).

    ``results``: one staged result per arm (the same staged workload). An arm
    without a result, or whose result lacks a stage, counts as failed there.
    A composed arm (:func:`composed_from`) may have stages no other arm has
    (the threshold stage of :func:`drafting_by_load`, measured for it and for
    off only): there it is compared with off alone.
    """
    if max_loss_pct < 0:
        raise ValueError(f"max_loss_pct must be >= 0, got {max_loss_pct}")
    names: list[str] = []
    for result in results.values():
        for name in stages.stage_names(result or {}):
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError("no arm's result has stages: use choose() for an unstaged workload")
    composed = composed_from(arms)
    extra = _extra_stages(arms, results, composed)
    common = [n for n in names if n not in extra]
    decisive = parse_rule(rule, common)
    # Alpha is split over the stages every arm has, so that adding a composed
    # arm changes no other arm's verdict; its threshold stage only checks that it
    # is not slower there (never that it is faster), at the same level.
    stage_alpha = alpha if decisive is not None else alpha / len(common)
    split = {arm: stages.split_result(r) if r else {} for arm, r in results.items()}
    per_stage: list[StageChoice] = []
    for name in names:
        here = [a for a in arms if name not in extra or a.name == OFF or a.name in composed]
        stage_results = {arm: parts.get(name) for arm, parts in split.items()}
        stage_errors = dict(errors or {})
        for arm in here:
            if (
                arm.name not in stage_errors
                and results.get(arm.name)
                and not stage_results.get(arm.name)
            ):
                stage_errors[arm.name] = f"stage {name} not measured"
        choice = choose(
            here, stage_results, stage_errors, objective, min_gain_pct, stage_alpha, min_trials
        )
        _versus_static(choice, composed, stage_results, objective, stage_alpha)
        recorded = (stages.stage_params(r, name) for r in results.values() if r)
        params = next((p for p in recorded if p), {})
        per_stage.append(StageChoice(name, params, stage_alpha, choice))
    return _apply_rule(
        arms, per_stage, objective, rule, decisive, min_gain_pct, max_loss_pct, composed
    )


def composed_from(arms: Sequence[Arm]) -> dict[str, str]:
    """Composed arm -> the static arm it was composed from: an arm whose config has a
    batch-size schedule (:data:`SCHEDULE_KEY`) and is another arm's config plus it."""
    out = {}
    for arm in arms:
        if SCHEDULE_KEY not in arm.config:
            continue
        static = {k: v for k, v in arm.config.items() if k != SCHEDULE_KEY}
        match = next((a.name for a in arms if a.config == static and a.name != OFF), None)
        if match is not None:
            out[arm.name] = match
    return out


def _extra_stages(
    arms: Sequence[Arm],
    results: Mapping[str, Mapping[str, Any] | None],
    composed: Mapping[str, str],
) -> set[str]:
    """Stages only composed arms (and off) measured: no other speculative arm's result has them."""
    if not composed:
        return set()
    others = [
        set(stages.stage_names(results.get(a.name) or {}))
        for a in arms
        if a.name != OFF and a.name not in composed and results.get(a.name)
    ]
    if not others:
        return set()
    mine = {n for name in composed for n in stages.stage_names(results.get(name) or {})}
    return {n for n in mine if not any(n in theirs for theirs in others)}


def _versus_static(
    choice: Choice,
    composed: Mapping[str, str],
    stage_results: Mapping[str, Mapping[str, Any] | None],
    objective: str,
    alpha: float,
) -> None:
    """A composed arm's change against its static arm at this stage (same estimate as vs off)."""
    for outcome in choice.arms:
        static = composed.get(outcome.name)
        if static is None:
            continue
        outcome.composed_from = static
        mine, theirs = stage_results.get(outcome.name), stage_results.get(static)
        if not mine or not theirs or outcome.status == "failed":
            continue
        a = clean_samples(samples_from_result(theirs, objective))[0]
        b = clean_samples(samples_from_result(mine, objective))[0]
        if len(a) < 2 or len(b) < 2:
            continue
        shift = ranks.hodges_lehmann(a, b, alpha=alpha)
        outcome.versus_static_pct = shift.change * 100.0
        outcome.versus_static_lo_pct = shift.change_lo * 100.0
        outcome.versus_static_hi_pct = shift.change_hi * 100.0


def _apply_rule(
    arms: Sequence[Arm],
    per_stage: Sequence[StageChoice],
    objective: str,
    rule: str,
    decisive: str | None,
    min_gain_pct: float,
    max_loss_pct: float,
    composed: Mapping[str, str] | None = None,
) -> StagedChoice:
    composed = dict(composed or {})

    def outcome(stage: StageChoice, arm: str) -> ArmOutcome | None:
        return next((a for a in stage.choice.arms if a.name == arm), None)

    verdicts: dict[str, str] = {arm.name: "" for arm in arms}
    stage_list = list(per_stage)
    # The stages every arm was measured at (a composed arm's threshold stage is not one).
    common = [s for s in per_stage if all(outcome(s, a.name) for a in arms)]

    def done(winner: Arm | None, reason: str) -> StagedChoice:
        if winner is not None:
            verdicts[winner.name] = "chosen"
        return StagedChoice(
            winner.name if winner else None,
            dict(winner.config) if winner else {},
            objective,
            rule,
            reason,
            stage_list,
            verdicts,
            composed,
            max_loss_pct,
        )

    off_failed = [s.stage for s in common if _status(outcome(s, OFF)) == "failed"]
    if OFF not in verdicts or off_failed:
        for name in verdicts:
            verdicts[name] = "not compared"
        where = ", ".join(off_failed) or "any stage"
        return done(None, f"plain decoding was not measured at {where}: no arm can be compared")
    verdicts[OFF] = "reference"
    candidates: list[tuple[float, Arm]] = []
    for arm in arms:
        if arm.name == OFF:
            continue
        outs = {s.stage: o for s in per_stage if (o := outcome(s, arm.name)) is not None}
        extra = [s.stage for s in per_stage if s not in common and s.stage in outs]
        failed = [stage for stage, o in outs.items() if o.status == "failed"]
        off_missing = [
            s.stage for s in per_stage if s.stage in extra and _status(outcome(s, OFF)) == "failed"
        ]
        if failed or off_missing:
            said = [f"failed at {', '.join(failed)}"] if failed else []
            if off_missing:
                said.append(f"off was not measured at {', '.join(off_missing)}")
            verdicts[arm.name] = "; ".join(said)
            continue
        lows = {stage: o.gain_lo_pct for stage, o in outs.items()}
        faster = [
            st
            for st, lo in lows.items()
            if st not in extra and lo is not None and lo > min_gain_pct
        ]
        static = composed.get(arm.name)
        # A composed arm must also beat the arm it came from somewhere.
        not_static = (
            f"not proven faster than {static} at any stage"
            if static is not None
            and not any((o.versus_static_lo_pct or 0.0) > min_gain_pct for o in outs.values())
            else ""
        )
        beyond = f" (and than {static} at {_beats_static(outs, min_gain_pct)})" if static else ""
        if decisive is not None:
            if decisive in faster and not not_static:
                candidates.append((outs[decisive].gain_pct or 0.0, arm))
                verdicts[arm.name] = f"faster at {decisive}{beyond}"
            else:
                verdicts[arm.name] = not_static or f"not proven faster at {decisive}"
            continue
        his = {stage: o.gain_hi_pct for stage, o in outs.items()}
        slower = [st for st, hi in his.items() if hi is not None and hi < -max_loss_pct]
        unsure = [
            st for st, lo in lows.items() if st not in slower and (lo is None or lo < -max_loss_pct)
        ]
        said = []
        if slower:
            said.append(f"more than {max_loss_pct:g}% slower at {', '.join(slower)}")
        if unsure:
            said.append(f"not shown within {max_loss_pct:g}% of off at {', '.join(unsure)}")
        if not faster and not said:
            said.append("not proven faster at any stage")
        if not_static:
            said.append(not_static)
        if said:
            verdicts[arm.name] = "; ".join(said)
        else:
            worst = min(o.gain_pct or 0.0 for o in outs.values())
            candidates.append((worst, arm))
            verdicts[arm.name] = f"faster at {', '.join(faster)}{beyond}, nowhere slower"
    if not candidates:
        off = next(arm for arm in arms if arm.name == OFF)
        rejected = "; ".join(f"{n}: {v}" for n, v in verdicts.items() if n != OFF) or "none"
        how = (
            f"faster at stage {decisive}"
            if decisive is not None
            else f"faster somewhere and nowhere more than {max_loss_pct:g}% slower"
        )
        return done(off, f"no speculative arm is {how} (arms: {rejected}): off serves")
    best_gain, best = max(candidates, key=lambda item: item[0])
    for _, arm in candidates:
        if arm is not best:
            verdicts[arm.name] += f"; beaten by {best.name}"
    what = (
        f"beats plain decoding at stage {decisive} ({_than_off(best_gain)})"
        if decisive is not None
        else f"beats plain decoding at some stage and is nowhere more than {max_loss_pct:g}% "
        f"slower (worst stage: {_than_off(best_gain)})"
    )
    return done(best, f"{best.name} {what} on {objective}: {best.name} serves")


def _status(outcome: ArmOutcome | None) -> str:
    return "failed" if outcome is None else outcome.status


def _beats_static(outs: Mapping[str, ArmOutcome], min_gain_pct: float) -> str:
    return ", ".join(
        stage for stage, o in outs.items() if (o.versus_static_lo_pct or 0.0) > min_gain_pct
    )


def choose_any(
    arms: Sequence[Arm],
    results: Mapping[str, Mapping[str, Any] | None],
    errors: Mapping[str, str] | None = None,
    objective: str = "output_tokens_per_s",
    min_gain_pct: float = 0.0,
    alpha: float = 0.05,
    min_trials: int = 3,
    rule: str = DEFAULT_RULE,
    max_loss_pct: float = 5.0,
) -> Choice | StagedChoice:
    """:func:`choose_staged` when the results are staged, else :func:`choose`
    (unchanged; the rule is then only checked: an unstaged workload has no stage)."""
    if any(r and stages.is_staged(r) for r in results.values()):
        return choose_staged(
            arms, results, errors, objective, min_gain_pct, alpha, min_trials, rule, max_loss_pct
        )
    if rule != NEVER_SLOWER:
        parse_rule(rule, [])
    return choose(arms, results, errors, objective, min_gain_pct, alpha, min_trials)


def confirm_across_starts(
    choice: Choice | StagedChoice,
    arms: Sequence[Arm],
    starts: Sequence[Mapping[str, Mapping[str, Any] | None]],
    objective: str = "output_tokens_per_s",
    min_gain_pct: float = 0.0,
    alpha: float = 0.05,
    min_trials: int = 3,
    rule: str = DEFAULT_RULE,
    max_loss_pct: float = 5.0,
) -> Choice | StagedChoice:
    """Keep a speculative winner only when it holds across server starts.

    ``starts``: for the second start on, off's and the winner's results (by arm
    name), each a fresh start of both, as many as were measured (the role adds
    starts while they disagree, up to ``benchgate_speculative_max_starts``).
    Each start is judged alone, by the same rule, between off and the winner.
    When every start chooses the winner, it is kept. When one does not, the
    starts are pooled (:func:`pool_starts`): each start's estimate is one
    sample, and the winner is kept only when the rule holds on the pooled
    interval, whose width is the start-to-start spread; otherwise plain
    decoding serves and the choice says the arm was not decided across starts.
    A start that was not measured (an arm without a result) decides against
    the winner. ``choice`` is changed in place and returned; with off (or
    nothing) chosen, or no later start, it is as it was.
    """
    if choice.winner in (None, OFF) or not starts:
        return choice
    arm = next(a for a in arms if a.name == choice.winner)
    off = next(a for a in arms if a.name == OFF)
    first = _gains_of(choice, arm.name)
    for number, results in enumerate(starts, start=2):
        pair = {OFF: results.get(OFF), arm.name: results.get(arm.name)}
        errors = {name: "not measured in this start" for name, r in pair.items() if not r}
        sub = choose_any(
            [off, arm], pair, errors, objective, min_gain_pct, alpha, min_trials, rule, max_loss_pct
        )
        choice.starts.append(
            StartCheck(number, arm.name, sub.winner, sub.reason, _gains_of(sub, arm.name))
        )
    count = len(choice.starts) + 1
    if all(check.held for check in choice.starts):
        choice.reason += f"; it held in {count} server starts"
        return choice
    lost = [c.start for c in choice.starts if not c.held]
    choice.pooled = pool_starts(
        arm.name, [first] + [c.gains for c in choice.starts], alpha, min_gain_pct, max_loss_pct,
        rule if isinstance(choice, StagedChoice) else None,
    )  # fmt: skip
    where = "start " + ", ".join(str(n) for n in lost)
    if choice.pooled.kept:
        choice.reason += (
            f"; not at {where} of {count} server starts, and pooled over them it still "
            f"{choice.pooled.why}"
        )
        return choice
    first_loss = next(c for c in choice.starts if not c.held)
    choice.reason = (
        f"{arm.name} won at start 1 and not at {where} ({first_loss.reason}); pooled over "
        f"{count} server starts it {choice.pooled.why}: "
        f"not decided across starts, so plain decoding serves"
    )
    choice.winner, choice.config = OFF, {}
    not_decided = f"won at start 1, not at {where}: not decided"
    if isinstance(choice, StagedChoice):
        choice.verdicts[arm.name] = not_decided
        choice.verdicts[OFF] = "chosen"
    else:
        for outcome in choice.arms:
            if outcome.name == arm.name:
                outcome.status, outcome.note = "not decided", not_decided
            elif outcome.name == OFF:
                outcome.status = "winner"
    return choice


def pool_starts(
    arm: str,
    gains: Sequence[Mapping[str, float | None]],
    alpha: float = 0.05,
    min_gain_pct: float = 0.0,
    max_loss_pct: float = 5.0,
    rule: str | None = DEFAULT_RULE,
) -> PooledStarts:
    """The winner's change against off over server starts, each start one sample.

    ``gains``: per start, the arm's estimated change per stage (%; "" when the
    workload is unstaged; None where the start did not measure it; stages of
    the first start that the later ones lack are left out). Per stage,
    the mean of the starts' changes on the log scale and its interval from
    Student's t with n - 1 degrees of freedom: the spread between starts is
    what widens it, however tight each start's own trials were. The rule is
    applied to the pooled bounds as to one start's: ``None`` (unstaged) or
    ``stage:<name>`` needs the lower bound above ``min_gain_pct`` (at that
    stage); ``never_slower`` needs it at one stage at least and every stage's
    lower bound at ``-max_loss_pct`` or above, each stage at ``alpha / k``.
    Fewer than two measured starts, or a stage a start did not measure, keep
    the arm undecided.
    """
    from scipy.stats import t as student_t

    # A stage of the first start only (a composed arm's threshold) is not pooled.
    names = [n for n in gains[0] if all(n in g for g in gains[1:])] if gains else []
    level = alpha / len(names) if rule == NEVER_SLOWER and names else alpha

    def outcome(kept: bool, why: str) -> PooledStarts:
        return PooledStarts(arm, len(gains), level, pooled, kept, why)

    pooled: list[PooledStage] = []
    for name in names:
        values = [g.get(name) for g in gains]
        if len(values) < 2 or any(v is None or v <= -100 for v in values):
            return outcome(False, f"was not measured at {name or 'the load'} in every start")
        logs = [math.log1p(float(v or 0) / 100) for v in values]
        mean = statistics.fmean(logs)
        t = float(student_t.ppf(1 - level, len(logs) - 1))
        half = t * statistics.stdev(logs) / math.sqrt(len(logs))
        low, mid, high = (math.expm1(x) * 100 for x in (mean - half, mean, mean + half))
        pooled.append(PooledStage(name, [float(v or 0) for v in values], mid, low, high))
    if not pooled:
        return outcome(False, "was not measured")
    decisive = rule[len("stage:") :] if rule and rule.startswith("stage:") else None
    judged = [p for p in pooled if p.stage == decisive] if decisive else pooled
    faster = [p for p in judged if p.lo_pct > min_gain_pct]
    slower = [p for p in pooled if p.lo_pct < -max_loss_pct] if rule == NEVER_SLOWER else []
    if not faster:
        where = f" at {decisive}" if decisive else " at any stage" if len(pooled) > 1 else ""
        return outcome(False, f"was not proven more than {min_gain_pct:g}% faster{where}")
    if slower:
        where = ", ".join(p.stage for p in slower)
        return outcome(False, f"was not shown within {max_loss_pct:g}% of off at {where}")
    where = ", ".join(p.stage for p in faster if p.stage)
    return outcome(True, "was proven faster" + (f" at {where}" if where else ""))


def _gains_of(choice: Choice | StagedChoice, arm: str) -> dict[str, float | None]:
    if isinstance(choice, StagedChoice):
        return {
            s.stage: next((a.gain_pct for a in s.choice.arms if a.name == arm), None)
            for s in choice.stages
        }
    return {"": next((a.gain_pct for a in choice.arms if a.name == arm), None)}


#: vLLM's batch-size schedule for the draft length (``SpeculativeConfig``; in
#: 0.31.0 and 0.32.0): ``[[first, last, k], ...]``, k = 0 drafts nothing, the
#: last entry's k carries on above its range.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: The per-flag CLI's switch (v0.4 - v0.8): no drafting while more requests than this run.
DISABLE_KEY = "disable_by_batch_size"


#: The name of the stage a composed arm and off are measured at besides the
#: workload's: the first batch size where the schedule stops drafting.
THRESHOLD_STAGE = "threshold"


@dataclass
class LoadSchedule:
    """An arm that helps at low load and hurts at high load, and the setting that
    drafts only at the low load (:func:`drafting_by_load`): the composed arm."""

    arm: str
    up_to: int  # drafting while at most this many requests run
    helps_at: list[str]
    hurts_at: list[str]
    config: dict[str, Any]  # the arm's config with the schedule (--speculative-config)
    flags_config: dict[str, Any]  # the same for the per-flag CLI
    name: str = ""  # the composed arm's name: "<arm>-upto<up_to>"
    # The workload stage that measures the batch size where drafting stops
    # (up_to + 1 requests), or None when a stage of the workload already does.
    threshold: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def advice(self) -> str:
        return (
            f"{self.arm} is faster at {', '.join(self.helps_at)} and not shown to be "
            f"as fast at {', '.join(self.hurts_at)}: vLLM can draft while {self.up_to} "
            f"request{'' if self.up_to == 1 else 's'} or fewer run, and not above. "
            f"Measure that as an arm: "
            f"{{name: {self.name}, config: {json.dumps(self.config)}}} "
            f"(per-flag CLI: {json.dumps(self.flags_config)})"
        )


def _fixed_concurrency(params: Mapping[str, Any]) -> int | None:
    """A stage's number of requests in flight, when the client holds it fixed."""
    c = params.get("concurrency")
    if params.get("request_rate") or isinstance(c, bool) or not isinstance(c, int) or c < 1:
        return None
    return c


def drafting_by_load(choice: StagedChoice, min_gain_pct: float = 0.0) -> list[LoadSchedule]:
    """Arms proven faster than off at every low-load stage and, at every stage above
    them, not shown within the rule's ``max_loss_pct`` of off (proven slower, or
    possibly that much slower): drafting by load (vLLM's batch-size schedule) would
    keep the gain and lose the loss or the risk, where one arm for all loads cannot.
    Stages with a request rate (their batch size is not fixed) are left out; at least
    two stages are needed."""
    fixed = [(c, s) for s in choice.stages if (c := _fixed_concurrency(s.params)) is not None]
    if len(fixed) < 2:
        return []
    fixed.sort(key=lambda item: item[0])
    out = []
    names = [a.name for a in fixed[0][1].choice.arms if a.name != OFF]
    measured = {c for c, _ in fixed}
    taken = {s.stage for s in choice.stages}
    for name in names:
        # A composed arm, or an arm whose schedule is measured already: nothing to suggest.
        if name in choice.composed or name in choice.composed.values():
            continue
        outs = [
            (c, s.stage, next((a for a in s.choice.arms if a.name == name), None)) for c, s in fixed
        ]
        if any(o is None or o.status == "failed" for _, _, o in outs):
            continue
        helps = [
            (c, st)
            for c, st, o in outs
            if o and o.gain_lo_pct is not None and o.gain_lo_pct > min_gain_pct
        ]
        hurts = [
            (c, st)
            for c, st, o in outs
            if o and (c, st) not in helps and (o.gain_lo_pct or 0.0) < -choice.max_loss_pct
        ]
        if not helps or not hurts or len(helps) + len(hurts) != len(outs):
            continue
        up_to = max(c for c, _ in helps)
        if up_to >= min(c for c, _ in hurts):
            continue
        config = dict(outs[0][2].config) if outs[0][2] else {}
        k = config.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            continue
        stage_name = THRESHOLD_STAGE
        while stage_name in taken:
            stage_name += "-"
        out.append(
            LoadSchedule(
                arm=name,
                up_to=up_to,
                helps_at=[st for _, st in helps],
                hurts_at=[st for _, st in hurts],
                config={**config, SCHEDULE_KEY: [[1, up_to, k], [up_to + 1, up_to + 1, 0]]},
                flags_config={**config, DISABLE_KEY: up_to},
                name=f"{name}-upto{up_to}",
                threshold=(
                    None
                    if up_to + 1 in measured
                    else {"name": stage_name, "concurrency": up_to + 1}
                ),
            )
        )
    return out


_STAGE_STATUS = {"winner": "faster", "beaten": "faster"}


def render_staged_table(choice: StagedChoice) -> str:
    """Every arm at every stage: medians, the change against off, the outcome there."""
    alpha = choice.stages[0].alpha if choice.stages else 0.0
    level = table.interval_pct(alpha)
    every = [a for st in choice.stages for a in st.choice.arms]
    configs = any(fingerprint(a.server_config) for a in every)
    header = [
        "stage",
        "arm",
        *(["config"] if configs else []),
        "median tok/s",
        "TTFT ms",
        "TPOT ms",
        "accept",
        f"vs off ({level}% interval)",
        "here",
    ]
    rows = [header]
    for s in choice.stages:
        for i, a in enumerate(s.choice.arms):
            status = "reference" if a.name == OFF and a.status != "failed" else a.status
            rows.append(
                [
                    s.stage if i == 0 else "",
                    a.name,
                    *([fingerprint(a.server_config) or numfmt.MISSING] if configs else []),
                    numfmt.number(a.output_tokens_per_s, 1),
                    numfmt.number(a.ttft_ms, 1),
                    numfmt.number(a.tpot_ms, 2),
                    _rate(a.acceptance_rate),
                    _change_cell(a),
                    _STAGE_STATUS.get(status, status),
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    loads = "; ".join(
        f"{s.stage}: {table.load_words(s.params) or 'load not recorded'}" for s in choice.stages
    )
    default = " (the default)" if choice.rule == DEFAULT_RULE else ""
    lines += [
        f"stages: {loads}; judged at alpha {alpha:.3g} per stage",
        _explain(choice.objective, level),
        *_config_lines(list({a.name: a for a in every}.values())),
        f"rule: {choice.rule}{default}",
        *(f"  {name}: {verdict}" for name, verdict in choice.verdicts.items()),
        *_composed_lines(choice),
        *(f"by load: {hint.advice()}" for hint in drafting_by_load(choice)),
        *(check.line() for check in choice.starts),
        *([choice.pooled.line()] if choice.pooled else []),
        f"chosen: {choice.winner or 'none'}: {choice.reason}",
    ]
    return "\n".join(lines)


def _composed_lines(choice: StagedChoice) -> list[str]:
    """What each composed arm serves (its schedule) and how it did against its static arm."""
    lines = []
    for name, static in choice.composed.items():
        config = next(
            (a.config for s in choice.stages for a in s.choice.arms if a.name == name), {}
        )
        versus = [
            f"{s.stage} "
            + numfmt.change_interval(
                a.versus_static_pct, a.versus_static_lo_pct, a.versus_static_hi_pct
            )
            for s in choice.stages
            for a in s.choice.arms
            if a.name == name and a.versus_static_pct is not None
        ]
        # vLLM may serve a schedule differently from its static arm (0.26.0 on CUDA
        # lowers its CUDA graphs to PIECEWISE): say so beside the comparison.
        apart = differences(_server_of(choice, static), _server_of(choice, name), (static, name))
        differed = (
            f"; its server differed from {static}'s in more than the schedule: {'; '.join(apart)}"
            if apart
            else ""
        )
        lines.append(
            f"composed: {name} is {static} with {SCHEDULE_KEY} "
            f"{json.dumps(config.get(SCHEDULE_KEY), separators=(',', ':'))} "
            f"(batch sizes [first, last, k]; k=0 drafts nothing; the last k carries on above)"
            + (f"; vs {static}: {'; '.join(versus)}" if versus else "")
            + differed
        )
    return lines


def _server_of(choice: StagedChoice, name: str) -> dict[str, Any] | None:
    """The serving configuration an arm ran with (the first stage that knows it)."""
    return next(
        (
            a.server_config
            for s in choice.stages
            for a in s.choice.arms
            if a.name == name and a.server_config
        ),
        None,
    )
