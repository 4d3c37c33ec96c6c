"""The vllm_facts Ansible module: documentation, and real runs of its main() in check mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from _load import load_file

REPO = Path(__file__).resolve().parents[1]
MODULE = REPO / "plugins" / "modules" / "vllm_facts.py"
DATA = REPO / "tests" / "data" / "nvidia-smi"


def load_module():
    return load_file(MODULE, "vllm_facts")


def test_documentation_matches_argument_spec():
    mod = load_module()
    doc = yaml.safe_load(mod.DOCUMENTATION)
    yaml.safe_load(mod.EXAMPLES)
    ret = yaml.safe_load(mod.RETURN)
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert doc["attributes"]["facts"]["support"] == "full"
    assert set(doc["options"]) == set(mod.ARGUMENT_SPEC)
    for name, spec in mod.ARGUMENT_SPEC.items():
        assert doc["options"][name]["type"] == spec["type"], name
        assert doc["options"][name].get("default") == spec.get("default"), name
    assert set(ret) == {"ansible_facts", "advice", "vllm_release"}
    assert set(ret["ansible_facts"]["contains"]) == {"vllm_hardware", "vllm_release"}
    assert mod.HAS_BENCHGATE


def run_module(tmp_path, path_dir, **args):
    """Run the module file as Ansible runs it on a host: a Python process with an args file."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_check_mode": True, **args}}))
    env = dict(os.environ, PATH=str(path_dir))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_check_mode_without_nvidia_smi(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = run_module(
        tmp_path, empty, speculative={"model": "/srv/models/draft"}, tensor_parallel_size=4
    )
    facts = out["ansible_facts"]["vllm_hardware"]
    assert out["changed"] is False and "failed" not in out
    assert facts["gpu_count"] == 0 and facts["interconnect"] == "none"
    assert "nvidia-smi not found" in facts["reason"]
    assert [a["topic"] for a in out["advice"]] == ["gpus", "benchmark"]


def test_check_mode_with_a_stand_in_nvidia_smi(tmp_path):
    """nvidia-smi on PATH prints the real H200 capture; the module reads it in check mode."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "name = 'h200-topo-m.txt' if sys.argv[1:] == ['topo', '-m'] else 'h200-query-gpu.csv'\n"
        f"sys.stdout.write(open({str(DATA)!r} + '/' + name).read())\n"
    )
    fake.chmod(0o755)
    out = run_module(
        tmp_path,
        bindir,
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
        calibration=str(REPO / "lab" / "calibration" / "h200-qwen3-14b-4b.json"),
    )
    facts = out["ansible_facts"]["vllm_hardware"]
    assert out["changed"] is False
    assert facts["gpu_count"] == 1 and facts["names"] == ["NVIDIA H200"]
    assert facts["native_fp8"] is True and facts["interconnect"] == "single"
    assert facts["gpus"][0]["memory_bandwidth_source"] == "measured"
    messages = [a["message"] for a in out["advice"]]
    assert any("FP8 available natively (CC 9.0, Hopper)" in m for m in messages)
    assert any("ngram drafting runs no draft model" in m for m in messages)


def test_bad_tensor_parallel_size_fails(tmp_path):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"tensor_parallel_size": 0}}))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["failed"] is True
    assert "tensor_parallel_size must be 1 or more" in out["msg"]


def test_the_release_it_is_given(tmp_path):
    """release: a vLLM release venv (through its `current` link); the fact says what its
    SpeculativeConfig declares, read from the source, and whether it drafts by batch size."""
    empty = tmp_path / "bin"
    empty.mkdir()
    release = tmp_path / "releases" / "0.32.0"
    source = release / "lib" / "python3.12" / "site-packages" / "vllm" / "config" / "speculative.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "class SpeculativeConfig:\n"
        "    method: str | None = None\n"
        "    num_speculative_tokens: int | None = None\n"
        "    num_speculative_tokens_per_batch_size: list | None = None\n"
    )
    current = tmp_path / "current"
    current.symlink_to(release)
    out = run_module(tmp_path, empty, release=str(current))
    facts = out["ansible_facts"]["vllm_release"]
    assert out["vllm_release"] == facts
    assert facts == {
        "path": str(release),
        "speculative_fields": [
            "method",
            "num_speculative_tokens",
            "num_speculative_tokens_per_batch_size",
        ],
        "batch_size_schedule": True,
        "reason": f"vllm/config/speculative.py of {release} declares "
        "num_speculative_tokens_per_batch_size",
    }
    assert out["ansible_facts"]["vllm_hardware"]["gpu_count"] == 0  # gathered as before

    out = run_module(tmp_path, empty, release=str(tmp_path / "nowhere"))
    assert out["vllm_release"]["batch_size_schedule"] is False
    assert out["vllm_release"]["speculative_fields"] is None
    assert "no vLLM SpeculativeConfig source found under" in out["vllm_release"]["reason"]


def test_no_release_no_release_fact(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = run_module(tmp_path, empty)
    assert set(out["ansible_facts"]) == {"vllm_hardware"} and "vllm_release" not in out
