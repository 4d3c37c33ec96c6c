"""The report as one self-contained HTML document (inline CSS and SVG, no scripts)."""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Mapping, Sequence
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
    roofline_text,
    short_time,
    spec_text,
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
from .charts import chart_acceptance, chart_over_time, chart_spec_ab, chart_stages
from .data import NOT_MEASURED, OFF, Report, RunView, roofline_efficiency

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem auto;
       max-width: 1240px; color: #222; background: #fff; line-height: 1.4; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05rem; margin-top: 1.4rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .85rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td > b { white-space: nowrap; }
figure.chart { margin: .5rem 0 1rem; } figure.chart svg { max-width: 100%; height: auto; }
figcaption, .note { color: #555; font-size: .85rem; }
.verdict { font-weight: 600; padding: 0 .3rem; border-radius: 3px; }
.verdict-PASS { color: #0a5c2b; background: #e3f4e8; }
.verdict-FAIL { color: #8a1010; background: #fbe4e4; }
.verdict-INCONCLUSIVE { color: #6b4d00; background: #fdf3d6; }
ul.reasons { margin: 0; padding-left: 1.1rem; }
code { font-size: .85rem; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _anchor(text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    safe = "".join(ch if ch.isalnum() else "-" for ch in text)[:40]
    return f"host-{safe}-{digest}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[tuple[str, bool]]]) -> str:
    """Rows of (already escaped HTML, numeric?) cells."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if num else f"<td>{c}</td>" for c, num in row)
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(svg: str | None, chart_id: str, caption: str) -> str:
    if svg is None:
        return f'<p class="note">{_e(caption)}: no data.</p>'
    return (
        f'<figure class="chart" id="{_e(chart_id)}" data-chart="{_e(chart_id.split("-")[-1])}">'
        f"{svg}<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _verdict_span(verdict: str) -> str:
    return f'<span class="verdict verdict-{_e(verdict)}">{_e(verdict)}</span>'


def _config_legend_html(runs: Sequence[RunView]) -> str:
    """The serving configurations of ``runs`` by fingerprint; "" when none is known."""
    legend = config_legend(runs)
    if not legend:
        return ""
    return (
        "<h3>Serving configurations</h3>"
        + _table(
            ["config", "runs", "settings"],
            [
                [
                    (f"<code>{_e(fp)}</code>", False),
                    (str(n), True),
                    (f"<code>{_e(t)}</code>", False),
                ]
                for fp, t, n in legend
            ],
        )
        + _context_html(runs)
        + f'<p class="note">{_e(CONFIG_NOTE)}</p>'
    )


def _context_html(runs: Sequence[RunView]) -> str:
    """What the runs ran under (host, engine), as a list; "" when none recorded it."""
    lines = context_lines(runs)
    if not lines:
        return ""
    return (
        '<ul class="config-context">'
        + "".join(f"<li>{_e(line)}</li>" for line in lines)
        + f'</ul><p class="note">{_e(CONTEXT_NOTE)}</p>'
    )


def _causes_html(lines: Sequence[CauseLine], note: bool = True) -> str:
    """One line per speculative arm and pair of releases: why its tokens/s changed."""
    if not lines:
        return ""
    items = "".join(
        f'<li data-arm="{_e(c.arm)}" data-cause="{_e(c.split.cause or c.split.status)}">'
        f"<b>{_e(c.label)}</b>: {_e(c.words)}</li>"
        for c in lines
    )
    title = f'<p class="causes-title">{_e(CAUSES_TITLE)}:</p>'
    tail = f'<p class="note">{_e(CAUSES_NOTE)}</p>' if note else ""
    return f'{title}<ul class="causes">{items}</ul>{tail}'


def _arm_table(rows: Sequence[ArmRow]) -> str:
    configs = any(r.config for r in rows)
    return _table(
        arm_headers(configs),
        [
            [
                (_e(r.release), False),
                (_e(r.arm), False),
                *([(_e(r.config or MISSING), False)] if configs else []),
                (str(r.runs), True),
                (_e(number(r.throughput)), True),
                (_e(vs_off_text(r)), True),
                (_e(number(r.ttft_ms, 1)), True),
                (_e(number(r.tpot_ms, 2)), True),
                (
                    _e(
                        number(
                            None if r.acceptance_rate is None else 100 * r.acceptance_rate,
                            1,
                            "%",
                        )
                    ),
                    True,
                ),
            ]
            for r in rows
        ],
    )


def _stage_title(name: str, params: Mapping[str, Any] | None) -> str:
    load = load_text(params)
    return f"{name} ({load})" if load else name


def _stages_html(
    runs: Sequence[RunView], choices: Sequence[Mapping[str, Any]], aid: str, host: str
) -> str:
    """Every stage of the host's staged runs: a table and a chart per stage, and all side
    by side."""
    names = stage_order(runs)
    per_stage = [
        (name, arm_rows(stage_runs(runs, name), stage_choices(choices, name))) for name in names
    ]
    out = [
        "<h3>Stages</h3>",
        f'<p class="note">{len(runs)} staged run(s); stages in the order they ran: '
        + ", ".join(_e(_stage_title(n, stage_params(runs, n))) for n in names)
        + '. Each stage\'s figures come from its own trials only; "vs off" is the staged '
        "A/B's estimate at that stage where the ledger has it, else the ratio of the "
        "medians.</p>",
        _chart(
            chart_stages(
                per_stage,
                aid + "-stages",
                [load_text(stage_params(runs, n)) for n in names],
            ),
            aid + "-stages",
            f"{host}: tokens/s, TTFT and TPOT medians at every stage",
        ),
    ]
    explained = False
    for i, (name, rows) in enumerate(per_stage):
        sid = f"{aid}-stage{i}"
        out.append(
            f'<h4 id="{_e(sid)}" data-stage="{_e(name)}">Stage '
            f"{_e(_stage_title(name, stage_params(runs, name)))}</h4>"
        )
        out.append(_arm_table(rows))
        lines = cause_lines(stage_runs(runs, name))
        out.append(_causes_html(lines, note=False))
        explained = explained or bool(lines)
        out.append(
            _chart(
                chart_over_time(
                    stage_runs(runs, name),
                    sid + "-time",
                    f"stage {name}: runs over time (dots: single trials)",
                ),
                sid + "-time",
                f"{host}, stage {name}: output tokens/s, TTFT and TPOT medians per run",
            )
        )
    if explained:
        out.append(f'<p class="note">{_e(CAUSES_TITLE)}: {_e(CAUSES_NOTE)}</p>')
    return "".join(out)


def _staged_verdicts_html(verdicts: Sequence[ledger.VerdictRecord]) -> str:
    """Each staged gate verdict: every stage's verdict, and per metric the estimate and
    interval the gate recorded."""
    views = [sv for sv in (staged_verdict(v) for v in verdicts) if sv is not None]
    if not views:
        return ""
    out = ["<h3>Staged gate verdicts</h3>"]
    for sv in views:
        v = sv.record
        out.append(
            f'<p class="staged-verdict">{_e(short_time(v.recorded_at))} UTC, '
            f"{_e(v.baseline_release or MISSING)} → {_e(v.release or MISSING)}"
            f"{', ' + _e(v.phase) if v.phase else ''}: {_verdict_span(v.verdict)} "
            f'<span class="note">({_e(correction_text(sv))})</span></p>'
        )
        rows = []
        metric_rows = staged_verdict_rows(sv)
        for r in metric_rows:
            rows.append(
                [
                    (_e(r.stage) if r.first else "", False),
                    (_e(r.load) if r.first else "", False),
                    (_verdict_span(r.stage_verdict) if r.first else "", False),
                    (_e(r.alpha) if r.first else "", True),
                    (_e(r.metric) + (" *" if r.critical else ""), False),
                    (_e(r.baseline), True),
                    (_e(r.candidate), True),
                    (_e(r.change), True),
                    (_e(r.interval), True),
                    (_e(r.limit), True),
                    (_e(r.verdict), False),
                ]
            )
        out.append(_table(STAGED_VERDICT_HEADERS, rows))
        out.extend(f'<p class="note">{_e(n)}</p>' for n in metric_notes(metric_rows))
        reasons = "".join(
            f"<li>stage {_e(stage)} ({_e(verdict)}): {_e(reason)}</li>"
            for stage, verdict, reason in stage_reasons(sv)
        )
        if reasons:
            out.append(f'<ul class="reasons">{reasons}</ul>')
    out.append(f'<p class="note">{_e(STAGED_VERDICT_NOTE)}</p>')
    return "".join(out)


def _staged_ab_html(choices: Sequence[Mapping[str, Any]], known: Sequence[str]) -> str:
    """Each staged A/B: every arm at every stage, and where it helps and hurts."""
    staged = [c for c in choices if is_staged_choice(c)]
    if not staged:
        return ""
    out = ["<h3>Staged speculative A/B</h3>"]
    for c in reversed(staged):
        out.append(
            f'<p class="staged-ab">{_e(short_time(str(c.get("recorded_at", ""))))} UTC, release '
            f"{_e(c.get('release') or MISSING)}, {_e(c.get('objective') or MISSING)}: chosen "
            f"<b>{_e(c.get('winner') or 'none')}</b> — {_e(c.get('reason') or '')}</p>"
        )
        out.append(
            _table(
                STAGED_AB_HEADERS,
                [
                    [
                        (_e(r.stage) if r.first else "", False),
                        (_e(r.arm), False),
                        (_e(r.throughput), True),
                        (_e(r.ttft_ms), True),
                        (_e(r.tpot_ms), True),
                        (_e(r.acceptance), True),
                        (_e(r.vs_off), True),
                        (_e(r.bounds), True),
                        (_e(r.here), False),
                    ]
                    for r in staged_ab_rows(c, known)
                ],
            )
        )
        out.append(
            _table(
                ["arm", "over the stages"],
                [
                    [(_e(a.get("name")), False), (_e(a.get("status") or MISSING), False)]
                    for a in c.get("arms") or []
                    if isinstance(a, Mapping)
                ],
            )
        )
    out.append(f'<p class="note">{_e(STAGED_AB_NOTE)}</p>')
    return "".join(out)


def _run_figure(run: RunView, name: str, digits: int) -> str:
    """A run's figure; a staged run's per stage, one line each."""
    if not run.stages:
        return _e(number(getattr(run, name), digits))
    return "<br>".join(f"{_e(s.name)}: {_e(number(getattr(s, name), digits))}" for s in run.stages)


def _verdict_html(verdicts: Sequence[ledger.VerdictRecord]) -> str:
    if not verdicts:
        return '<p class="note">No verdicts recorded.</p>'
    rows = []
    for v in verdicts:
        reasons = "".join(f"<li>{_e(r)}</li>" for r in v.reasons) or "<li>(none given)</li>"
        runs = " → ".join(_e(x) for x in (v.baseline_run_id, v.candidate_run_id) if x is not None)
        staged = staged_verdict(v)
        per_stage = (
            "".join(
                f"<br>{_e(s['stage'])}: {_verdict_span(str(s.get('verdict') or MISSING))}"
                for s in staged.stages
            )
            if staged
            else ""
        )
        rows.append(
            [
                (_e(short_time(v.recorded_at)), False),
                (_e(v.host), False),
                (_e(v.baseline_release or MISSING) + " → " + _e(v.release or MISSING), False),
                (_e(v.phase or MISSING), False),
                (_verdict_span(v.verdict) + per_stage, False),
                (f'<ul class="reasons">{reasons}</ul>', False),
                (runs or MISSING, False),
            ]
        )
    return _table(
        ["when (UTC)", "host", "release (from → to)", "phase", "verdict", "reasons", "runs"],
        rows,
    )


def _choices_html(choices: Sequence[Mapping[str, Any]]) -> str:
    if not choices:
        return ""
    return "<h3>Speculative A/B choices</h3>" + _table(
        ["when (UTC)", "release", "objective", "winner", "config", "reason"],
        [
            [
                (_e(short_time(str(c.get("recorded_at", "")))), False),
                (_e(c.get("release") or MISSING), False),
                (_e(c.get("objective") or MISSING), False),
                (f"<b>{_e(c.get('winner') or 'none')}</b>", False),
                (f"<code>{_e(spec_text(c.get('config') or {}) or '{}')}</code>", False),
                (_e(c.get("reason") or ""), False),
            ]
            for c in reversed(choices)
        ],
    )


def _host_html(report: Report, host: str) -> str:
    runs = report.runs_of(host)
    aid = _anchor(host)
    out = [f'<section class="host" id="{_e(aid)}"><h2>Host {_e(host)}</h2>']
    choices = [c for c in report.ab_choices if c.get("host") == host]
    if not runs:
        out.append('<p class="note">No runs recorded for this host.</p>')
        return (
            "".join(out)
            + _choices_html(choices)
            + _staged_ab_html(choices, [])
            + _staged_verdicts_html([v for v in report.verdicts if v.host == host])
            + "</section>"
        )
    models = sorted({r.model for r in runs if r.model})
    workloads = sorted({r.workload for r in runs if r.workload})
    hw = next((r.hardware for r in reversed(runs) if r.hardware), None)
    facts = [
        f"{len(runs)} run(s) from {_e(short_time(runs[0].recorded_at))} "
        f"to {_e(short_time(runs[-1].recorded_at))} UTC"
    ]
    if models:
        facts.append("model " + ", ".join(f"<code>{_e(m)}</code>" for m in models))
    if workloads:
        facts.append("workload " + ", ".join(f"<code>{_e(w)}</code>" for w in workloads))
    if hw:
        hw_text = json.dumps(hw, sort_keys=True) if not isinstance(hw, str) else hw
        facts.append(f"hardware <code>{_e(hw_text[:200])}</code>")
    out.append(f'<p class="note">{"; ".join(facts)}.</p>')
    out.append(_config_legend_html(runs))
    differ = arm_config_notes(runs)
    if differ:
        out.append(
            '<ul class="config-differs">'
            + "".join(f"<li>{_e(line)}</li>" for line in differ)
            + "</ul>"
        )

    staged = [r for r in runs if r.stages]
    flat = [r for r in runs if not r.stages]
    if flat:
        rows = arm_rows(flat, choices)
        out.append("<h3>Per release and speculative arm</h3>")
        out.append(_arm_table(rows))
        out.append(
            '<p class="note">Medians over the runs of each group; "vs off" is the A/B\'s own '
            'estimate of the change in tokens/s against the same release\'s "off" arm, better or '
            "worse, with its interval (as in its table), or, without a recorded A/B, the ratio of "
            "the medians. A run counts as "
            '"off" unless the ledger or '
            "its result records a speculative configuration, or its phase is an arm label such as "
            "<code>arm:ngram-k3</code>.</p>"
        )
        out.append(_causes_html(cause_lines(flat)))

        out.append("<h3>Throughput and latency over time</h3>")
        out.append(
            _chart(
                chart_over_time(flat, aid + "-time"),
                aid + "-time",
                f"{host}: output tokens/s, TTFT and TPOT medians per run",
            )
        )

        out.append("<h3>Speculative decoding on vs off</h3>")
        arms = {r.arm for r in flat}
        if arms == {OFF}:
            out.append(
                '<p class="note">Every run of this host had speculative decoding off '
                "(no A/B runs recorded).</p>"
            )
        out.append(
            _chart(
                chart_spec_ab(rows, aid + "-specab"),
                aid + "-specab",
                f"{host}: median output tokens/s per release and speculative arm",
            )
        )
    else:
        out.append(
            '<p class="note">Every run of this host is staged: its figures are shown per '
            "stage below.</p>"
        )
    if staged:
        out.append(_stages_html(staged, choices, aid, host))

    out.append(_choices_html(choices))
    out.append(_staged_ab_html(choices, stage_order(staged)))

    out.append("<h3>Per-position acceptance</h3>")
    # Every run's curve (a staged run's over all its stages' trials).
    curves: list[tuple[str, Sequence[float]]] = [
        (f"{r.release} · {r.arm}" + (f" · {r.config}" if r.config else ""), r.per_position)
        for r in arm_rows(runs, choices)
        if r.per_position
    ]
    if curves:
        pp_rows = [
            [(_e(label), False)] + [(_e(number(100 * v, 1, "%")), True) for v in c]
            for label, c in curves
        ]
        width = max(len(c) for _, c in curves)
        pp_rows = [row + [("", True)] * (width + 1 - len(row)) for row in pp_rows]
        out.append(_table(["release · arm"] + [f"pos {i}" for i in range(width)], pp_rows))
    else:
        out.append(
            '<p class="note">No per-position acceptance for this host: none of its runs had '
            "speculative decoding on, or their result files were not found.</p>"
        )
    if curves:
        reference = bool(report.reference_acceptance)
        if report.reference_acceptance:
            curves.append((report.reference_label, report.reference_acceptance))
        out.append(
            _chart(
                chart_acceptance(curves, aid + "-accept", reference=reference),
                aid + "-accept",
                f"{host}: share of draft cycles in which position i was accepted",
            )
        )

    out.append("<h3>Roofline efficiency</h3>")
    measured, unmeasured = roofline_status(runs)
    if not measured:
        out.append(f'<p class="note">Roofline efficiency: {NOT_MEASURED}.</p>')
    else:
        out.append(
            _table(
                ["when (UTC)", "release", "speculative", "efficiency", "details"],
                [
                    [
                        (_e(short_time(r.recorded_at)), False),
                        (_e(r.release), False),
                        (_e(r.arm), False),
                        (_e(number(roofline_efficiency(r.roofline), 1, "%")), True),
                        (_e(roofline_text(r.roofline or {})), False),
                    ]
                    for r in measured
                ],
            )
        )
        out.append(
            '<p class="note">Efficiency = measured single-stream decode tokens/s over the '
            "bound that reading the weights at the GPU's memory bandwidth sets.</p>"
        )
    for line in unmeasured if measured or any("(" in x for x in unmeasured) else []:
        out.append(f'<p class="note">{_e(line)}.</p>')

    out.append(_staged_verdicts_html([v for v in report.verdicts if v.host == host]))

    out.append("<h3>Runs</h3>")
    out.append(
        _table(
            [
                "#",
                "when (UTC)",
                "phase",
                "release",
                "speculative",
                "tokens/s",
                "TTFT ms",
                "TPOT ms",
                "result file",
            ],
            [
                [
                    (str(r.id), True),
                    (_e(short_time(r.recorded_at)), False),
                    (_e(r.phase), False),
                    (_e(r.release), False),
                    (
                        _e(r.arm)
                        + (
                            f"<br><code>{_e(spec_text(r.speculative))}</code>"
                            if r.speculative
                            else ""
                        ),
                        False,
                    ),
                    (_run_figure(r, "throughput", 1), True),
                    (_run_figure(r, "ttft_ms", 1), True),
                    (_run_figure(r, "tpot_ms", 2), True),
                    (f"<code>{_e(r.result_source)}</code>" if r.result_source else MISSING, False),
                ]
                for r in reversed(runs)
            ],
        )
    )
    out.append("</section>")
    return "".join(out)


def render_html(report: Report) -> str:
    """The whole report as one HTML document (inline CSS and SVG, no scripts)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(report.title)}</h1>",
        f'<p class="note">Generated {_e(report.generated_at)} from <code>'
        f"{_e(report.ledger_path)}</code>: {len(report.runs)} run(s), "
        f"{len(report.verdicts)} verdict(s), {len(report.hosts)} host(s); "
        f"{report.results_matched} run(s) matched to their result file.</p>",
    ]
    latest: dict[str, ledger.VerdictRecord] = {}
    for v in report.verdicts:  # newest first
        latest.setdefault(v.host, v)
    if report.hosts:
        parts.append(
            _table(
                ["host", "runs", "latest verdict", "release (from → to)", "when (UTC)"],
                [
                    [
                        (f'<a href="#{_e(_anchor(h))}">{_e(h)}</a>', False),
                        (str(len(report.runs_of(h))), True),
                        (
                            f'<span class="verdict verdict-{_e(latest[h].verdict)}">'
                            f"{_e(latest[h].verdict)}</span>"
                            if h in latest
                            else MISSING,
                            False,
                        ),
                        (
                            _e(latest[h].baseline_release or MISSING)
                            + " → "
                            + _e(latest[h].release or MISSING)
                            if h in latest
                            else MISSING,
                            False,
                        ),
                        (_e(short_time(latest[h].recorded_at)) if h in latest else MISSING, False),
                    ]
                    for h in report.hosts
                ],
            )
        )
    else:
        parts.append('<p class="note">The ledger holds no runs and no verdicts.</p>')
    if report.reference_acceptance:
        parts.append(
            f'<h2>Reference acceptance</h2><p class="note">{_e(report.reference_label)}: '
            + " / ".join(_e(number(100 * v, 1, "%")) for v in report.reference_acceptance)
            + " per draft position (drawn beside each host's measured curves).</p>"
        )
        parts.append(
            _chart(
                chart_acceptance(
                    [(report.reference_label, report.reference_acceptance)], "reference-accept"
                ),
                "reference-accept",
                f"{report.reference_label}: per-position acceptance",
            )
        )
    for host in report.hosts:
        parts.append(_host_html(report, host))
    parts.append('<section id="verdicts"><h2>Verdict history</h2>')
    parts.append(_verdict_html(report.verdicts))
    parts.append("</section></body></html>\n")
    return "\n".join(parts)
