"""The injected regression of lab/experiments/inject/: found as a vLLM general plugin
without installing anything, and it slows each engine step by its share."""

from __future__ import annotations

import importlib
import sys
import time
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest

INJECT = Path(__file__).resolve().parents[2] / "lab" / "experiments" / "inject"


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in for vllm.v1.engine.core whose engine step takes 20 ms."""

    class EngineCore:
        def _process_engine_step(self):
            time.sleep(0.02)
            return True

    names = ["vllm", "vllm.v1", "vllm.v1.engine", "vllm.v1.engine.core"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["vllm.v1.engine.core"].EngineCoreProc = EngineCore  # type: ignore[attr-defined]
    monkeypatch.syspath_prepend(str(INJECT))
    sys.modules.pop("benchgate_slowstep", None)
    return EngineCore


def _step_seconds(core_cls) -> float:
    core = core_cls()
    started = time.perf_counter()
    for _ in range(5):
        assert core._process_engine_step() is True
    return (time.perf_counter() - started) / 5


def test_vllm_finds_the_plugin_on_pythonpath(fake_vllm):
    found = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert found.get("benchgate_slowstep") == "benchgate_slowstep:register"


def test_each_step_sleeps_its_share(fake_vllm, monkeypatch):
    monkeypatch.setenv("BENCHGATE_SLOW_STEP", "0.5")
    plugin = importlib.import_module("benchgate_slowstep")
    plugin.register()
    plugin.register()  # vLLM loads plugins in every process: patched once
    step = _step_seconds(fake_vllm)
    assert 0.029 < step < 0.045  # 20 ms + 50%


def test_without_the_variable_nothing_changes(fake_vllm, monkeypatch):
    monkeypatch.delenv("BENCHGATE_SLOW_STEP", raising=False)
    original = fake_vllm._process_engine_step
    importlib.import_module("benchgate_slowstep").register()
    assert fake_vllm._process_engine_step is original
