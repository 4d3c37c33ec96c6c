"""GPU calibration probe: memory bandwidth and the verify-cost curve T(n)/T(1).

Runs where PyTorch is (the vLLM venv on a GPU host; the CPU works too, for
tests). Prints one JSON document:

- ``bandwidth_gbs``: device memory bandwidth, from a large copy (bytes read +
  written) and from a large read-only reduction; the median of repeated runs.
- ``models``: for each layer shape (a Llama/Qwen-style decoder: fused QKV,
  output projection, fused gate/up, down projection), the time of one decode
  step over all layers when n tokens per sequence are scored at once, and
  ``verify_curve`` = T(n)/T(1) for n = 1..max_n. That is the v(n) the advisor
  (``benchgate advise --verify-curve``) needs. Weights are distinct per layer,
  so every step reads them all from memory as a real decode step does; the
  step is captured in a CUDA graph so that launch overhead does not hide the
  memory time. Attention over the KV cache is not modelled (short contexts).
- ``draft_cost_ratio``: T_draft(1) / T_target(1) for a draft/target pair, the
  advisor's c.

Tensor parallelism is modelled by the per-rank shapes (columns or rows split by
``tp``); the all-reduce between ranks is not measured here (one GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LayerShape:
    """Per-layer projection sizes of a decoder (before tensor-parallel split)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    q_dim: int
    kv_dim: int

    def split(self, tp: int) -> list[tuple[int, int]]:
        """(in, out) of the four matmuls of one layer on one of ``tp`` ranks."""
        return [
            (self.hidden, (self.q_dim + 2 * self.kv_dim) // tp),  # fused QKV, column-parallel
            (self.q_dim // tp, self.hidden),  # output projection, row-parallel
            (self.hidden, 2 * self.intermediate // tp),  # fused gate/up, column-parallel
            (self.intermediate // tp, self.hidden),  # down projection, row-parallel
        ]

    def weight_bytes(self, tp: int, bytes_per_param: int = 2) -> int:
        return self.layers * sum(i * o for i, o in self.split(tp)) * bytes_per_param


# The field report's pair (Qwen3-14B target, Qwen3-4B draft), from their configs.
KNOWN_SHAPES = {
    "qwen3-14b": LayerShape("qwen3-14b", 5120, 17408, 40, 40 * 128, 8 * 128),
    "qwen3-4b": LayerShape("qwen3-4b", 2560, 9728, 36, 32 * 128, 8 * 128),
    "qwen3-0.6b": LayerShape("qwen3-0.6b", 1024, 3072, 28, 16 * 128, 8 * 128),
    "tiny": LayerShape("tiny", 128, 352, 4, 4 * 32, 2 * 32),
}


def _timer(torch: Any, device: str) -> Any:
    """A function that runs ``fn`` ``reps`` times and returns the median seconds."""

    def run(fn: Any, reps: int) -> float:
        samples = []
        for _ in range(reps):
            if device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    return run


def measure_bandwidth(torch: Any, device: str, size_bytes: int, reps: int) -> dict[str, float]:
    n = size_bytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    timed = _timer(torch, device)
    timed(lambda: dst.copy_(src), 3)  # warm up
    copy_s = timed(lambda: dst.copy_(src), reps)
    read_s = timed(lambda: src.sum(), reps)
    return {
        "copy_gbs": 2 * n * 4 / copy_s / 1e9,
        "read_gbs": n * 4 / read_s / 1e9,
        "size_bytes": float(n * 4),
    }


def measure_step_curve(
    torch: Any, device: str, shape: LayerShape, tp: int, max_n: int, reps: int, dtype: Any
) -> dict[str, Any]:
    """Seconds of one decode step over all layers for n = 1..max_n tokens."""
    weights = [
        [torch.randn(i, o, device=device, dtype=dtype) * 0.01 for i, o in shape.split(tp)]
        for _ in range(shape.layers)
    ]
    timed = _timer(torch, device)
    times: dict[int, float] = {}
    for n in range(1, max_n + 1):
        x = torch.randn(n, shape.hidden, device=device, dtype=dtype)
        q_in = torch.randn(n, shape.q_dim // tp, device=device, dtype=dtype)
        mlp_in = torch.randn(n, shape.intermediate // tp, device=device, dtype=dtype)

        def step(x: Any = x, q_in: Any = q_in, mlp_in: Any = mlp_in) -> None:
            for qkv, out, gate_up, down in weights:
                torch.matmul(x, qkv)
                torch.matmul(q_in, out)
                torch.matmul(x, gate_up)
                torch.matmul(mlp_in, down)

        run = step
        if device == "cuda":
            step()  # warm up kernels and their workspaces before capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        timed(run, 3)
        times[n] = timed(run, reps)
    base = times[1]
    return {
        "tp": tp,
        "weight_bytes": shape.weight_bytes(tp, torch.tensor([], dtype=dtype).element_size()),
        "step_s": {str(n): t for n, t in times.items()},
        "verify_curve": {str(n): t / base for n, t in times.items()},
    }


def calibrate(
    target: str,
    draft: str | None,
    tp_list: list[int],
    max_n: int,
    bandwidth_bytes: int,
    reps: int,
    device: str | None = None,
) -> dict[str, Any]:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    report: dict[str, Any] = {
        "schema": "benchgate.calibration/1",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "bandwidth_gbs": measure_bandwidth(torch, device, bandwidth_bytes, reps),
        "models": {},
    }
    for name in [target] + ([draft] if draft else []):
        shape = KNOWN_SHAPES[name]
        report["models"][name] = {
            "shape": asdict(shape),
            "tp": {
                str(tp): measure_step_curve(torch, device, shape, tp, max_n, reps, dtype)
                for tp in tp_list
            },
        }
        if device == "cuda":
            torch.cuda.empty_cache()
    if draft:
        report["draft_cost_ratio"] = {
            str(tp): report["models"][draft]["tp"][str(tp)]["step_s"]["1"]
            / report["models"][target]["tp"][str(tp)]["step_s"]["1"]
            for tp in tp_list
        }
    for name, model in report["models"].items():
        for tp, curve in model["tp"].items():
            # Roofline: the step cannot be faster than reading the weights once.
            curve["roofline_s"] = curve["weight_bytes"] / (
                report["bandwidth_gbs"]["read_gbs"] * 1e9
            )
            curve["efficiency_at_1"] = curve["roofline_s"] / curve["step_s"]["1"]
            model["tp"][tp] = curve
        report["models"][name] = model
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="qwen3-14b", choices=sorted(KNOWN_SHAPES))
    parser.add_argument("--draft", default="qwen3-4b", choices=sorted(KNOWN_SHAPES))
    parser.add_argument("--tp", default="1,4", help="tensor-parallel sizes to model, e.g. 1,4")
    parser.add_argument("--max-n", type=int, default=16, help="largest tokens scored per step")
    parser.add_argument("--bandwidth-mib", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args(argv)
    report = calibrate(
        args.target,
        args.draft,
        [int(t) for t in args.tp.split(",")],
        args.max_n,
        args.bandwidth_mib * 2**20,
        args.reps,
        args.device,
    )
    text = json.dumps(report, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
