"""The one venv builder (roles/benchgate_venv) and the failure_reason filter.

The builder runs for real on this machine: a venv is created, pip runs inside
it (offline: ``--no-index``), the marker is written last and decides the next
run; a failing pip leaves no folder behind and says what failed.
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

from _load import ansible_env, load_file

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")

failure = load_file(ROOT / "plugins/filter/failure.py", "bg_failure")


def test_failure_reason_names_the_task_the_msg_and_the_end_of_stderr() -> None:
    result = {
        "msg": "non-zero return code",
        "stderr": "x" * 2000 + "\nERROR: No matching distribution",
    }
    why = failure.failure_reason(result, "Install the requirements with pip", 100)
    assert why.startswith('"Install the requirements with pip" failed: non-zero return code: ')
    assert why.endswith("ERROR: No matching distribution")
    assert len(why.split(": ", 2)[2]) == 100


def test_failure_reason_without_stderr_or_task() -> None:
    assert failure.failure_reason({"msg": "a\n  b"}) == "failed: a b"
    assert failure.failure_reason({"msg": "m" * 50}, "t", 20) == '"t" failed: ' + "m" * 17 + "..."
    assert failure.failure_reason({}, "t") == '"t" failed'


def test_failure_reason_refuses_what_is_not_a_result() -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="task result"):
        failure.failure_reason("boom")
    with pytest.raises(AnsibleFilterError, match="limit"):
        failure.failure_reason({}, "t", "many")


def _build(
    tmp_path: Path, venv: Path, identity: dict[str, Any], requirements: list[str], **more: Any
) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK is not None
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Build",
                    "ansible.builtin.include_role": {"name": "benchgate_venv"},
                    "vars": {
                        "benchgate_venv_path": str(venv),
                        "benchgate_venv_identity": identity,
                        "benchgate_venv_requirements": requirements,
                        "benchgate_venv_python": sys.executable,
                        "benchgate_venv_pip_args": ["--no-index"],
                        "benchgate_venv_pip_attempts": 1,
                        "benchgate_venv_what": "Building the test venv",
                        **more,
                    },
                },
                {
                    "name": "Say",
                    "ansible.builtin.debug": {"msg": "NEEDED={{ benchgate_venv_needed }}"},
                },
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    environ = ansible_env(tmp_path)
    return subprocess.run(
        [
            ANSIBLE_PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
    )


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="the builder makes root-owned files")
def test_builder_marks_last_skips_when_complete_and_rebuilds_on_change(tmp_path: Path) -> None:
    venv = tmp_path / "releases" / "1.0"
    venv.parent.mkdir()
    first = _build(tmp_path, venv, {"version": "1.0"}, ["# nothing to install"])
    assert first.returncode == 0, first.stdout[-3000:]
    assert "NEEDED=True" in first.stdout
    marker = venv / "benchgate-venv.json"
    assert json.loads(marker.read_text()) == {"version": "1.0"}
    assert (venv / "benchgate-requirements.txt").read_text() == "# nothing to install\n"
    assert (venv / "bin" / "python").exists()

    again = _build(tmp_path, venv, {"version": "1.0"}, ["# nothing to install"])
    assert again.returncode == 0 and "NEEDED=False" in again.stdout
    assert "changed=0" in again.stdout

    changed = _build(tmp_path, venv, {"version": "1.1"}, ["# other pins"])
    assert changed.returncode == 0 and "NEEDED=True" in changed.stdout
    assert json.loads(marker.read_text()) == {"version": "1.1"}


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="the builder makes root-owned files")
def test_a_failing_pip_removes_a_fresh_venv_and_says_what_failed(tmp_path: Path) -> None:
    venv = tmp_path / "releases" / "9.9"
    venv.parent.mkdir()
    done = _build(
        tmp_path,
        venv,
        {"version": "9.9"},
        ["no-such-package-benchgate==9.9"],
        benchgate_venv_fresh=True,
        benchgate_venv_failure_hint="Fix the pin.",
    )
    assert done.returncode != 0
    out = " ".join(done.stdout.split())
    assert f"Building the test venv into {venv} failed:" in out
    assert '"Install the requirements with pip" failed: non-zero return code:' in out
    assert "No matching distribution found for no-such-package-benchgate==9.9" in out
    assert out.count("Fix the pin.") >= 1
    assert not venv.exists()


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="the builder makes root-owned files")
def test_a_release_marker_written_by_earlier_benchgate_still_counts_as_complete(
    tmp_path: Path,
) -> None:
    """vllm_install's marker bytes are those benchgate wrote before the builder existed."""
    venv = tmp_path / "releases" / "0.31.0"
    (venv / "bin").mkdir(parents=True)
    wanted = {"package": "vllm", "version": "0.31.0", "extra_packages": []}
    (venv / "benchgate-release.json").write_text(
        json.dumps(wanted, indent=4, sort_keys=True) + "\n"
    )
    done = _build(
        tmp_path, venv, wanted, ["vllm==0.31.0"], benchgate_venv_marker="benchgate-release.json"
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "NEEDED=False" in done.stdout
    assert not (venv / "bin" / "python").exists()  # nothing was built


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="the builder makes root-owned files")
def test_the_folder_that_serves_is_never_rebuilt_under_another_name(tmp_path: Path) -> None:
    """benchgate_venv_protect names the serving folder through a link; the venv is
    the same folder written through a symlinked parent with a trailing slash."""
    real = tmp_path / "real"
    venv = real / "releases" / "1.0"
    (venv / "bin").mkdir(parents=True)
    (venv / "sentinel").write_text("serving\n")
    (real / "current").symlink_to(venv)
    (tmp_path / "alias").symlink_to(real)
    done = _build(
        tmp_path,
        tmp_path / "alias" / "releases" / "1.0",
        {"version": "1.0", "extra": "other"},
        ["# other pins"],
        benchgate_venv_fresh=True,
        benchgate_venv_protect=f"{tmp_path}/alias//current/",
    )
    out = " ".join(done.stdout.split())
    assert done.returncode != 0, out[-3000:]
    assert "it serves, and benchgate never removes or rebuilds it. Nothing was changed." in out
    assert sorted(p.name for p in venv.iterdir()) == ["bin", "sentinel"]
