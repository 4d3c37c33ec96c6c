"""What a benchmark result reports about the host and the service besides latency.

Three figures, each either available or not with a reason (never a guess):

* **roofline**: the single-stream decode upper bound, tokens/s =
  memory bandwidth / (weight bytes / tensor-parallel size), from the served
  model's safetensors headers (sizes only, no tensor is loaded), and the
  measured single-stream efficiency (1000 / median TPOT in ms against it).
* **service memory**: RSS (and PSS where readable) of the service's process
  tree, its cgroup's ``memory.current`` / ``memory.peak``, and GPU memory from
  ``nvidia-smi``, sampled before and after the trials.
* **cold start**: seconds from the unit's last start to ``/health`` 200 and to
  the first completion, as recorded by the vllm_service role's readiness wait
  (``wait_ready.py``) in ``/run/benchgate/<unit>.ready.json``.

Runs on the target host (the vllm_benchmark module imports it): Python 3.9,
stdlib only.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from . import confounds, nvidia_smi
from .serverconfig import read_server_config

# --------------------------------------------------------------------- safetensors

# A header larger than this is not a safetensors header (the format caps it at 100 MB).
_MAX_HEADER = 100 * 1024 * 1024
INDEX_FILE = "model.safetensors.index.json"


class WeightsError(ValueError):
    """The model folder holds no readable safetensors weights."""


def safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """(JSON header, header length) of one safetensors file.

    The file starts with the header's length (8 bytes, little-endian), then
    the header; the tensors' data follow.
    """
    path = Path(path)
    with path.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise WeightsError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length <= 0 or length > _MAX_HEADER:
            raise WeightsError(f"{path}: header length {length} is not plausible")
        text = handle.read(length)
    if len(text) != length:
        raise WeightsError(f"{path}: header cut short ({len(text)} of {length} bytes)")
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WeightsError(f"{path}: header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise WeightsError(f"{path}: header is not a JSON object")
    return header, length


def safetensors_tensor_bytes(path: str | Path) -> int:
    """Sum of the tensor sizes (``data_offsets`` end - begin) of one safetensors file.

    Checks the offsets against the file size, so a truncated file fails
    instead of reporting weights that are not there.
    """
    path = Path(path)
    header, length = safetensors_header(path)
    data_size = path.stat().st_size - 8 - length
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(v) for v in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise WeightsError(f"{path}: tensor {name!r} has no valid data_offsets") from exc
        if not 0 <= begin <= end <= data_size:
            raise WeightsError(
                f"{path}: tensor {name!r} offsets [{begin}, {end}] outside the data "
                f"({data_size} bytes)"
            )
        total += end - begin
    return total


def weight_files(model_dir: str | Path) -> list[Path]:
    """The safetensors files that make up the model in ``model_dir``.

    With a ``model.safetensors.index.json`` the files its ``weight_map`` names
    (a folder may also hold a consolidated copy that vLLM does not load);
    otherwise every ``*.safetensors`` at the top of the folder.
    """
    folder = Path(model_dir)
    if not folder.is_dir():
        raise WeightsError(f"{model_dir} is not a folder on this host")
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WeightsError(f"{index}: unreadable weight_map: {exc}") from exc
        files = [folder / name for name in names]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise WeightsError(f"{index} names missing files: {', '.join(missing[:3])}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"no *.safetensors in {model_dir}")
    return files


def model_weight_bytes(model_dir: str | Path) -> tuple[int, int]:
    """(total tensor bytes, number of files) of the model in ``model_dir``."""
    files = weight_files(model_dir)
    try:
        return sum(safetensors_tensor_bytes(f) for f in files), len(files)
    except OSError as exc:
        raise WeightsError(f"cannot read the weights: {exc}") from exc


# --------------------------------------------------------------------- GPUs

# Peak memory bandwidth in GB/s (1e9 bytes/s), from the vendors' datasheets.
# Matched against nvidia-smi's name; first match wins, so specific names first.
GPU_BANDWIDTH_GBS: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("H200", ("h200",), 4800.0),
    ("H100 PCIe", ("h100", "pcie"), 2000.0),
    ("H100 SXM", ("h100", "hbm3"), 3350.0),
    ("A100 80GB PCIe", ("a100", "80gb", "pcie"), 1935.0),
    ("A100 80GB SXM", ("a100", "80gb"), 2039.0),
    ("A100 40GB", ("a100", "40gb"), 1555.0),
    ("L40S", ("l40s",), 864.0),
    ("L40", ("l40",), 864.0),
    ("L4", ("l4",), 300.0),
    ("A10G", ("a10g",), 600.0),
    ("RTX 4090", ("rtx 4090",), 1008.0),
)


def _words(name: str) -> list[str]:
    return name.lower().replace("-", " ").replace("_", " ").split()


def known_bandwidth(gpu_name: str) -> tuple[str, float] | None:
    """(table entry, GB/s) for an nvidia-smi GPU name, or None when not in the table."""
    lowered = gpu_name.lower().replace("-", " ")
    words = set(_words(gpu_name))
    for label, needles, gbs in GPU_BANDWIDTH_GBS:
        # One-word needles match whole words ("l4" must not match "l40s");
        # several-word ones match as substrings of the name.
        if all((n in words) if " " not in n else (n in lowered) for n in needles):
            return label, gbs
    return None


# GPU memory and the GPU names for the bandwidth table.
NVIDIA_SMI_FIELDS = ("index", "name", "memory.used", "memory.total")
NVIDIA_SMI_QUERY = nvidia_smi.query_args(NVIDIA_SMI_FIELDS)


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=index,name,memory.used,memory.total
    --format=csv,noheader,nounits`` (memory in MiB)."""
    gpus = []
    for row in nvidia_smi.parse_query_gpu(text, NVIDIA_SMI_FIELDS):
        used = nvidia_smi.number(row.cells["memory.used"])
        total = nvidia_smi.number(row.cells["memory.total"])
        if used is None or total is None:
            raise ValueError(
                f"unexpected nvidia-smi memory figures of GPU {row.index}: "
                f"{row.cells['memory.used']!r} MiB used of {row.cells['memory.total']!r}"
            )
        gpus.append(
            {
                "index": row.index,
                "name": row.cells["name"],
                "memory_used_mib": used,
                "memory_total_mib": total,
            }
        )
    return gpus


