"""A vLLM general plugin that makes every engine step slower by a known share:
a regression of known size on a real server, for measuring the gate's
detection rate (``benchmarks/gate_real_runs.py --mode slowstep``).

With ``BENCHGATE_SLOW_STEP=f`` in the server's environment and this folder on
its ``PYTHONPATH`` (the ``.dist-info`` beside it declares the entry point, so
nothing is installed), the engine core sleeps ``f`` times the duration of each
step after that step. Where the engine is the bottleneck (a closed-loop load
that keeps it busy), throughput falls to ``1 / (1 + f)`` of what it was:
``f = 0.1765`` is a 15% regression. Where it is not always busy, the
regression is smaller; the real runs measure what it came to. Without the
variable, or with 0, the plugin changes nothing.

vLLM loads general plugins in every process (``vllm.general_plugins``); the
engine core's class is patched once per process, wherever it is imported
first (a forked engine process inherits the patched class).
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
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore, _MARK, None) is not None:
        return
    step = EngineCore._process_engine_step

    def slowed(self: Any) -> Any:
        started = time.perf_counter()
        out = step(self)
        time.sleep(share * (time.perf_counter() - started))
        return out

    EngineCore._process_engine_step = slowed
    setattr(EngineCore, _MARK, share)
