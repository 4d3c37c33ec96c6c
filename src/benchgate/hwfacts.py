"""Hardware facts of a GPU host, and what they mean for speculative decoding.

Runs on the target host (the ``vllm_facts`` module imports it from the client
venv), so it keeps to the standard library and Python 3.9.

* :func:`parse_gpu_csv` reads ``nvidia-smi --query-gpu=<QUERY_FIELDS>
  --format=csv,noheader,nounits`` with :mod:`benchgate.nvidia_smi`, the
  reader :mod:`benchgate.hostprobe` uses too.
* :func:`parse_topology` reads ``nvidia-smi topo -m``: the link between each
  pair of GPUs, NVLink (``NV<n>``) or a PCIe path (``PIX``, ``PXB``, ``PHB``,
  ``NODE``, ``SYS``), summarised as ``nvlink`` / ``pcie`` / ``mixed`` /
  ``single``.
* :func:`native_fp8` is the compute-capability rule: FP8 tensor cores from
  8.9 on (Ada Lovelace: L4, L40, L40S, RTX 4090; Hopper 9.0; Blackwell 10.x
  and 12.x). Ampere (8.0, 8.6) runs FP8 checkpoints weight-only (Marlin).
* Memory bandwidth comes from a measured figure (``benchgate.calibrate``
  JSON, when its device is this GPU) or from the datasheet table in
  :mod:`benchgate.hostprobe` (``GPU_BANDWIDTH_GBS``, shared with the roofline).
* :func:`gather` runs the two commands and never raises: without nvidia-smi,
  or when it fails, the facts say ``gpu_count: 0`` and why.
* :func:`hardware_advice` is the field report's decision table, corrected
  (docs/field-report-notes.md), as advisory notes. The benchmark (speculative
  vs. off on the same release) stays the final word.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable

from . import nvidia_smi
from .hostprobe import known_bandwidth

__all__ = [
    "QUERY_FIELDS",
    "GpuInfo",
    "Note",
    "advice_dicts",
    "architecture",
    "gather",
    "hardware_advice",
    "link_kind",
    "native_fp8",
    "parse_compute_capability",
    "parse_gpu_csv",
    "parse_topology",
    "summarize_links",
]

SCHEMA = "benchgate.hwfacts/1"

# The order of the columns in the CSV that parse_gpu_csv reads.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "compute_cap",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.limit",
    "pci.bus_id",
)
QUERY_ARGS = tuple(nvidia_smi.query_args(QUERY_FIELDS))

# Below this a GPU's memory bandwidth, not its compute, sets what a draft
# step costs in wall time (L4 300, A10 600, L40S 864, RTX 4090 1008 GB/s).
LOW_BANDWIDTH_GBS = 1000.0
# Less device memory than this per GPU leaves little room for a draft model.
SMALL_VRAM_MIB = 32 * 1024

PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]


# --------------------------------------------------------------------------
# compute capability
# --------------------------------------------------------------------------


def parse_compute_capability(text: str) -> tuple[int, int] | None:
    """``"8.9"`` -> (8, 9); None for ``[N/A]`` or anything else unparsable."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text))
    return (int(match.group(1)), int(match.group(2))) if match else None


def native_fp8(compute_capability: str) -> bool:
    """FP8 tensor cores: compute capability 8.9 (Ada) or newer (Hopper, Blackwell)."""
    cc = parse_compute_capability(compute_capability)
    return cc is not None and cc >= (8, 9)


def architecture(compute_capability: str) -> str | None:
    """The NVIDIA architecture of a compute capability, or None when unknown."""
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return None
    major, minor = cc
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ada Lovelace" if minor >= 9 else "Ampere"
    if major == 9:
        return "Hopper"
    if major in (10, 11, 12):
        return "Blackwell"
    return None


# --------------------------------------------------------------------------
# nvidia-smi --query-gpu
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as nvidia-smi reports it, plus what benchgate derives from it."""

    index: int
    name: str
    uuid: str
    memory_total_mib: int | None
    compute_capability: str
    architecture: str | None
    native_fp8: bool
    clocks_max_sm_mhz: int | None
    clocks_max_mem_mhz: int | None
    power_limit_w: float | None
    pci_bus_id: str
    memory_bandwidth_datasheet_gbs: float | None
    memory_bandwidth_measured_gbs: float | None = None

    @property
    def memory_bandwidth_gbs(self) -> float | None:
        """The measured figure when there is one, else the datasheet's."""
        if self.memory_bandwidth_measured_gbs is not None:
            return self.memory_bandwidth_measured_gbs
        return self.memory_bandwidth_datasheet_gbs

    @property
    def memory_bandwidth_source(self) -> str | None:
        if self.memory_bandwidth_measured_gbs is not None:
            return "measured"
        return "datasheet" if self.memory_bandwidth_datasheet_gbs is not None else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["memory_bandwidth_gbs"] = self.memory_bandwidth_gbs
        out["memory_bandwidth_source"] = self.memory_bandwidth_source
        return out


