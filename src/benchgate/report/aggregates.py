"""Aggregates shared by the HTML and Markdown reports, and the text of their figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import causes
from ..numfmt import MISSING, change_interval, change_words, medians_note, number
from ..serverconfig import config_text, differences, engine_text, host_text
from .data import NOT_MEASURED, OFF, RunView, median, num, roofline_efficiency


def release_key(release: str) -> tuple[Any, ...]:
    parts: list[tuple[int, Any]] = []
    for chunk in release.replace("-", ".").replace("+", ".").split("."):
        parts.append((0, int(chunk)) if chunk.isdigit() else (1, chunk))
    return tuple(parts)


def arm_key(arm: str) -> tuple[int, str]:
    return (0 if arm == OFF else 1, arm)


@dataclass(frozen=True)
class ArmRow:
    release: str
    arm: str
    runs: int
    throughput: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    change_vs_off_pct: float | None
    acceptance_rate: float | None
    per_position: list[float] | None
    # The A/B's interval of that change (lower, upper), when the ledger has it.
    change_vs_off_interval: tuple[float, float] | None = None
    # The serving configuration's fingerprint ("": not known), see config_legend.
    config: str = ""


def ab_estimates(choices: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(release, arm) -> the latest A/B's estimate of the arm's change against off, in %.

    The A/B table and its choice use this estimate (Hodges-Lehmann over the
    trials); the report shows the same figure, not a second one.
    """
    out: dict[tuple[str, str], float] = {}
    for choice in choices:  # oldest first: the latest wins
        for arm in choice.get("arms") or []:
            gain = num(arm.get("gain_pct")) if isinstance(arm, Mapping) else None
            if gain is not None:
                out[(str(choice.get("release")), str(arm.get("name")))] = gain
    return out


def ab_acceptance(choices: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(release, arm) -> the latest A/B's acceptance rate of the arm (accepted over
    drafted tokens, over its trials), so the report shows the A/B table's figure."""
    out: dict[tuple[str, str], float] = {}
    for choice in choices:
        for arm in choice.get("arms") or []:
            rate = num(arm.get("acceptance_rate")) if isinstance(arm, Mapping) else None
            if rate is not None:
                out[(str(choice.get("release")), str(arm.get("name")))] = rate
    return out


def ab_intervals(
    choices: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[float, float]]:
    """(release, arm) -> the interval of :func:`ab_estimates`' estimate, in % (latest A/B)."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for choice in choices:
        for arm in choice.get("arms") or []:
            if not isinstance(arm, Mapping):
                continue
            lo, hi = num(arm.get("gain_lo_pct")), num(arm.get("gain_hi_pct"))
            if lo is not None and hi is not None:
                out[(str(choice.get("release")), str(arm.get("name")))] = (lo, hi)
    return out


def arm_rows(runs: Sequence[RunView], choices: Sequence[Mapping[str, Any]] = ()) -> list[ArmRow]:
    """Per release, arm and serving configuration: medians over the runs, and the change
    of tokens/s against off: the A/B's own estimate where the ledger has it (``choices``),
    else the medians' ratio; the acceptance rate the A/B's where it has one, else the
    median over the runs."""
    estimates = ab_estimates(choices)
    intervals = ab_intervals(choices)
    accepted = ab_acceptance(choices)
    groups: dict[tuple[str, str, str], list[RunView]] = {}
    for r in runs:
        groups.setdefault((r.release, r.arm, r.config), []).append(r)
    # Off of the same release and configuration; else of the release's runs whose
    # configuration is not known (the A/B's arms differ in their speculative flags).
    off = {
        (rel, cfg): median(x.throughput for x in rs)
        for (rel, arm, cfg), rs in groups.items()
        if arm == OFF
    }
    offs: dict[str, list[float]] = {}
    for (rel, _), value in off.items():
        if value is not None:
            offs.setdefault(rel, []).append(value)
    rows = []
    for (rel, arm, cfg), rs in sorted(
        groups.items(), key=lambda kv: (release_key(kv[0][0]), arm_key(kv[0][1]), kv[0][2])
    ):
        tput = median(x.throughput for x in rs)
        base = off.get((rel, cfg))
        if base is None and len(offs.get(rel, [])) == 1:
            base = offs[rel][0]
        change = estimates.get((rel, arm))
        change_from_ab = change is not None
        if change is None and arm != OFF and base and tput is not None:
            change = 100.0 * (tput - base) / base
        latest_pp = next((x.per_position for x in reversed(rs) if x.per_position), None)
        rows.append(
            ArmRow(
                release=rel,
                arm=arm,
                runs=len(rs),
                throughput=tput,
                ttft_ms=median(x.ttft_ms for x in rs),
                tpot_ms=median(x.tpot_ms for x in rs),
                change_vs_off_pct=change,
                acceptance_rate=accepted.get((rel, arm), median(x.acceptance_rate for x in rs)),
                per_position=_mean_lists([x.per_position for x in rs if x.per_position])
                or latest_pp,
                change_vs_off_interval=intervals.get((rel, arm)) if change_from_ab else None,
                config=cfg,
            )
        )
    return rows


def series_name(release: str, arm: str, config: str = "") -> str:
    """A chart series' name: release, arm and, when known, the configuration's fingerprint."""
    return f"{release} · spec {arm}" + (f" · {config}" if config else "")


def config_legend(runs: Sequence[RunView]) -> list[tuple[str, str, int]]:
    """Every serving configuration among ``runs``: (fingerprint, its settings, how
    many runs), in order of first appearance; [] when no run's configuration is known."""
    seen: dict[str, tuple[str, int]] = {}
    for r in sorted(runs, key=lambda r: (r.recorded_at, r.id)):
        if r.config:
            text, count = seen.get(r.config, (config_text(r.server_config), 0))
            seen[r.config] = (text, count + 1)
    return [(fp, text, count) for fp, (text, count) in seen.items()]