def query_gpus(
    run: Callable[[Sequence[str]], str] | None = None,
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(GPU rows, None) or (None, reason) when nvidia-smi is missing or fails."""
    if run is None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return None, "nvidia-smi not found (no NVIDIA GPU or driver on this host)"

        def run(argv: Sequence[str]) -> str:
            proc = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=20, check=False
            )
            if proc.returncode != 0:
                raise OSError(f"exit {proc.returncode}: {proc.stderr.strip()[:200]}")
            return proc.stdout

        argv = [exe, *NVIDIA_SMI_QUERY]
    else:
        argv = ["nvidia-smi", *NVIDIA_SMI_QUERY]
    try:
        gpus = parse_nvidia_smi(run(argv))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if not gpus:
        return None, "nvidia-smi lists no GPU"
    return gpus, None


# --------------------------------------------------------------------- roofline


def decode_bound_tokens_per_s(weight_bytes: int, tp: int, bandwidth_gbs: float) -> float:
    """Single-stream decode upper bound: every step reads each rank's weight share once."""
    if weight_bytes <= 0 or tp < 1 or bandwidth_gbs <= 0:
        raise ValueError("weight_bytes, tp and bandwidth must be positive")
    return bandwidth_gbs * 1e9 / (weight_bytes / tp)


def roofline(
    model_dir: str | None,
    tp: int,
    bandwidth_gbs: float | None,
    gpus: list[dict[str, Any]] | None,
    gpu_reason: str | None,
    tpot_ms_median: float | None,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The roofline block of a result; ``available`` false with a ``reason`` when it cannot be.

    ``bandwidth_gbs`` (measured, e.g. a calibration's ``read_gbs``) wins over
    the table; without it the GPUs nvidia-smi lists must all have one table
    entry.
    """
    out: dict[str, Any] = {
        "available": False,
        "reason": None,
        "model_dir": model_dir,
        "weight_bytes": None,
        "weight_files": None,
        "tensor_parallel_size": tp,
        "gpu_name": None,
        "bandwidth_gbs": None,
        "bandwidth_source": None,
        "decode_bound_tokens_per_s": None,
        "tpot_ms_median": tpot_ms_median,
        "measured_tokens_per_s": None,
        "efficiency_pct": None,
        "concurrency": concurrency,
    }
    if not model_dir:
        out["reason"] = "no model folder given (model_dir)"
        return out
    if tp < 1:
        out["reason"] = f"tensor-parallel size must be >= 1, got {tp}"
        return out
    try:
        out["weight_bytes"], out["weight_files"] = model_weight_bytes(model_dir)
    except WeightsError as exc:
        out["reason"] = f"weights unknown: {exc}"
        return out
    if gpus:
        names = sorted({g["name"] for g in gpus})
        out["gpu_name"] = names[0] if len(names) == 1 else ", ".join(names)
    if bandwidth_gbs is not None and bandwidth_gbs > 0:
        out["bandwidth_gbs"] = float(bandwidth_gbs)
        out["bandwidth_source"] = "given"
    elif gpus:
        names = sorted({g["name"] for g in gpus})
        if len(names) > 1:
            out["reason"] = f"GPUs of different kinds ({', '.join(names)}); pass bandwidth_gbs"
            return out
        known = known_bandwidth(names[0])
        if known is None:
            out["reason"] = f"GPU {names[0]!r} is not in the bandwidth table; pass bandwidth_gbs"
            return out
        out["bandwidth_source"] = f"datasheet: {known[0]}"
        out["bandwidth_gbs"] = known[1]
    else:
        why = gpu_reason or "no GPU found"
        out["reason"] = f"no memory bandwidth: {why}, and no bandwidth_gbs given"
        return out
    bound = decode_bound_tokens_per_s(out["weight_bytes"], tp, out["bandwidth_gbs"])
    out["decode_bound_tokens_per_s"] = bound
    out["available"] = True
    if tpot_ms_median is not None and tpot_ms_median > 0:
        measured = 1000.0 / tpot_ms_median
        out["measured_tokens_per_s"] = measured
        out["efficiency_pct"] = 100.0 * measured / bound
        if concurrency is not None and concurrency > 1:
            out["reason"] = (
                f"TPOT measured at concurrency {concurrency}: batching slows each stream, so "
                "the efficiency is single-stream only at concurrency 1"
            )
    else:
        out["reason"] = "no TPOT measured (no valid trial with > 1 output token): bound only"
    return out


def bandwidth_from_calibration(path: str | Path) -> float:
    """``bandwidth_gbs.read_gbs`` (or a plain number) of a ``benchgate.calibration/1`` file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    value = data.get("bandwidth_gbs") if isinstance(data, dict) else None
    if isinstance(value, dict):
        value = value.get("read_gbs")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{path}: no positive bandwidth_gbs.read_gbs")
    return float(value)


# --------------------------------------------------------------------- systemd


def parse_systemctl_show(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


UNIT_PROPERTIES = (
    "MainPID",
    "ControlGroup",
    "InvocationID",
    "ActiveState",
    "ExecMainStartTimestampMonotonic",
    "ActiveEnterTimestampMonotonic",
)


def systemctl_show(unit: str, properties: Iterable[str] = UNIT_PROPERTIES) -> dict[str, str]:
    """``systemctl show -p ... unit`` as a dict; empty when systemctl is missing or fails."""
    exe = shutil.which("systemctl")
    if exe is None:
        return {}
    argv = [exe, "show", unit]
    for prop in properties:
        argv += ["-p", prop]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_systemctl_show(proc.stdout) if proc.returncode == 0 else {}


# --------------------------------------------------------------------- processes


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def parent_pids(proc_root: str | Path = "/proc") -> dict[int, int]:
    """pid -> parent pid for every process readable under ``proc_root``."""
    parents: dict[int, int] = {}
    root = Path(proc_root)
    try:
        entries = list(root.iterdir())
    except OSError:
        return parents
    for entry in entries:
        if not entry.name.isdigit():
            continue
        stat = _read(entry / "stat")
        if not stat or ")" not in stat:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = stat.rpartition(")")[2].split()
        if len(fields) >= 2 and fields[1].lstrip("-").isdigit():
            parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(root_pid: int, proc_root: str | Path = "/proc") -> list[int]:
    """``root_pid`` and all its descendants that still run, root first."""
    parents = parent_pids(proc_root)
    if root_pid not in parents:
        return []
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop(0)
        if pid in tree:
            continue
        tree.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return tree


def _kib_field(text: str | None, key: str) -> int | None:
    """``key:  123 kB`` from /proc status or smaps_rollup text, in bytes."""
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def tree_memory(root_pid: int, proc_root: str | Path = "/proc") -> dict[str, Any]:
    """RSS (and PSS where readable) summed over the process tree of ``root_pid``.

    RSS double-counts pages the processes share; PSS splits them, but reading
    another user's ``smaps_rollup`` needs root, so it is null when any process
    could not be read.
    """
    root = Path(proc_root)
    pids = process_tree(root_pid, root)
    rss = 0
    pss: int | None = 0
    counted = 0
    for pid in pids:
        value = _kib_field(_read(root / str(pid) / "status"), "VmRSS")
        if value is None:
            continue  # exited meanwhile, or a kernel thread
        counted += 1
        rss += value
        pss_value = _kib_field(_read(root / str(pid) / "smaps_rollup"), "Pss")
        pss = None if pss is None or pss_value is None else pss + pss_value
    return {
        "pid": root_pid,
        "pids": counted,
        "rss_bytes": rss if counted else None,
        "pss_bytes": pss if counted else None,
    }


def cgroup_memory(
    control_group: str | None, cgroup_root: str | Path = "/sys/fs/cgroup"
) -> dict[str, Any]:
    """``memory.current`` and ``memory.peak`` (cgroup v2; v1's usage files as fallback)."""
    out: dict[str, Any] = {
        "cgroup": control_group or None,
        "memory_current_bytes": None,
        "memory_peak_bytes": None,
    }
    if not control_group:
        return out
    root = Path(cgroup_root)
    rel = control_group.lstrip("/")
    for base, current, peak in (
        (root / rel, "memory.current", "memory.peak"),
        (root / "memory" / rel, "memory.usage_in_bytes", "memory.max_usage_in_bytes"),
    ):
        value = _read(base / current)
        if value is not None and value.strip().isdigit():
            out["memory_current_bytes"] = int(value.strip())
            peak_value = _read(base / peak)
            if peak_value is not None and peak_value.strip().isdigit():
                out["memory_peak_bytes"] = int(peak_value.strip())
            break
    return out


def locate_service(
    unit: str | None, pid: int | None, show: Callable[[str], Mapping[str, str]] | None = None
) -> tuple[int | None, str | None, dict[str, str], str | None]:
    """(main pid, control group, unit properties, reason when no pid)."""
    props: dict[str, str] = {}
    control_group = None
    if unit:
        props = dict((show or systemctl_show)(unit))
        control_group = props.get("ControlGroup") or None
        if pid is None:
            main = props.get("MainPID", "")
            if not props:
                return None, None, props, f"systemctl show {unit} failed (no systemd here?)"
            if not main.isdigit() or int(main) == 0:
                state = props.get("ActiveState", "?")
                return None, control_group, props, f"{unit} has no main process (state {state})"
            pid = int(main)
    if pid is None:
        return None, None, props, "no service unit or pid given"
    return pid, control_group, props, None


def memory_sample(
    pid: int | None,
    control_group: str | None,
    gpus: list[dict[str, Any]] | None,
    at: str,
    proc_root: str | Path = "/proc",
    cgroup_root: str | Path = "/sys/fs/cgroup",
) -> dict[str, Any]:
    sample: dict[str, Any] = {"at": at}
    if pid is not None:
        sample.update(tree_memory(pid, proc_root))
    else:
        sample.update(pid=None, pids=0, rss_bytes=None, pss_bytes=None)
    cg = cgroup_memory(control_group, cgroup_root)
    sample["cgroup_memory_current_bytes"] = cg["memory_current_bytes"]
    sample["cgroup_memory_peak_bytes"] = cg["memory_peak_bytes"]
    sample["gpus"] = gpus
    return sample


# --------------------------------------------------------------------- cold start

COLD_START_DIR = "/run/benchgate"


def default_cold_start_file(unit: str) -> str:
    return f"{COLD_START_DIR}/{unit}.ready.json"


def cold_start(path: str | None, unit_props: Mapping[str, str] | None) -> dict[str, Any]:
    """The cold-start record wait_ready.py wrote, checked against the unit's current start."""
    out: dict[str, Any] = {
        "available": False,
        "reason": None,
        "source": path,
        "healthy_s": None,
        "first_completion_s": None,
        "upper_bound": None,
        "poll_interval_s": None,
        "start_property": None,
        "recorded_at": None,
        "matches_current_start": None,
    }
    if not path:
        out["reason"] = "no service unit or cold_start_file given"
        return out
    text = _read(Path(path))
    if text is None:
        out["reason"] = f"no record at {path} (the service was not started through wait_ready.py)"
        return out
    try:
        record = json.loads(text)
        healthy = float(record["healthy_s"])
    except (ValueError, KeyError, TypeError) as exc:
        out["reason"] = f"{path}: unreadable record: {exc}"
        return out
    completion = record.get("first_completion_s")
    out.update(
        healthy_s=healthy,
        first_completion_s=float(completion) if completion is not None else None,
        upper_bound=bool(record.get("upper_bound", False)),
        poll_interval_s=record.get("poll_interval_s"),
        start_property=record.get("start_property"),
        recorded_at=record.get("recorded_at"),
    )
    invocation = record.get("invocation_id")
    current = (unit_props or {}).get("InvocationID")
    if invocation and current:
        out["matches_current_start"] = invocation == current
        if invocation != current:
            out["reason"] = (
                f"{path} is from an earlier start of the unit (invocation {invocation}, "
                f"now {current})"
            )
            return out
    out["available"] = True
    return out


# --------------------------------------------------------------------- one probe


class ServiceProbe:
    """Collects memory before and after the trials; builds the result's host blocks."""

    def __init__(
        self,
        unit: str | None = None,
        pid: int | None = None,
        model_dir: str | None = None,
        tensor_parallel_size: int = 1,
        bandwidth_gbs: float | None = None,
        cold_start_file: str | None = None,
        gpu_query: Callable[[], tuple[Any, Any]] | None = None,
        proc_root: str = "/proc",
        cgroup_root: str = "/sys/fs/cgroup",
        show: Callable[[str], Mapping[str, str]] | None = None,
        gpu_facts_run: confounds.Runner | None = None,
        journal: confounds.JournalReader | None = None,
        log_file: str | None = None,
    ) -> None:
        self.unit = unit or None
        self.log_file = log_file or None
        self.pid = pid
        self.model_dir = model_dir or None
        self.tp = tensor_parallel_size
        self.bandwidth_gbs = bandwidth_gbs if bandwidth_gbs else None
        if cold_start_file:
            self.cold_start_file: str | None = cold_start_file
        else:
            self.cold_start_file = default_cold_start_file(self.unit) if self.unit else None
        self._gpu_query = gpu_query or query_gpus
        self._proc_root = proc_root
        self._cgroup_root = cgroup_root
        self._show = show
        # What reads the host's GPUs and the engine's journal (tests pass stand-ins).
        self._gpu_facts_run = gpu_facts_run
        self._journal = journal
        self.samples: dict[str, dict[str, Any]] = {}
        self.gpus: list[dict[str, Any]] | None = None
        self.gpu_reason: str | None = None
        self.props: dict[str, str] = {}
        self.main_pid: int | None = None
        self.control_group: str | None = None
        self.service_reason: str | None = None

    def sample(self, label: str, at: str) -> None:
        """Sample service memory and GPU memory now (``label``: before / after)."""
        self.main_pid, self.control_group, props, self.service_reason = locate_service(
            self.unit, self.pid, self._show
        )
        if props:
            self.props = props
        self.gpus, self.gpu_reason = self._gpu_query()
        self.samples[label] = memory_sample(
            self.main_pid, self.control_group, self.gpus, at, self._proc_root, self._cgroup_root
        )

    def server_config(self) -> dict[str, Any] | None:
        """The server's configuration (:func:`benchgate.serverconfig.read_server_config`)
        from its main process, with what it ran under (:func:`benchgate.confounds.context`:
        ``host``, ``engine`` and their reasons); None when no process was found or it
        cannot be read."""
        if self.main_pid is None:
            return None
        config = read_server_config(self.main_pid, self._proc_root)
        if config is None:
            return None
        config.update(
            confounds.context(
                self.unit,
                self.props if self.unit else None,
                config.get("cpus"),
                self._proc_root,
                self._gpu_facts_run,
                self._journal,
                self.log_file,
            )
        )
        return config

    def memory_report(self) -> dict[str, Any]:
        have = any(
            s.get("rss_bytes") is not None or s.get("cgroup_memory_current_bytes") is not None
            for s in self.samples.values()
        )
        reason = None
        if not self.samples:
            reason = "not sampled"
        elif not have:
            reason = self.service_reason or "the service's processes could not be read"
        return {
            "available": have,
            "reason": reason,
            "unit": self.unit,
            "pid": self.main_pid,
            "cgroup": self.control_group,
            "gpu_reason": self.gpu_reason if self.gpus is None else None,
            "before": self.samples.get("before"),
            "after": self.samples.get("after"),
        }

    def report(self, tpot_ms_median: float | None, concurrency: int | None) -> dict[str, Any]:
        """``roofline``, ``service_memory`` and ``cold_start`` for the result."""
        if self.gpus is None and self.gpu_reason is None:
            self.gpus, self.gpu_reason = self._gpu_query()
        return {
            "roofline": roofline(
                self.model_dir,
                self.tp,
                self.bandwidth_gbs,
                self.gpus,
                self.gpu_reason,
                tpot_ms_median,
                concurrency,
            ),
            "service_memory": self.memory_report(),
            "cold_start": cold_start(self.cold_start_file, self.props if self.unit else None),
        }


__all__ = [
    "GPU_BANDWIDTH_GBS",
    "ServiceProbe",
    "WeightsError",
    "bandwidth_from_calibration",
    "cgroup_memory",
    "cold_start",
    "decode_bound_tokens_per_s",
    "default_cold_start_file",
    "known_bandwidth",
    "model_weight_bytes",
    "parse_nvidia_smi",
    "parse_systemctl_show",
    "process_tree",
    "query_gpus",
    "roofline",
    "safetensors_tensor_bytes",
    "tree_memory",
]