def parse_gpu_csv(text: str) -> list[GpuInfo]:
    """GPUs from ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``.

    Raises ValueError on a line that does not have the expected columns, or
    whose index is not a number.
    """
    out: list[GpuInfo] = []
    for row in nvidia_smi.parse_query_gpu(text, QUERY_FIELDS):
        name, cc = row.cells["name"], row.cells["compute_cap"]
        known = known_bandwidth(name)
        out.append(
            GpuInfo(
                index=row.index,
                name=name,
                uuid=row.cells["uuid"],
                memory_total_mib=nvidia_smi.whole_number(row.cells["memory.total"]),
                compute_capability=nvidia_smi.value(cc) or "",
                architecture=architecture(cc),
                native_fp8=native_fp8(cc),
                clocks_max_sm_mhz=nvidia_smi.whole_number(row.cells["clocks.max.sm"]),
                clocks_max_mem_mhz=nvidia_smi.whole_number(row.cells["clocks.max.mem"]),
                power_limit_w=nvidia_smi.number(row.cells["power.limit"]),
                pci_bus_id=row.cells["pci.bus_id"],
                memory_bandwidth_datasheet_gbs=known[1] if known else None,
            )
        )
    return out


# --------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------


def link_kind(cell: str) -> str:
    """``NV18`` -> nvlink; ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` -> pcie; ``X`` -> self."""
    cell = cell.strip().upper()
    if cell == "X":
        return "self"
    if re.fullmatch(r"NV\d+", cell):
        return "nvlink"
    if cell in PCIE_LINKS:
        return "pcie"
    return "unknown"


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """GPU-to-GPU links of ``nvidia-smi topo -m``: {(i, j): "NV18", ...} for i < j.

    The matrix's header names the columns (``GPU0 GPU1 ... NIC0 CPU Affinity
    ...``); each ``GPU<i>`` row holds one cell per column, the GPU columns
    first. NIC rows and columns, the affinity columns and the legend are
    ignored. Raises ValueError when no matrix header is found.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = None
    for pos, line in enumerate(lines):
        tokens = line.split()
        if tokens and tokens[0] == "GPU0":
            header = pos
            break
    if header is None:
        raise ValueError("no GPU0 column in the nvidia-smi topo -m output")
    columns = []
    for token in lines[header].split():
        if re.fullmatch(r"GPU\d+", token):
            columns.append(int(token[3:]))
        else:
            break
    cells: dict[int, list[str]] = {}
    for line in lines[header + 1 :]:
        tokens = line.split()
        if not tokens:
            if cells:
                break  # the blank line before the legend
            continue
        match = re.fullmatch(r"GPU(\d+)", tokens[0])
        if match:
            cells[int(match.group(1))] = tokens[1 : 1 + len(columns)]
    links: dict[tuple[int, int], str] = {}
    for row, values in cells.items():
        for col, value in zip(columns, values):
            if row < col:
                links[(row, col)] = value
    return links


def summarize_links(links: Mapping[tuple[int, int], str], gpu_count: int) -> str:
    """``single`` (0-1 GPU), ``nvlink`` / ``pcie`` (every pair), ``mixed`` or ``unknown``."""
    if gpu_count <= 1:
        return "single"
    kinds = {link_kind(cell) for cell in links.values()}
    expected_pairs = gpu_count * (gpu_count - 1) // 2
    if not kinds or "unknown" in kinds or len(links) < expected_pairs:
        return "unknown"
    if kinds == {"nvlink"}:
        return "nvlink"
    if kinds == {"pcie"}:
        return "pcie"
    return "mixed"


# --------------------------------------------------------------------------
# calibration and gathering
# --------------------------------------------------------------------------


def load_calibration(path: str) -> tuple[str | None, float | None]:
    """(device name, read bandwidth GB/s) from a ``benchgate.calibrate`` JSON file."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    bandwidth = data.get("bandwidth_gbs") or {}
    value = bandwidth.get("read_gbs", bandwidth.get("copy_gbs"))
    return data.get("device"), (float(value) if value is not None else None)


