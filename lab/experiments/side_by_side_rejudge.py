"""Judge recorded side-by-side measurements both ways: as pairs and as two samples.

Every run of ``playbooks/upgrade.yml`` with ``benchgate_side_by_side`` leaves
``side-by-side.json`` and ``side-by-side-reference.json`` (and, after an
INCONCLUSIVE first verdict, ``candidate-more.json`` and its reference) in
``artifacts/<run>/<host>/``. This judges each such folder with the gate
(``benchgate.gate.run_gate``, which the module calls): as the role does
(pairs: Wilcoxon signed-rank on trial i of each side, no run-to-run spread),
and as two independent samples
with no run-to-run spread and with ``--run-spread``; each with the first
measurement only and with the extra trials. One line per folder and way:

    .venv/bin/python lab/experiments/side_by_side_rejudge.py artifacts/2026*/benchgate-demo \\
        --limit 14 --run-spread 4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchgate.gate import run_gate


def _judge(baseline: Any, candidate: Any, limit: float, spread: float) -> dict[str, Any]:
    """The gate's result, with the module's defaults and no ledger."""
    return run_gate(baseline, candidate, max_regression_pct=limit, run_spread_pct=spread).result()


def _load(folder: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / name).read_text(encoding="utf-8"))
    return data


def _strip(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "interleaved"}


def _line(out: dict[str, Any]) -> str:
    parts = []
    for m in out["metrics"]:
        if m["metric"] != "output_tokens_per_s" or m.get("change_pct") is None:
            continue
        parts.append(
            f"{m.get('stage') or 'all'} {m['change_pct']:+.1f}% "
            f"[{m['change_lo_pct']:+.1f}, {m['change_hi_pct']:+.1f}] n={m['n_candidate']}"
        )
    return f"{out['verdict']:<12} " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--limit", type=float, default=14.0)
    ap.add_argument("--run-spread", type=float, default=4.0)
    args = ap.parse_args(argv)
    for folder in args.folders:
        first = folder / "side-by-side.json"
        if not first.is_file():
            continue
        cand = [_load(folder, "side-by-side.json")]
        ref = [_load(folder, "side-by-side-reference.json")]
        if (folder / "candidate-more-reference.json").is_file():
            cand.append(_load(folder, "candidate-more.json"))
            ref.append(_load(folder, "candidate-more-reference.json"))
        for label, n in (("first", 1), ("+more", len(cand))):
            if label == "+more" and n == 1:
                continue
            paired = _judge(ref[:n], cand[:n], args.limit, args.run_spread)
            print(f"{folder}  {label:<6} pairs                 {_line(paired)}")
            for spread in (0.0, args.run_spread):
                apart = _judge(
                    [_strip(r) for r in ref[:n]], [_strip(c) for c in cand[:n]], args.limit, spread
                )
                print(f"{folder}  {label:<6} two samples, {spread:g}% run spread {_line(apart)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
