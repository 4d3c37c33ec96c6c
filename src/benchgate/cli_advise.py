"""``benchgate advise``: should speculative decoding be on, and with which k?

Example (the field report's L4 numbers)::

    benchgate advise --acceptance 79.3,65.1,55.0,45.3,38.6 --draft-cost 0.29 \\
        --measured-speedup 0.634
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from . import advisor

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
        required=True,
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
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.set_defaults(_run=run)


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
                "-" if row.k == 0 else f"{row.marginal_gain:.3f}",
                "-" if row.k == 0 else f"{row.marginal_cost:.3f}",
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
    for warning in advice.warnings:
        lines.append(f"WARNING: {warning}")
    return "\n".join(lines)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        rates = advisor.parse_rates(args.acceptance)
        advice = advisor.advise(
            rates,
            args.draft_cost,
            args.verify_curve,
            margin=args.margin,
            measured_speedup=args.measured_speedup,
            measured_k=args.measured_k,
        )
    except ValueError as exc:
        print(f"benchgate advise: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        out.write(json.dumps(advice.to_dict(), indent=1) + "\n")
    else:
        out.write(format_table(advice) + "\n")
    return EXIT_OK
