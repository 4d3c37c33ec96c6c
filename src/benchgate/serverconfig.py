"""The serving configuration a result was measured on, and its short fingerprint.

Two runs of one release can serve differently: ``--max-num-seqs 1`` starves a
server that ``--max-num-seqs 256`` keeps busy. A result carries the server's
configuration as ``server_config`` (optional: older results lack it), read
where it cannot be out of date, from the running server itself:

* ``argv``: the main process's command line (``/proc/<pid>/cmdline``), the
  values of flags that look secret (``--api-key``, tokens) replaced by ``***``;
* ``env``: the environment variables that change how vLLM serves
  (:data:`ENV_PREFIXES`), none whose name looks secret;
* ``cpus``: the CPUs the process may run on (a unit's ``CPUAffinity=``);
* ``host`` and ``engine`` (each None with ``host_reason`` / ``engine_reason`` when
  not read): what it ran under, the CPU and GPUs and what vLLM said about itself
  at start-up (:mod:`benchgate.confounds`).

:func:`fingerprint` names a configuration by a short digest of what changes
the figures (:func:`config_args`: the flags after ``serve``, without the ones
that do not, :data:`IGNORED_FLAGS`; the environment; the CPUs), so that the
report, ``benchgate history`` and the A/B tell configurations apart and list
each fingerprint's settings in a legend (:func:`config_text`). The host and the
engine stay out of the fingerprint (a run keeps its fingerprint whether or not they
were read); :func:`context_text` says them in a line, and :func:`differences`
names where two configurations' hosts or engines differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .serve import FLAG_OPTIONS

#: Flags that do not change what is measured: where the server listens, its
#: name for the model, its logging, its key. Their values are left out too.
IGNORED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
        "--uvicorn-log-level",
        "--disable-log-requests",
        "--disable-log-stats",
        "--enable-log-requests",
    }
)
_SECRET = re.compile(r"key|token|secret|password", re.IGNORECASE)
#: Environment variables that change how vLLM serves.
ENV_PREFIXES = (
    "VLLM_",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NCCL_",
)
REDACTED = "***"
#: The flags that set speculative decoding: ``--speculative-config``, vLLM 0.32's
#: short aliases, and the per-flag options of the releases before 0.8.3
#: (:data:`benchgate.serve.FLAG_OPTIONS`), in the spelling :func:`differences` compares.
SPECULATIVE_FLAGS = frozenset(
    {"--speculative-config", "--spec-method", "--spec-model", "--spec-tokens"}
    | {flag.replace("_", "-") for flag in FLAG_OPTIONS.values()}
)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every flag whose name looks secret replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("--") and _SECRET.search(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def read_server_config(pid: int, proc_root: str | Path = "/proc") -> dict[str, Any] | None:
    """The ``server_config`` of process ``pid``; None when its command line cannot be read."""
    root = Path(proc_root) / str(pid)
    try:
        raw = (root / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    if not argv:
        return None
    env: dict[str, str] = {}
    try:
        for item in (root / "environ").read_bytes().split(b"\0"):
            name, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep and name.startswith(ENV_PREFIXES) and not _SECRET.search(name):
                env[name] = value
    except OSError:
        pass  # another user's environment needs root: the argv still tells most
    cpus = None
    try:
        for line in (root / "status").read_text(encoding="utf-8").splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus = line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return {"argv": redact_argv(argv), "env": dict(sorted(env.items())), "cpus": cpus}


def _serve_args(config: Mapping[str, Any]) -> list[str]:
    """The arguments after ``serve`` (all but the program when there is none),
    ``--flag=value`` split, without :data:`IGNORED_FLAGS`."""
    argv = [str(a) for a in config.get("argv") or []]
    start = argv.index("serve") + 1 if "serve" in argv else min(1, len(argv))
    args: list[str] = []
    for arg in argv[start:]:
        if arg.startswith("--") and "=" in arg:
            args.extend(arg.split("=", 1))
        else:
            args.append(arg)
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if not arg.startswith("--"):
                continue
        if arg in IGNORED_FLAGS:
            skip_value = True
            continue
        kept.append(arg)
    return kept


def config_args(config: Mapping[str, Any] | None) -> list[str]:
    """What in ``config`` changes the figures, in a stable order: the arguments after
    ``serve`` (all but the program when there is none), ``--flag=value`` split,
    without :data:`IGNORED_FLAGS`; then the environment and the CPUs."""
    if not isinstance(config, Mapping):
        return []
    kept = _serve_args(config)
    env = config.get("env")
    if isinstance(env, Mapping):
        kept += [f"{k}={v}" for k, v in sorted(env.items())]
    if config.get("cpus"):
        kept.append(f"cpus={config['cpus']}")
    return kept


def fingerprint(config: Mapping[str, Any] | None) -> str | None:
    """Six hex digits naming the configuration (:func:`config_args`); None when unknown."""
    args = config_args(config)
    if not args:
        return None
    text = json.dumps(args, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def config_text(config: Mapping[str, Any] | None) -> str:
    """The settings a fingerprint stands for, for a legend: ``Qwen/Qwen3-0.6B --max-num-seqs 1``."""
    return " ".join(config_args(config))


def _is_flag(arg: str) -> bool:
    """``--max-num-seqs``, ``-tp``; not a value such as ``-1`` or ``-0.5``."""
    if not arg.startswith("-") or arg == "-":
        return False
    try:
        float(arg)
    except ValueError:
        return True
    return False


def _flag_name(arg: str) -> str:
    """One spelling per flag: vLLM takes ``--max_num_seqs`` for ``--max-num-seqs``."""
    return arg.replace("_", "-")


def _options(config: Mapping[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    """The positional arguments (the model) and every flag with its values, in order
    (a flag given twice has both values); the speculative flags left out."""
    positional: list[str] = []
    options: dict[str, list[str]] = {}
    current: str | None = None
    for arg in _serve_args(config):
        if _is_flag(arg):
            current = _flag_name(arg)
            options.setdefault(current, [])
        elif current is None:
            positional.append(arg)
        else:
            options[current].append(arg)
    for flag in SPECULATIVE_FLAGS:
        options.pop(flag, None)
    return positional, options


def _env(config: Mapping[str, Any]) -> dict[str, str]:
    env = config.get("env")
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, Mapping) else {}


def _as_text(values: Sequence[str]) -> str:
    return " ".join(values)


def _block(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    block = config.get(key)
    return block if isinstance(block, Mapping) else {}


def _gpu_list(host: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    gpus = host.get("gpus")
    if not isinstance(gpus, list):
        return None
    return [g for g in gpus if isinstance(g, Mapping)]


def _gpu_names(gpus: Sequence[Mapping[str, Any]]) -> str:
    """``NVIDIA H200``, ``4x NVIDIA H100 80GB HBM3``, ``none``."""
    if not gpus:
        return "none"
    counts: dict[str, int] = {}
    for g in gpus:
        name = str(g.get("name") or "?")
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{n}x {name}" for name, n in counts.items())


def _same(gpus: Sequence[Mapping[str, Any]], key: str) -> Any:
    """The one value every GPU has for ``key``; None when they differ or none says."""
    values = {g.get(key) for g in gpus}
    return values.pop() if len(values) == 1 else None


def host_text(config: Mapping[str, Any] | None) -> str:
    """The host in a line: ``AMD EPYC 9654 96-Core Processor, 16 CPUs online, server on
    2; GPU NVIDIA H200 (driver 570.124.06, SM max 1980 MHz, 143771 MiB)``; ``""`` when
    not known."""
    host = _block(config, "host") if isinstance(config, Mapping) else {}
    if not host:
        return ""
    parts = []
    if host.get("cpu_model"):
        parts.append(str(host["cpu_model"]))
    if host.get("cpus_online"):
        parts.append(f"{host['cpus_online']} CPUs online")
    if host.get("server_cpus"):
        parts.append(f"server on {host['server_cpus']}")
    text = ", ".join(parts)
    gpus = _gpu_list(host)
    if gpus is not None:
        details = []
        if gpus and _same(gpus, "driver_version"):
            details.append(f"driver {_same(gpus, 'driver_version')}")
        if gpus and _same(gpus, "sm_clock_max_mhz"):
            details.append(f"SM max {_same(gpus, 'sm_clock_max_mhz')} MHz")
        if gpus and _same(gpus, "memory_total_mib"):
            details.append(f"{_same(gpus, 'memory_total_mib')} MiB")
        gpu = "GPU " + _gpu_names(gpus) + (f" ({', '.join(details)})" if details else "")
        text = f"{text}; {gpu}" if text else gpu
    return text


def _on_off(value: Any) -> str | None:
    return None if not isinstance(value, bool) else ("on" if value else "off")


# The engine facts that differences and engine_text name: (key, label).
_ENGINE_FACTS: tuple[tuple[str, str], ...] = (
    ("async_scheduling", "async scheduling"),
    ("model_runner", "model runner"),
    ("cudagraph_mode", "CUDA graphs"),
    ("compilation_mode", "compilation"),
)


def _engine_value(engine: Mapping[str, Any], key: str) -> str | None:
    value = engine.get(key)
    if key == "async_scheduling":
        return _on_off(value)
    return None if value is None else str(value)


def engine_text(config: Mapping[str, Any] | None) -> str:
    """What vLLM said about itself at start-up, in a line: ``vLLM 0.26.0, async
    scheduling off, model runner V1, CUDA graphs PIECEWISE, compilation VLLM_COMPILE,
    TP 1``; ``""`` when not known."""
    engine = _block(config, "engine") if isinstance(config, Mapping) else {}
    parts = []
    if engine.get("vllm_version"):
        parts.append(f"vLLM {engine['vllm_version']}")
    for key, label in _ENGINE_FACTS:
        value = _engine_value(engine, key)
        if value is not None:
            parts.append(f"{label} {value}")
    if engine.get("enforce_eager") is True:
        parts.append("eager")
    if engine.get("tensor_parallel_size"):
        parts.append(f"TP {engine['tensor_parallel_size']}")
    return ", ".join(parts)


def context_text(config: Mapping[str, Any] | None) -> str:
    """What a configuration ran under, for a legend: ``host: ...; engine: ...``
    (:func:`host_text`, :func:`engine_text`), the parts known; ``""`` when neither is.

    >>> context_text({"argv": ["vllm", "serve", "m"], "host": {"cpus_online": 2,
    ...     "gpus": []}, "engine": {"async_scheduling": False}})
    'host: 2 CPUs online; GPU none; engine: async scheduling off'
    """
    parts = []
    host, engine = host_text(config), engine_text(config)
    if host:
        parts.append(f"host: {host}")
    if engine:
        parts.append(f"engine: {engine}")
    return "; ".join(parts)


def context_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Where the hosts and engines of two configurations differ, among the facts both
    state: the engine's asynchronous scheduling, model runner, CUDA graph and
    compilation modes; the CPU model, the CPUs online, the GPUs, their driver,
    maximum SM clock and memory. The vLLM version is left out (two releases differ in
    it by design), and so are the tensor-parallel size and eager mode (flags that
    :func:`differences` compares already) and the SM clock of the moment."""
    out: list[str] = []
    engine_a, engine_b = _block(a, "engine"), _block(b, "engine")
    for key, label in _ENGINE_FACTS:
        va, vb = _engine_value(engine_a, key), _engine_value(engine_b, key)
        if va is not None and vb is not None and va != vb:
            out.append(f"{label}: {va} vs {vb}")
    host_a, host_b = _block(a, "host"), _block(b, "host")
    for key, label in (("cpu_model", "CPU model"), ("cpus_online", "CPUs online")):
        va, vb = host_a.get(key), host_b.get(key)
        if va is not None and vb is not None and va != vb:
            out.append(f"{label}: {va} vs {vb}")
    gpus_a, gpus_b = _gpu_list(host_a), _gpu_list(host_b)
    if gpus_a is None or gpus_b is None:
        return out
    names_a, names_b = _gpu_names(gpus_a), _gpu_names(gpus_b)
    if names_a != names_b:
        out.append(f"GPU: {names_a} vs {names_b}")
    if not gpus_a or not gpus_b:
        return out
    for key, label, unit in (
        ("driver_version", "GPU driver", ""),
        ("sm_clock_max_mhz", "GPU max SM clock", " MHz"),
        ("memory_total_mib", "GPU memory", " MiB"),
    ):
        if key == "memory_total_mib" and names_a != names_b:
            continue  # another GPU: its memory differs by design
        va, vb = _same(gpus_a, key), _same(gpus_b, key)
        if va is not None and vb is not None and va != vb:
            out.append(f"{label}: {va} vs {vb}{unit}")
    return out


