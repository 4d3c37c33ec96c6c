"""Speculative-decoding advisor: is drafting worth it, and with how many tokens?

The model (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", with measured per-position acceptance instead of one
constant alpha):

* ``a_i`` (i = 1..K) is the share of draft cycles in which draft token ``i`` was
  accepted -- vLLM's ``spec_decode_num_accepted_tokens_per_pos`` (position
  ``i-1``) divided by ``spec_decode_num_drafts``. Token ``i`` is only accepted if
  tokens ``1..i-1`` were, so these shares are already cumulative.
* One step with ``k`` drafted tokens yields ``E(k) = 1 + sum(a_1..a_k)`` tokens
  (the accepted ones plus the token the target always adds).
* It costs ``k*c + v(k+1)`` target decode steps: ``c`` is one draft step
  relative to one target decode step, ``v(n)`` the cost of one target pass
  that scores ``n`` tokens (``v(1) = 1``; flat ``v(n) = 1`` is the textbook
  "verification is free" case, a measured table is better).
* Speedup over plain decoding ``S(k) = E(k) / (k*c + v(k+1))``.

Adding position ``k`` improves the speedup only when ``a_k / (c + v(k+1) -
v(k)) > S(k-1)``; it merely beats plain decoding at the margin when ``a_k > c +
v(k+1) - v(k)``. :func:`break_even_draft_cost` solves both for ``c``.

Pure functions and dataclasses; the CLI is in :mod:`benchgate.cli_advise`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Union

__all__ = [
    "Advice",
    "KPrediction",
    "VerifyCurve",
    "TableCurve",
    "acceptance_from_counts",
    "advise",
    "break_even_draft_cost",
    "draft_cost_from_arm",
    "expected_tokens",
    "flat_verify",
    "leviathan_expected_tokens",
    "leviathan_speedup",
    "load_verify_curve",
    "monotone_fit",
    "predict",
    "wasteful_positions",
]

VerifyCurve = Callable[[int], float]
CurveInput = Union[VerifyCurve, Mapping[Any, Any], Sequence[float], str, None]

# A measured speedup below this share of the prediction is flagged.
DEFAULT_SHORTFALL = 0.70
# The best k must beat plain decoding by this much to be worth the complexity.
DEFAULT_MARGIN = 0.05

LIKELY_CAUSES = (
    "verification is not flat: with tensor parallelism over PCIe every target pass pays an "
    "all-reduce per layer, so scoring k+1 tokens costs more than one decode step -- measure "
    "v(n) and pass it as the verify curve",
    "the draft competes with the target for memory bandwidth (same GPUs, same HBM), so its "
    "real cost ratio c is higher than its size ratio",
    "scheduler budget: with speculative decoding on, vLLM 0.32 sets max_num_scheduled_tokens "
    "to max_num_batched_tokens (often 2048) and every request's draft slots count against it, "
    "so fewer requests fit in a step under load (vllm/config/vllm.py)",
    "per-step overheads the model leaves out: draft not CUDA-graph captured, rejection "
    "sampling, CPU-side bookkeeping between draft and verify",
    "acceptance under the benchmark's workload is lower than the rates used here",
)


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------


def flat_verify(n: int) -> float:
    """Textbook verification: scoring n tokens costs one decode step."""
    return 1.0


def acceptance_from_counts(accepted_per_position: Sequence[int], num_drafts: int) -> list[float]:
    """Per-position acceptance from vLLM's counters (``..._per_pos_total`` / ``..._num_drafts``)."""
    if num_drafts <= 0:
        raise ValueError("num_drafts must be positive")
    return [count / num_drafts for count in accepted_per_position]


def _check_rates(rates: Sequence[float]) -> list[float]:
    out = [float(r) for r in rates]
    if not out:
        raise ValueError("need at least one per-position acceptance rate")
    for i, r in enumerate(out):
        if not 0.0 <= r <= 1.0:
            raise ValueError(
                f"acceptance rate at position {i} is {r}; give rates as fractions in [0, 1] "
                "(or percentages, which parse_rates converts)"
            )
    return out


