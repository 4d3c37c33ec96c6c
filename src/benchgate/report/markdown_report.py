"""The report as GitHub-flavoured Markdown (tables, no charts) for chat or a pull request."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from .. import ledger
from ..numfmt import MISSING, number
from .aggregates import arm_rows, roofline_status, short_time, vs_off_text
from .data import NOT_MEASURED, Report, roofline_efficiency


def _md(value: Any) -> str:
    """Text for a Markdown table cell: no HTML, no pipes, one line."""
    text = "" if value is None else str(value)
    text = html.escape(text, quote=False)
    for ch in ("\\", "|", "`", "*", "[", "]"):
        text = text.replace(ch, "\\" + ch)
    return " ".join(text.split())


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown (tables, no charts) for chat or a PR."""
    lines = [
        f"## {_md(report.title)}",
        "",
        f"{len(report.runs)} run(s), {len(report.verdicts)} verdict(s), "
        f"{len(report.hosts)} host(s); generated {_md(report.generated_at)}.",
        "",
    ]
    latest: dict[str, ledger.VerdictRecord] = {}
    for v in report.verdicts:
        latest.setdefault(v.host, v)
    for host in report.hosts:
        runs = report.runs_of(host)
        lines += [f"### {_md(host)}", ""]
        if host in latest:
            v = latest[host]
            lines += [
                f"Latest verdict: **{_md(v.verdict)}** "
                f"({_md(v.baseline_release or MISSING)} → {_md(v.release or MISSING)}, "
                f"{_md(short_time(v.recorded_at))} UTC)",
                "",
            ]
        choices = [c for c in report.ab_choices if c.get("host") == host]
        if choices:
            c = choices[-1]
            lines += [
                f"Latest speculative A/B ({_md(c.get('release') or MISSING)}, "
                f"{_md(c.get('objective') or MISSING)}): "
                f"winner **{_md(c.get('winner') or 'none')}** — {_md(c.get('reason') or '')}",
                "",
            ]
        if not runs:
            lines += ["No runs recorded.", ""]
            continue
        rows = arm_rows(runs, choices)
        lines += _md_table(
            ["release", "speculative", "runs", "tokens/s", "vs off", "TTFT ms", "TPOT ms"],
            [
                [
                    _md(r.release),
                    _md(r.arm),
                    str(r.runs),
                    number(r.throughput),
                    vs_off_text(r),
                    number(r.ttft_ms, 1),
                    number(r.tpot_ms, 2),
                ]
                for r in rows
            ],
        )
        lines.append("")
        curves = [(f"{r.release} · {r.arm}", r.per_position) for r in rows if r.per_position]
        if curves:
            if report.reference_acceptance:
                curves.append((report.reference_label, report.reference_acceptance))
            width = max(len(c or []) for _, c in curves)
            lines.append("Per-position acceptance:")
            lines.append("")
            lines += _md_table(
                ["release · arm"] + [f"pos {i}" for i in range(width)],
                [
                    [_md(label)]
                    + [number(100 * v, 1, "%") for v in (c or [])]
                    + [""] * (width - len(c or []))
                    for label, c in curves
                ],
            )
            lines.append("")
        measured, unmeasured = roofline_status(runs)
        if measured:
            lines += _md_table(
                ["when (UTC)", "release", "speculative", "roofline efficiency"],
                [
                    [
                        _md(short_time(r.recorded_at)),
                        _md(r.release),
                        _md(r.arm),
                        number(roofline_efficiency(r.roofline), 1, "%"),
                    ]
                    for r in measured
                ],
            )
            lines += [f"Roofline: {_md(x)}." for x in unmeasured] + [""]
        else:
            lines += [f"Roofline efficiency: {NOT_MEASURED}."]
            lines += [f"Roofline: {_md(x)}." for x in unmeasured if "(" in x] + [""]
    lines += ["### Verdict history", ""]
    if report.verdicts:
        lines += _md_table(
            ["when (UTC)", "host", "release", "phase", "verdict", "reasons"],
            [
                [
                    _md(short_time(v.recorded_at)),
                    _md(v.host),
                    f"{_md(v.baseline_release or MISSING)} → {_md(v.release or MISSING)}",
                    _md(v.phase or MISSING),
                    f"**{_md(v.verdict)}**",
                    "<br>".join(_md(r) for r in v.reasons) or MISSING,
                ]
                for v in report.verdicts
            ],
        )
    else:
        lines.append("No verdicts recorded.")
    return "\n".join(lines) + "\n"
