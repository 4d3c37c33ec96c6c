"""benchgate as the installed collection benchgate.benchgate, the way a user gets it.

Builds the collection from this repository (``ansible-galaxy collection build``),
installs the tarball into a temporary collections path and runs, from a separate
playbook project (tests/collection_user/: its own ansible.cfg, nothing pointing at
this checkout), a user's playbooks that call benchgate by fully qualified names.
With ``BENCHGATE_COLLECTION_HOST`` set to a podman container that serves vLLM (the
demo host, a molecule instance), the benchgate role's preflight also runs against it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
USER = Path(__file__).parent / "collection_user"
BIN = Path(sys.executable).parent
GALAXY = shutil.which("ansible-galaxy", path=str(BIN)) or shutil.which("ansible-galaxy")
PLAYBOOK = shutil.which("ansible-playbook", path=str(BIN)) or shutil.which("ansible-playbook")
pytestmark = pytest.mark.skipif(GALAXY is None or PLAYBOOK is None, reason="Ansible not installed")


def user_env() -> dict[str, str]:
    """The environment of a user's run: no ANSIBLE_* setting of this checkout's
    (molecule and the tests set some), plain output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = run([str(GALAXY), "collection", "build", "--output-path", str(out), str(ROOT)], ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("benchgate-benchgate-*.tar.gz")
    return path


@pytest.fixture(scope="module")
def project(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's playbook project with the collection installed in ./collections."""
    project = tmp_path_factory.mktemp("user") / "ops"
    shutil.copytree(USER, project)
    installed = run(
        [
            str(GALAXY),
            "collection",
            "install",
            "--force",
            "-p",
            str(project / "collections"),
            str(tarball),
        ],
        project,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (project / "collections/ansible_collections/benchgate/benchgate/MANIFEST.json").is_file()
    return project


def test_collection_version_is_the_package_version() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    init = (ROOT / "src/benchgate/__init__.py").read_text()
    assert galaxy["version"] == pyproject["project"]["version"]
    assert f'__version__ = "{galaxy["version"]}"' in init


def test_the_tarball_holds_the_collection_and_no_lab(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    for needed in (
        "MANIFEST.json",
        "meta/runtime.yml",
        "playbooks/upgrade.yml",
        "roles/benchgate/tasks/preflight.yml",
        "plugins/modules/benchgate_gate.py",
        "plugins/filter/vllm.py",
        "plugins/callback/benchgate_summary.py",
        "workloads/demo.yml",
        "pyproject.toml",
        "src/benchgate/__init__.py",
    ):
        assert needed in names, needed
    tops = {name.split("/")[0] for name in names}
    assert not tops & {
        "tests",
        "molecule",
        "lab",
        "benchmarks",
        "scripts",
        "inventory",
        ".cache",
        ".venv",
        ".git",
        ".collections",
        "ansible.cfg",
    }, tops
    assert not [n for n in names if "__pycache__" in n or n.startswith("docs/calibration")]
    # Small: the roles, plugins, package and workloads, not the caches (MB).
    assert tarball.stat().st_size < 1_000_000


def test_a_user_playbook_imports_the_upgrade_by_its_fqcn(project: Path) -> None:
    (project / "hosts.yml").write_text(
        "all:\n  children:\n    vllm_hosts:\n      hosts:\n        vllm-1: {}\n"
    )
    checked = run([str(PLAYBOOK), "-i", "hosts.yml", "--syntax-check", "upgrade.yml"], project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "playbook: upgrade.yml" in checked.stdout


def test_the_collection_runs_on_the_controller_by_fqcn(project: Path) -> None:
    """Filters, a module, a role reading the shipped workloads, the summary callback."""
    ran = run([str(PLAYBOOK), "-i", "localhost,", "local.yml"], project)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert re.search(r"localhost\s*: ok=\d+\s+changed=1\s+unreachable=0\s+failed=0", out), out
    assert "BENCHGATE SUMMARY" in out
    assert re.search(r"demo-host\s+0\.31\.0 -> 0\.32\.0", out), out
    assert (project / "ledger.sqlite").is_file()


@pytest.mark.skipif(
    not os.environ.get("BENCHGATE_COLLECTION_HOST"),
    reason="BENCHGATE_COLLECTION_HOST names no podman container serving vLLM",
)
def test_the_preflight_passes_on_a_live_host_by_fqcn(project: Path) -> None:
    """Read-only: the benchgate role's preflight against a host that serves vLLM."""
    host = os.environ["BENCHGATE_COLLECTION_HOST"]
    (project / "live.yml").write_text(
        "all:\n  children:\n    vllm_hosts:\n      hosts:\n"
        f"        {host}:\n"
        "          ansible_connection: containers.podman.podman\n"
        "          ansible_python_interpreter: /usr/bin/python3\n"
    )
    # The user's settings for that host: the demo's (molecule/default deploys with them).
    (project / "group_vars").mkdir(exist_ok=True)
    shutil.copy(ROOT / "inventory/demo/group_vars/all/main.yml", project / "group_vars/all.yml")
    ran = run([str(PLAYBOOK), "-i", "live.yml", "preflight.yml"], project)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert f"benchgate preflight passed on {host}" in out
    assert re.search(rf"{re.escape(host)}\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", out)
