"""What a measurement ran under besides the server's flags: the host and the engine.

Two runs with the same ``vllm serve`` arguments can still differ in what decides
their figures: another GPU or driver, clocks held low, or a vLLM that turned
asynchronous scheduling off for a draft model and fell back to its older model
runner. The result's ``server_config`` (:mod:`benchgate.serverconfig`) carries
both, read after the trials:

* ``host`` (:func:`host_facts`): the CPU model (``/proc/cpuinfo``), the logical
  CPUs online and how many the server may run on, and per GPU (``nvidia-smi``)
  its name, driver, current and maximum SM clock and memory; ``gpus`` is ``[]``
  where there is no nvidia-smi (a CPU host).
* ``engine`` (:func:`engine_facts`): what vLLM states about itself at start-up,
  read from the unit's journal since its last start (:func:`read_engine_log`):
  its version, asynchronous scheduling on or off (and why off), the model
  runner (V1 or V2, and why V1), the CUDA graph and compilation modes, eager
  mode, the tensor-parallel size. Only what a line states is recorded; a fact
  no line states stays None.

Reading them never fails a measurement: a block that cannot be read is None and
``host_reason`` / ``engine_reason`` say why (:func:`context`).

Runs on the target host (the vllm_benchmark module imports it): Python 3.9,
stdlib only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from . import nvidia_smi

__all__ = [
    "ENGINE_LOG_MAX_BYTES",
    "ENGINE_LOG_MAX_LINES",
    "GPU_FIELDS",
    "context",
    "cpu_model",
    "engine_facts",
    "gpu_facts",
    "host_facts",
    "read_engine_log",
    "read_log_file",
    "unit_start_epoch",
]

#: At most this much of the unit's journal is read, from its last start on: the
#: start-up lines come first, and a server that has run for days logs a lot.
ENGINE_LOG_MAX_BYTES = 2 * 1024 * 1024
ENGINE_LOG_MAX_LINES = 4000
#: The unit properties that date its last start, on the monotonic clock (µs);
#: the first one set wins (as in the vllm_service role's wait_ready.py).
START_PROPERTIES = ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
#: What nvidia-smi is asked per GPU, in this order.
GPU_FIELDS = ("index", "name", "driver_version", "clocks.sm", "clocks.max.sm", "memory.total")
_TIMEOUT_S = 20.0
# How many of the matched lines the engine block keeps, and how long each may be.
_MAX_EVIDENCE = 16
_MAX_LINE = 300

Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]
JournalReader = Callable[[str, int], "tuple[str | None, str | None]"]


# --------------------------------------------------------------------- engine


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_JOURNAL_MARK = re.compile(r"^-- .* --$")
_VERSION = (
    re.compile(r"vLLM API server version (\S+)"),
    re.compile(r"Initializing a V\d LLM engine \(v([^)\s]+)\)"),
)
_ASYNC_STATE = re.compile(r"Asynchronous scheduling is (enabled|disabled)\b")
# "Async scheduling not supported with draft_model-based speculative decoding and
# will be disabled.", "Async scheduling will be disabled because it is not supported
# with the `ray` distributed executor backend ...": the reason it is off.
_ASYNC_OFF = re.compile(r"(Async scheduling\b.*\bwill be disabled\b.*?)\.?\s*$")
_RUNNER_V2 = re.compile(r"\bUsing V2 Model Runner\b")
# "Model Runner V2 does not yet support speculative method 'draft_model'; using the
# V1 model runner instead.", "Model Runner V2 requires Triton; using ...".
_RUNNER_V1 = re.compile(r"(Model Runner V2 [^;]*); using the V1 model runner instead")
_RUNNER_V1_DEFAULT = re.compile(r"(Defaulting to V1 model runner\b.*?)\.?\s*$")
# The resolved configuration vLLM prints ("'cudagraph_mode': <CUDAGraphMode.PIECEWISE:
# 1>"), its overrides ("Overriding cudagraph_mode from FULL_AND_PIECEWISE to
# PIECEWISE", "Overriding cudagraph_mode to PIECEWISE.") and the attention backend's
# ("...; setting cudagraph_mode=PIECEWISE").
_CUDAGRAPH = (
    re.compile(r"cudagraph_mode'?\s*[:=]\s*<?CUDAGraphMode\.([A-Z_]+)"),
    re.compile(r"Overriding cudagraph_mode (?:from [A-Z_]+ )?to ([A-Z_]+)"),
    re.compile(r"setting cudagraph_mode=([A-Z_]+)"),
)
_COMPILATION = re.compile(r"\bmode'?\s*[:=]\s*<?CompilationMode\.([A-Z_]+)")
# Eager mode, said three ways (vLLM's config, its older config, the CPU platform).
_EAGER_SET = re.compile(r"Enforce eager set, disabling torch\.compile and CUDAGraphs")
_EAGER_GRAPHS = re.compile(
    r"Cudagraph is disabled under eager mode|CUDA graph is not supported on CPU, fallback "
    r"to the eager mode"
)
_EAGER_FIELD = re.compile(r"\benforce_eager=(True|False)\b")
_TP = re.compile(r"\btensor_parallel_size=(\d+)\b")
_CONFIG_DUMP = "with config:"
# The API server's echo of its arguments ("non-default args: {...}", older releases'
# "args: Namespace(...)"): what was asked, which the argv already has, not what vLLM
# made of it; and it holds the API key when one was given. Skipped.
_ARGS_ECHO = re.compile(r"non-default args:|\bargs: Namespace\(")
# A value whose name says key, token, secret or password, in a kept line.
_SECRET_VALUE = re.compile(
    r"""(\w*(?:key|token|secret|password)['"]?\s*[:=]\s*)(\[[^\]]*\]|'[^']*'|"[^"]*"|[^,\s})]+)""",
    re.IGNORECASE,
)


def _empty_engine() -> dict[str, Any]:
    return {
        "vllm_version": None,
        "async_scheduling": None,
        "async_scheduling_note": None,
        "model_runner": None,
        "model_runner_note": None,
        "cudagraph_mode": None,
        "compilation_mode": None,
        "enforce_eager": None,
        "tensor_parallel_size": None,
        "lines": [],
    }


def _evidence(line: str, matches: Sequence[str]) -> str:
    """The line as kept: whole when short; else its start (up to vLLM's ``with
    config:``, which may be followed by anything) and the parts that matched; the
    value of anything named like a key, token, secret or password replaced."""
    if len(line) > _MAX_LINE:
        cut = line.index(_CONFIG_DUMP) + len(_CONFIG_DUMP) if _CONFIG_DUMP in line else 0
        head = line[: min(cut, _MAX_LINE // 2)] if cut else line[: _MAX_LINE // 2]
        rest = [m for m in matches if m not in head]
        line = (head + " … " + " … ".join(rest))[: 2 * _MAX_LINE]
    return _SECRET_VALUE.sub(r"\1***", line)


def engine_facts(log_text: str) -> dict[str, Any]:
    """The facts vLLM states about itself in its log ``log_text`` (oldest line first).

    Each fact is what the last line that states it says (vLLM resolves its
    configuration in steps: the attention backend may lower the CUDA graph mode
    after the configuration was printed); a fact no line states is None. The API
    server's echo of its arguments is not read (what was asked, not what vLLM made
    of it). ``lines`` keeps the lines that stated something (long ones cut to their
    start and the matched parts; secret-looking values replaced), the last 16.

    >>> facts = engine_facts(
    ...     "INFO [vllm.py:840] Asynchronous scheduling is enabled.\\n"
    ...     "INFO [gpu_worker.py:385] Using V2 Model Runner\\n")
    >>> facts["async_scheduling"], facts["model_runner"], facts["vllm_version"]
    (True, 'V2', None)
    """
    out = _empty_engine()
    evidence: list[str] = []
    for raw in log_text.splitlines():
        line = _ANSI.sub("", raw).strip()
        if not line or _JOURNAL_MARK.match(line) or _ARGS_ECHO.search(line):
            continue
        matched: list[str] = []
        for pattern in _VERSION:
            m = pattern.search(line)
            if m:
                out["vllm_version"] = m.group(1)
                matched.append(m.group(0))
        m = _ASYNC_OFF.search(line)
        if m:
            out["async_scheduling"] = False
            out["async_scheduling_note"] = m.group(1)
            matched.append(m.group(0))
        m = _ASYNC_STATE.search(line)
        if m:
            out["async_scheduling"] = m.group(1) == "enabled"
            if out["async_scheduling"]:
                out["async_scheduling_note"] = None
            matched.append(m.group(0))
        if _RUNNER_V2.search(line):
            out["model_runner"], out["model_runner_note"] = "V2", None
            matched.append("Using V2 Model Runner")
        for pattern in (_RUNNER_V1, _RUNNER_V1_DEFAULT):
            m = pattern.search(line)
            if m:
                out["model_runner"], out["model_runner_note"] = "V1", m.group(1)
                matched.append(m.group(0))
        for pattern in _CUDAGRAPH:
            for m in pattern.finditer(line):
                out["cudagraph_mode"] = m.group(1)
                matched.append(m.group(0))
        m = _COMPILATION.search(line)
        if m:
            out["compilation_mode"] = m.group(1)
            matched.append(m.group(0))
        if _EAGER_SET.search(line):
            out.update(enforce_eager=True, cudagraph_mode="NONE", compilation_mode="NONE")
            matched.append("Enforce eager set")
        m = _EAGER_GRAPHS.search(line)
        if m:
            out.update(enforce_eager=True, cudagraph_mode="NONE")
            matched.append(m.group(0))
        m = _EAGER_FIELD.search(line)
        if m:
            out["enforce_eager"] = m.group(1) == "True"
            matched.append(m.group(0))
        m = _TP.search(line)
        if m:
            out["tensor_parallel_size"] = int(m.group(1))
            matched.append(m.group(0))
        if matched:
            kept = _evidence(line, matched)
            if kept not in evidence:
                evidence.append(kept)
    out["lines"] = evidence[-_MAX_EVIDENCE:]
    return out


def unit_start_epoch(
    props: Mapping[str, str],
    now: float | None = None,
    now_monotonic: float | None = None,
) -> float | None:
    """The unit's last start as seconds since the epoch, from its monotonic start
    timestamp (:data:`START_PROPERTIES`); None when systemd did not say."""
    for name in START_PROPERTIES:
        raw = str(props.get(name) or "")
        if raw.isdigit() and int(raw) > 0:
            wall = time.time() if now is None else now
            mono = time.monotonic() if now_monotonic is None else now_monotonic
            return wall - (mono - int(raw) / 1e6)
    return None


def _journal_reader(
    max_bytes: int = ENGINE_LOG_MAX_BYTES, max_lines: int = ENGINE_LOG_MAX_LINES
) -> JournalReader:
    def read(unit: str, since: int) -> tuple[str | None, str | None]:
        exe = shutil.which("journalctl")
        if exe is None:
            return None, "journalctl not found (no systemd journal on this host)"
        argv = [exe, "-u", unit, "--since", f"@{since}", "-o", "cat", "--no-pager"]
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=dict(os.environ, LC_ALL="C", SYSTEMD_PAGER=""),
                )
            except OSError as exc:
                return None, f"journalctl could not run: {exc}"
            timed_out: list[bool] = []

            def stop() -> None:
                timed_out.append(True)
                proc.kill()

            timer = threading.Timer(_TIMEOUT_S, stop)
            timer.start()
            chunks: list[bytes] = []
            size = 0
            try:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    chunks.append(raw)
                    size += len(raw)
                    if len(chunks) >= max_lines or size >= max_bytes:
                        break
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                rc = proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
            err.seek(0)
            detail = err.read().decode("utf-8", "replace").strip().splitlines()
        text = b"".join(chunks).decode("utf-8", "replace")
        if not text.strip() or all(_JOURNAL_MARK.match(x.strip()) for x in text.splitlines()):
            why = detail[-1] if detail else "no lines"
            if timed_out:
                return None, f"journalctl -u {unit} printed nothing in {_TIMEOUT_S:g} s"
            if rc not in (0, -9):
                return None, f"journalctl -u {unit} failed (exit {rc}): {why}"
            return None, f"journalctl -u {unit} has no lines since its start: {why}"
        return text, None

    return read


def read_log_file(
    path: str | Path,
    max_bytes: int = ENGINE_LOG_MAX_BYTES,
    max_lines: int = ENGINE_LOG_MAX_LINES,
) -> tuple[str | None, str | None, str | None]:
    """(log text, how it was read, None) or (None, None, reason): the end of a file a
    server writes its log to, at most ``max_bytes`` bytes and ``max_lines`` whole lines.

    A file gives no start to read from, as a unit's journal does: when the server has
    written more than that since it started, its start-up lines are cut off and the
    facts they state stay unknown (never those of an earlier start: the last line that
    states a fact wins, and a later start's lines come later)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError as exc:
        return None, None, f"cannot read the server's log {path}: {_short(exc)}"
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line read may start mid-line
    lines = lines[-max_lines:]
    if not lines:
        return None, None, f"the server's log {path} is empty"
    return "\n".join(lines) + "\n", f"the end of {path}", None


def read_engine_log(
    unit: str | None,
    props: Mapping[str, str] | None,
    journal: JournalReader | None = None,
    now: float | None = None,
    now_monotonic: float | None = None,
    log_file: str | Path | None = None,
) -> tuple[str | None, str | None, str | None]:
    """(log text, how it was read, None) or (None, None, reason): ``log_file`` when
    given (:func:`read_log_file`), else the unit's journal since its last start (a
    second before, the timestamp's precision), at most :data:`ENGINE_LOG_MAX_LINES`
    lines and :data:`ENGINE_LOG_MAX_BYTES` bytes."""
    if log_file:
        return read_log_file(log_file)
    if not unit:
        missing = (
            "no service unit or log file given (the engine's log is read from a unit's "
            "journal or the file the server writes)"
        )
        return None, None, missing
    start = unit_start_epoch(props or {}, now, now_monotonic)
    if start is None:
        names = " or ".join(START_PROPERTIES)
        return None, None, f"the start of {unit} is not known (systemctl show gave no {names})"
    since = int(start) - 1
    text, reason = (journal or _journal_reader())(unit, since)
    if text is None:
        return None, None, reason or "journalctl read nothing"
    return text, f"journalctl -u {unit} --since @{since}", None


# --------------------------------------------------------------------- host


def cpu_model(proc_root: str | Path = "/proc") -> str | None:
    """The first ``model name`` of ``/proc/cpuinfo``; None when it has none (ARM
    kernels print no model name) or cannot be read."""
    try:
        text = (Path(proc_root) / "cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return None


def cpu_count(cpu_list: str | None) -> int | None:
    """How many CPUs a cpulist (``0-3,8``) names; None when it is not one."""
    if not cpu_list:
        return None
    total = 0
    for part in re.split(r"[,\s]+", cpu_list.strip()):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last < first:
            return None
        total += last - first + 1
    return total


def _run(argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            env=dict(os.environ, LC_ALL="C"),
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def gpu_facts(
    run: Runner | None = None, exe: str | None = None
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(GPUs, None), ([], reason) without nvidia-smi, or (None, reason) when it fails.

    Per GPU: ``index``, ``name``, ``driver_version``, ``sm_clock_mhz`` (now, after
    the trials), ``sm_clock_max_mhz`` and ``memory_total_mib``.
    """
    if run is None:
        exe = exe or shutil.which("nvidia-smi")
        if exe is None:
            return [], "nvidia-smi not found (no NVIDIA GPU or driver on this host)"
        run = _run
    rc, out, err = run([exe or "nvidia-smi", *nvidia_smi.query_args(GPU_FIELDS)])
    if rc != 0:
        detail = (err or out).strip().splitlines()
        return None, f"nvidia-smi failed (exit {rc}): {detail[-1] if detail else 'no output'}"
    try:
        rows = nvidia_smi.parse_query_gpu(out, GPU_FIELDS)
    except ValueError as exc:
        return None, f"nvidia-smi: {exc}"
    gpus = [
        {
            "index": row.index,
            "name": nvidia_smi.value(row.cells["name"]),
            "driver_version": nvidia_smi.value(row.cells["driver_version"]),
            "sm_clock_mhz": nvidia_smi.whole_number(row.cells["clocks.sm"]),
            "sm_clock_max_mhz": nvidia_smi.whole_number(row.cells["clocks.max.sm"]),
            "memory_total_mib": nvidia_smi.whole_number(row.cells["memory.total"]),
        }
        for row in rows
    ]
    return gpus, None


def host_facts(
    server_cpus: str | None,
    proc_root: str | Path = "/proc",
    run: Runner | None = None,
) -> dict[str, Any]:
    """The host block: ``cpu_model``, ``cpus_online`` (logical CPUs of the host),
    ``server_cpus`` (how many the server may run on: its ``Cpus_allowed_list``),
    ``gpus`` (:func:`gpu_facts`) and ``gpu_reason``."""
    gpus, gpu_reason = gpu_facts(run)
    return {
        "cpu_model": cpu_model(proc_root),
        "cpus_online": os.cpu_count(),
        "server_cpus": cpu_count(server_cpus),
        "gpus": gpus,
        "gpu_reason": gpu_reason,
    }


# --------------------------------------------------------------------- both


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def context(
    unit: str | None,
    props: Mapping[str, str] | None,
    server_cpus: str | None,
    proc_root: str | Path = "/proc",
    run: Runner | None = None,
    journal: JournalReader | None = None,
    log_file: str | Path | None = None,
) -> dict[str, Any]:
    """``host``, ``host_reason``, ``engine``, ``engine_reason`` for a server_config
    (the engine from ``log_file`` when given, else from ``unit``'s journal).

    Never raises: a block that cannot be read is None, and its reason says why.
    """
    out: dict[str, Any] = {"host": None, "host_reason": None, "engine": None}
    out["engine_reason"] = None
    try:
        out["host"] = host_facts(server_cpus, proc_root, run)
    except Exception as exc:  # a fact not read must not fail the run
        out["host_reason"] = f"host facts not read: {_short(exc)}"
    try:
        text, source, reason = read_engine_log(unit, props, journal, log_file=log_file)
        if text is None:
            out["engine_reason"] = reason
        else:
            facts = engine_facts(text)
            facts["source"] = source
            facts["log_lines_read"] = len(text.splitlines())
            out["engine"] = facts
    except Exception as exc:  # the same
        out["engine_reason"] = f"engine log not read: {_short(exc)}"
    return out
