"""The server's API key lives in one setting: vllm_service_api_key.

Issue 32: a key given only as ``vllm_service_secret_environment.VLLM_API_KEY``
or ``--api-key`` in ``vllm_service_extra_args`` was used by the server but
not sent by the benchmark (which reads ``vllm_service_api_key``): the
baseline got 401. Such a key is now refused in vllm_service's preflight,
naming where it was given and never its value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from benchgate.serve import api_key_elsewhere
from test_filters import F
from test_fleet_inputs import ROOT, _host, _inventory, _play, _tree, needs_ansible

ENVS = ("vllm_service_environment", "vllm_service_secret_environment")


@pytest.mark.parametrize(
    ("extra_args", "where"),
    [
        (["--api-key", "k"], "--api-key"),
        (["--enforce-eager", "--api-key=k"], "--api-key"),
        (["--api_key", "k"], "--api_key"),  # vLLM reads _ as -
        (["--api-k", "k"], "--api-k"),  # argparse takes an unambiguous prefix
        ({"api_key": "k"}, "--api_key"),  # a mapping of option -> value
        ({"--api-key": "k", "enforce_eager": True}, "--api-key"),
    ],
)
def test_an_api_key_in_the_extra_args_is_found(extra_args: Any, where: str) -> None:
    assert api_key_elsewhere(extra_args) == [f"vllm_service_extra_args ({where})"]


@pytest.mark.parametrize(
    "extra_args",
    [
        [],
        None,
        ["--enforce-eager", "--max-num-seqs", "1"],
        ["--api-server-count", "2"],  # another option
        ["--api", "x"],  # ambiguous for vLLM's parser: not taken for --api-key
        ["--served-model-name", "api-key"],
        {"api_key": None, "enforce_eager": True},  # None leaves the option out
    ],
)
def test_other_extra_args_are_fine(extra_args: Any) -> None:
    assert api_key_elsewhere(extra_args) == []


def test_the_key_in_an_environment_is_found_by_name_never_by_value() -> None:
    envs = {
        "vllm_service_environment": {"VLLM_API_KEY": "zq91-plain", "OMP_NUM_THREADS": "2"},
        "vllm_service_secret_environment": {"VLLM_API_KEY": "zq92-secret"},
    }
    found = api_key_elsewhere(["--api-key", "zq93-arg"], envs)
    assert found == [
        "vllm_service_extra_args (--api-key)",
        "vllm_service_environment.VLLM_API_KEY",
        "vllm_service_secret_environment.VLLM_API_KEY",
    ]
    assert "zq9" not in " ".join(found)
    assert api_key_elsewhere([], {"vllm_service_secret_environment": {"HF_TOKEN": "x"}}) == []


def test_the_filter() -> None:
    envs = {"vllm_service_secret_environment": {"VLLM_API_KEY": "k"}}
    assert F["api_key_elsewhere"]([], envs) == ["vllm_service_secret_environment.VLLM_API_KEY"]
    assert F["api_key_elsewhere"](["--enforce-eager"]) == []
    with pytest.raises(AnsibleFilterError, match="mapping of setting name"):
        F["api_key_elsewhere"]([], ["VLLM_API_KEY"])


def _settings_in(data: Any) -> list[dict[str, Any]]:
    """Every mapping in an inventory or vars file that sets one of the key's places."""
    found = []
    if isinstance(data, dict):
        if {"vllm_service_extra_args", *ENVS} & set(data):
            found.append(data)
        for value in data.values():
            found += _settings_in(value)
    elif isinstance(data, list):
        for value in data:
            found += _settings_in(value)
    return found


def test_the_shipped_inventories_give_the_key_in_its_one_place() -> None:
    """The demo, the examples, molecule's fleet and the other scenarios pass the check."""
    files = [
        path
        for folder in (ROOT / "inventory", ROOT / "molecule")
        for path in sorted(folder.rglob("*.yml"))
    ]
    checked = set()
    for path in files:
        for document in yaml.safe_load_all(path.read_text()):
            for settings in _settings_in(document):
                checked.add(path.relative_to(ROOT).as_posix())
                envs = {name: settings.get(name) or {} for name in ENVS}
                extra = settings.get("vllm_service_extra_args")
                assert api_key_elsewhere(extra, envs) == [], path
    assert {
        "molecule/fleet/inventory/group_vars/vllm_hosts.yml",
        "inventory/demo/group_vars/all/main.yml",
        "inventory/examples/l4-fleet-per-flag.yml",
    } <= checked, checked


@needs_ansible
def test_a_key_given_elsewhere_is_refused_before_anything_changes(tmp_path: Path) -> None:
    secrets = {
        "args": "zq71-from-extra-args",
        "secret_env": "zq72-from-secret-environment",
        "env": "zq73-from-environment",
        "abbrev": "zq74-from-an-abbreviation",
    }
    hosts = {
        "args": _host(tmp_path, "args", vllm_service_extra_args=["--api-key", secrets["args"]]),
        "secret_env": _host(
            tmp_path,
            "secret_env",
            vllm_service_secret_environment={"VLLM_API_KEY": secrets["secret_env"]},
        ),
        "env": _host(tmp_path, "env", vllm_service_environment={"VLLM_API_KEY": secrets["env"]}),
        "abbrev": _host(
            tmp_path, "abbrev", vllm_service_extra_args=[f"--api_k={secrets['abbrev']}"]
        ),
        # The one place: accepted (the run stops on the others).
        "good": _host(tmp_path, "good", vllm_service_api_key="zq75-the-right-place"),
    }
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    says = "that benchgate's benchmark and readiness check would not send"
    assert f"vllm_service_extra_args (--api-key) gives the server an API key {says}" in out, out
    assert f"vllm_service_secret_environment.VLLM_API_KEY gives the server an API key {says}" in out
    assert f"vllm_service_environment.VLLM_API_KEY gives the server an API key {says}" in out
    assert f"vllm_service_extra_args (--api_k) gives the server an API key {says}" in out
    assert "set vllm_service_api_key instead" in out
    assert "fatal: [good]" not in out
    for secret in [*secrets.values(), "zq75-the-right-place"]:
        assert secret not in out
    assert "PLAY [Upgrade, canary first, then in batches]" not in out
    assert {name: _tree(tmp_path / name) for name in hosts} == before
