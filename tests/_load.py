"""Import a Python file by its path: the tests' one copy of the importlib recipe.

The Ansible modules and plugins, the lab/experiments/ scripts and the role files
are not importable packages; the tests load them with load_file.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(path: Path, name: str | None = None, *, register: bool = False) -> ModuleType:
    """Import the Python file at path as a module named name (default: its stem).

    register=True puts it in sys.modules first (dataclasses and pickling look
    their module up). Each call executes the file afresh: two calls with
    different names give two independent modules.
    """
    spec = importlib.util.spec_from_file_location(name or Path(path).stem, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ansible_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a real ansible-playbook run in a test: this repository's
    ansible.cfg, plain output, and a lock file of the test's own."""
    import os

    root = Path(__file__).resolve().parents[1]
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(root / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        BENCHGATE_LOCK_FILE=str(tmp_path / "rollout.lock"),
    )
