#!/usr/bin/env python3
"""Download, for the H200 device image (Python 3.12, x86-64), the wheels that
`vllm serve` imports and the image lacks, following their requirements.

Usage (here, with network): python3 lab/gpu/resolve_deps.py OUTDIR
Reads requirements-serve.txt and device_pkgs.txt beside this file. Skips what
the device image already has and the torch / CUDA-kernel family (vLLM is
installed with --no-deps; its optional kernels are not needed for a dense
bf16 model). Prints one line per requirement it could not fetch.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
SKIP_ALWAYS = [
    "torch",
    "torchaudio",
    "torchvision",
    "torchcodec",
    "triton",
    "nvidia-cutlass-dsl",
    "flashinfer-python",
    "flashinfer-cubin",
    "tilelang",
    "quack-kernels",
    "humming-kernels",
    "tokenspeed-mla",
    "pynvvideocodec",
    "apache-tvm-ffi",
    "nvidia-cudnn-frontend",
    "fastsafetensors",
    "nvtx",
]
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_5_x86_64",
    "any",
]


def download(spec: str, out: str) -> bool:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        out,
        spec,
    ]
    for plat in PLATFORMS:
        cmd[5:5] = ["--platform", plat]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        print("FAIL", spec, res.stderr.strip().splitlines()[-1:], flush=True)
    return res.returncode == 0


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(HERE, "device_pkgs.txt"), encoding="utf-8") as fh:
        device = {canonicalize_name(line.strip()) for line in fh if line.strip()}
    skip = device | {canonicalize_name(x) for x in SKIP_ALWAYS}
    with open(os.path.join(HERE, "requirements-serve.txt"), encoding="utf-8") as fh:
        queue = [Requirement(line.strip()) for line in fh if line.strip()]
    seen: dict[str, str | None] = {}
    while queue:
        req = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in skip or name in seen:
            continue
        if req.marker and not req.marker.evaluate(ENV):
            continue
        if not download(str(req).split(";")[0], out):
            seen[name] = None
            continue
        files = [
            f
            for f in glob.glob(os.path.join(out, "*.whl"))
            if canonicalize_name(os.path.basename(f).split("-")[0]) == name
        ]
        if not files:
            print("nofile", req, flush=True)
            seen[name] = None
            continue
        seen[name] = sorted(files)[-1]
        with zipfile.ZipFile(seen[name]) as zf:
            meta = next(x for x in zf.namelist() if x.endswith(".dist-info/METADATA"))
            text = zf.read(meta).decode()
        for line in text.splitlines():
            if line.startswith("Requires-Dist:"):
                dep = Requirement(line.split(":", 1)[1].strip())
                if not dep.marker or any(
                    dep.marker.evaluate({**ENV, "extra": e}) for e in ["", *req.extras]
                ):
                    queue.append(dep)
    # xgrammar 0.2.x needs apache-tvm-ffi >= 0.1.11 (vLLM pins 0.1.10); pycountry for
    # mistral_common's extras.
    for extra in ("apache-tvm-ffi>=0.1.11,<0.2", "pycountry"):
        download(extra, out)
    print(len(glob.glob(os.path.join(out, "*.whl"))), "wheels in", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".cache/gpu/deps"))
