"""The data a report shows: ledger runs read into :class:`RunView`, and loading.

Tolerant readers: results and ledgers from other versions. No formatting here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import sqlite3
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import causes, ledger
from ..serverconfig import fingerprint

OFF = "off"
NOT_MEASURED = "not measured"

#: Runs whose result has this many bytes or more are not read for enrichment.
MAX_RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class StageFigures:
    """One stage of a staged run: its load and its figures, from that stage's trials only."""

    name: str
    params: dict[str, Any]  # the stage's workload params (its load), {} when not recorded
    valid_trials: int
    throughput: float | None  # median output tokens/s over the stage's valid trials
    throughput_samples: list[float]
    ttft_ms: float | None
    tpot_ms: float | None
    acceptance_rate: float | None
    # The stage's trials as the cause split reads them (benchgate.causes); None when
    # the run's whole result was not found (the ledger keeps no server counters).
    steps: causes.Steps | None = None


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
    # A staged run: every stage's figures, in the order they ran (empty: unstaged). The
    # run's own throughput, TTFT and TPOT then pool all stages' trials.
    stages: tuple[StageFigures, ...] = ()
    # The serving configuration measured (benchgate.serverconfig), and its
    # fingerprint ("" when not known: a run recorded before it was kept).
    server_config: dict[str, Any] | None = None
    config: str = ""
    # The trials as the cause split reads them (benchgate.causes: tokens per step, time
    # per step); None when the whole result was not found.
    steps: causes.Steps | None = None

    @property
    def when(self) -> datetime | None:
        return parse_time(self.recorded_at)

    def stage(self, name: str) -> RunView | None:
        """This run as seen at one stage (its figures; no acceptance curve or roofline),
        ``None`` when the run did not measure that stage."""
        for s in self.stages:
            if s.name == name:
                return replace(
                    self,
                    throughput=s.throughput,
                    throughput_samples=list(s.throughput_samples),
                    ttft_ms=s.ttft_ms,
                    tpot_ms=s.tpot_ms,
                    acceptance_rate=s.acceptance_rate,
                    per_position=None,
                    roofline=None,
                    stages=(),
                    steps=s.steps,
                )
        return None


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


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def median(values: Iterable[float | None]) -> float | None:
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

    ``arm:ngram-k3`` names the arm (``arm:off`` is off), also as a gate's side
    (``candidate:arm:ngram-k3``); ``arm-ngram-k3`` and ``spec:ngram-k3``, which
    older releases wrote, still do; other phases
    (``baseline``, ``candidate``) take the name from the mapping; no mapping is "off".
    A later server start of an arm (``arm:ngram-k3#2``) is the same arm.
    """
    p = (phase or "").strip()
    # A gate's side with an arm: "candidate:arm:ngram-k3" (the staged upgrade's).
    head, sep, tail = p.partition(":")
    if sep and head.lower() in ("baseline", "candidate") and ":" in tail:
        p = tail
    for prefix in ("arm:", "arm-", "spec:", "spec-"):
        if p.lower().startswith(prefix) and len(p) > len(prefix):
            # "arm:ngram-k3#2": a later server start of the arm (the A/B's check), the same arm.
            rest = re.sub(r"#[0-9]+$", "", p[len(prefix) :]) or p[len(prefix) :]
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
        v = num(roofline[key])
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
        w = num(spec.get("drafts")) or 1.0
        for i, r in enumerate(rates):
            v = num(r)
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
    """The median of metric ``name`` in a result's summary. Its metrics are keyed by
    flat, dotted names (``ttft_ms.median``, ``spec.acceptance_rate``), which a
    dotted path cannot reach; a nested spelling is read too."""
    metrics = summary.get("metrics") if isinstance(summary, Mapping) else None
    if not isinstance(metrics, Mapping):
        return None
    flat = metrics.get(name)
    if isinstance(flat, Mapping):
        return num(flat.get("median"))
    return num(_get(metrics, f"{name}.median"))


def _trial_values(trials: Sequence[Mapping[str, Any]], path: str) -> list[float]:
    out = []
    for t in trials:
        if not t.get("valid"):
            continue
        v = num(_get(t.get("metrics") or {}, path))
        if v is not None:
            out.append(v)
    return out


def _figures(
    summary: Any, trials: Sequence[Mapping[str, Any]]
) -> tuple[float | None, list[float], float | None, float | None, float | None]:
    """Median tokens/s, its samples, TTFT, TPOT and acceptance rate: the summary's
    medians where it has them, else the valid trials'."""
    samples = _trial_values(trials, "output_tokens_per_s")
    tput = _summary_median(summary, "output_tokens_per_s")
    if tput is None:
        tput = median(samples)
    if not samples and isinstance(_get(summary, "metrics.output_tokens_per_s.samples"), list):
        samples = [
            v
            for v in (num(x) for x in summary["metrics"]["output_tokens_per_s"]["samples"])
            if v is not None
        ]
    ttft = _summary_median(summary, "ttft_ms.median")
    if ttft is None:
        ttft = median(_trial_values(trials, "ttft_ms.median"))
    tpot = _summary_median(summary, "tpot_ms.median")
    if tpot is None:
        tpot = median(_trial_values(trials, "tpot_ms.median"))
    acc = _summary_median(summary, "spec.acceptance_rate")
    return tput, samples, ttft, tpot, acc


def _stage_figures(
    run: ledger.RunRecord, steps: Mapping[str | None, causes.Steps] | None = None
) -> tuple[StageFigures, ...]:
    """Every stage of a staged run (the ledger's ``stages_json`` and the trials' stage),
    in the order they ran; () for an unstaged run. ``steps``: each stage's trials as the
    cause split reads them, from the whole result (None: not found)."""
    blocks = [b for b in (getattr(run, "stages", None) or []) if isinstance(b, Mapping)]
    names: list[str] = [str(b["name"]) for b in blocks if isinstance(b.get("name"), str)]
    for t in run.trials:
        if isinstance(t.get("stage"), str) and t["stage"] not in names:
            names.append(t["stage"])
    out = []
    for name in names:
        block = next((b for b in blocks if b.get("name") == name), {})
        trials = [t for t in run.trials if t.get("stage") == name]
        tput, samples, ttft, tpot, acc = _figures(block.get("summary"), trials)
        params = block.get("params")
        out.append(
            StageFigures(
                name=name,
                params=dict(params) if isinstance(params, Mapping) else {},
                valid_trials=sum(1 for t in trials if t.get("valid")),
                throughput=tput,
                throughput_samples=samples,
                ttft_ms=ttft,
                tpot_ms=tpot,
                acceptance_rate=acc,
                steps=None if steps is None else steps.get(name, causes.Steps()),
            )
        )
    return tuple(out)


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
    tput, samples, ttft, tpot, acc = _figures(run.summary, run.trials)
    per_pos = _per_position(result, run.trials)
    server = getattr(run, "server_config", None)  # the ledger's server_json column
    if not isinstance(server, Mapping) and isinstance(result, Mapping):
        server = result.get("server_config")
    server = dict(server) if isinstance(server, Mapping) else None
    steps = causes.steps_by_stage(result) if isinstance(result, Mapping) else None
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
        stages=_stage_figures(run, steps),
        server_config=server,
        config=fingerprint(server) or "",
        steps=None if steps is None else causes.pool(steps.values()),
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
