"""``benchgate advise``: should speculative decoding be on, and with which k?

Example (the field report's L4 numbers)::

    benchgate advise --acceptance 79.3,65.1,55.0,45.3,38.6 --draft-cost 0.29 \\
        --measured-speedup 0.634

The draft cost c can come from the serving stack instead of a guess: one
measured A/B arm implies it (``--fit-arm K:SPEEDUP``, or ``--fit-results
PLAIN.json ARM.json``, two ``benchgate bench`` results of the same release and
load, which also give the per-position acceptance). The other k are then
predicted from that c (lab/calibration/h200-vllm.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from . import advisor
from .numfmt import MISSING

EXIT_OK = 0
EXIT_ERROR = 1


def register(subparsers: Any) -> None:
    """Add the ``advise`` subcommand to ``benchgate``'s sub-parsers."""
    p = subparsers.add_parser(
        "advise",
        help="predict the speculative-decoding speedup per k from acceptance rates",
        description=(
            "Predict tokens per step E(k) = 1 + a_1 + ... + a_k, step cost k*c + v(k+1) and "
            "speedup S(k) = E(k) / cost for each k, and recommend k or off."
        ),
    )
    p.add_argument(
        "--acceptance",
        help="per-position acceptance, comma-separated, percent or fractions "
        "(accepted_per_pos / num_drafts), e.g. 79.3,65.1,55.0,45.3,38.6",
    )
    p.add_argument(
        "--draft-cost",
        type=float,
        default=0.1,
        help="cost of one draft step relative to one target decode step, c (default: 0.1)",
    )
    p.add_argument(
        "--verify-curve",
        default="flat",
        help="'flat' (v(n) = 1) or a JSON file: {n: cost} or [v(1), v(2), ...] (default: flat)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=advisor.DEFAULT_MARGIN,
        help="the best k must beat plain decoding by this factor (default: %(default)s)",
    )
    p.add_argument(
        "--measured-speedup",
        type=float,
        help="measured speculative tok/s divided by plain tok/s, to check against the model",
    )
    p.add_argument(
        "--measured-k",
        type=int,
        help="k the measurement ran with (default: the number of acceptance rates)",
    )
    p.add_argument(
        "--fit-arm",
        metavar="K:SPEEDUP",
        help="take c from one measured arm instead of --draft-cost: K drafted tokens per step "
        "reached SPEEDUP (spec tok/s / plain tok/s, same release and load), e.g. 3:0.654",
    )
    p.add_argument(
        "--fit-results",
        nargs=2,
        metavar=("PLAIN", "ARM"),
        help="take c (and, unless --acceptance is given, the per-position acceptance) from two "
        "`benchgate bench` result files of the same release and load: plain decoding and one "
        "speculative arm (median output tok/s; acceptance from the server's counters)",
    )
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.set_defaults(_run=run, command_name="advise")


def format_table(advice: advisor.Advice) -> str:
    """The per-k table and the recommendation, as plain text."""
    head = ("k", "E(k) tokens", "step cost", "speedup", "gain a_k", "cost +", "pays?")
    rows = [head]
    for row in advice.rows:
        if row.k == 0:
            verdict = "(plain)"
        elif row.improves and row.beats_plain:
            verdict = "yes"
        elif row.beats_plain:
            verdict = "lowers S"
        else:
            verdict = "no"
        rows.append(
            (
                str(row.k),
                f"{row.expected_tokens:.3f}",
                f"{row.step_cost:.3f}",
                f"{row.speedup:.3f}",
                MISSING if row.k == 0 else f"{row.marginal_gain:.3f}",
                MISSING if row.k == 0 else f"{row.marginal_cost:.3f}",
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"accepted per draft (all {len(advice.rates)} positions): "
        f"{advice.accepted_per_draft:.3f}; draft cost c = {advice.draft_cost:g}"
    )
    if advice.wasteful_positions:
        pos = ", ".join(str(p) for p in advice.wasteful_positions)
        lines.append(f"positions that lower the speedup (0-based): {pos}")
    lines.append(f"recommendation: {advice.recommendation}")
    if advice.measured_vs_predicted is not None:
        lines.append(
            f"measured/predicted at k={advice.measured_k}: {advice.measured_vs_predicted:.0%}; "
            f"implied step cost {advice.implied_step_cost:.2f} target steps"
        )
    for note in advice.notes:
        lines.append(f"note: {note}")
    for warning in advice.warnings:
        lines.append(f"WARNING: {warning}")
    return "\n".join(lines)


def _median_tok_s(result: dict[str, Any], path: str) -> float:
    metric = (result.get("summary") or {}).get("metrics", {}).get("output_tokens_per_s") or {}
    value = metric.get("median")
    if not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{path}: no median output_tokens_per_s in the result's summary")
    return float(value)


def _read_result(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read result {path!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a benchgate result")
    return data


def fit_from_results(plain_path: str, arm_path: str) -> tuple[int, float, list[float]]:
    """(k, measured speedup, per-position acceptance) of one arm against plain decoding."""
    from . import ab

    plain, arm = _read_result(plain_path), _read_result(arm_path)
    _, _, per_pos = ab.acceptance_of(arm)
    if not per_pos:
        raise ValueError(
            f"{arm_path}: no speculative-decoding counters in its trials "
            "(was speculative decoding on, and /metrics readable?)"
        )
    speedup = _median_tok_s(arm, arm_path) / _median_tok_s(plain, plain_path)
    return len(per_pos), speedup, per_pos


def _parse_fit_arm(text: str) -> tuple[int, float]:
    try:
        k_text, speedup_text = text.split(":")
        return int(k_text), float(speedup_text)
    except ValueError as exc:
        raise ValueError(f"--fit-arm takes K:SPEEDUP, e.g. 3:0.654, got {text!r}") from exc


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        fit_results = getattr(args, "fit_results", None)
        fit_arm = getattr(args, "fit_arm", None)
        if fit_results and fit_arm:
            raise ValueError("give --fit-arm or --fit-results, not both")
        fitted: tuple[int, float] | None = None
        rates: list[float] | None = None
        if args.acceptance:
            rates = advisor.parse_rates(args.acceptance)
        if fit_results:
            k, speedup, measured_rates = fit_from_results(*fit_results)
            rates = rates or measured_rates
            fitted = (k, speedup)
        elif fit_arm:
            fitted = _parse_fit_arm(fit_arm)
        if rates is None:
            raise ValueError("give --acceptance (or --fit-results, whose arm measured it)")
        draft_cost = args.draft_cost
        notes = []
        if fitted is not None:
            k, speedup = fitted
            draft_cost = advisor.draft_cost_from_arm(rates, k, speedup, args.verify_curve)
            notes.append(
                f"draft cost c = {draft_cost:.3f} fitted to the measured arm k={k} "
                f"(speedup {speedup:.3f}): E({k}) / speedup - v({k + 1}) = {k} * c; "
                "the other rows are predictions"
            )
        advice = advisor.advise(
            rates,
            draft_cost,
            args.verify_curve,
            margin=args.margin,
            measured_speedup=args.measured_speedup,
            measured_k=args.measured_k,
        )
        advice.notes[:0] = notes
    except ValueError as exc:
        print(f"benchgate advise: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        out.write(json.dumps(advice.to_dict(), indent=1) + "\n")
    else:
        out.write(format_table(advice) + "\n")
    return EXIT_OK
