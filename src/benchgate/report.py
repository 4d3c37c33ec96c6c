"""Reports from the ledger: one self-contained HTML file, or Markdown for a pull request.

What a report shows, per host:

* throughput (output tokens/s) and latency (TTFT, TPOT medians) of every run
  over time, one series per release and speculative arm;
* speculative decoding on vs off per release (median tokens/s of each arm and
  the change against "off");
* per-position acceptance of the speculative arms, drawn (and a reference
  curve, e.g. the field report's, when one is given);
* roofline efficiency when the results carry a ``roofline`` section ("not
  measured" otherwise);
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
then the phase label (``arm-<name>`` or ``spec:<name>``), else "off".

The ledger is opened read-only; the report never changes it. Charts are
matplotlib figures rendered to inline SVG (text kept as text), so the HTML
needs no network, no JavaScript and no external CSS. Every string from the
ledger or a result is escaped.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import math
import re
import sqlite3
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import ledger

__all__ = [
    "OFF",
    "Report",
    "RunView",
    "arm_of",
    "build_report",
    "load_report",
    "render_html",
    "render_markdown",
    "speculative_label",
]

OFF = "off"
NOT_MEASURED = "not measured"

#: Runs whose result has this many bytes or more are not read for enrichment.
MAX_RESULT_BYTES = 64 * 1024 * 1024

# Colours of the charts (matplotlib's "tab10"); the page's own CSS uses none of them.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


# --------------------------------------------------------------------------
# The data a report shows
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    """One ledger run, with what the report needs read out of it."""

    id: int
    recorded_at: str
    host: str
    phase: str
    release: str
    arm: str
    speculative: dict[str, Any] | None
    model: str | None
    workload: str | None
    hardware: Any
    throughput: float | None  # median output tokens/s over valid trials
    throughput_samples: list[float]
    ttft_ms: float | None  # median of the trials' TTFT medians
    tpot_ms: float | None
    acceptance_rate: float | None
    per_position: list[float] | None  # per-position acceptance, fractions
    roofline: dict[str, Any] | None
    result_source: str | None  # where the whole result was found, if it was

    @property
    def when(self) -> datetime | None:
        return parse_time(self.recorded_at)


@dataclass
class Report:
    title: str
    generated_at: str
    ledger_path: str
    runs: list[RunView]
    verdicts: list[ledger.VerdictRecord]
    results_matched: int = 0
    reference_acceptance: list[float] | None = None
    reference_label: str = "reference"
    hosts: list[str] = field(default_factory=list)
    ab_choices: list[dict[str, Any]] = field(default_factory=list)

    def runs_of(self, host: str) -> list[RunView]:
        return sorted((r for r in self.runs if r.host == host), key=lambda r: (r.recorded_at, r.id))


# --------------------------------------------------------------------------
# Small readers (tolerant: results and ledgers from other versions)
# --------------------------------------------------------------------------


def parse_time(text: str | None) -> datetime | None:
    """ISO-8601 (with ``Z`` or an offset, or naive = UTC) to an aware datetime."""
    if not text:
        return None
    s = str(text).strip().replace(" ", "T")
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        try:
            dt = datetime.fromisoformat(s[:19])
        except ValueError:
            return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _get(node: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


def _canonical_sha256(result: Any) -> str:
    """The digest :func:`benchgate.ledger.record_result` stores for a result."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def speculative_label(spec: Mapping[str, Any] | None) -> str:
    """A short arm name for a speculative mapping: ``ngram-k3``, ``draft-k4``, ``off``.

    The same names the speculative A/B gives its arms (method, ``-k`` and the
    number of speculative tokens; a draft model is ``draft``).
    """
    if not spec or spec.get("enabled") is False:
        return OFF
    method = str(spec.get("method") or "")
    if method in ("", "draft_model") and (spec.get("model") or spec.get("draft_model")):
        method = "draft"
    name = method or "spec"
    k = spec.get("num_speculative_tokens", spec.get("k"))
    return f"{name}-k{k}" if k is not None else name


