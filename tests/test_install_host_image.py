"""Installing a release on a host whose image brings torch (issue 34, point 5).

GPU hosts often run an image with its own CUDA build of torch and a wheelhouse
prepared for it: the release venv must see the image's packages
(``vllm_install_system_site_packages``) and pip must install exactly the pinned
wheels without resolving vLLM's own torch pin (``vllm_install_no_deps``). Real
``ansible-playbook`` runs ``vllm_install`` here with a local connection and a
wheelhouse holding one small wheel named vllm that declares a dependency no
source has, as vLLM's wheel declares a torch the image does not carry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

from test_install_paths import _install, _root

VERSION = "9.9.9"
MISSING = "benchgate-absent-torch==1.0"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(folder: Path) -> Path:
    """A wheel `vllm` VERSION whose `vllm --version` prints VERSION, requiring MISSING."""
    dist = f"vllm-{VERSION}.dist-info"
    files = {
        "vllm/__init__.py": f'__version__ = "{VERSION}"\n',
        "vllm/cli.py": "def main():\n    print(__import__('vllm').__version__)\n",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}\nRequires-Dist: {MISSING}\n"
        ),
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{dist}/entry_points.txt": "[console_scripts]\nvllm = vllm.cli:main\n",
    }
    record = [_record_line(name, text.encode()) for name, text in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True)
    wheel = folder / f"vllm-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


def test_a_wheelhouse_for_the_hosts_image_installs_with_no_deps_and_system_packages(
    tmp_path: Path,
) -> None:
    real, root = _root(tmp_path, "trailing-slash")
    wheelhouse = _wheel(tmp_path / "wheelhouse").parent
    image_settings = {
        "vllm_version": VERSION,
        "vllm_install_wheelhouse": str(wheelhouse),
        "vllm_install_no_deps": True,
        "vllm_install_system_site_packages": True,
    }

    done = _install(tmp_path, root, **image_settings)
    out = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, out
    release = real / "releases" / VERSION
    assert (real / "current").resolve() == release
    assert "include-system-site-packages = true" in (release / "pyvenv.cfg").read_text()
    marker = json.loads((release / "benchgate-release.json").read_text())
    assert marker == {
        "package": "vllm",
        "version": VERSION,
        "extra_packages": [],
        "system_site_packages": True,
        "no_deps": True,
    }
    ran = subprocess.run(
        [str(release / "bin" / "vllm"), "--version"], capture_output=True, text=True
    )
    assert ran.stdout.strip() == VERSION

    again = _install(tmp_path, root, **image_settings)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "changed=0" in again.stdout, again.stdout[-3000:]


def test_without_no_deps_the_missing_dependency_stops_the_install_and_nothing_serves(
    tmp_path: Path,
) -> None:
    real, root = _root(tmp_path, "symlinked-root")
    wheelhouse = _wheel(tmp_path / "wheelhouse").parent

    done = _install(tmp_path, root, vllm_version=VERSION, vllm_install_wheelhouse=str(wheelhouse))
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, out[-3000:]
    assert f"Installing vllm=={VERSION}" in out and "benchgate-absent-torch" in out, out[-3000:]
    assert not (real / "releases" / VERSION).exists()
    assert not (real / "current").exists()
