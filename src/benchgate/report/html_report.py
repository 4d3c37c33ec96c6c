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
    arm_rows,
    roofline_status,
    roofline_text,
    short_time,
    spec_text,
    vs_off_text,
)
from .charts import chart_acceptance, chart_over_time, chart_spec_ab
from .data import NOT_MEASURED, OFF, Report, roofline_efficiency

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem auto;
       max-width: 1100px; color: #222; background: #fff; line-height: 1.4; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05rem; margin-top: 1.4rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
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


def _verdict_html(verdicts: Sequence[ledger.VerdictRecord]) -> str:
    if not verdicts:
        return '<p class="note">No verdicts recorded.</p>'
    rows = []
    for v in verdicts:
        reasons = "".join(f"<li>{_e(r)}</li>" for r in v.reasons) or "<li>(none given)</li>"
        runs = " → ".join(_e(x) for x in (v.baseline_run_id, v.candidate_run_id) if x is not None)
        rows.append(
            [
                (_e(short_time(v.recorded_at)), False),
                (_e(v.host), False),
                (_e(v.baseline_release or MISSING) + " → " + _e(v.release or MISSING), False),
                (_e(v.phase or MISSING), False),
                (f'<span class="verdict verdict-{_e(v.verdict)}">{_e(v.verdict)}</span>', False),
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
        return "".join(out) + _choices_html(choices) + "</section>"
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

    rows = arm_rows(runs, choices)
    out.append("<h3>Per release and speculative arm</h3>")
    out.append(
        _table(
            [
                "release",
                "speculative",
                "runs",
                "tokens/s",
                "vs off",
                "TTFT ms",
                "TPOT ms",
                "acceptance",
            ],
            [
                [
                    (_e(r.release), False),
                    (_e(r.arm), False),
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
    )
    out.append(
        '<p class="note">Medians over the runs of each group; "vs off" is the A/B\'s own '
        'estimate of the change in tokens/s against the same release\'s "off" arm, better or '
        "worse, with its interval (as in its table), or, without a recorded A/B, the ratio of "
        "the medians. A run counts as "
        '"off" unless the ledger or '
        "its result records a speculative configuration, or its phase is an arm label such as "
        "<code>arm:ngram-k3</code>.</p>"
    )

    out.append("<h3>Throughput and latency over time</h3>")
    out.append(
        _chart(
            chart_over_time(runs, aid + "-time"),
            aid + "-time",
            f"{host}: output tokens/s, TTFT and TPOT medians per run",
        )
    )

    out.append("<h3>Speculative decoding on vs off</h3>")
    arms = {r.arm for r in runs}
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

    out.append(_choices_html(choices))

    out.append("<h3>Per-position acceptance</h3>")
    curves: list[tuple[str, Sequence[float]]] = [
        (f"{r.release} · {r.arm}", r.per_position) for r in rows if r.per_position
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
                    (_e(number(r.throughput)), True),
                    (_e(number(r.ttft_ms, 1)), True),
                    (_e(number(r.tpot_ms, 2)), True),
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
