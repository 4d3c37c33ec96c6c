"""Reports from the ledger: one self-contained HTML file, or Markdown for a pull request.

What a report shows, per host:

* throughput (output tokens/s) and latency (TTFT, TPOT medians) of every run
  over time, one series per release and speculative arm;
* speculative decoding on vs off per release (median tokens/s of each arm and
  the change against "off");
* why a speculative arm's tokens/s changed from one release to the next:
  acceptance (tokens per step) against step cost (time per step), from the
  server's spec-decode counters (:mod:`benchgate.causes`), one line per arm;
* per-position acceptance of the speculative arms, drawn (and a reference
  curve, e.g. the field report's, when one is given);
* roofline efficiency when the results carry a ``roofline`` section ("not
  measured" otherwise);
* staged runs (``stages:`` workloads, :mod:`benchgate.stages`) stage by
  stage: each stage's figures from its own trials, the staged gate verdict of
  every stage (estimate and interval as the gate recorded them) and the
  staged A/B (every arm at every stage); unstaged runs render as before;
* and, for all hosts, the verdict history with every reason.

Where the data comes from: the ledger (:mod:`benchgate.ledger`) keeps each
run's summary, per-trial metrics and phase label, and the sha256 of the whole
result document. What only the whole result has (``target.speculative``,
``trials[].server.spec_decode``, ``roofline``) is read from result JSON files
found under ``results_dirs`` (``artifacts/`` beside the ledger by default) and
matched to runs by that sha256, so a file that was edited after recording is
not mistaken for the run. Columns a later ledger schema adds (``result_json``,
``target_json``, ``speculative_json``, ``roofline_json``, ``arm``) are used when
present.

A run's speculative arm, first found wins: a ``speculative`` mapping in the
result (``target``, ``metadata``, ``server`` or top level; ``{}`` is "off"),
then the phase label (``arm:<name>``; ``arm-<name>`` and ``spec:<name>`` from
older ledgers), else "off".

The ledger is opened read-only; the report never changes it. Charts are
matplotlib figures rendered to inline SVG (text kept as text), so the HTML
needs no network, no JavaScript and no external CSS. Every string from the
ledger or a result is escaped.

One module per job: :mod:`.data` (the ledger and result files read into
:class:`RunView`), :mod:`.aggregates` (per release and arm, roofline status),
:mod:`.charts` (SVG), :mod:`.html_report` and :mod:`.markdown_report`.
"""

from __future__ import annotations

from .aggregates import ArmRow, arm_rows, roofline_status
from .charts import PALETTE, chart_acceptance, chart_over_time, chart_spec_ab, chart_stages
from .data import (
    MAX_RESULT_BYTES,
    NOT_MEASURED,
    OFF,
    Report,
    RunView,
    StageFigures,
    arm_of,
    build_report,
    index_results,
    load_report,
    open_snapshot,
    parse_time,
    roofline_efficiency,
    speculative_label,
)
from .html_report import render_html
from .markdown_report import render_markdown

__all__ = [
    "MAX_RESULT_BYTES",
    "NOT_MEASURED",
    "OFF",
    "PALETTE",
    "ArmRow",
    "Report",
    "RunView",
    "StageFigures",
    "arm_of",
    "arm_rows",
    "build_report",
    "chart_acceptance",
    "chart_over_time",
    "chart_spec_ab",
    "chart_stages",
    "index_results",
    "load_report",
    "open_snapshot",
    "parse_time",
    "render_html",
    "render_markdown",
    "roofline_efficiency",
    "roofline_status",
    "speculative_label",
]