def _compare(
    keys: Iterable[str],
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    names: tuple[str, str],
    alone: Callable[[str, Any], str],
    value: Callable[[Any], str],
) -> list[str]:
    """``<alone> only in <name>`` for a key on one side, ``key: <a> vs <b>`` where they differ."""
    out = []
    for key in keys:
        if key not in b:
            out.append(f"{alone(key, a[key])} only in {names[0]}")
        elif key not in a:
            out.append(f"{alone(key, b[key])} only in {names[1]}")
        elif a[key] != b[key]:
            out.append(f"{key}: {value(a[key])} vs {value(b[key])}")
    return out


def differences(
    a: Mapping[str, Any] | None,
    b: Mapping[str, Any] | None,
    names: tuple[str, str] = ("A", "B"),
) -> list[str]:
    """How two serving configurations differ apart from speculative decoding, one line
    per difference: ``--async-scheduling only in B``, ``--max-num-seqs: 1 vs 256``,
    ``VLLM_CPU_OMP_THREADS_BIND: 1 vs 0-1``, ``cpus: 1 vs 0-1``, then what they ran
    under (:func:`context_differences`): ``async scheduling: on vs off``, ``GPU: NVIDIA
    H100 80GB HBM3 vs NVIDIA H200``, ``CPU model: ... vs ...``.

    The speculative setting (``--speculative-config`` and the old per-flag options,
    :data:`SPECULATIVE_FLAGS`) is left out, and so is what :func:`config_args` leaves
    out (the program, ``--host``, ``--port`` and the like). ``names`` name the two
    sides. Empty when they differ in speculation only, and when either is not known
    (None: a result from before benchgate kept its configuration).

    >>> a = {"argv": ["vllm", "serve", "m", "--speculative-config", "{}"], "env": {}}
    >>> b = {"argv": ["vllm", "serve", "m", "--async-scheduling"], "env": {}}
    >>> differences(a, b), differences(a, {**a, "argv": ["vllm", "serve", "m"]})
    (['--async-scheduling only in B'], [])
    """
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return []
    name_a, name_b = names
    out: list[str] = []
    pos_a, opts_a = _options(a)
    pos_b, opts_b = _options(b)
    if pos_a != pos_b:
        label = "model" if len(pos_a) <= 1 and len(pos_b) <= 1 else "arguments"
        out.append(f"{label}: {_as_text(pos_a) or '-'} vs {_as_text(pos_b) or '-'}")
    out += _compare(
        [*opts_a, *(f for f in opts_b if f not in opts_a)],
        opts_a,
        opts_b,
        names,
        alone=lambda flag, values: _as_text([flag, *values]),
        value=_as_text,
    )
    env_a, env_b = _env(a), _env(b)
    out += _compare(
        sorted(set(env_a) | set(env_b)),
        env_a,
        env_b,
        names,
        alone=lambda key, value: f"{key}={value}",
        value=str,
    )
    cpus_a, cpus_b = a.get("cpus") or None, b.get("cpus") or None
    if cpus_a != cpus_b:
        if cpus_b is None:
            out.append(f"cpus {cpus_a} only in {name_a}")
        elif cpus_a is None:
            out.append(f"cpus {cpus_b} only in {name_b}")
        else:
            out.append(f"cpus: {cpus_a} vs {cpus_b}")
    return out + context_differences(a, b)


__all__ = [
    "ENV_PREFIXES",
    "IGNORED_FLAGS",
    "SPECULATIVE_FLAGS",
    "config_args",
    "config_text",
    "context_differences",
    "context_text",
    "differences",
    "engine_text",
    "fingerprint",
    "host_text",
    "read_server_config",
    "redact_argv",
]
