"""An API key reaches the server but never the results written to disk or returned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _load import load_file
from benchgate.bench import BenchmarkError, module_run
from benchgate.cli import main
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "workloads" / "demo.yml")
KEY = "bg-secret-test-key-5f0c2a9e"
SMALL = {"trials": 1, "num_requests": 4, "output_len": 4, "warmup": 0, "concurrency": 2}


def module_params(base_url: str, output_path: Path, api_key: str | None) -> dict[str, object]:
    return {
        "base_url": base_url,
        "model": None,
        "workload": DEMO,
        "input_len": None,
        "timeout": None,
        "output_path": str(output_path),
        "include_requests": True,
        "api_key": api_key,
        **SMALL,
    }


def test_module_result_holds_no_api_key(tmp_path):
    out = tmp_path / "artifacts" / "host" / "result.json"
    with serve_in_thread(FakeConfig(api_key=KEY, ttft_s=0.001, itl_s=0.001)) as srv:
        returned = module_run(module_params(srv.base_url, out, KEY), check_mode=False)
        served = srv.state.requests
    # The key was used: the server refuses requests without it (next test).
    assert returned["all_valid"] is True
    assert served >= SMALL["num_requests"]
    written = out.read_text(encoding="utf-8")
    assert json.loads(written)["schema"] == "benchgate.result/1"
    assert KEY not in written
    assert KEY not in json.dumps(returned)
    # Nothing else the module left beside the result (e.g. a temporary file).
    assert [p.name for p in out.parent.iterdir()] == ["result.json"]


def test_the_fake_server_refuses_a_missing_key(tmp_path):
    out = tmp_path / "result.json"
    with serve_in_thread(FakeConfig(api_key=KEY, ttft_s=0.001, itl_s=0.001)) as srv:
        try:
            returned = module_run(module_params(srv.base_url, out, None), check_mode=False)
        except BenchmarkError:
            return
    assert returned["all_valid"] is False


def test_cli_result_holds_no_api_key(tmp_path, capsys: pytest.CaptureFixture[str]):
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    out = tmp_path / "cli" / "result.json"
    argv = ["bench", "--workload", DEMO, "--api-key-file", str(key_file), "-o", str(out)]
    argv += ["--trials", "1", "--num-requests", "4", "--output-len", "4", "--warmup", "0"]
    with serve_in_thread(FakeConfig(api_key=KEY, ttft_s=0.001, itl_s=0.001)) as srv:
        code = main([*argv, "--base-url", srv.base_url])
    printed = capsys.readouterr()
    assert code == 0
    written = out.read_text(encoding="utf-8")
    assert json.loads(written)["summary"]["valid_trials"] == 1
    assert KEY not in written
    assert KEY not in printed.out and KEY not in printed.err


def load_wait_ready():
    path = REPO / "roles" / "vllm_service" / "files" / "wait_ready.py"
    return load_file(path, "wait_ready_secrets")


def test_wait_ready_reads_the_key_from_the_env_file_not_argv(tmp_path):
    # The role renders values with to_json; the key must come back verbatim,
    # quotes and all, and never be needed on the command line.
    env_file = tmp_path / "vllm.env"
    quoted = json.dumps(KEY + '"q')
    env_file.write_text(f'# Secrets for vllm.service\nHF_TOKEN="hf_x"\nVLLM_API_KEY={quoted}\n')
    wr = load_wait_ready()
    assert wr.api_key_from(str(env_file)) == KEY + '"q'
    assert wr.api_key_from(str(tmp_path / "missing.env")) == ""
    env_file.write_text('HF_TOKEN="hf_x"\n')
    assert wr.api_key_from(str(env_file)) == ""
    verify = (REPO / "roles" / "vllm_service" / "tasks" / "verify.yml").read_text()
    assert "--env-file" in verify and "api_key" not in verify