def _run(argv: Sequence[str]) -> tuple[int, str, str]:
    env = dict(os.environ, LC_ALL="C")
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=60, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def _no_gpu(reason: str, notes: list[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "gpu_count": 0,
        "reason": reason,
        "gpus": [],
        "names": [],
        "homogeneous": True,
        "native_fp8": False,
        "min_compute_capability": None,
        "interconnect": "none",
        "links": {},
        "memory_bandwidth_gbs": None,
        "memory_total_mib": None,
        "notes": notes,
    }


def gather(
    nvidia_smi: str | None = None,
    calibration: str | None = None,
    run: Runner = _run,
) -> dict[str, Any]:
    """Facts of this host's GPUs. Never raises: no GPU means ``gpu_count`` 0 and a reason.

    ``nvidia_smi`` is the executable (default: looked up on PATH).
    ``calibration`` is a ``benchgate.calibrate`` JSON file whose measured
    bandwidth replaces the datasheet figure for GPUs of the same name.
    """
    notes: list[str] = []
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe or (nvidia_smi and not os.access(nvidia_smi, os.X_OK)):
        return _no_gpu(
            f"nvidia-smi not found ({nvidia_smi or 'not on PATH'}): no NVIDIA driver on this host",
            notes,
        )
    rc, out, err = run([exe, *QUERY_ARGS])
    if rc != 0:
        detail = (err or out).strip().splitlines()
        return _no_gpu(
            f"nvidia-smi --query-gpu failed (exit {rc}): {detail[-1] if detail else 'no output'}",
            notes,
        )
    try:
        found = parse_gpu_csv(out)
    except ValueError as exc:
        return _no_gpu(str(exc), notes)
    if not found:
        return _no_gpu("nvidia-smi lists no GPU", notes)

    if calibration:
        try:
            device, measured = load_calibration(calibration)
        except (OSError, ValueError, AttributeError) as exc:
            notes.append(f"calibration {calibration} not used: {exc}")
        else:
            if measured is None:
                notes.append(f"calibration {calibration} holds no bandwidth figure")
            else:
                matched = [g for g in found if device and g.name.lower() == device.lower()]
                if not matched:
                    notes.append(
                        f"calibration {calibration} was measured on {device!r}, not on "
                        f"{', '.join(sorted({g.name for g in found}))}: not used"
                    )
                found = [
                    GpuInfo(**{**asdict(g), "memory_bandwidth_measured_gbs": measured})
                    if g in matched
                    else g
                    for g in found
                ]
    for gpu in found:
        if gpu.memory_bandwidth_gbs is None:
            notes.append(
                f"GPU {gpu.index} ({gpu.name}) is not in benchgate's bandwidth table: "
                "measure it with python -m benchgate.calibrate and pass the JSON as calibration"
            )

    rc, out, err = run([exe, "topo", "-m"])
    links: dict[tuple[int, int], str] = {}
    if len(found) <= 1:
        interconnect = "single"
    elif rc != 0:
        interconnect = "unknown"
        notes.append(f"nvidia-smi topo -m failed (exit {rc}): {(err or out).strip()[:200]}")
    else:
        try:
            links = parse_topology(out)
        except ValueError as exc:
            interconnect = "unknown"
            notes.append(str(exc))
        else:
            interconnect = summarize_links(links, len(found))

    ccs = [parse_compute_capability(g.compute_capability) for g in found]
    known_ccs = [cc for cc in ccs if cc is not None]
    min_cc = f"{min(known_ccs)[0]}.{min(known_ccs)[1]}" if known_ccs else None
    bandwidths = [g.memory_bandwidth_gbs for g in found]
    memories = [g.memory_total_mib for g in found]
    names = sorted({g.name for g in found})
    return {
        "schema": SCHEMA,
        "gpu_count": len(found),
        "reason": None,
        "gpus": [g.to_dict() for g in found],
        "names": names,
        "homogeneous": len(names) == 1,
        "native_fp8": all(g.native_fp8 for g in found),
        "min_compute_capability": min_cc,
        "interconnect": interconnect,
        "links": {f"{a}-{b}": cell for (a, b), cell in sorted(links.items())},
        "memory_bandwidth_gbs": None if None in bandwidths else min(bandwidths),  # type: ignore[type-var]
        "memory_total_mib": None if None in memories else min(memories),  # type: ignore[type-var]
        "notes": notes,
    }


# --------------------------------------------------------------------------
# advisory preflight: the field report's decision table, corrected
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """One advisory note. ``level``: info, caution (may cost speed) or warning (likely wrong)."""

    level: str
    topic: str
    message: str


# vLLM speculative methods that run no draft model forward passes.
_NO_DRAFT_MODEL = ("ngram", "suffix")
# Methods whose draft is a small head on the target's own hidden states.
_DRAFT_HEADS = ("eagle", "eagle3", "medusa", "mlp_speculator", "mtp")


def _draft_kind(speculative: Mapping[str, Any]) -> str | None:
    """None (off), ``lookup`` (ngram/suffix), ``head`` (eagle, mtp, ...) or ``model``."""
    if not speculative:
        return None
    method = str(speculative.get("method") or "").lower()
    if method in _NO_DRAFT_MODEL:
        return "lookup"
    if method in _DRAFT_HEADS or method.endswith("_mtp"):
        return "head"
    return "model"


def hardware_advice(
    facts: Mapping[str, Any],
    speculative: Mapping[str, Any] | None = None,
    tensor_parallel_size: int = 1,
) -> list[Note]:
    """Advisory notes for a speculative configuration on this hardware.

    ``speculative`` is ``vllm_service_speculative`` (``{}`` = off);
    ``tensor_parallel_size`` the target's TP. The rules are the field report's
    table with its errors fixed (docs/field-report-notes.md): Ada has native
    FP8; the L4's problem is absolute bandwidth and PCIe, not a lack of
    compute; verification pays the same all-reduces as one decode step, while
    each draft step at the target's TP pays them again.
    """
    speculative = speculative or {}
    tp = int(tensor_parallel_size)
    notes: list[Note] = []
    final = Note(
        "info",
        "benchmark",
        "advisory only: the A/B benchmark (speculative vs. off, same release, same workload) "
        "is the final word",
    )
    count = int(facts.get("gpu_count") or 0)
    if count == 0:
        notes.append(
            Note(
                "info",
                "gpus",
                f"no GPU facts ({facts.get('reason') or 'no GPU'}): hardware advice skipped",
            )
        )
        return [*notes, final]

    gpu_list = list(facts.get("gpus") or [])
    names = list(facts.get("names") or sorted({g.get("name", "?") for g in gpu_list}))
    label = names[0] if len(names) == 1 else " + ".join(names)
    kind = _draft_kind(speculative)
    draft_tp = speculative.get("draft_tensor_parallel_size")
    k = speculative.get("num_speculative_tokens")

    if tp > count:
        notes.append(
            Note(
                "warning",
                "gpus",
                f"tensor_parallel_size {tp} exceeds the {count} GPU(s) nvidia-smi lists: "
                "vLLM will not start",
            )
        )
    if not facts.get("homogeneous", True):
        notes.append(
            Note(
                "caution",
                "gpus",
                f"the GPUs differ ({label}): tensor parallelism runs at the pace of the slowest",
            )
        )

    # FP8: from compute capability 8.9 on (the report's Ada row said no: wrong).
    min_cc = facts.get("min_compute_capability")
    arch = architecture(min_cc) if min_cc else None
    if min_cc and native_fp8(min_cc):
        notes.append(
            Note(
                "info",
                "fp8",
                f"FP8 available natively (CC {min_cc}, {arch}): FP8 checkpoints run W8A8 "
                "FP8 kernels"
                + ("; an FP8 draft costs about its weight bytes" if kind == "model" else ""),
            )
        )
    elif min_cc and parse_compute_capability(min_cc) and parse_compute_capability(min_cc) >= (8, 0):  # type: ignore[operator]
        notes.append(
            Note(
                "caution" if kind == "model" else "info",
                "fp8",
                f"no native FP8 (CC {min_cc}, {arch}): FP8 checkpoints run weight-only "
                "(Marlin), dequantising on every step"
                + (
                    "; an FP8 draft costs more than its weight bytes suggest"
                    if kind == "model"
                    else ""
                ),
            )
        )
    elif min_cc:
        notes.append(
            Note(
                "caution",
                "fp8",
                f"no FP8 tensor cores (CC {min_cc}{', ' + arch if arch else ''}): "
                "prefer BF16/FP16 or integer-quantised checkpoints",
            )
        )

    interconnect = facts.get("interconnect")
    if tp > 1:
        if interconnect in ("pcie", "mixed"):
            over = "PCIe" if interconnect == "pcie" else "partly PCIe (mixed NVLink/PCIe)"
            text = (
                f"TP {tp} over {over}: every forward pass pays two all-reduces per layer "
                "across the GPUs"
            )
            if kind is not None:
                text += (
                    "; verifying k+1 tokens pays the same all-reduces as one decode step, but "
                    "they are latency-bound on PCIe, so speculative gains shrink"
                )
            notes.append(Note("caution" if kind else "info", "interconnect", text))
            if kind == "model" and draft_tp in (None, tp) and tp != 1:
                notes.append(
                    Note(
                        "caution",
                        "draft_tp",
                        f"the draft runs at TP {tp} (vLLM's default: the target's TP), so each "
                        f"of the {k if k else 'k'} draft steps pays the all-reduces too; A/B "
                        "draft_tensor_parallel_size: 1",
                    )
                )
            if kind is not None and tp >= 4 and interconnect == "pcie":
                notes.append(
                    Note(
                        "warning",
                        "interconnect",
                        f"TP {tp} over PCIe is the field report's case (4x L4): speculative "
                        "decoding ran at 0.63x of plain decoding there; expect it to lose "
                        "unless the A/B says otherwise",
                    )
                )
        elif interconnect == "nvlink":
            notes.append(
                Note(
                    "info",
                    "interconnect",
                    f"TP {tp} over NVLink: all-reduces are cheap; a verify pass stays close "
                    "to one decode step",
                )
            )
        else:
            notes.append(
                Note(
                    "caution",
                    "interconnect",
                    f"TP {tp} over an unknown interconnect ({interconnect}): check "
                    "nvidia-smi topo -m; over PCIe every pass pays the all-reduces",
                )
            )
    elif kind is not None:
        notes.append(
            Note(
                "info",
                "interconnect",
                "TP 1: no all-reduce; verification is close to one decode step (flat up to "
                "16 tokens on an H200, lab/calibration)",
            )
        )

    bandwidth = facts.get("memory_bandwidth_gbs")
    if bandwidth is not None and kind in ("model", "head"):
        if bandwidth < LOW_BANDWIDTH_GBS:
            notes.append(
                Note(
                    "caution",
                    "bandwidth",
                    f"memory-bound small GPU ({label}, {bandwidth:.0f} GB/s): the draft's weight "
                    "reads add to the target's on the same memory, so its cost ratio c is at "
                    "least its weight-byte ratio and every draft step is slow in wall time "
                    f"({4800 / bandwidth:.0f}x an H200's per byte); the GPU's arithmetic is "
                    "not the limit",
                )
            )
        else:
            notes.append(
                Note(
                    "info",
                    "bandwidth",
                    f"{bandwidth:.0f} GB/s per GPU: draft cost ratio c is about the draft's "
                    "weight bytes over the target's",
                )
            )
    memory = facts.get("memory_total_mib")
    if memory is not None and memory < SMALL_VRAM_MIB and kind == "model":
        notes.append(
            Note(
                "caution",
                "vram",
                f"{memory / 1024:.0f} GiB per GPU: the draft's weights and KV cache take room "
                "from the target's KV cache (fewer sequences in flight)",
            )
        )
    if kind == "lookup":
        notes.append(
            Note(
                "info",
                "draft",
                f"{speculative.get('method')} drafting runs no draft model: no draft weights "
                "compete for memory bandwidth; only acceptance decides",
            )
        )
    if kind is None:
        notes.append(
            Note("info", "draft", "speculative decoding is off: nothing to weigh against it")
        )
    return [*notes, final]


def advice_dicts(notes: Sequence[Note]) -> list[dict[str, str]]:
    return [asdict(note) for note in notes]


# --------------------------------------------------------------------------
# python -m benchgate.hwfacts
# --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchgate.hwfacts",
        description="Print this host's GPU facts (or read saved ones) and the advisory notes.",
    )
    parser.add_argument("--facts", help="read facts from this JSON file instead of gathering")
    parser.add_argument("--calibration", help="benchgate.calibrate JSON with a measured bandwidth")
    parser.add_argument("--nvidia-smi", help="nvidia-smi executable (default: from PATH)")
    parser.add_argument(
        "--speculative", default="{}", help="vllm_service_speculative as JSON (default: {} = off)"
    )
    parser.add_argument("--tensor-parallel-size", "--tp", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        speculative = json.loads(args.speculative)
        if not isinstance(speculative, dict):
            raise ValueError("--speculative must be a JSON object")
        if args.facts:
            with open(args.facts, encoding="utf-8") as handle:
                facts = json.load(handle)
            facts = facts.get("vllm_hardware", facts)
        else:
            facts = gather(args.nvidia_smi, args.calibration)
    except (OSError, ValueError) as exc:
        print(f"benchgate.hwfacts: {exc}", file=sys.stderr)
        return 1
    notes = hardware_advice(facts, speculative, args.tensor_parallel_size)
    json.dump({"vllm_hardware": facts, "advice": advice_dicts(notes)}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