def arm_of(phase: str | None, speculative: Mapping[str, Any] | None) -> str:
    """The speculative arm of a run: the phase's arm label, else its speculative mapping.

    ``arm:ngram-k3`` / ``arm-ngram-k3`` / ``spec:ngram-k3`` name the arm
    (``arm:off`` is off); other phases (``baseline``, ``candidate``) take the
    name from the mapping; no mapping is "off".
    """
    p = (phase or "").strip()
    for prefix in ("arm:", "arm-", "spec:", "spec-"):
        if p.lower().startswith(prefix) and len(p) > len(prefix):
            rest = p[len(prefix) :]
            return OFF if rest.lower() in ("off", "none", "disabled", "plain") else rest
    return speculative_label(speculative)


def _find_speculative(*docs: Any) -> dict[str, Any] | None:
    """The first ``speculative`` mapping in a result; ``None`` when none says."""
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        for path in (
            "target.speculative",
            "metadata.speculative",
            "server.speculative",
            "speculative",
            "target.speculative_config",
            "metadata.speculative_config",
            "speculative_config",
        ):
            value = _get(doc, path)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    continue
            if isinstance(value, Mapping):
                return dict(value)
            if value is False:
                return {}
    return None


def _find_roofline(*docs: Any) -> dict[str, Any] | None:
    for doc in docs:
        for path in ("roofline", "summary.roofline", "target.roofline", "metadata.roofline"):
            value = _get(doc, path)
            if isinstance(value, Mapping) and value:
                return dict(value)
    return None


def roofline_efficiency(roofline: Mapping[str, Any] | None) -> float | None:
    """Efficiency in percent from a roofline mapping (``efficiency_pct`` or a fraction)."""
    if not roofline:
        return None
    keys = [k for k in roofline if "efficiency" in str(k).lower()]
    keys.sort(key=lambda k: (not str(k).endswith("_pct"), str(k) != "efficiency", str(k)))
    for key in keys:
        v = _num(roofline[key])
        if v is None:
            continue
        return v if str(key).endswith("_pct") or v > 1.5 else v * 100.0
    return None


def _per_position(result: Any, trials: Sequence[Mapping[str, Any]]) -> list[float] | None:
    """Per-position acceptance over the valid trials, weighted by each trial's drafts."""
    sources: list[tuple[Any, bool]] = []
    if isinstance(result, Mapping) and isinstance(result.get("trials"), list):
        for t in result["trials"]:
            if isinstance(t, Mapping):
                sources.append((_get(t, "server.spec_decode"), t.get("valid") is not False))
    if not any(s for s, _ in sources):  # a ledger that keeps it with the trial metrics
        sources = [
            (_get(t, "metrics.spec_decode") or _get(t, "metrics.server.spec_decode"), t["valid"])
            for t in trials
        ]
    sums: list[float] = []
    weights: list[float] = []
    for spec, valid in sources:
        if not valid or not isinstance(spec, Mapping):
            continue
        rates = spec.get("per_position_acceptance")
        if not isinstance(rates, list) or not rates:
            continue
        w = _num(spec.get("drafts")) or 1.0
        for i, r in enumerate(rates):
            v = _num(r)
            if v is None:
                continue
            while len(sums) <= i:
                sums.append(0.0)
                weights.append(0.0)
            sums[i] += v * w
            weights[i] += w
    if not sums:
        return None
    return [s / w if w else 0.0 for s, w in zip(sums, weights)]


def _summary_median(summary: Any, name: str) -> float | None:
    return _num(_get(summary, f"metrics.{name}.median")) if isinstance(summary, Mapping) else None


def _trial_values(trials: Sequence[Mapping[str, Any]], path: str) -> list[float]:
    out = []
    for t in trials:
        if not t.get("valid"):
            continue
        v = _num(_get(t.get("metrics") or {}, path))
        if v is not None:
            out.append(v)
    return out


