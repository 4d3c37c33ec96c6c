"""The report as GitHub-flavoured Markdown (tables, no charts) for chat or a pull request."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from .. import ledger
from ..numfmt import MISSING, number
from .aggregates import (
    CAUSES_NOTE,
    CAUSES_TITLE,
    CONFIG_NOTE,
    CONTEXT_NOTE,
    STAGED_AB_HEADERS,
    STAGED_AB_NOTE,
    STAGED_VERDICT_HEADERS,
    STAGED_VERDICT_NOTE,
    ArmRow,
    CauseLine,
    arm_config_notes,
    arm_headers,
    arm_rows,
    cause_lines,
    config_legend,
    context_lines,
    correction_text,
    is_staged_choice,
    load_text,
    metric_notes,
    roofline_status,
    short_time,
    stage_choices,
    stage_order,
    stage_params,
    stage_reasons,
    stage_runs,
    staged_ab_rows,
    staged_verdict,
    staged_verdict_rows,
    vs_off_text,
)
from .data import NOT_MEASURED, Report, RunView, roofline_efficiency


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


def _arm_table(rows: Sequence[ArmRow]) -> list[str]:
    configs = any(r.config for r in rows)
    return _md_table(
        arm_headers(configs),
        [
            [
                _md(r.release),
                _md(r.arm),
                *([_md(r.config or MISSING)] if configs else []),
                str(r.runs),
                number(r.throughput),
                vs_off_text(r),
                number(r.ttft_ms, 1),
                number(r.tpot_ms, 2),
                number(None if r.acceptance_rate is None else 100 * r.acceptance_rate, 1, "%"),
            ]
            for r in rows
        ],
    )


def _causes_md(lines: Sequence[CauseLine], note: bool = True) -> list[str]:
    """One line per speculative arm and pair of releases: why its tokens/s changed."""
    if not lines:
        return []
    out = [f"{CAUSES_TITLE}:", ""]
    out += [f"- **{_md(c.label)}**: {_md(c.words)}" for c in lines]
    return out + ["", *([_md(CAUSES_NOTE), ""] if note else [])]


def _config_legend_md(runs: Sequence[RunView]) -> list[str]:
    """The serving configurations of ``runs`` by fingerprint; [] when none is known."""
    legend = config_legend(runs)
    if not legend:
        return []
    return [
        "Serving configurations:",
        "",
        *_md_table(
            ["config", "runs", "settings"],
            [[f"`{fp}`", str(n), f"`{t}`" if t else MISSING] for fp, t, n in legend],
        ),
        "",
        *_context_md(runs),
        _md(CONFIG_NOTE),
        "",
    ]


def _context_md(runs: Sequence[RunView]) -> list[str]:
    """What the runs ran under (host, engine), as a list; [] when none recorded it."""
    lines = context_lines(runs)
    if not lines:
        return []
    return [*(f"- {_md(line)}" for line in lines), "", _md(CONTEXT_NOTE), ""]


def _stage_title(name: str, params: Any) -> str:
    load = load_text(params)
    return f"{name} ({load})" if load else name


def _stages_md(runs: Sequence[RunView], choices: Sequence[Any]) -> list[str]:
    """One table per stage of the staged runs (each stage's own trials)."""
    lines = []
    explained = False
    for name in stage_order(runs):
        lines += [f"Stage **{_md(_stage_title(name, stage_params(runs, name)))}**:", ""]
        lines += _arm_table(arm_rows(stage_runs(runs, name), stage_choices(choices, name)))
        lines.append("")
        causes = cause_lines(stage_runs(runs, name))
        lines += _causes_md(causes, note=False)
        explained = explained or bool(causes)
    if explained:
        lines += [_md(f"{CAUSES_TITLE}: {CAUSES_NOTE}"), ""]
    return lines


def _staged_ab_md(choices: Sequence[Any], known: Sequence[str]) -> list[str]:
    lines: list[str] = []
    for c in reversed([c for c in choices if is_staged_choice(c)]):
        lines += [
            f"Staged speculative A/B ({_md(c.get('release') or MISSING)}, "
            f"{_md(short_time(str(c.get('recorded_at', ''))))} UTC): chosen "
            f"**{_md(c.get('winner') or 'none')}** — {_md(c.get('reason') or '')}",
            "",
        ]
        lines += _md_table(
            list(STAGED_AB_HEADERS),
            [
                [
                    _md(r.stage) if r.first else "",
                    _md(r.arm),
                    r.throughput,
                    r.ttft_ms,
                    r.tpot_ms,
                    r.acceptance,
                    r.vs_off,
                    _md(r.bounds),
                    _md(r.here),
                ]
                for r in staged_ab_rows(c, known)
            ],
        )
        lines.append("")
        lines += [
            f"- {_md(a.get('name'))}: {_md(a.get('status') or MISSING)}"
            for a in c.get("arms") or []
            if isinstance(a, dict)
        ]
        lines += ["", _md(STAGED_AB_NOTE), ""]
    return lines


def _staged_verdicts_md(verdicts: Sequence[ledger.VerdictRecord]) -> list[str]:
    lines: list[str] = []
    for v in verdicts:
        sv = staged_verdict(v)
        if sv is None:
            continue
        lines += [
            f"Staged gate verdict ({_md(v.baseline_release or MISSING)} → "
            f"{_md(v.release or MISSING)}, {_md(short_time(v.recorded_at))} UTC): "
            f"**{_md(v.verdict)}** ({_md(correction_text(sv))})",
            "",
        ]
        metric_rows = staged_verdict_rows(sv)
        lines += _md_table(
            list(STAGED_VERDICT_HEADERS),
            [
                [
                    _md(r.stage) if r.first else "",
                    _md(r.load) if r.first else "",
                    f"**{_md(r.stage_verdict)}**" if r.first else "",
                    r.alpha if r.first else "",
                    _md(r.metric) + (" \\*" if r.critical else ""),
                    r.baseline,
                    r.candidate,
                    r.change,
                    _md(r.interval),
                    r.limit,
                    _md(r.verdict),
                ]
                for r in metric_rows
            ],
        )
        lines.append("")
        lines += [_md(n) for n in metric_notes(metric_rows)]
        lines += [
            f"- stage {_md(stage)} ({_md(verdict)}): {_md(reason)}"
            for stage, verdict, reason in stage_reasons(sv)
        ]
        lines += ["", _md(STAGED_VERDICT_NOTE), ""]
    return lines


def _stage_verdicts_md(v: ledger.VerdictRecord) -> str:
    """A staged verdict's stages, for its verdict-history cell ("" when unstaged)."""
    sv = staged_verdict(v)
    if sv is None:
        return ""
    return "".join(f"<br>{_md(s['stage'])}: {_md(s.get('verdict'))}" for s in sv.stages)


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
            lines += _staged_verdicts_md([v for v in report.verdicts if v.host == host])
            continue
        lines += _config_legend_md(runs)
        differ = arm_config_notes(runs)
        if differ:
            lines += [f"- {_md(line)}" for line in differ] + [""]
        staged = [r for r in runs if r.stages]
        flat = [r for r in runs if not r.stages]
        if flat:
            lines += _arm_table(arm_rows(flat, choices))
            lines.append("")
            lines += _causes_md(cause_lines(flat))
        if staged:
            lines += _stages_md(staged, choices)
            lines += _staged_ab_md(choices, stage_order(staged))
        # Every run's curve (a staged run's over all its stages' trials).
        rows = arm_rows(runs, choices)
        curves = [
            (f"{r.release} · {r.arm}" + (f" · {r.config}" if r.config else ""), r.per_position)
            for r in rows
            if r.per_position
        ]
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
        lines += _staged_verdicts_md([v for v in report.verdicts if v.host == host])
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
                    f"**{_md(v.verdict)}**" + _stage_verdicts_md(v),
                    "<br>".join(_md(r) for r in v.reasons) or MISSING,
                ]
                for v in report.verdicts
            ],
        )
    else:
        lines.append("No verdicts recorded.")
    return "\n".join(lines) + "\n"