def context_lines(runs: Sequence[RunView]) -> list[str]:
    """What the runs ran under, for the serving-configurations legend: each host
    description (:func:`benchgate.serverconfig.host_text`) with the releases measured
    on it, then per release and arm the latest run's engine facts
    (:func:`benchgate.serverconfig.engine_text`); [] when no run recorded them."""
    hosts: dict[str, list[str]] = {}
    engines: dict[tuple[str, str], str] = {}
    for r in sorted(runs, key=lambda r: (r.recorded_at, r.id)):
        host = host_text(r.server_config)
        if host:
            releases = hosts.setdefault(host, [])
            if r.release not in releases:
                releases.append(r.release)
        engine = engine_text(r.server_config)
        if engine:
            engines[(r.release, r.arm)] = engine
    several = len(hosts) > 1
    out = [
        f"host{' (' + ', '.join(sorted(rels, key=release_key)) + ')' if several else ''}: {text}"
        for text, rels in hosts.items()
    ]
    out += [
        f"engine, {release} · {arm}: {text}"
        for (release, arm), text in sorted(
            engines.items(), key=lambda kv: (release_key(kv[0][0]), arm_key(kv[0][1]))
        )
    ]
    return out


CONTEXT_NOTE = (
    "host: the CPU and GPUs the server ran on (nvidia-smi, /proc/cpuinfo); engine: what "
    "vLLM said about itself at start-up, read from the service's journal (its latest run "
    "per release and arm). Both stay out of the fingerprint."
)


CONFIG_NOTE = (
    "config: a fingerprint of the server's configuration (the arguments after serve, "
    "without --host, --port and the like, the vLLM environment and the CPUs), read from "
    "its running process; runs of one release with different configurations are shown "
    'apart. "-": not recorded (a run from before benchgate kept it).'
)


def arm_headers(configs: bool) -> list[str]:
    """The columns of the per-release-and-arm table (HTML and Markdown alike)."""
    return [
        "release",
        "speculative",
        *(["config"] if configs else []),
        "runs",
        "tokens/s",
        "vs off",
        "TTFT ms",
        "TPOT ms",
        "acceptance",
    ]


def vs_off_text(row: ArmRow) -> str:
    """The "vs off" cell: the change in words with its interval, as the A/B table writes it."""
    lo, hi = row.change_vs_off_interval or (None, None)
    return change_interval(row.change_vs_off_pct, lo, hi)


