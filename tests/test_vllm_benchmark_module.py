"""The vllm_benchmark Ansible module: documentation, arguments, check mode, a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _load import load_file
from benchgate.bench import module_run, workload_from_module_params
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread
from benchgate.workload import WorkloadError, load_workload

REPO = Path(__file__).resolve().parents[1]
MODULE = REPO / "plugins" / "modules" / "vllm_benchmark.py"
DEMO = str(REPO / "workloads" / "demo.yml")


def load_module():
    return load_file(MODULE, "vllm_benchmark")


def params(**kw):
    base = {name: spec.get("default") for name, spec in load_module().ARGUMENT_SPEC.items()}
    base.update(base_url="http://127.0.0.1:9", workload=DEMO)
    base.update(kw)
    return base


def test_documentation_matches_argument_spec():
    mod = load_module()
    doc = yaml.safe_load(mod.DOCUMENTATION)
    yaml.safe_load(mod.EXAMPLES)
    yaml.safe_load(mod.RETURN)
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert doc["attributes"]["diff_mode"]["support"] == "none"
    options = doc["options"]
    assert set(options) == set(mod.ARGUMENT_SPEC)
    for name, spec in mod.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"], name
        assert options[name].get("required", False) == spec.get("required", False), name
        assert options[name].get("default") == spec.get("default"), name
    assert mod.ARGUMENT_SPEC["api_key"]["no_log"] is True
    assert mod.HAS_BENCHGATE


def test_overrides_and_inline_workload():
    wl = workload_from_module_params(params(concurrency=8, trials=5, timeout=12.5))
    demo = load_workload(DEMO)
    assert (wl.concurrency, wl.trials, wl.timeout_s, wl.output_len) == (8, 5, 12.5, 64)
    assert wl.hash != demo.hash
    assert workload_from_module_params(params(timeout=1.0)).hash == demo.hash
    inline = {
        "name": "i",
        "version": 2,
        "input_len": 4,
        "output_len": 4,
        "concurrency": 1,
        "num_requests": 2,
        "trials": 1,
    }
    assert workload_from_module_params(params(workload=inline)).version == 2
    with pytest.raises(WorkloadError, match="'output_len'"):
        workload_from_module_params(params(output_len=0))
    with pytest.raises(WorkloadError, match="'input_len': is required"):
        workload_from_module_params(params(workload={"name": "x", "version": 1}))


def test_check_mode_sends_no_load():
    with serve_in_thread(FakeConfig()) as srv:
        out = module_run(params(base_url=srv.base_url, concurrency=2), check_mode=True)
        assert srv.state.requests == 0
    assert out["changed"] is False and out["skipped"] is True
    assert "no load sent" in out["msg"]
    assert out["workload"]["name"] == "demo" and len(out["workload"]["hash"]) == 64


def test_run_writes_output_and_never_reports_change(tmp_path):
    dest = tmp_path / "results" / "r.json"
    with serve_in_thread(FakeConfig(ttft_s=0, itl_s=0)) as srv:
        out = module_run(
            params(
                base_url=srv.base_url,
                trials=2,
                num_requests=4,
                warmup=0,
                output_len=4,
                output_path=str(dest),
            ),
            check_mode=False,
        )
    assert out["changed"] is False and out["all_valid"] is True and out["valid_trials"] == 2
    assert out["msg"] == "2/2 valid trials"
    assert "requests" not in out["result"]["trials"][0]
    saved = json.loads(dest.read_text())
    assert saved["schema"] == "benchgate.result/1" and len(saved["trials"][0]["requests"]) == 4
    assert out["summary"] == saved["summary"]


def test_each_trial_is_logged_while_the_module_runs():
    lines = []
    with serve_in_thread(FakeConfig(ttft_s=0, itl_s=0)) as srv:
        module_run(
            params(
                base_url=srv.base_url,
                trials=2,
                num_requests=4,
                warmup=0,
                output_len=4,
                label="h1 baseline",
            ),
            check_mode=False,
            log=lines.append,
        )
    assert [line.split(":")[1].strip() for line in lines] == ["trial 1/2", "trial 2/2"]
    assert all(line.startswith("benchgate h1 baseline: ") for line in lines)


def ansible(args, tmp_path, check=False):
    env = dict(
        os.environ,
        ANSIBLE_LIBRARY=str(REPO / "plugins" / "modules"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
    )
    exe = Path(sys.executable).parent / "ansible"
    cmd = [
        str(exe),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        "vllm_benchmark",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-a",
        json.dumps(args),
    ]
    if check:
        cmd.append("--check")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


@pytest.mark.skipif(not (Path(sys.executable).parent / "ansible").exists(), reason="no ansible")
def test_ansible_runs_the_module(tmp_path):
    with serve_in_thread(FakeConfig(ttft_s=0, itl_s=0, api_key="s3cret")) as srv:
        args = {
            "base_url": srv.base_url,
            "workload": DEMO,
            "trials": 1,
            "num_requests": 3,
            "warmup": 0,
            "output_len": 4,
            "api_key": "s3cret",
        }
        check = ansible(args, tmp_path, check=True)
        assert srv.state.requests == 0
        run = ansible(args, tmp_path)
    assert "SKIPPED" in check.stdout, check.stdout + check.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    assert '"all_valid": true' in run.stdout and '"changed": false' in run.stdout
    assert "s3cret" not in run.stdout
    bad = ansible({**args, "base_url": "http://127.0.0.1:9"}, tmp_path)
    assert bad.returncode != 0 and "cannot reach http://127.0.0.1:9/v1/models" in bad.stdout


def test_check_mode_validates_the_prompt_source(tmp_path):
    inline = {
        "name": "f",
        "version": 1,
        "input_len": 4,
        "output_len": 4,
        "concurrency": 1,
        "num_requests": 2,
        "trials": 1,
        "prompts": {"source": "file", "path": str(tmp_path / "missing.txt")},
    }
    with pytest.raises(WorkloadError, match="'prompts.path': file not found"):
        module_run(params(workload=inline), check_mode=True)
