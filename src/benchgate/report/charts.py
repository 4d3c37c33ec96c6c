"""Charts of a report: matplotlib figures rendered to inline SVG (text kept as text)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from typing import Any

from .aggregates import ArmRow, arm_key, release_key, series_name
from .data import RunView

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


def _line(ax: Any, pts: Sequence[tuple[Any, Any]], color: str, label: str | None) -> None:
    """One series of points joined by a line; nothing when there are none."""
    if pts:
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            linestyle="-",
            color=color,
            label=label,
        )


#: The three panels of a throughput/latency chart: y label, the row's figure.
_PANELS: tuple[tuple[str, Callable[[Any], float | None]], ...] = (
    ("output tokens/s", lambda r: r.throughput),
    ("TTFT median, ms", lambda r: r.ttft_ms),
    ("TPOT median, ms", lambda r: r.tpot_ms),
)


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


def chart_over_time(
    runs: Sequence[RunView], salt: str, title: str = "runs over time (dots: single trials)"
) -> str | None:
    """Throughput, TTFT and TPOT of each run over time; one series per release and arm."""
    timed = [r for r in runs if r.when is not None]
    if not timed:
        return None
    import matplotlib.dates as mdates

    series: dict[tuple[str, str, str], list[RunView]] = {}
    for r in timed:
        series.setdefault((r.release, r.arm, r.config), []).append(r)
    order = sorted(series, key=lambda k: (release_key(k[0]), arm_key(k[1]), k[2]))
    with _rc():
        fig = _figure(9.0, 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        panels = _PANELS
        for i, key in enumerate(order):
            rs = series[key]
            color = PALETTE[i % len(PALETTE)]
            label = _mpl_text(series_name(*key))
            for ax, (_, get) in zip(axes, panels):
                pts = [(r.when, get(r)) for r in rs if get(r) is not None]
                _line(ax, pts, color, label if ax is axes[0] else None)
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
        axes[0].set_title(_mpl_text(title))
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
    releases = sorted({r.release for r in rows}, key=release_key)
    # One bar per arm and configuration (its fingerprint, when known).
    arms = sorted({(r.arm, r.config) for r in rows}, key=lambda a: (arm_key(a[0]), a[1]))
    width = 0.8 / len(arms)
    with _rc():
        fig = _figure(max(4.5, 1.6 * len(releases) + 2.5), 3.4)
        ax = fig.subplots()
        for j, (arm, config) in enumerate(arms):
            xs, ys = [], []
            for i, rel in enumerate(releases):
                row = next(
                    (r for r in rows if (r.release, r.arm, r.config) == (rel, arm, config)), None
                )
                if row is not None and row.throughput is not None:
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(row.throughput)
            name = f"spec {arm}" + (f" · {config}" if config else "")
            bars = ax.bar(xs, ys, width=width * 0.95, label=_mpl_text(name))
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


def chart_stages(
    stages: Sequence[tuple[str, Sequence[ArmRow]]], salt: str, loads: Sequence[str] = ()
) -> str | None:
    """Every stage side by side: tokens/s, TTFT and TPOT medians (one panel each), the
    stages on the x axis in the order they ran, one series per release and arm."""
    keys = sorted(
        {(r.release, r.arm, r.config) for _, rows in stages for r in rows},
        key=lambda k: (release_key(k[0]), arm_key(k[1]), k[2]),
    )
    if not keys or not any(r.throughput is not None for _, rows in stages for r in rows):
        return None
    ticks = [
        _mpl_text(name + (f"\n{loads[i]}" if i < len(loads) and loads[i] else ""))
        for i, (name, _) in enumerate(stages)
    ]
    with _rc():
        fig = _figure(max(5.5, 1.8 * len(stages) + 3.0), 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        panels = _PANELS
        for i, key in enumerate(keys):
            color = PALETTE[i % len(PALETTE)]
            label = _mpl_text(series_name(*key))
            for ax, (_, get) in zip(axes, panels):
                pts = [
                    (x, get(row))
                    for x, (_, rows) in enumerate(stages)
                    for row in rows
                    if (row.release, row.arm, row.config) == key and get(row) is not None
                ]
                _line(ax, pts, color, label if ax is axes[0] else None)
        for ax, (ylabel, _) in zip(axes, panels):
            ax.set_ylabel(ylabel)
        axes[-1].set_xticks(range(len(stages)), ticks)
        axes[0].legend(loc="best", fontsize=8)
        axes[0].set_title("every stage: medians over the runs, per release and arm")
        fig.tight_layout()
        return _svg(fig, salt)