# --------------------------------------------------------------------------
# Why a speculative arm's tokens/s changed (benchgate.causes)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseLine:
    """One speculative arm from one release (or run) to the next, its change split."""

    arm: str
    workload: str  # "" when the host's runs all share one workload
    before: str  # a release, or "run #12"
    after: str
    split: causes.Split
    # How the two sides' serving configurations differ apart from speculation.
    differs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``ngram-k3, 0.31.0 → 0.32.0`` (the workload too, where the host has several)."""
        arm = f"{self.arm} ({self.workload})" if self.workload else self.arm
        return f"{arm}, {self.before} → {self.after}"

    @property
    def words(self) -> str:
        """The split's sentence, and what else the two sides' configurations change."""
        text = self.split.sentence
        if self.differs:
            text += ". These runs differ in more than speculation: " + "; ".join(self.differs)
        return text + "."


CAUSES_TITLE = "Why tokens/s changed, per speculative arm"
CAUSES_NOTE = (
    "Each speculative arm against its previous release at the same load (with one release, "
    "its latest run against the one before), split with the server's spec-decode counters: "
    "tokens per step (tokens generated over the steps the requests took; a step emits one "
    "token plus the draft tokens accepted in it) and time per step (the trial's duration "
    "over those steps, per request). Their shares of the change in log tokens/s: the "
    "drafter (acceptance) or the engine (step cost) is named when it carries more than two "
    "thirds, else both. Medians over the trials: a description, not a test."
)


def _cause_sides(
    runs: Sequence[RunView],
) -> list[tuple[tuple[str, list[RunView]], tuple[str, list[RunView]]]]:
    """The pairs of sides to split, oldest first: consecutive releases (each the runs of
    its latest run's configuration); with one release, its last two runs."""
    ordered = sorted(runs, key=lambda r: (r.recorded_at, r.id))
    by_release: dict[str, list[RunView]] = {}
    for r in ordered:
        by_release.setdefault(r.release, []).append(r)
    if len(by_release) >= 2:
        sides = [
            (rel, [r for r in group if r.config == group[-1].config])
            for rel, group in sorted(by_release.items(), key=lambda kv: release_key(kv[0]))
        ]
        return list(zip(sides, sides[1:]))
    if len(ordered) >= 2:
        a, b = ordered[-2:]
        return [((f"run #{a.id}", [a]), (f"run #{b.id}", [b]))]
    return []


def cause_lines(runs: Sequence[RunView]) -> list[CauseLine]:
    """Every speculative arm of ``runs`` (one host; at one stage: :func:`stage_runs`) split
    from each release to the next (:func:`benchgate.causes.split_steps`), per workload."""
    series: dict[tuple[str, str], list[RunView]] = {}
    for r in runs:
        if r.arm != OFF:
            series.setdefault((r.workload or "", r.arm), []).append(r)
    several = len({w for w, _ in series}) > 1
    out = []
    for (workload, arm), group in sorted(
        series.items(), key=lambda kv: (kv[0][0], arm_key(kv[0][1]))
    ):
        for (name_a, side_a), (name_b, side_b) in _cause_sides(group):
            names = (name_a, name_b)
            split = causes.split_steps(
                causes.pool(r.steps for r in side_a),
                causes.pool(r.steps for r in side_b),
                names=names,
            )
            differs = differences(side_a[-1].server_config, side_b[-1].server_config, names)
            out.append(
                CauseLine(arm, workload if several else "", name_a, name_b, split, tuple(differs))
            )
    return out


def arm_config_notes(runs: Sequence[RunView]) -> list[str]:
    """Where an A/B's speculative arm served with more changed than speculation: per
    release, each arm's latest configuration against "off"'s (both known)."""
    latest: dict[tuple[str, str], RunView] = {}
    for r in sorted(runs, key=lambda r: (r.recorded_at, r.id)):
        if r.server_config:
            latest[(r.release, r.arm)] = r
    out = []
    for (release, arm), run in sorted(
        latest.items(), key=lambda kv: (release_key(kv[0][0]), arm_key(kv[0][1]))
    ):
        off = latest.get((release, OFF))
        if arm == OFF or off is None:
            continue
        differs = differences(off.server_config, run.server_config, (OFF, arm))
        if differs:
            out.append(
                f"{release}: {arm} differs from off in more than speculation: " + "; ".join(differs)
            )
    return out


def _mean_lists(lists: Sequence[Sequence[float] | None]) -> list[float] | None:
    vals = [lst for lst in lists if lst]
    if not vals:
        return None
    n = max(len(v) for v in vals)
    out = []
    for i in range(n):
        col = [v[i] for v in vals if len(v) > i]
        out.append(sum(col) / len(col))
    return out


def short_time(text: str) -> str:
    return text[:19].replace("T", " ")


def spec_text(spec: Mapping[str, Any] | None) -> str:
    if not spec:
        return ""
    return ", ".join(f"{k}={spec[k]}" for k in sorted(spec, key=str))


_ROOFLINE_KEYS = (
    "gpu_name",
    "tensor_parallel_size",
    "bandwidth_gbs",
    "bandwidth_source",
    "decode_bound_tokens_per_s",
    "measured_tokens_per_s",
    "tpot_ms_median",
    "concurrency",
)


def roofline_text(roofline: Mapping[str, Any]) -> str:
    """The roofline block's figures, the documented ones first."""
    keys = [k for k in _ROOFLINE_KEYS if k in roofline] + sorted(
        (k for k in roofline if k not in _ROOFLINE_KEYS and "efficiency" not in str(k)),
        key=str,
    )
    parts = []
    for k in keys:
        v = roofline[k]
        if k in ("available", "reason") or v is None:
            continue
        if isinstance(v, (str, int, float, bool)):
            n = num(v)
            parts.append(f"{k}={n:.4g}" if n is not None else f"{k}={v}")
    return ", ".join(parts[:10])


def roofline_status(runs: Sequence[RunView]) -> tuple[list[RunView], list[str]]:
    """Runs with a roofline efficiency, and why the others have none (one line per reason)."""
    measured: list[RunView] = []
    reasons: dict[str, int] = {}
    for r in runs:
        rf = r.roofline
        if rf and rf.get("available") is not False and roofline_efficiency(rf) is not None:
            measured.append(r)
            continue
        why = str(rf.get("reason") or "") if rf else ""
        reasons[why] = reasons.get(why, 0) + 1
    lines = [
        f"{n} run(s): {NOT_MEASURED}" + (f" ({why})" if why else "")
        for why, n in sorted(reasons.items())
    ]
    return measured, lines


# --------------------------------------------------------------------------
# Staged runs, verdicts and A/B choices
# --------------------------------------------------------------------------


def stage_order(runs: Sequence[RunView]) -> list[str]:
    """The stages of the runs, in the order they ran (first seen first)."""
    names: list[str] = []
    for r in runs:
        for s in r.stages:
            if s.name not in names:
                names.append(s.name)
    return names


def stage_params(runs: Sequence[RunView], stage: str) -> dict[str, Any]:
    """The load of a stage as the latest run that recorded it measured it ({} if none did)."""
    for r in reversed(runs):
        for s in r.stages:
            if s.name == stage and s.params:
                return dict(s.params)
    return {}


def stage_runs(runs: Sequence[RunView], stage: str) -> list[RunView]:
    """The runs that measured ``stage``, each with that stage's figures only."""
    return [v for v in (r.stage(stage) for r in runs) if v is not None]


def is_staged_choice(choice: Mapping[str, Any]) -> bool:
    """Whether an ``ab_choices`` entry is a staged A/B (its arms carry per-stage figures)."""
    return any(
        isinstance(a, Mapping) and isinstance(a.get("stages"), Mapping) and a["stages"]
        for a in choice.get("arms") or []
    )


def stage_choices(choices: Sequence[Mapping[str, Any]], stage: str) -> list[dict[str, Any]]:
    """The staged A/B choices as seen at one stage (each arm's figures there), shaped like
    an unstaged choice, so :func:`arm_rows` takes the A/B's estimate at that stage."""
    out = []
    for c in choices:
        if not is_staged_choice(c):
            continue
        arms = []
        for a in c.get("arms") or []:
            here = (a.get("stages") or {}).get(stage) if isinstance(a, Mapping) else None
            if isinstance(here, Mapping):
                arms.append({**here, "name": a.get("name"), "status_overall": a.get("status")})
        out.append({**c, "arms": arms})
    return out


def choice_stage_order(choice: Mapping[str, Any], known: Sequence[str] = ()) -> list[str]:
    """The stages of a staged A/B: ``known`` (the runs' order) first, then the rest.

    The ledger stores each arm's stages as a JSON object with sorted keys, so the
    order they ran in comes from the runs when the ledger has them.
    """
    seen: list[str] = []
    for a in choice.get("arms") or []:
        if isinstance(a, Mapping) and isinstance(a.get("stages"), Mapping):
            seen += [str(k) for k in a["stages"] if str(k) not in seen]
    return [s for s in known if s in seen] + [s for s in seen if s not in known]


@dataclass(frozen=True)
class StagedVerdictView:
    """A staged gate verdict from the ledger (``benchgate.staged_verdict/1`` details)."""

    record: Any  # ledger.VerdictRecord
    alpha: float | None
    correction: str
    stages: list[dict[str, Any]]  # each: stage, verdict, alpha, params, reasons, metrics


def staged_verdict(record: Any) -> StagedVerdictView | None:
    """The per-stage verdicts a ledger verdict recorded; ``None`` for an unstaged verdict."""
    details = record.details if isinstance(record.details, Mapping) else {}
    stages = details.get("stages")
    if not isinstance(stages, list) or not stages:
        return None
    entries = [dict(s) for s in stages if isinstance(s, Mapping) and s.get("stage") is not None]
    if not entries:
        return None
    return StagedVerdictView(
        record=record,
        alpha=num(details.get("alpha")),
        correction=str(details.get("correction") or ""),
        stages=entries,
    )


def stage_reasons(view: StagedVerdictView) -> list[tuple[str, str, str]]:
    """(stage, its verdict, one reason) for every reason every stage gave."""
    return [
        (str(s["stage"]), str(s.get("verdict") or MISSING), str(r))
        for s in view.stages
        for r in s.get("reasons") or []
    ]


def correction_text(view: StagedVerdictView) -> str:
    """How the gate split its alpha over the stages, in words."""
    n = len(view.stages)
    if view.alpha is None:
        return f"{n} stage(s), every one must pass"
    if view.correction == "bonferroni":
        return f"alpha {view.alpha:g} split over {n} stages (Bonferroni); every stage must pass"
    return f"every stage at alpha {view.alpha:g} (no correction); every stage must pass"


def load_text(params: Mapping[str, Any] | None) -> str:
    """A stage's load in words (``benchgate.stages.load_words``), "" when not recorded."""
    from ..table import load_words

    return load_words(params or {}) if params and "concurrency" in params else ""


def interval_text(lo: Any, hi: Any, higher_is_better: bool = True) -> str:
    """The gate's (or the A/B's) interval on the change, in words, worst end first
    (``15.0% worse to 6.0% worse``), as its own tables write it; "-" when open."""
    a, b = num(lo), num(hi)
    if a is None and b is None:
        return "-"
    low = "unbounded" if a is None else change_words(a, higher_is_better)
    high = "unbounded" if b is None else change_words(b, higher_is_better)
    return f"{low} to {high}" if higher_is_better else f"{high} to {low}"


def metric_note(m: Mapping[str, Any]) -> str:
    """A recorded metric line's :func:`~benchgate.numfmt.medians_note`: what its
    estimate is computed from, and why its medians can point the other way. A
    line recorded before the pairs' ratio was kept says side by side in its reason."""
    return medians_note(
        num(m.get("baseline_median")),
        num(m.get("candidate_median")),
        num(m.get("change_pct")),
        m.get("direction", "higher") != "lower",
        num(m.get("pairs_change_pct")),
        paired="pairs, side by side" in str(m.get("reason") or ""),
    )


@dataclass(frozen=True)
class StageMetricRow:
    """One metric of one stage of a staged verdict, its figures as text."""

    stage: str
    first: bool  # the stage's first row (stage, load and verdict go there)
    load: str
    stage_verdict: str
    alpha: str
    metric: str
    critical: bool
    baseline: str
    candidate: str
    change: str
    interval: str
    limit: str
    verdict: str
    # What the change is computed from and why the medians differ ("" if nothing to
    # add); the change then ends in NOTE_MARK, and the note follows the table.
    note: str = ""


#: Marks a change whose note (:func:`metric_note`) follows the table.
NOTE_MARK = " †"


def metric_notes(rows: Sequence[StageMetricRow]) -> list[str]:
    """The notes of the rows that have one, as the lines under their table say them."""
    return [f"† {r.stage}, {r.metric}: {r.note}" for r in rows if r.note]


def staged_verdict_rows(view: StagedVerdictView) -> list[StageMetricRow]:
    """Every stage of a staged verdict, one row per judged metric (one row if none was):
    the medians, the estimate of the change and the interval the gate recorded."""
    rows = []
    for s in view.stages:
        alpha = num(s.get("alpha"))
        level = f"{100 * (1 - 2 * alpha):.4g}% " if alpha is not None else ""
        metrics = [m for m in s.get("metrics") or [] if isinstance(m, Mapping)] or [{}]
        for j, m in enumerate(metrics):
            higher = m.get("direction", "higher") != "lower"
            rows.append(
                StageMetricRow(
                    stage=str(s["stage"]),
                    first=j == 0,
                    load=load_text(s.get("params")),
                    stage_verdict=str(s.get("verdict") or MISSING),
                    alpha=number(alpha, 4),
                    metric=str(m.get("metric", MISSING)),
                    critical=bool(m.get("critical")),
                    baseline=number(num(m.get("baseline_median")), 2),
                    candidate=number(num(m.get("candidate_median")), 2),
                    change=change_words(num(m.get("change_pct")), higher)
                    + (NOTE_MARK if metric_note(m) else ""),
                    note=metric_note(m),
                    interval=(
                        level
                        + interval_text(m.get("change_lo_pct"), m.get("change_hi_pct"), higher)
                        if m
                        else MISSING
                    ),
                    limit=number(num(m.get("max_regression_pct")), 1, "%"),
                    verdict=str(m.get("verdict", MISSING)),
                )
            )
    return rows


# A stage's own comparison names its best arm "winner"; the staged A/B's table
# (``ab.render_staged_table``) calls that "faster": the winner is the rule's, over all stages.
_STAGE_STATUS = {"winner": "faster", "beaten": "faster"}


@dataclass(frozen=True)
class StagedArmRow:
    """One arm at one stage of a staged A/B, its figures as text."""

    stage: str
    first: bool  # the stage's first row
    arm: str
    throughput: str
    ttft_ms: str
    tpot_ms: str
    acceptance: str
    vs_off: str
    bounds: str
    here: str  # the arm's outcome at this stage


def staged_ab_rows(choice: Mapping[str, Any], known: Sequence[str] = ()) -> list[StagedArmRow]:
    """Every arm of a staged A/B at every stage (``choice_stage_order``), as the A/B's
    own table (``ab.render_staged_table``) shows them."""
    rows = []
    arms = [a for a in choice.get("arms") or [] if isinstance(a, Mapping)]
    for stage in choice_stage_order(choice, known):
        first = True
        for a in arms:
            here = (a.get("stages") or {}).get(stage)
            if not isinstance(here, Mapping):
                continue
            acc = num(here.get("acceptance_rate"))
            status = str(here.get("status") or "")
            if a.get("name") == OFF and status != "failed":
                status = "reference"
            status = _STAGE_STATUS.get(status, status)
            rows.append(
                StagedArmRow(
                    stage=stage,
                    first=first,
                    arm=str(a.get("name")),
                    throughput=number(num(here.get("output_tokens_per_s"))),
                    ttft_ms=number(num(here.get("ttft_ms")), 1),
                    tpot_ms=number(num(here.get("tpot_ms")), 2),
                    acceptance=number(None if acc is None else 100 * acc, 1, "%"),
                    vs_off=change_words(num(here.get("gain_pct"))),
                    bounds=(
                        interval_text(here.get("gain_lo_pct"), here.get("gain_hi_pct"))
                        if here.get("gain_pct") is not None
                        else MISSING
                    ),
                    here=status or MISSING,
                )
            )
            first = False
    return rows


STAGED_VERDICT_HEADERS = (
    "stage",
    "load",
    "stage verdict",
    "alpha",
    "metric",
    "baseline",
    "candidate",
    "change",
    "interval",
    "limit",
    "metric verdict",
)
STAGED_VERDICT_NOTE = (
    "baseline, candidate: the trials' medians at that stage; change: the gate's "
    "Hodges-Lehmann estimate († what it is computed from, where the medians point the "
    "other way or the sides ran as pairs, follows the table); interval: its two-sided "
    "interval at the stage's alpha (each bound one-sided at alpha); * critical. The host "
    "passes only when every stage passes; each stage's reasons follow its table."
)
STAGED_AB_HEADERS = (
    "stage",
    "arm",
    "tokens/s",
    "TTFT ms",
    "TPOT ms",
    "acceptance",
    "vs off",
    "bounds",
    "here",
)
STAGED_AB_NOTE = (
    'Every arm against plain decoding ("off") at every stage: vs off is the A/B\'s estimate '
    "of the change in the objective there, bounds its one-sided bounds, here the arm's "
    'outcome at that stage; "over the stages" is where the arm helps and where it hurts, as '
    "the rule judged it."
)