def _run_view(
    run: ledger.RunRecord, extra: Mapping[str, Any], result: Any, source: str | None
) -> RunView:
    def column_json(name: str) -> Any:
        text = extra.get(name)
        if not isinstance(text, str):
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return None

    stored = column_json("result_json")
    if result is None and isinstance(stored, Mapping):
        result, source = stored, "ledger"
    target = column_json("target_json")
    docs = [d for d in (result, {"target": target} if target else None) if d is not None]
    spec = getattr(run, "speculative", None)  # the ledger's speculative_json column
    if not isinstance(spec, Mapping):
        spec = column_json("speculative_json")
    if not isinstance(spec, Mapping):
        spec = _find_speculative(*docs)
    arm = arm_of(run.phase, spec)
    roofline = column_json("roofline_json")
    if not isinstance(roofline, Mapping):
        roofline = _find_roofline(*docs, {"summary": run.summary})
    summary = run.summary
    samples = _trial_values(run.trials, "output_tokens_per_s")
    tput = _summary_median(summary, "output_tokens_per_s")
    if tput is None:
        tput = _median(samples)
    if not samples and isinstance(_get(summary, "metrics.output_tokens_per_s.samples"), list):
        samples = [
            v
            for v in (_num(x) for x in summary["metrics"]["output_tokens_per_s"]["samples"])
            if v is not None
        ]
    ttft = _summary_median(summary, "ttft_ms.median")
    if ttft is None:
        ttft = _median(_trial_values(run.trials, "ttft_ms.median"))
    tpot = _summary_median(summary, "tpot_ms.median")
    if tpot is None:
        tpot = _median(_trial_values(run.trials, "tpot_ms.median"))
    per_pos = _per_position(result, run.trials)
    acc = _summary_median(summary, "spec.acceptance_rate")
    return RunView(
        id=run.id,
        recorded_at=run.recorded_at,
        host=run.host,
        phase=run.phase,
        release=run.release or "?",
        arm=arm,
        speculative=dict(spec) if isinstance(spec, Mapping) else None,
        model=run.model,
        workload=run.workload_name,
        hardware=run.hardware,
        throughput=tput,
        throughput_samples=samples,
        ttft_ms=ttft,
        tpot_ms=tpot,
        acceptance_rate=acc,
        per_position=per_pos,
        roofline=dict(roofline) if isinstance(roofline, Mapping) else None,
        result_source=source,
    )


def index_results(dirs: Iterable[str | Path], wanted: set[str]) -> dict[str, tuple[Any, str]]:
    """``{sha256: (result, path)}`` for the JSON files under ``dirs`` whose digest is wanted."""
    found: dict[str, tuple[Any, str]] = {}
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.json")):
            if len(found) == len(wanted):
                return found
            try:
                if not path.is_file() or path.stat().st_size >= MAX_RESULT_BYTES:
                    continue
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if not isinstance(data, dict):
                continue
            digest = _canonical_sha256(data)
            if digest in wanted and digest not in found:
                found[digest] = (data, str(path))
    return found


