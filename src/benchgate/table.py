"""The gate's verdict as plain text: the metrics' table (one per stage) and the reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import numfmt
from .rules import Verdict


def interval_pct(alpha: float) -> str:
    """The two-sided level of the gate's interval at ``alpha``, in %: "90" at 0.05."""
    return f"{round((1 - 2 * alpha) * 100, 1):g}"


def _metrics_table(verdict: Verdict) -> str:
    """A plain-text table of the per-metric outcome plus the reasons.

    The change column is the estimate that the reasons give (Hodges-Lehmann,
    with its interval, in words: better or worse for that metric); the
    verdict's alpha (the judging one) names the interval's level in its heading.
    """
    level = f"{interval_pct(verdict.alpha)}% interval"
    header = (
        "metric",
        "baseline median",
        "candidate median",
        f"change ({level})",
        "p",
        "limit",
        "verdict",
    )
    rows: list[tuple[str, ...]] = [header]
    for m in verdict.metrics:
        rows.append(
            (
                m.metric + (" *" if m.critical else ""),
                f"{numfmt.figure(m.baseline_median)} (n={m.n_baseline})",
                f"{numfmt.figure(m.candidate_median)} (n={m.n_candidate})",
                numfmt.change_interval(
                    m.change_pct, m.change_lo_pct, m.change_hi_pct, m.direction != "lower"
                ),
                numfmt.MISSING if m.p_value is None else f"{m.p_value:.3g}",
                f"{m.max_regression_pct:g}%",
                m.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        "medians: of each side's trials; change: the Hodges-Lehmann estimate of the "
        "change and its interval, as in the reasons (the medians can point the other way)"
    )
    lines.extend(f"  {m.metric}: {m.note()}" for m in verdict.metrics if m.note())
    lines.append(f"verdict: {verdict.verdict}   (* critical)")
    lines.extend(f"  - {r}" for r in verdict.reasons)
    lines.extend(f"  ! {w}" for w in verdict.warnings)
    return "\n".join(lines)


def load_words(params: Mapping[str, Any]) -> str:
    """A stage's load in words ("concurrency 4", "2 req/s, concurrency 16"); "" if unknown."""
    if not params:
        return ""
    load = f"concurrency {params.get('concurrency')}"
    if params.get("request_rate"):
        load = f"{params['request_rate']:g} req/s, {load}"
    return load


def render_table(verdict: Verdict) -> str:
    """The verdict as text: the metrics' table; for a staged verdict, each
    stage's table under its heading, then the verdict over the stages."""
    if not verdict.staged:
        return _metrics_table(verdict)
    blocks: list[str] = []
    for s in verdict.stages:
        load = load_words(s.params)
        heading = f"== stage {s.stage}" + (f" ({load})" if load else "")
        heading += f": {s.verdict.verdict}, judged at alpha {s.alpha:.3g} =="
        blocks.append(heading + "\n" + _metrics_table(s.verdict))
    split = (
        f"alpha {verdict.alpha:g} split over {len(verdict.stages)} stages (Bonferroni)"
        if verdict.correction == "bonferroni"
        else f"every stage at alpha {verdict.alpha:g} (no correction)"
    )
    summary = [
        f"staged verdict: {verdict.verdict} (every stage must pass; {split})",
        *(f"  {s.stage}: {s.verdict.verdict}" for s in verdict.stages),
        *(f"  - {r}" for r in verdict.reasons),
        *(f"  ! {w}" for w in verdict.warnings),
    ]
    return "\n\n".join([*blocks, "\n".join(summary)])
