"""Every module and filter renders with ansible-doc, and its EXAMPLES are real.

Real examples: they parse as YAML, call our modules with documented options
only, and every variable they read is one the playbooks, roles or
inventories use (or one the example itself registers).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment, nodes

from _load import load_file

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_DOC = shutil.which("ansible-doc", path=str(Path(sys.executable).parent)) or shutil.which(
    "ansible-doc"
)
pytestmark = pytest.mark.skipif(ANSIBLE_DOC is None, reason="ansible-doc not installed")

MODULES = sorted(path.stem for path in (ROOT / "plugins" / "modules").glob("*.py"))


def filter_names() -> list[str]:
    """The names the filter plugin registers (not those of the doc files)."""
    names: list[str] = []
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        plugin = load_file(path, f"bg_docs_{path.stem}")
        names.extend(plugin.FilterModule().filters())
    return sorted(names)


FILTERS = filter_names()
# Variables Ansible sets itself, and Jinja globals.
MAGIC = {
    "ansible_check_mode",
    "ansible_playbook_python",
    "groups",
    "hostvars",
    "inventory_hostname",
    "lookup",
    "now",
    "omit",
    "playbook_dir",
    "query",
    "role_path",
}
# Task keys whose values are bare Jinja expressions.
BARE_EXPRESSIONS = {"when", "that", "changed_when", "failed_when", "until"}


def ansible_doc(kind: str, names: list[str]) -> dict[str, Any]:
    assert ANSIBLE_DOC is not None
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [ANSIBLE_DOC, "-t", kind, "--json", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    docs: dict[str, Any] = json.loads(done.stdout)
    return docs


@pytest.fixture(scope="module")
def module_docs() -> dict[str, Any]:
    return ansible_doc("module", MODULES)


@pytest.fixture(scope="module")
def filter_docs() -> dict[str, Any]:
    return ansible_doc("filter", FILTERS)


@pytest.fixture(scope="module")
def known_variables() -> set[str]:
    """Every word in the playbooks, roles and inventories."""
    words: set[str] = set()
    for folder in ("playbooks", "roles", "inventory"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".yml", ".yaml", ".j2"):
                words.update(re.findall(r"\w+", path.read_text()))
    return words


def expressions(value: Any, key: str = "") -> Iterator[str]:
    """The Jinja expressions in an example: templated strings and bare conditions."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from expressions(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from expressions(item, key)
    elif isinstance(value, str):
        if key in BARE_EXPRESSIONS:
            yield "{{ " + value + " }}"
        elif "{{" in value or "{%" in value:
            yield value


def variables_read(example: Any) -> set[str]:
    env = Environment()
    return {
        name.name
        for text in expressions(example)
        for name in env.parse(text).find_all(nodes.Name)
        if name.ctx == "load"
    }


def variables_set(example: Any) -> set[str]:
    """What a task list registers or sets in vars:, or a filter example's keys."""
    if isinstance(example, dict):
        return set(example)
    names: set[str] = set()
    for task in example:
        names.update([task["register"]] if "register" in task else [])
        names.update(task.get("vars", {}))
    return names


def test_every_module_renders(module_docs: dict[str, Any]) -> None:
    assert sorted(module_docs) == MODULES
    for name, doc in module_docs.items():
        assert doc["doc"]["short_description"], name
        assert doc["examples"].strip(), name
        assert doc["return"], name


def test_every_filter_renders(filter_docs: dict[str, Any]) -> None:
    assert len(FILTERS) >= 9
    assert sorted(filter_docs) == FILTERS
    for name, doc in filter_docs.items():
        assert doc["doc"]["short_description"], name
        assert "_input" in doc["doc"]["options"], name
        assert name in doc["examples"], name
        assert doc["return"]["_value"]["type"], name


def test_module_examples_call_modules_with_documented_options(
    module_docs: dict[str, Any],
) -> None:
    options = {name: set(doc["doc"]["options"]) for name, doc in module_docs.items()}
    for name, doc in module_docs.items():
        tasks = yaml.safe_load(doc["examples"])
        assert isinstance(tasks, list) and tasks, name
        called = [(module, task[module]) for task in tasks for module in options if module in task]
        assert name in [module for module, _ in called], f"{name}'s EXAMPLES never call it"
        for module, args in called:
            unknown = set(args or {}) - options[module]
            assert not unknown, f"{name}'s EXAMPLES give {module} unknown options {unknown}"


@pytest.mark.parametrize("kind", ["module", "filter"])
def test_examples_read_only_variables_that_exist(
    kind: str,
    module_docs: dict[str, Any],
    filter_docs: dict[str, Any],
    known_variables: set[str],
) -> None:
    docs = module_docs if kind == "module" else filter_docs
    for name, doc in docs.items():
        example = yaml.safe_load(doc["examples"])
        missing = variables_read(example) - variables_set(example) - MAGIC - known_variables
        assert not missing, f"{kind} {name}: EXAMPLES read variables that exist nowhere: {missing}"


def test_the_variable_check_finds_a_made_up_variable(known_variables: set[str]) -> None:
    example = yaml.safe_load(
        """
        - name: Judge
          benchgate_gate:
            baseline: "{{ __vllm_benchmark_baseline.result }}"
            candidate: "{{ __benchgate_candidate_run.result }}"
            release: "{{ vllm_version }}"
          register: __benchgate_candidate_run
          when: not benchgate_controller_python
        """
    )
    missing = variables_read(example) - variables_set(example) - MAGIC - known_variables
    assert missing == {"__vllm_benchmark_baseline", "benchgate_controller_python"}
