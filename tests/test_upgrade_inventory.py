"""playbooks/upgrade.yml's first check: the inventory must declare vllm_hosts.

Real ansible-playbook runs against inventories with no reachable host, so
nothing is touched: a missing group is refused (it used to match nothing and
exit 0), a declared but empty group is a fleet with nothing to upgrade (the
scheduled rollout of molecule/scheduler relies on it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")


def _upgrade(tmp_path: Path, inventory: str) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK is not None
    inv = tmp_path / "hosts.yml"
    inv.write_text(inventory)
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        BENCHGATE_LOCK_FILE=str(tmp_path / "rollout.lock"),
        ANSIBLE_NOCOLOR="1",
    )
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inv), str(ROOT / "playbooks" / "upgrade.yml")]
    argv += ["-e", "vllm_version=0.32.0"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)


def test_an_inventory_without_the_group_is_refused(tmp_path: Path) -> None:
    done = _upgrade(tmp_path, "other:\n  hosts:\n    gpu1:\n      ansible_host: 192.0.2.1\n")
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "The inventory has no group vllm_hosts" in out
    assert "PLAY [Check every host" not in out  # stopped before the host plays


def test_a_declared_empty_group_runs_and_upgrades_nothing(tmp_path: Path) -> None:
    done = _upgrade(tmp_path, "all:\n  children:\n    vllm_hosts:\n      hosts: {}\n")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "PLAY [Upgrade, canary first, then in batches]" in out
    assert "no hosts matched" in out
