#!/usr/bin/env python3
"""Here: issue 34, point 4, the field report's configuration as rows (batches 52-59).

    python lab/gpu/fp8_rows.py SPREAD_DIR [--json PATH]

SPREAD_DIR is spread.py's folder (or spread_summary.py's) with starts of
experiment.py's v<rel>-fp8-<arm>-{2048,8192} servers, each measured at sc1
(one stream) and ac64 (64 streams); arms: off, d4b-k3 (the 4B draft quantised
online), d4b16-k3 (the draft in bf16), d4bq-k3 (the draft an FP8 checkpoint).
Per server start and load: median tok/s, TTFT and TPOT. Per release and
--max-num-batched-tokens: the product's A/B between plain decoding and every
arm that has a start there (ab.choose_any on the two loads as the staged
workload's single and busy stages). Per arm and setting: the product's gate
from 0.24.0 to 0.26.0 at each load (`benchgate judge`), on each server's first
start. Every start of a server is printed; the A/B and the gate take the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_rounds import read_starts, staged  # noqa: E402

from benchgate import ab  # noqa: E402
from benchgate.samples import samples_from_result  # noqa: E402

LOADS = ("sc1", "ac64")
TAGS = ("2048", "8192")
ARMS = ("off", "d4b-k3", "d4b16-k3", "d4bq-k3")


def median(result: dict[str, Any] | None, metric: str) -> float | None:
    values = samples_from_result(result, metric) if result else []
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    starts = read_starts(a.folder)
    first = {name: runs[0][1] for name, runs in starts.items() if runs}
    out: dict[str, Any] = {"rows": [], "ab": {}, "gate": {}}
    print("server                    start load  tok/s    TTFT ms  TPOT ms")
    for name, runs in starts.items():
        for start, loads in runs:
            for load in LOADS:
                r = loads.get(load)
                row = {
                    "server": name,
                    "start": start,
                    "load": load,
                    **{m: median(r, m) for m in ("output_tokens_per_s", "ttft_ms", "tpot_ms")},
                }
                out["rows"].append(row)
                cells = [row[m] for m in ("output_tokens_per_s", "ttft_ms", "tpot_ms")]
                text = "  ".join(f"{c:7.1f}" if c else "      -" for c in cells)
                print(f"{name:25} {start!s:5} {load:5} {text}")
    for rel in ("26", "24"):
        for tag in TAGS:
            names = {arm: f"v{rel}-fp8-{arm}-{tag}" for arm in ARMS}
            present = [arm for arm in ARMS[1:] if names[arm] in first]
            if names["off"] not in first or not present:
                continue
            arms = [ab.Arm(ab.OFF, {})]
            arms += [ab.Arm(arm, {"num_speculative_tokens": 3}) for arm in present]
            results = {
                ab.OFF if arm == "off" else arm: staged(first[names[arm]], LOADS)
                for arm in ("off", *present)
            }
            choice = ab.choose_any(arms, results)
            key = f"0.{rel}.0 mnbt {tag}"
            out["ab"][key] = {"winner": choice.winner, "reason": choice.reason}
            print(f"\n== A/B, {key}: {choice.winner}: {choice.reason}")
            print(ab.render_staged_table(choice) if isinstance(choice, ab.StagedChoice) else "")
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            for tag in TAGS:
                old, new = first.get(f"v24-fp8-{arm}-{tag}"), first.get(f"v26-fp8-{arm}-{tag}")
                for load in LOADS:
                    if not (old and new and load in old and load in new):
                        continue
                    b, c = Path(tmp, "b.json"), Path(tmp, "c.json")
                    b.write_text(json.dumps(old[load]))
                    c.write_text(json.dumps(new[load]))
                    cmd = [sys.executable, "-m", "benchgate.cli", "judge"]
                    done = subprocess.run(
                        [*cmd, "--baseline", str(b), "--candidate", str(c), "--json"],
                        capture_output=True,
                        text=True,
                    )
                    verdict = json.loads(done.stdout)["verdict"] if done.stdout else "ERROR"
                    key = f"{arm} mnbt {tag} {load}"
                    out["gate"][key] = verdict
                    print(f"gate 0.24.0 -> 0.26.0, {key}: {verdict}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
