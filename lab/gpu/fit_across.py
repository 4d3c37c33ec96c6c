#!/usr/bin/env python3
"""Here (CPU): a draft cost fitted in one lease, predicting the arms of others.

    .venv/bin/python lab/gpu/fit_across.py lab/calibration/h100-vllm-4 \
        lab/calibration/h100-vllm lab/calibration/h100-vllm-2 lab/calibration/h100-vllm-3

The first folder (a `judge.py` output) gives c, the draft's cost per step
relative to a target step, from its k=3 arm of each release, draft and load
(`benchgate.advisor.draft_cost_from_arm`, as `benchgate advise --fit-arm`
does). Every speculative run of the other folders with the same release,
draft and load is then predicted from its own measured acceptance
(`benchgate.advisor.predict`) and set beside its measured speedup (against
its own lease's plain run). Then the c that every arm implies, by k: the
advisor's model (`k*c + v(k+1)`) holds where that is one number. Prints
markdown tables; nothing is written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from benchgate import advisor  # noqa: E402

FIT_K = 3


def runs(folder: Path) -> dict[str, dict]:
    return json.loads((folder / "summary.json").read_text())["runs"]


def key(row: dict) -> tuple[str, str, str]:
    return row["release"], row["draft"], row["load"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fit", type=Path, help="judge.py output folder whose k=3 arms give c")
    ap.add_argument("others", type=Path, nargs="+", help="judge.py output folders to predict")
    args = ap.parse_args()

    c_of = {
        key(row): advisor.draft_cost_from_arm(row["per_position_acceptance"], FIT_K, row["speedup"])
        for row in runs(args.fit).values()
        if row.get("k") == FIT_K and "speedup" in row
    }
    print(
        f"c from {args.fit.name}'s k={FIT_K} arms: "
        + ", ".join(f"{r} {d} {load} {c:.3f}" for (r, d, load), c in sorted(c_of.items()))
    )
    print()
    print("| release | load | arm | folder | measured vs plain | predicted | error |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for folder in args.others:
        for _, row in sorted(runs(folder).items()):
            if "speedup" not in row or key(row) not in c_of or not row["per_position_acceptance"]:
                continue
            pred = advisor.predict(row["per_position_acceptance"], c_of[key(row)])[row["k"]].speedup
            err = 100 * (pred / row["speedup"] - 1)
            errors.append(abs(err))
            arm = f"{row['draft']}-k{row['k']}"
            print(
                f"| {row['release']} | {row['load']} | {arm} | `{folder.name}` "
                f"| {row['speedup']:.3f} | {pred:.3f} | {err:+.1f} % |"
            )
    within = sum(e <= 10 for e in errors)
    print()
    print(f"{within} of {len(errors)} predictions within 10 %")

    # The model holds where c is one number: c implied by each arm, by k.
    implied: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    for folder in [args.fit, *args.others]:
        for row in runs(folder).values():
            if "speedup" in row and row["per_position_acceptance"]:
                c = advisor.draft_cost_from_arm(
                    row["per_position_acceptance"], row["k"], row["speedup"]
                )
                implied.setdefault(key(row), {}).setdefault(row["k"], []).append(c)
    ks = sorted({k for by_k in implied.values() for k in by_k})
    print()
    print("c implied by each arm (all folders; one value per run):")
    print()
    print("| release | draft | load | " + " | ".join(f"k={k}" for k in ks) + " |")
    print("|---|---|---|" + "---|" * len(ks))
    for (rel, draft, load), by_k in sorted(implied.items()):
        cells = [" / ".join(f"{c:.2f}" for c in by_k.get(k, [])) or "-" for k in ks]
        print(f"| {rel} | {draft} | {load} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
