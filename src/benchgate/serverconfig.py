"""The serving configuration a result was measured on, and its short fingerprint.

Two runs of one release can serve differently: ``--max-num-seqs 1`` starves a
server that ``--max-num-seqs 256`` keeps busy. A result carries the server's
configuration as ``server_config`` (optional: older results lack it), read
where it cannot be out of date, from the running server itself:

* ``argv``: the main process's command line (``/proc/<pid>/cmdline``), the
  values of flags that look secret (``--api-key``, tokens) replaced by ``***``;
* ``env``: the environment variables that change how vLLM serves
  (:data:`ENV_PREFIXES`), none whose name looks secret;
* ``cpus``: the CPUs the process may run on (a unit's ``CPUAffinity=``).

:func:`fingerprint` names a configuration by a short digest of what changes
the figures (:func:`config_args`: the flags after ``serve``, without the ones
that do not, :data:`IGNORED_FLAGS`; the environment; the CPUs), so that the
report, ``benchgate history`` and the A/B tell configurations apart and list
each fingerprint's settings in a legend (:func:`config_text`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


def config_args(config: Mapping[str, Any] | None) -> list[str]:
    """What in ``config`` changes the figures, in a stable order: the arguments after
    ``serve`` (all but the program when there is none), ``--flag=value`` split,
    without :data:`IGNORED_FLAGS`; then the environment and the CPUs."""
    if not isinstance(config, Mapping):
        return []
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


__all__ = [
    "ENV_PREFIXES",
    "IGNORED_FLAGS",
    "config_args",
    "config_text",
    "fingerprint",
    "read_server_config",
    "redact_argv",
]