def parse_rates(text: str) -> list[float]:
    """``"79.3,65.1,55"`` (percent) or ``"0.793,0.651"`` (fractions) -> fractions."""
    try:
        values = [float(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as exc:
        raise ValueError(f"acceptance rates must be comma-separated numbers: {text!r}") from exc
    if any(v > 1.0 for v in values):
        values = [v / 100.0 for v in values]
    return _check_rates(values)


def expected_tokens(rates: Sequence[float], k: int) -> float:
    """E(k) = 1 + a_1 + ... + a_k: tokens produced by one draft+verify step."""
    rates = _check_rates(rates)
    if not 0 <= k <= len(rates):
        raise ValueError(f"k={k} is outside 0..{len(rates)} (the positions measured)")
    return 1.0 + sum(rates[:k])


def leviathan_expected_tokens(alpha: float, k: int) -> float:
    """Leviathan et al. (2023), eq. 1: (1 - alpha^(k+1)) / (1 - alpha) for a constant alpha."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. (2023), walltime improvement with flat verification."""
    return leviathan_expected_tokens(alpha, k) / (k * c + 1.0)


def monotone_fit(values: Sequence[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool-adjacent-violators, equal weights).

    Measured step times jitter by a percent or two, so a flat curve can dip
    (an fp8 Qwen3-14B step on an H200: 4.66 ms for one token, 4.58 ms for
    two). A verify cost cannot really fall as more tokens are scored; the fit
    replaces each run of falling points by its mean and leaves rising data as
    it is.
    """
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out.extend([total / count] * int(count))
    return out


class TableCurve:
    """v(n) from a measured table: normalised to v(1) = 1, interpolated linearly,
    extended beyond the table along its last segment (never below the last value).

    ``fit_note`` says how the table was changed to make it non-decreasing
    (None when the measured values already were).
    """

    def __init__(self, points: Sequence[tuple[int, float]]) -> None:
        points = sorted((int(n), float(v)) for n, v in points)
        if not points or points[0][0] != 1:
            raise ValueError("a verify curve needs the cost of scoring 1 token (n = 1) to scale by")
        if any(v <= 0 for _, v in points):
            raise ValueError("verify costs must be positive")
        ns = [n for n, _ in points]
        measured = [v for _, v in points]
        fitted = monotone_fit(measured)
        self.fit_note: str | None = None
        if fitted != measured:
            dips = [
                f"n={ns[i + 1]}: {measured[i + 1]:.4g} < {measured[i]:.4g}"
                for i in range(len(measured) - 1)
                if measured[i + 1] < measured[i]
            ]
            largest = max(abs(f - m) / m for f, m in zip(fitted, measured))
            self.fit_note = (
                "the measured verify costs fall at "
                + ", ".join(dips)
                + "; used their least-squares non-decreasing fit (falling runs pooled to their "
                f"mean, largest change {largest:.1%}) and normalised it to v(1) = 1"
            )
        base = fitted[0]
        self.measured = {n: v / measured[0] for n, v in zip(ns, measured)}
        self.table = [(n, v / base) for n, v in zip(ns, fitted)]

    def __call__(self, n: int) -> float:
        table = self.table
        if n <= 1:
            return 1.0
        for (n0, v0), (n1, v1) in zip(table, table[1:]):
            if n0 <= n <= n1:
                return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        if len(table) == 1:
            return table[0][1]
        (n0, v0), (n1, v1) = table[-2], table[-1]
        return max(v1, v1 + (v1 - v0) * (n - n1) / (n1 - n0))


def load_verify_curve(source: CurveInput) -> VerifyCurve:
    """A verify-cost curve v(n) from a callable, a table or a JSON file.

    ``None`` / ``"flat"`` -> v(n) = 1. A mapping ``{n: cost}`` or a list
    ``[v(1), v(2), ...]`` becomes a :class:`TableCurve`: normalised so that
    v(1) = 1, made non-decreasing where the measurement dips
    (:func:`monotone_fit`; the curve's ``fit_note`` says so), interpolated
    linearly and extended beyond the table along its last segment. A string
    other than ``"flat"`` is a path to a JSON file holding such a mapping or
    list (e.g. step times measured with 1..n tokens scored per sequence), or a
    ``benchgate.calibrate`` report (its target's step times are used).
    """
    if source is None or source == "flat":
        return flat_verify
    if callable(source):
        return source
    if isinstance(source, str):
        try:
            with open(source, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read verify curve {source!r}: {exc}") from exc
        return load_verify_curve(data)
    if isinstance(source, Mapping) and source.get("schema") == "benchgate.calibration/1":
        # `python -m benchgate.calibrate` output: the target's (first model's) measured step
        # times at the smallest tensor-parallel size it modelled.
        try:
            target = next(iter(source["models"].values()))
            tp = min(target["tp"], key=int)
            return load_verify_curve(target["tp"][tp]["step_s"])
        except (KeyError, StopIteration, TypeError, AttributeError) as exc:
            raise ValueError(f"calibration report without step times: {exc!r}") from exc
    if isinstance(source, Mapping):
        points = [(int(n), float(v)) for n, v in source.items()]
    else:
        points = [(i + 1, float(v)) for i, v in enumerate(source)]
    return TableCurve(points)


def draft_cost_from_arm(
    rates: Sequence[float], k: int, measured_speedup: float, verify: CurveInput = None
) -> float:
    """The draft cost ratio c that one measured speculative arm implies.

    On the serving stack a drafting step costs what it costs: the draft's
    kernels, its launch and sampling overheads, whether it is CUDA-graph
    captured, its share of the scheduler. An A/B arm that ran k drafted
    tokens per step with per-position acceptance ``rates`` and reached
    ``measured_speedup`` (its tok/s over plain tok/s, same release and load)
    spent E(k) / speedup target decode steps per step, so
    ``c = (E(k) / speedup - v(k+1)) / k`` (at least 0). :func:`predict` with
    that c predicts the other k on the same release, draft and load.
    """
    rates = _check_rates(rates)
    if not 1 <= k <= len(rates):
        raise ValueError(f"k={k} is outside 1..{len(rates)} (the positions measured)")
    if measured_speedup <= 0:
        raise ValueError("measured speedup must be positive (spec tok/s / plain tok/s)")
    v = load_verify_curve(verify)
    return max(0.0, (expected_tokens(rates, k) / measured_speedup - v(k + 1)) / k)


# --------------------------------------------------------------------------
# predictions
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class KPrediction:
    """The model's numbers for drafting k tokens per step (k = 0 is plain decoding)."""

    k: int
    expected_tokens: float  # E(k)
    step_cost: float  # k*c + v(k+1), in target decode steps
    speedup: float  # S(k) = E(k) / step_cost
    marginal_gain: float  # a_k: tokens the k-th position adds per step
    marginal_cost: float  # c + v(k+1) - v(k): what the k-th position adds to the step
    beats_plain: bool  # a_k > marginal cost: the position pays for itself vs. no drafting
    improves: bool  # S(k) > S(k-1): the position raises the speedup


def predict(
    rates: Sequence[float], draft_cost: float, verify: CurveInput = None
) -> list[KPrediction]:
    """Predictions for k = 0..K (K = number of positions measured)."""
    rates = _check_rates(rates)
    if draft_cost < 0:
        raise ValueError("draft cost ratio c must be >= 0")
    v = load_verify_curve(verify)
    rows = [KPrediction(0, 1.0, v(1), 1.0 / v(1), 0.0, 0.0, False, False)]
    for k in range(1, len(rates) + 1):
        e = expected_tokens(rates, k)
        cost = k * draft_cost + v(k + 1)
        speedup = e / cost
        d_cost = draft_cost + v(k + 1) - v(k)
        gain = rates[k - 1]
        rows.append(
            KPrediction(
                k=k,
                expected_tokens=e,
                step_cost=cost,
                speedup=speedup,
                marginal_gain=gain,
                marginal_cost=d_cost,
                beats_plain=gain > d_cost,
                improves=speedup > rows[-1].speedup,
            )
        )
    return rows


def wasteful_positions(
    rates: Sequence[float], draft_cost: float, verify: CurveInput = None
) -> list[int]:
    """0-based positions whose drafting lowers the speedup (S(k) < S(k-1)), k = position + 1."""
    return [row.k - 1 for row in predict(rates, draft_cost, verify)[1:] if not row.improves]


@dataclass(frozen=True)
class BreakEven:
    """Draft cost ratios above which one position stops paying (None: never, inf: always)."""

    position: int  # 0-based, as vLLM's position label
    lowers_speedup_above: float | None  # c where S(k) drops below S(k-1)
    loses_to_plain_above: float | None  # c where a_k < c + v(k+1) - v(k)


def break_even_draft_cost(
    rates: Sequence[float], position: int, verify: CurveInput = None
) -> BreakEven:
    """Solve the marginal conditions for c, for 0-based ``position`` (k = position + 1).

    S(k) < S(k-1)  <=>  a_k * ((k-1)c + v(k)) < E(k-1) * (c + v(k+1) - v(k))
                   <=>  c > (a_k v(k) - E(k-1) dv) / (E(k-1) - (k-1) a_k)
    when the denominator is positive (true for non-increasing rates);
    a_k < c + dv   <=>  c > a_k - dv.
    """
    rates = _check_rates(rates)
    k = position + 1
    if not 1 <= k <= len(rates):
        raise ValueError(f"position {position} is outside 0..{len(rates) - 1}")
    v = load_verify_curve(verify)
    a_k = rates[k - 1]
    e_prev = expected_tokens(rates, k - 1)
    dv = v(k + 1) - v(k)
    denom = e_prev - (k - 1) * a_k
    numer = a_k * v(k) - e_prev * dv
    # denom <= 0 only when a later position is accepted more often than the
    # average before it (rates that rise); no threshold "above c" exists then.
    lowers = max(0.0, numer / denom) if denom > 0 else None
    return BreakEven(position, lowers, max(0.0, a_k - dv))


@dataclass(frozen=True)
class Advice:
    """What the advisor recommends, with the table behind it."""

    rates: list[float]
    draft_cost: float
    margin: float
    rows: list[KPrediction]
    best_k: int | None  # None = turn speculative decoding off
    best_speedup: float
    accepted_per_draft: float  # E(K) - 1 with all measured positions
    wasteful_positions: list[int]  # 0-based
    recommendation: str
    measured_speedup: float | None = None
    measured_k: int | None = None
    measured_vs_predicted: float | None = None
    implied_step_cost: float | None = None  # E(k)/measured: what one step really cost
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was done to the inputs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def advise(
    rates: Sequence[float],
    draft_cost: float = 0.1,
    verify: CurveInput = None,
    *,
    margin: float = DEFAULT_MARGIN,
    measured_speedup: float | None = None,
    measured_k: int | None = None,
    shortfall: float = DEFAULT_SHORTFALL,
) -> Advice:
    """Recommend k (or off) and check a measured speedup against the prediction.

    ``measured_speedup`` is speculative tok/s divided by plain tok/s on the
    same release and workload; ``measured_k`` the k it ran with (default: the
    number of rates given). A measurement below ``shortfall`` times the
    prediction means the model's assumptions do not hold on that host: the
    warning lists the usual reasons.
    """
    rates = _check_rates(rates)
    curve = load_verify_curve(verify)
    notes = (
        [f"verify curve: {curve.fit_note}"]
        if isinstance(curve, TableCurve) and curve.fit_note
        else []
    )
    rows = predict(rates, draft_cost, curve)
    best = max(rows[1:], key=lambda row: row.speedup)
    if best.speedup >= 1.0 + margin:
        best_k: int | None = best.k
        text = (
            f"draft k={best.k}: predicted speedup {best.speedup:.2f}x "
            f"({best.expected_tokens:.2f} tokens per step at cost {best.step_cost:.2f})"
        )
    else:
        best_k = None
        text = (
            f"off: the best k ({best.k}) predicts {best.speedup:.2f}x, "
            f"not above 1 + margin ({1 + margin:.2f}x)"
        )
    wasteful = [row.k - 1 for row in rows[1:] if not row.improves]
    warnings: list[str] = []
    ratio = implied = None
    if measured_speedup is not None:
        if measured_speedup <= 0:
            raise ValueError("measured speedup must be positive (spec tok/s / plain tok/s)")
        mk = len(rates) if measured_k is None else measured_k
        if not 1 <= mk <= len(rates):
            raise ValueError(f"measured k={mk} is outside 1..{len(rates)}")
        predicted = rows[mk].speedup
        ratio = measured_speedup / predicted
        implied = rows[mk].expected_tokens / measured_speedup
        if ratio < shortfall:
            warnings.append(
                f"measured speedup {measured_speedup:.2f}x at k={mk} is {ratio:.0%} of the "
                f"predicted {predicted:.2f}x (below {shortfall:.0%}): one step really cost "
                f"{implied:.2f} target decode steps, not {rows[mk].step_cost:.2f}. Likely causes: "
                + "; ".join(LIKELY_CAUSES)
            )
        if measured_speedup < 1.0:
            text += f"; measured {measured_speedup:.2f}x at k={mk}: speculative decoding is slower"
            if best_k is not None:
                text += " here -- trust the measurement and turn it off until an A/B says otherwise"
    return Advice(
        rates=rates,
        draft_cost=draft_cost,
        margin=margin,
        rows=rows,
        best_k=best_k,
        best_speedup=best.speedup,
        accepted_per_draft=rows[-1].expected_tokens - 1.0,
        wasteful_positions=wasteful,
        recommendation=text,
        measured_speedup=measured_speedup,
        measured_k=None if measured_speedup is None else (measured_k or len(rates)),
        measured_vs_predicted=ratio,
        implied_step_cost=implied,
        warnings=warnings,
        notes=notes,
    )
