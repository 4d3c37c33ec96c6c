"""Each role's defaults and its argument specs describe the same knobs."""

from __future__ import annotations

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
