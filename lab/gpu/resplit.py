#!/usr/bin/env python3
"""Here: re-cut stage.sh's parts into N carry folders of equal size across both
bundles, so that each call's carry plus the working tree stays under the
device tool's 64 MiB (tracked files included).

    python3 lab/gpu/resplit.py [--parts 6] [--gpu-dir .cache/gpu]

Reads .cache/gpu/p0-*/b0.part* and p1-*/b1.part* (stage.sh's output), checks
each joined bundle against bundle-<i>.sha, and writes .cache/gpu/pr-<n>/ with
pieces b<i>.part<NN> numbered per bundle (device.sh's `install I` joins
b<i>.part* in name order, whichever folders they came in). A folder can hold
the tail of bundle 0 and the head of bundle 1; bundle 0 is complete once the
folder holding its last piece has been received (printed below).
On 2026-12-05: 6 folders of 58.1 MiB, bundle 0 complete with pr-3.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", type=int, default=6)
    p.add_argument("--gpu-dir", default=".cache/gpu")
    a = p.parse_args()
    g = Path(a.gpu_dir)
    src = {b: sorted(g.glob(f"p{b}-*/b{b}.part*")) for b in (0, 1)}
    size = {b: sum(f.stat().st_size for f in fs) for b, fs in src.items()}
    total = sum(size.values())
    chunk = -(-total // a.parts)
    print(f"bundles {size} bytes, {a.parts} folders of {chunk / 2**20:.1f} MiB")
    for old in g.glob("pr-*"):
        shutil.rmtree(old)
    folder = used = 0
    piece = {0: 0, 1: 0}
    for b in (0, 1):
        h = hashlib.sha256()
        out = None
        for f in src[b]:
            with open(f, "rb") as fh:
                while d := fh.read(1 << 20):
                    h.update(d)
                    while d:
                        if out is None:
                            os.makedirs(g / f"pr-{folder}", exist_ok=True)
                            out = open(g / f"pr-{folder}" / f"b{b}.part{piece[b]:02d}", "wb")  # noqa: SIM115
                            piece[b] += 1
                        take = min(len(d), chunk - used)
                        out.write(d[:take])
                        used += take
                        d = d[take:]
                        if used == chunk:
                            out.close()
                            out = None
                            folder += 1
                            used = 0
        last = folder if out is not None else folder - 1
        if out is not None:
            out.close()
            out = None
        want = (g / f"bundle-{b}.sha").read_text().strip()
        got = h.hexdigest()[:16]
        print(f"bundle {b}: sha256 {got} (want {want}), complete with pr-{last}")
        if got != want:
            return 1
        shutil.copy(g / f"bundle-{b}.sha", g / f"pr-{last}" / f"bundle-{b}.sha")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
