"""Each default has one home; where Ansible needs the literal again (a module's
documentation, in its .yml beside it, and argument_spec, a role's defaults), it
must equal that home."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from _load import load_file
from benchgate import rules

ROOT = Path(__file__).resolve().parents[1]


def _gate_module() -> Any:
    return load_file(ROOT / "plugins" / "modules" / "benchgate_gate.py", "benchgate_gate_home")


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_the_gate_modules_defaults_are_the_packages() -> None:
    module = _gate_module()
    doc_file = ROOT / "plugins" / "modules" / "benchgate_gate.yml"
    documented = yaml.safe_load(doc_file.read_text())["DOCUMENTATION"]["options"]
    config = rules.GateConfig()
    home = {
        "metrics": list(rules.DEFAULT_METRICS),
        "critical_metrics": list(rules.DEFAULT_CRITICAL),
        "max_regression_pct": rules.DEFAULT_MAX_REGRESSION_PCT,
        "alpha": config.alpha,
        "min_trials": config.min_trials,
        "noncritical_fail": config.noncritical_fail,
        "fail_requires_bound": config.fail_requires_bound,
        "latency_stat": config.latency_stat,
    }
    for name, value in home.items():
        assert module.ARGUMENT_SPEC[name]["default"] == value, name
        assert documented[name]["default"] == value, name


def test_the_roles_gate_defaults_are_the_packages() -> None:
    defaults = _yaml(ROOT / "roles" / "benchgate" / "defaults" / "main.yml")
    config = rules.GateConfig()
    assert defaults["benchgate_max_regression_pct"] == rules.DEFAULT_MAX_REGRESSION_PCT
    assert defaults["benchgate_run_spread_pct"] == config.run_spread_pct
    assert defaults["benchgate_set_aside_slowest"] == config.set_aside_slowest


def test_fallbacks_for_other_roles_settings_equal_their_defaults() -> None:
    """`x | default(v)` outside x's role must use x's own default (the copies
    not yet replaced by an export: vllm_install_root, vllm_service_speculative,
    vllm_service_tensor_parallel_size, ...)."""
    defaults: dict[str, Any] = {}
    for role in (ROOT / "roles").iterdir():
        path = role / "defaults" / "main.yml"
        if path.exists():
            defaults.update(_yaml(path) or {})
    pattern = re.compile(
        r"\b(vllm_[a-z_]+|benchgate_[a-z_]+) \| default\(('[^']*'|[0-9.]+|\{\}|\[\])\)"
    )
    found = 0
    for path in [*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/*/*.yml")]:
        for name, raw in pattern.findall(path.read_text()):
            if name not in defaults or "{{" in str(defaults[name]):
                continue
            found += 1
            where = f"{path.relative_to(ROOT)}: {name} | default({raw})"
            assert yaml.safe_load(raw) == defaults[name], where
    assert found > 0


def test_vllm_service_defines_its_unit_path_and_base_url_once() -> None:
    """vllm_service exports its unit, unit path, secrets file and base URL
    (roles/vllm_service/tasks/exports.yml); no other role or playbook builds
    them again or restates vllm_service's name, host or port defaults."""
    restated = re.compile(
        r"vllm_service_(name|host|port) \| default\(|/etc/systemd/system/\{\{ vllm_service"
    )
    files = [
        *ROOT.glob("playbooks/*.yml"),
        *ROOT.glob("playbooks/tasks/**/*.yml"),
        *ROOT.glob("roles/*/*/*.yml"),
        *ROOT.glob("tests/playbooks/*.yml"),
    ]
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in files
        if not path.is_relative_to(ROOT / "roles" / "vllm_service")
        for match in restated.finditer(path.read_text())
    ]
    assert not found, found
    service_vars = _yaml(ROOT / "roles" / "vllm_service" / "vars" / "main.yml")
    assert service_vars["_vllm_service_unit_path"] == "/etc/systemd/system/{{ _vllm_service_unit }}"
    exports = _yaml(ROOT / "roles" / "vllm_service" / "tasks" / "exports.yml")
    [task] = exports
    assert task["ansible.builtin.set_fact"] == {
        "vllm_service_unit": "{{ _vllm_service_unit }}",
        "vllm_service_unit_path": "{{ _vllm_service_unit_path }}",
        "vllm_service_env_file": "{{ _vllm_service_env_file }}",
        "vllm_service_base_url": "{{ _vllm_service_base_url }}",
    }
    # Everyone else reads the exports.
    benchgate_vars = (ROOT / "roles" / "benchgate" / "vars" / "main.yml").read_text()
    assert "{{ vllm_service_unit_path }}" in benchgate_vars
    bench = _yaml(ROOT / "roles" / "vllm_benchmark" / "defaults" / "main.yml")
    assert bench["vllm_benchmark_base_url"] == "{{ vllm_service_base_url }}"
    assert bench["vllm_benchmark_service_unit"] == "{{ vllm_service_unit }}"
