"""The serving release survives any spelling of ``vllm_install_root`` (issue 32, point 3).

Real ``ansible-playbook`` runs the ``vllm_install`` role on this machine (a
local connection) against a root under ``tmp_path`` written as an operator
might: with a trailing slash, with a double slash, or through a symlink. The
role used to compare the release folder as written with the resolved
``current`` link, so the serving release looked like another one: pip was run
inside it (the venv builder wiped it, pip failed, the rescue removed it),
``previous`` was pointed at the serving release itself, and prune removed the
serving release and the rollback target.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from _load import ansible_env

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
pytestmark = [
    pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the role makes root-owned files"),
]

SPELLINGS = ["trailing-slash", "double-slash", "symlinked-root"]


def _release(root: Path, version: str, extra: list[str] | None = None) -> Path:
    """A complete release folder, as vllm_install leaves it (marker bytes included)."""
    release = root / "releases" / version
    (release / "bin").mkdir(parents=True)
    wanted = {"package": "vllm", "version": version, "extra_packages": extra or []}
    (release / "benchgate-release.json").write_text(
        json.dumps(wanted, indent=4, sort_keys=True) + "\n"
    )
    (release / "bin" / "vllm").write_text(f"#!/bin/sh\necho {version}\n")
    (release / "bin" / "vllm").chmod(0o755)
    (release / "sentinel").write_text(f"release {version}\n")
    return release


def _root(tmp_path: Path, spelling: str) -> tuple[Path, str]:
    """The real install root, and vllm_install_root as the operator wrote it."""
    real = tmp_path / "data" / "vllm"
    real.mkdir(parents=True)
    if spelling == "trailing-slash":
        return real, f"{real}/"
    if spelling == "double-slash":
        return real, str(real).replace("/data/", "/data//") + "//"
    link = tmp_path / "opt-vllm"
    link.symlink_to(real)
    return real, str(link)


def _install(tmp_path: Path, root: str, **settings: Any) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK is not None
    play = [
        {
            "name": "Install",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Run the role",
                    "ansible.builtin.include_role": {
                        "name": "vllm_install",
                        "tasks_from": settings.pop("tasks_from", "main"),
                    },
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    hostvars = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "vllm_install_python": sys.executable,
        "vllm_install_root": root,
        "vllm_install_no_index": True,  # pip never leaves this machine
        "vllm_install_pip_retries": 1,
        **settings,
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"web1": hostvars}}}))
    env = ansible_env(tmp_path)
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _tree(path: Path) -> dict[str, str]:
    """Every file and link under path, with its content or link text."""
    out = {}
    for item in sorted(path.rglob("*")):
        name = str(item.relative_to(path))
        if item.is_symlink():
            out[name] = "-> " + os.readlink(item)
        elif item.is_file():
            out[name] = item.read_text()
        else:
            out[name] = "/"
    return out


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_serving_release_is_never_rebuilt_whatever_the_roots_spelling(
    tmp_path: Path, spelling: str
) -> None:
    """The same version with other extra packages: refused before anything changes."""
    real, root = _root(tmp_path, spelling)
    serving = _release(real, "0.31.0")
    (real / "current").symlink_to(f"{root.rstrip('/')}/releases/0.31.0")
    before = _tree(real)

    done = _install(tmp_path, root, vllm_version="0.31.0", vllm_install_extra_packages=["x==1.0"])
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, out[-3000:]
    assert f"vllm==0.31.0 serves now from {serving}" in out, out[-3000:]
    assert "benchgate never runs pip inside the serving release. Nothing was changed." in out
    assert "Install the requirements with pip" not in out  # pip never ran
    assert _tree(real) == before
    assert (real / "current" / "sentinel").read_text() == "release 0.31.0\n"


@pytest.mark.parametrize("spelling", ["trailing-slash", "symlinked-root"])
def test_installing_the_serving_release_again_changes_nothing(
    tmp_path: Path, spelling: str
) -> None:
    """Complete and serving: current stays, previous still names the rollback target."""
    real, root = _root(tmp_path, spelling)
    _release(real, "0.30.0")
    _release(real, "0.31.0")
    (real / "current").symlink_to(real / "releases" / "0.31.0")
    (real / "previous").symlink_to(real / "releases" / "0.30.0")
    before = _tree(real)

    done = _install(tmp_path, root, vllm_version="0.31.0")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "changed=0" in done.stdout, done.stdout[-3000:]
    assert _tree(real) == before


@pytest.mark.parametrize("spelling", ["trailing-slash", "symlinked-root"])
def test_prune_keeps_the_serving_and_the_previous_release(tmp_path: Path, spelling: str) -> None:
    """After a rollback current names the older release; installing a third without
    activating it must keep both (vllm_install_keep_releases: 0 keeps no other)."""
    real, root = _root(tmp_path, spelling)
    _release(real, "0.30.0")
    _release(real, "0.31.0")
    _release(real, "0.32.0")
    _release(real, "0.29.0")  # neither serving, previous nor wanted: pruned
    (real / "current").symlink_to(real / "releases" / "0.30.0")
    (real / "previous").symlink_to(real / "releases" / "0.31.0")

    done = _install(
        tmp_path,
        root,
        vllm_version="0.32.0",
        vllm_install_activate=False,
        vllm_install_keep_releases=0,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert sorted(p.name for p in (real / "releases").iterdir()) == ["0.30.0", "0.31.0", "0.32.0"]
    assert (real / "current").resolve() == real / "releases" / "0.30.0"
    assert (real / "previous").resolve() == real / "releases" / "0.31.0"


def test_rolling_back_to_the_serving_release_keeps_previous(tmp_path: Path) -> None:
    """vllm_install_rollback_to written through the symlinked root names the serving
    release: nothing to flip, and previous must not become the serving release."""
    real, root = _root(tmp_path, "symlinked-root")
    _release(real, "0.30.0")
    _release(real, "0.31.0")
    (real / "current").symlink_to(real / "releases" / "0.31.0")
    (real / "previous").symlink_to(real / "releases" / "0.30.0")
    before = _tree(real)

    done = _install(
        tmp_path, root, tasks_from="rollback", vllm_install_rollback_to=f"{root}/releases/0.31.0"
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "changed=0" in done.stdout, done.stdout[-3000:]
    assert _tree(real) == before