def open_snapshot(path: str | Path) -> sqlite3.Connection:
    """An in-memory copy of the ledger at ``path``, migrated to this benchgate's schema.

    The file is opened read-only and copied with SQLite's backup API, so the
    report never writes to it (an old ledger is upgraded in the copy only).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no ledger at {p}")
    src = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        src.backup(mem)
    finally:
        src.close()
    mem.row_factory = sqlite3.Row
    tables = {r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "runs" not in tables or "verdicts" not in tables:
        mem.close()
        raise ValueError(f"{p} is not a benchgate ledger (no runs/verdicts tables)")
    # A newer ledger (RuntimeError): its columns are a superset, read it as it is.
    with contextlib.suppress(RuntimeError):
        ledger.migrate(mem)
    return mem


def _ab_choices(
    conn: sqlite3.Connection, host: str | None, since: str | None
) -> list[dict[str, Any]]:
    """Speculative A/B outcomes (``ab_choices``), oldest first; [] when the ledger has none."""
    found = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ab_choices'"
    ).fetchone()
    if not found:
        return []
    out = []
    for row in conn.execute("SELECT * FROM ab_choices ORDER BY recorded_at, id"):
        d = dict(row)
        if host is not None and d.get("host") != host:
            continue
        if since is not None and str(d.get("recorded_at", "")) < since.strip().replace(" ", "T"):
            continue
        for key in ("config_json", "arms_json"):
            try:
                d[key[:-5]] = json.loads(d.get(key) or "null")
            except json.JSONDecodeError:
                d[key[:-5]] = None
        out.append(d)
    return out


def build_report(
    runs: Sequence[ledger.RunRecord],
    verdicts: Sequence[ledger.VerdictRecord],
    *,
    extra_columns: Mapping[int, Mapping[str, Any]] | None = None,
    results: Mapping[int, tuple[Any, str]] | None = None,
    title: str = "benchgate report",
    ledger_path: str = "",
    reference_acceptance: Sequence[float] | None = None,
    reference_label: str = "reference",
    generated_at: str | None = None,
    ab_choices: Sequence[Mapping[str, Any]] = (),
) -> Report:
    """A :class:`Report` from ledger records (pure: no I/O)."""
    extra_columns = extra_columns or {}
    results = results or {}
    views = []
    for run in runs:
        result, source = results.get(run.id, (None, None))
        views.append(_run_view(run, extra_columns.get(run.id, {}), result, source))
    hosts = sorted(
        {v.host for v in views}
        | {v.host for v in verdicts}
        | {str(c.get("host")) for c in ab_choices if c.get("host")}
    )
    return Report(
        title=title,
        generated_at=generated_at or ledger.utcnow()[:19].replace("T", " ") + " UTC",
        ledger_path=ledger_path,
        runs=views,
        verdicts=sorted(verdicts, key=lambda v: (v.recorded_at, v.id), reverse=True),
        results_matched=sum(1 for v in views if v.result_source),
        reference_acceptance=list(reference_acceptance) if reference_acceptance else None,
        reference_label=reference_label,
        hosts=hosts,
        ab_choices=[dict(c) for c in ab_choices],
    )


def load_report(
    db: str | Path,
    *,
    results_dirs: Sequence[str | Path] | None = None,
    host: str | None = None,
    since: str | None = None,
    title: str = "benchgate report",
    reference_acceptance: Sequence[float] | None = None,
    reference_label: str = "reference",
) -> Report:
    """Read the ledger at ``db`` (read-only) and the matching result files into a report.

    ``results_dirs`` ``None``: the ledger's own folder; ``[]``: read no result files.
    """
    if results_dirs is None:
        results_dirs = [Path(db).parent]
    conn = open_snapshot(db)
    try:
        runs = ledger.runs(conn, host=host, since=since, limit=None)
        verdicts = ledger.history(conn, host=host, since=since, limit=None)
        choices = _ab_choices(conn, host, since)
        extra: dict[int, dict[str, Any]] = {}
        digests: dict[int, str] = {}
        for row in conn.execute("SELECT * FROM runs"):
            d = dict(row)
            extra[int(d["id"])] = d
            if d.get("result_sha256"):
                digests[int(d["id"])] = str(d["result_sha256"])
    finally:
        conn.close()
    wanted = {digests[r.id] for r in runs if r.id in digests}
    by_digest = index_results(results_dirs, wanted) if wanted and results_dirs else {}
    results = {r.id: by_digest[digests[r.id]] for r in runs if digests.get(r.id) in by_digest}
    return build_report(
        runs,
        verdicts,
        extra_columns=extra,
        results=results,
        title=title,
        ledger_path=str(db),
        reference_acceptance=reference_acceptance,
        reference_label=reference_label,
        ab_choices=choices,
    )


# --------------------------------------------------------------------------
# Aggregates shared by both formats
# --------------------------------------------------------------------------


def _release_key(release: str) -> tuple[Any, ...]:
    parts: list[tuple[int, Any]] = []
    for chunk in release.replace("-", ".").replace("+", ".").split("."):
        parts.append((0, int(chunk)) if chunk.isdigit() else (1, chunk))
    return tuple(parts)


def _arm_key(arm: str) -> tuple[int, str]:
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


def arm_rows(runs: Sequence[RunView]) -> list[ArmRow]:
    """Per release and arm: medians over the runs, and the change of tokens/s against off."""
    groups: dict[tuple[str, str], list[RunView]] = {}
    for r in runs:
        groups.setdefault((r.release, r.arm), []).append(r)
    off = {
        rel: _median(x.throughput for x in rs) for (rel, arm), rs in groups.items() if arm == OFF
    }
    rows = []
    for (rel, arm), rs in sorted(
        groups.items(), key=lambda kv: (_release_key(kv[0][0]), _arm_key(kv[0][1]))
    ):
        tput = _median(x.throughput for x in rs)
        base = off.get(rel)
        change = None
        if arm != OFF and base and tput is not None:
            change = 100.0 * (tput - base) / base
        latest_pp = next((x.per_position for x in reversed(rs) if x.per_position), None)
        rows.append(
            ArmRow(
                release=rel,
                arm=arm,
                runs=len(rs),
                throughput=tput,
                ttft_ms=_median(x.ttft_ms for x in rs),
                tpot_ms=_median(x.tpot_ms for x in rs),
                change_vs_off_pct=change,
                acceptance_rate=_median(x.acceptance_rate for x in rs),
                per_position=_mean_lists([x.per_position for x in rs if x.per_position])
                or latest_pp,
            )
        )
    return rows


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


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None else f"{value:,.{digits}f}{suffix}"


def _fmt_pct_change(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


def _short_time(text: str) -> str:
    return text[:19].replace("T", " ")


def _spec_text(spec: Mapping[str, Any] | None) -> str:
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


def _roofline_text(roofline: Mapping[str, Any]) -> str:
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
            n = _num(v)
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
# Charts (matplotlib → inline SVG)
# --------------------------------------------------------------------------


def _mpl_text(text: str) -> str:
    """Text for a matplotlib label: never mathtext, whatever the ledger holds."""
    return text.replace("$", r"\$")


def _svg(fig: Any, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    start = text.find("<svg")
    text = text[start:] if start >= 0 else text
    # matplotlib names elements figure_1, axes_1, ... in every figure: prefix all ids (and
    # the references to them) so that the page's ids stay unique.
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", salt)
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r'(href="#|url\(#)([^")]+)', lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    return text


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _rc() -> Any:
    import matplotlib
    from cycler import cycler

    return matplotlib.rc_context(
        {
            "text.parse_math": False,
            "font.size": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.prop_cycle": cycler(color=list(PALETTE)),
        }
    )


def chart_over_time(runs: Sequence[RunView], salt: str) -> str | None:
    """Throughput, TTFT and TPOT of each run over time; one series per release and arm."""
    timed = [r for r in runs if r.when is not None]
    if not timed:
        return None
    import matplotlib.dates as mdates

    series: dict[tuple[str, str], list[RunView]] = {}
    for r in timed:
        series.setdefault((r.release, r.arm), []).append(r)
    order = sorted(series, key=lambda k: (_release_key(k[0]), _arm_key(k[1])))
    with _rc():
        fig = _figure(9.0, 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        panels = (
            ("output tokens/s", lambda r: r.throughput),
            ("TTFT median, ms", lambda r: r.ttft_ms),
            ("TPOT median, ms", lambda r: r.tpot_ms),
        )
        for i, key in enumerate(order):
            rs = series[key]
            color = PALETTE[i % len(PALETTE)]
            label = _mpl_text(f"{key[0]} · spec {key[1]}")
            for ax, (_, get) in zip(axes, panels):
                pts = [(r.when, get(r)) for r in rs if get(r) is not None]
                if not pts:
                    continue
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker="o",
                    linestyle="-",
                    color=color,
                    label=label if ax is axes[0] else None,
                )
            for r in rs:  # per-trial spread of throughput
                if r.throughput_samples and r.when is not None:
                    axes[0].scatter(
                        [r.when] * len(r.throughput_samples),
                        r.throughput_samples,
                        s=8,
                        color=color,
                        alpha=0.35,
                    )
        for ax, (ylabel, _) in zip(axes, panels):
            ax.set_ylabel(ylabel)
        axes[0].legend(loc="best", fontsize=8)
        axes[0].set_title("runs over time (dots: single trials)")
        locator = mdates.AutoDateLocator()
        axes[-1].xaxis.set_major_locator(locator)
        axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        fig.tight_layout()
        return _svg(fig, salt)


def chart_spec_ab(rows: Sequence[ArmRow], salt: str) -> str | None:
    """Grouped bars: median tokens/s per release, one bar per speculative arm."""
    rows = [r for r in rows if r.throughput is not None]
    if not rows:
        return None
    releases = sorted({r.release for r in rows}, key=_release_key)
    arms = sorted({r.arm for r in rows}, key=_arm_key)
    width = 0.8 / len(arms)
    with _rc():
        fig = _figure(max(4.5, 1.6 * len(releases) + 2.5), 3.4)
        ax = fig.subplots()
        for j, arm in enumerate(arms):
            xs, ys = [], []
            for i, rel in enumerate(releases):
                row = next((r for r in rows if r.release == rel and r.arm == arm), None)
                if row is not None and row.throughput is not None:
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(row.throughput)
            bars = ax.bar(xs, ys, width=width * 0.95, label=_mpl_text(f"spec {arm}"))
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.set_xticks(range(len(releases)), [_mpl_text(r) for r in releases])
        ax.margins(y=0.2)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("output tokens/s (median)")
        ax.set_title("speculative decoding on vs off, per release")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        return _svg(fig, salt)


def chart_acceptance(
    curves: Sequence[tuple[str, Sequence[float]]], salt: str, reference: bool = False
) -> str | None:
    """Per-position acceptance (percent) as grouped bars, one group per draft position."""
    curves = [(label, c) for label, c in curves if c]
    if not curves:
        return None
    n = max(len(c) for _, c in curves)
    width = 0.8 / len(curves)
    with _rc():
        fig = _figure(max(4.5, 0.9 * n + 3.0), 3.2)
        ax = fig.subplots()
        for j, (label, c) in enumerate(curves):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(c))]
            hatch = "//" if reference and j == len(curves) - 1 else None
            bars = ax.bar(
                xs, [100.0 * v for v in c], width=width * 0.95, label=_mpl_text(label), hatch=hatch
            )
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(n), [str(i) for i in range(n)])
        ax.set_xlabel("draft position")
        ax.set_ylabel("accepted / drafted, %")
        ax.set_ylim(0, 105)
        ax.set_title("per-position acceptance")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        return _svg(fig, salt)


# --------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------

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
                (_e(_short_time(v.recorded_at)), False),
                (_e(v.host), False),
                (_e(v.baseline_release or "–") + " → " + _e(v.release or "–"), False),
                (_e(v.phase or "–"), False),
                (f'<span class="verdict verdict-{_e(v.verdict)}">{_e(v.verdict)}</span>', False),
                (f'<ul class="reasons">{reasons}</ul>', False),
                (runs or "–", False),
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
                (_e(_short_time(str(c.get("recorded_at", "")))), False),
                (_e(c.get("release") or "–"), False),
                (_e(c.get("objective") or "–"), False),
                (f"<b>{_e(c.get('winner') or 'none')}</b>", False),
                (f"<code>{_e(_spec_text(c.get('config') or {}) or '{}')}</code>", False),
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
        f"{len(runs)} run(s) from {_e(_short_time(runs[0].recorded_at))} "
        f"to {_e(_short_time(runs[-1].recorded_at))} UTC"
    ]
    if models:
        facts.append("model " + ", ".join(f"<code>{_e(m)}</code>" for m in models))
    if workloads:
        facts.append("workload " + ", ".join(f"<code>{_e(w)}</code>" for w in workloads))
    if hw:
        hw_text = json.dumps(hw, sort_keys=True) if not isinstance(hw, str) else hw
        facts.append(f"hardware <code>{_e(hw_text[:200])}</code>")
    out.append(f'<p class="note">{"; ".join(facts)}.</p>')

    rows = arm_rows(runs)
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
                    (_e(_fmt(r.throughput)), True),
                    (_e(_fmt_pct_change(r.change_vs_off_pct)), True),
                    (_e(_fmt(r.ttft_ms, 1)), True),
                    (_e(_fmt(r.tpot_ms, 2)), True),
                    (
                        _e(
                            _fmt(
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
        '<p class="note">Medians over the runs of each group; "vs off" compares tokens/s '
        'with the same release\'s "off" arm. A run counts as "off" unless the ledger or '
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
            [(_e(label), False)] + [(_e(_fmt(100 * v, 1, "%")), True) for v in c]
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
                        (_e(_short_time(r.recorded_at)), False),
                        (_e(r.release), False),
                        (_e(r.arm), False),
                        (_e(_fmt(roofline_efficiency(r.roofline), 1, "%")), True),
                        (_e(_roofline_text(r.roofline or {})), False),
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
                    (_e(_short_time(r.recorded_at)), False),
                    (_e(r.phase), False),
                    (_e(r.release), False),
                    (
                        _e(r.arm)
                        + (
                            f"<br><code>{_e(_spec_text(r.speculative))}</code>"
                            if r.speculative
                            else ""
                        ),
                        False,
                    ),
                    (_e(_fmt(r.throughput)), True),
                    (_e(_fmt(r.ttft_ms, 1)), True),
                    (_e(_fmt(r.tpot_ms, 2)), True),
                    (f"<code>{_e(r.result_source)}</code>" if r.result_source else "–", False),
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
                            else "–",
                            False,
                        ),
                        (
                            _e(latest[h].baseline_release or "–")
                            + " → "
                            + _e(latest[h].release or "–")
                            if h in latest
                            else "–",
                            False,
                        ),
                        (_e(_short_time(latest[h].recorded_at)) if h in latest else "–", False),
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
            + " / ".join(_e(_fmt(100 * v, 1, "%")) for v in report.reference_acceptance)
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


# --------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------


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
                f"({_md(v.baseline_release or '-')} → {_md(v.release or '-')}, "
                f"{_md(_short_time(v.recorded_at))} UTC)",
                "",
            ]
        choices = [c for c in report.ab_choices if c.get("host") == host]
        if choices:
            c = choices[-1]
            lines += [
                f"Latest speculative A/B ({_md(c.get('release') or '-')}, "
                f"{_md(c.get('objective') or '-')}): winner **{_md(c.get('winner') or 'none')}**"
                f" — {_md(c.get('reason') or '')}",
                "",
            ]
        if not runs:
            lines += ["No runs recorded.", ""]
            continue
        rows = arm_rows(runs)
        lines += _md_table(
            ["release", "speculative", "runs", "tokens/s", "vs off", "TTFT ms", "TPOT ms"],
            [
                [
                    _md(r.release),
                    _md(r.arm),
                    str(r.runs),
                    _fmt(r.throughput),
                    _fmt_pct_change(r.change_vs_off_pct),
                    _fmt(r.ttft_ms, 1),
                    _fmt(r.tpot_ms, 2),
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
                    + [_fmt(100 * v, 1, "%") for v in (c or [])]
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
                        _md(_short_time(r.recorded_at)),
                        _md(r.release),
                        _md(r.arm),
                        _fmt(roofline_efficiency(r.roofline), 1, "%"),
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
                    _md(_short_time(v.recorded_at)),
                    _md(v.host),
                    f"{_md(v.baseline_release or '-')} → {_md(v.release or '-')}",
                    _md(v.phase or "-"),
                    f"**{_md(v.verdict)}**",
                    "<br>".join(_md(r) for r in v.reasons) or "-",
                ]
                for v in report.verdicts
            ],
        )
    else:
        lines.append("No verdicts recorded.")
    return "\n".join(lines) + "\n"
