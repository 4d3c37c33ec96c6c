"""playbooks/speculative_ab.yml checks every host before any host changes.

Issue 32: its one play ran ``serial: 1`` with the checks inside, so host 2's
bad arm was found only after host 1's A/B had restarted host 1. Now a first
play checks every host (``any_errors_fatal``), as ``upgrade.yml`` does, and
only then the serial play starts. Real ``ansible-playbook`` on hosts reached
with a local connection (``test_fleet_inputs``' stand-ins for ``/opt/vllm``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from test_fleet_inputs import ROOT, _host, _inventory, _play, _tree, needs_ansible

PLAYBOOK = ROOT / "playbooks" / "speculative_ab.yml"


def _includes(play: dict[str, Any]) -> list[str]:
    return [
        f"{task['ansible.builtin.include_role']['name']}/"
        f"{task['ansible.builtin.include_role'].get('tasks_from', 'main.yml')}"
        for task in play.get("tasks", [])
        if "ansible.builtin.include_role" in task
    ]


def test_every_host_is_checked_in_a_play_before_the_serial_one() -> None:
    plays = yaml.safe_load(PLAYBOOK.read_text())
    [check] = [p for p in plays if "vllm_service/preflight.yml" in _includes(p)]
    [ab] = [p for p in plays if p.get("serial")]
    assert plays.index(check) < plays.index(ab)
    assert check["hosts"] == ab["hosts"] == "vllm_hosts"
    assert "serial" not in check and check["any_errors_fatal"] is True
    assert "benchgate/speculative_preflight.yml" in _includes(check)
    # The serial play changes hosts and checks nothing of its own any more.
    assert not {"vllm_service/preflight.yml", "benchgate/speculative_preflight.yml"} & set(
        _includes(ab)
    )


@needs_ansible
def test_a_bad_arm_on_the_last_host_stops_the_run_before_the_first_host_changes(
    tmp_path: Path,
) -> None:
    def host(name: str, with_draft: bool) -> dict[str, Any]:
        draft = tmp_path / name / "models" / "draft"
        if with_draft:
            draft.mkdir(parents=True)
            (draft / "config.json").write_text("{}\n")
        return _host(
            tmp_path,
            name,
            benchgate_speculative_candidates=[{"model": str(draft), "num_speculative_tokens": 2}],
        )

    hosts = {"gpu1": host("gpu1", True), "gpu2": host("gpu2", True), "gpu3": host("gpu3", False)}
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, PLAYBOOK, _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    # The last host's problem is found while every host is being checked ...
    assert "has no config.json on gpu3" in out, out
    # ... and no host reached the play that restarts them.
    assert "PLAY [A/B speculative decoding on the serving release]" not in out, out
    assert "Measure every arm" not in out, out
    assert {name: _tree(tmp_path / name) for name in hosts} == before


@needs_ansible
def test_an_arm_that_asks_vllm_to_quantize_a_plain_draft_is_refused_before_any_change(
    tmp_path: Path,
) -> None:
    # vLLM 0.24.0 and 0.26.0 on an H100 stopped at engine start with such an arm
    # ("hf_overrides must be a dict for get_quant_config"; lab/calibration/h100-vllm-8).
    def host(name: str, quantized: bool) -> dict[str, Any]:
        draft = tmp_path / name / "models" / "draft"
        draft.mkdir(parents=True)
        config = {"model_type": "qwen3"}
        if quantized:
            config["quantization_config"] = {"quant_method": "fp8"}  # type: ignore[assignment]
        (draft / "config.json").write_text(json.dumps(config) + "\n")
        arm = {"model": str(draft), "num_speculative_tokens": 3, "quantization": "fp8"}
        return _host(tmp_path, name, benchgate_speculative_candidates=[arm])

    hosts = {"gpu1": host("gpu1", True), "gpu2": host("gpu2", False)}
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, PLAYBOOK, _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    flat = " ".join(out.split())
    assert 'Arm "draft-k3" on gpu2: the draft model "' in flat, out
    assert "is not quantized (its config.json has no quantization_config)" in flat, out
    assert "Use a draft checkpoint quantized with fp8" in flat, out
    assert 'Arm "draft-k3" on gpu1' not in flat, out  # its checkpoint is quantized
    assert "PLAY [A/B speculative decoding on the serving release]" not in out, out
    assert {name: _tree(tmp_path / name) for name in hosts} == before


@needs_ansible
def test_a_served_speculative_config_that_asks_vllm_to_quantize_a_plain_draft_is_refused(
    tmp_path: Path,
) -> None:
    draft = tmp_path / "gpu1" / "models" / "draft"
    draft.mkdir(parents=True)
    (draft / "config.json").write_text('{"model_type": "qwen3"}\n')
    spec = {"model": str(draft), "num_speculative_tokens": 3, "quantization": "fp8"}
    hosts = {"gpu1": _host(tmp_path, "gpu1", vllm_service_speculative=spec)}
    before = _tree(tmp_path / "gpu1")
    done = _play(tmp_path, PLAYBOOK, _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    flat = " ".join(out.split())
    assert f'On gpu1, the draft model "{draft}" is not quantized' in flat, out
    assert "PLAY [A/B speculative decoding on the serving release]" not in out, out
    assert _tree(tmp_path / "gpu1") == before
