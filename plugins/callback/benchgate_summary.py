# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)
# Ansible reads DOCUMENTATION before the imports.
# ruff: noqa: E402
"""Print one line per host at the end of a benchgate play: from -> to, tokens/s, verdict."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: benchgate_summary
type: aggregate
short_description: Per-host summary of a benchgate upgrade
description:
  - At the end of the playbook, prints one line per host from the C(benchgate_summary)
    statistic that the upgrade playbook sets with C(ansible.builtin.set_stats) - the release
    before and after, the median output tokens/s before and after, the gate's estimate of
    the change with its interval and the interval's level (better or worse; for a staged
    workload, at the stage where the candidate fared worst, named after the interval), the
    verdict and whether the host was rolled back; then, per host, the speculative decoding
    A/B table (every arm's tokens/s, TTFT, acceptance and per-position acceptance, and the
    arm chosen).
  - A host that became unreachable during the run is listed with the verdict C(LOST) and
    the task it was lost in, whether or not the play recorded it; a host that failed with
    no verdict recorded (in preflight, or lost mid-task) is listed C(FAILED) with the task
    and its message.
  - When the environment variable C(BENCHGATE_SUMMARY_FILE) names a file, the summary is
    also written there as JSON.
requirements:
  - enable in ansible.cfg (callbacks_enabled = benchgate_summary)
  - the benchgate Python package in the controller's Python (it writes the figures)
"""

import json
import os

from ansible.plugins.callback import CallbackBase

from benchgate.numfmt import MISSING, change_interval, medians_note, number


def _tok(value: object) -> str:
    try:
        return number(float(value), 1)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return MISSING


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _change(before: object, after: object) -> float | None:
    """The medians' relative change in %, None when either is missing."""
    b, a = _float(before), _float(after)
    if a is None or not b:
        return None
    return (a / b - 1.0) * 100.0


def _estimate(item: dict) -> str:
    """The gate's estimate of the change in tokens/s with its interval, in words
    (``2.5% better (90% interval 1.0% worse to 6.0% better)``; the level where
    the line carries it: 90% for one stage, 95% for each of two at the same
    alpha); else the medians' change. Beside the estimate, what it is computed
    from and why the medians before and after can point the other way, in the
    words of the gate's reasons (``benchgate.numfmt.medians_note``)."""
    change = _float(item.get("change_pct"))
    if change is None:
        medians = _change(item.get("before_tok_s"), item.get("after_tok_s"))
        return change_interval(medians, None, None)
    note = medians_note(
        _float(item.get("before_tok_s")),
        _float(item.get("after_tok_s")),
        change,
        pairs_change=_float(item.get("pairs_change_pct")),
    )
    return change_interval(
        change,
        _float(item.get("change_lo_pct")),
        _float(item.get("change_hi_pct")),
        level=_float(item.get("interval_pct")),
        note=note,
    )


def format_summary(summary: dict) -> list[str]:
    """Render the per-host summary as text lines (pure, for tests)."""
    header = (
        "host",
        "release",
        "median tok/s before",
        "median tok/s after",
        "change (interval)",
        "verdict",
    )
    rows = [header]
    for host in sorted(summary):
        item = summary[host]
        verdict = str(item.get("verdict", "?"))
        if item.get("rolled_back") in (True, "True", "true"):
            verdict += " (rolled back)"
        rows.append(
            (
                host,
                f"{item.get('from', '?')} -> {item.get('to', '?')}",
                _tok(item.get("before_tok_s")),
                _tok(item.get("after_tok_s")),
                _estimate(item) + (f" at {item['stage']}" if item.get("stage") else ""),
                verdict,
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    ]
    for host in sorted(summary):
        for reason in summary[host].get("reasons") or []:
            lines.append(f"  {host}: {reason}")
    for host in sorted(summary):
        spec = summary[host].get("speculative") or {}
        if isinstance(spec, dict) and spec.get("table"):
            lines.append(f"{host}: speculative decoding A/B on {summary[host].get('to', '?')}")
            lines.extend(f"  {line}" for line in str(spec["table"]).splitlines())
    return lines


def add_lost(summary: dict, lost: dict, failed: dict | None = None) -> dict:
    """The summary with every host lost during the run (host -> the task it was
    lost in: LOST) and every host that failed with no verdict recorded (host ->
    (task, message): FAILED); a host with a verdict keeps it, the task is named
    either way."""
    out = {host: dict(item) for host, item in summary.items()}
    for host, task in lost.items():
        item = out.setdefault(host, {"from": "?", "to": "?", "verdict": "LOST", "reasons": []})
        if item.get("verdict") not in ("PASS", "FAIL", "INCONCLUSIVE"):
            item["verdict"] = "LOST"
        item["reasons"] = [*(item.get("reasons") or []), f'unreachable during "{task}"']
    for host, (task, message) in (failed or {}).items():
        if host in out:
            continue
        why = " ".join(str(message).split())[:300]
        out[host] = {
            "from": "?",
            "to": "?",
            "verdict": "FAILED",
            "reasons": [f'failed in "{task}"' + (f": {why}" if why else "")],
        }
    return out


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "benchgate_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lost: dict[str, str] = {}
        self._failed: dict[str, tuple[str, str]] = {}

    def v2_runner_on_unreachable(self, result):  # noqa: D102 - Ansible's hook
        self._lost.setdefault(result._host.get_name(), result._task.get_name())

    def v2_runner_on_failed(self, result, ignore_errors=False):  # noqa: D102 - Ansible's hook
        if not ignore_errors:
            message = result._result.get("msg", "") if isinstance(result._result, dict) else ""
            self._failed[result._host.get_name()] = (result._task.get_name(), message)

    def v2_playbook_on_stats(self, stats):  # noqa: D102 - Ansible's hook
        summary = add_lost(
            (stats.custom.get("_run") or {}).get("benchgate_summary") or {},
            self._lost,
            self._failed,
        )
        if not summary:
            return
        self._display.banner("BENCHGATE SUMMARY")
        for line in format_summary(summary):
            self._display.display(line)
        path = os.environ.get("BENCHGATE_SUMMARY_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(summary, handle, indent=2, sort_keys=True)
