"""Aggregates shared by the HTML and Markdown reports, and the text of their figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..numfmt import change_interval
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
    """Per release and arm: medians over the runs, and the change of tokens/s against off:
    the A/B's own estimate where the ledger has it (``choices``), else the medians' ratio."""
    estimates = ab_estimates(choices)
    intervals = ab_intervals(choices)
    groups: dict[tuple[str, str], list[RunView]] = {}
    for r in runs:
        groups.setdefault((r.release, r.arm), []).append(r)
    off = {rel: median(x.throughput for x in rs) for (rel, arm), rs in groups.items() if arm == OFF}
    rows = []
    for (rel, arm), rs in sorted(
        groups.items(), key=lambda kv: (release_key(kv[0][0]), arm_key(kv[0][1]))
    ):
        tput = median(x.throughput for x in rs)
        base = off.get(rel)
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
                acceptance_rate=median(x.acceptance_rate for x in rs),
                per_position=_mean_lists([x.per_position for x in rs if x.per_position])
                or latest_pp,
                change_vs_off_interval=intervals.get((rel, arm)) if change_from_ab else None,
            )
        )
    return rows


def vs_off_text(row: ArmRow) -> str:
    """The "vs off" cell: the change in words with its interval, as the A/B table writes it."""
    lo, hi = row.change_vs_off_interval or (None, None)
    return change_interval(row.change_vs_off_pct, lo, hi)


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
