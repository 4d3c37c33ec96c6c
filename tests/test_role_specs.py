"""Each role's defaults and its argument specs describe the same knobs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).parent.parent / "roles").iterdir() if p.is_dir())


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml")
    options = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    optional = {name for name, spec in options.items() if not spec.get("required")}
    assert set(defaults) == optional, (
        f"{role.name}: only in defaults {sorted(set(defaults) - optional)}, "
        f"only in argument_specs {sorted(optional - set(defaults))}"
    )
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:
            continue  # a templated default: the spec documents its resolved form
        assert options[name].get("default") == value, f"{role.name}: {name} default differs"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_required_options_have_no_default(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml")
    options = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        if spec.get("required"):
            assert name not in defaults, f"{role.name}: required {name} must not have a default"
            assert "default" not in spec, f"{role.name}: required {name} has a default in its spec"


ROOT = Path(__file__).parent.parent
TASKS_FROM = re.compile(
    r"name:\s*(?P<role>[a-z_]+)\s*,?\s*\n?\s*tasks_from:\s*(?P<step>[a-z_]+)(?:\.yml)?\b"
)


def _tasks_from_uses() -> set[tuple[str, str]]:
    """Every (role, entry point) that a playbook, role or test playbook includes."""
    files = [
        *ROOT.glob("playbooks/*.yml"),
        *ROOT.glob("roles/*/tasks/*.yml"),
        *ROOT.glob("molecule/*/*.yml"),
        *ROOT.glob("molecule/*/tasks/*.yml"),
        *ROOT.glob("tests/playbooks/*.yml"),
    ]
    uses: set[tuple[str, str]] = set()
    for path in files:
        for match in TASKS_FROM.finditer(path.read_text()):
            uses.add((match["role"], match["step"]))
    return uses


def test_the_scan_finds_the_known_entry_points() -> None:
    uses = _tasks_from_uses()
    assert {
        ("vllm_benchmark", "run"),
        ("vllm_service", "verify"),
        ("vllm_service", "preflight"),
        ("benchgate", "preflight"),
        ("benchgate", "batch_guard"),
        ("benchgate_venv", "check"),
    } <= uses


def test_every_entry_point_used_through_tasks_from_has_a_spec() -> None:
    missing = []
    for role, step in sorted(_tasks_from_uses()):
        assert (ROOT / "roles" / role / "tasks" / f"{step}.yml").exists(), (role, step)
        specs = _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
        if step not in specs:
            missing.append(f"{role}: {step}")
    assert not missing, f"entry points without a spec in meta/argument_specs.yml: {missing}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_entry_point_options_of_role_settings_keep_the_roles_defaults(role: Path) -> None:
    """An entry point restates a setting exactly as main does (same type and default),
    so that validating it can never change or reject what the role's defaults give."""
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    main = specs["main"]["options"]
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            if name in main and "default" in main[name]:
                assert option == main[name], f"{role.name}: {entry}.{name} differs from main's"
