"""Every setting that reaches a systemd unit holds only what its kind allows (issue 32, point 4).

``vllm_service_system_call_filter`` was checked by nothing: a newline in it
rendered ``ExecStartPre=+/bin/touch ...`` (run as root) into the unit, and
``systemd-analyze verify`` passed it. The preflight named the fields known to
be dangerous; now every setting has a kind with an allow-list
(``benchgate.allowlist``), each role names the kind of each setting
(``_<role>_setting_kinds``), and the walk below fails when a unit template
reads a setting, directly or through the role's own variables, without one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment, nodes

from _load import ansible_env
from benchgate.allowlist import KINDS, setting_errors

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
needs_ansible = pytest.mark.skipif(
    ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed"
)

# The unit files each role renders (and the EnvironmentFile beside vllm.service).
UNIT_TEMPLATES = {
    "vllm_service": ["vllm.service.j2", "vllm.env.j2"],
    "rollout_scheduler": ["rollout.service.j2", "rollout.timer.j2"],
}
# Read by the templates and set by Ansible itself, not by the user.
ANSIBLE_SET = {"ansible_managed"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) or {}


def _kinds(role: str) -> dict[str, str]:
    kinds: dict[str, str] = _yaml(ROOT / "roles" / role / "vars" / "main.yml")[
        f"_{role}_setting_kinds"
    ]
    return kinds


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _names_read(text: str) -> set[str]:
    """The variables a Jinja text reads (loop variables it sets itself left out)."""
    tree = Environment().parse(text)
    loads = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"}
    stores = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    return loads - stores


def _tasks(items: Any) -> Iterator[dict[str, Any]]:
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _definitions(role: str) -> tuple[dict[str, list[str]], set[str]]:
    """The role's own variables (vars/main.yml, set_fact) -> their texts; registered names."""
    folder = ROOT / "roles" / role
    defined = {
        name: list(_strings(value)) for name, value in _yaml(folder / "vars" / "main.yml").items()
    }
    registered: set[str] = set()
    for path in sorted((folder / "tasks").glob("*.yml")):
        for task in _tasks(_yaml(path)):
            for name, value in (task.get("ansible.builtin.set_fact") or {}).items():
                defined.setdefault(name, []).extend(_strings(value))
            if "register" in task:
                registered.add(task["register"])
    return defined, registered


def settings_read(role: str, texts: list[str]) -> tuple[set[str], set[str]]:
    """The ``<role>_*`` settings the texts read, directly or through ``_<role>_*`` /
    ``__<role>_*`` variables; and the names that could not be followed."""
    defined, registered = _definitions(role)
    todo = set().union(*(_names_read(text) for text in texts))
    seen: set[str] = set()
    settings: set[str] = set()
    unknown: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.startswith((f"_{role}_", f"__{role}_")):
            if name in defined:
                todo |= set().union(*(_names_read(text) for text in defined[name]))
            elif name not in registered:  # a registered result is read from the host
                unknown.add(name)
        elif name.startswith(f"{role}_"):
            settings.add(name)
        elif name not in ANSIBLE_SET:
            unknown.add(name)
    return settings, unknown


def _unit_texts(role: str) -> list[str]:
    folder = ROOT / "roles" / role / "templates"
    return [(folder / name).read_text() for name in UNIT_TEMPLATES[role]]


@pytest.mark.parametrize("role", sorted(UNIT_TEMPLATES))
def test_every_setting_the_unit_templates_read_has_a_kind(role: str) -> None:
    settings, unknown = settings_read(role, _unit_texts(role))
    assert not unknown, (
        f"{role}: the unit templates read {sorted(unknown)}, which the walk cannot follow"
    )
    kinds = _kinds(role)
    missing = sorted(settings - set(kinds))
    assert not missing, (
        f"{role}: the unit templates read {missing} without a kind: add each to "
        f"_{role}_setting_kinds in roles/{role}/vars/main.yml"
    )
    assert set(kinds.values()) <= set(KINDS), sorted(set(kinds.values()) - set(KINDS))
    # Every kind names a real setting of the role (a typo would check nothing).
    defaults = set(_yaml(ROOT / "roles" / role / "defaults" / "main.yml"))
    spec = _yaml(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    assert set(kinds) <= defaults | set(spec["options"]), sorted(set(kinds) - defaults)


def test_the_walk_finds_a_new_setting_and_one_behind_a_role_variable() -> None:
    """A test that cannot fail is a defect: a new knob in the template is found,
    directly and through the role's own variables (ExecStart's argv)."""
    new = "{% if vllm_service_new_knob %}X={{ vllm_service_new_knob }}{% endif %}"
    settings, _ = settings_read("vllm_service", [new])
    assert settings == {"vllm_service_new_knob"}
    settings, unknown = settings_read("vllm_service", ["ExecStart={{ __vllm_service_argv }}"])
    assert {
        "vllm_service_executable",
        "vllm_service_extra_args",
        "vllm_service_speculative",
    } <= settings
    assert not unknown
    settings, _ = settings_read("vllm_service", ["{{ _vllm_service_env_file }}"])
    assert settings == {"vllm_service_name"}
    _, unknown = settings_read("vllm_service", ["{{ benchgate_other_role }}"])
    assert unknown == {"benchgate_other_role"}


@pytest.mark.parametrize("role", sorted(UNIT_TEMPLATES))
def test_the_defaults_hold_only_what_their_kind_allows(role: str) -> None:
    defaults = _yaml(ROOT / "roles" / role / "defaults" / "main.yml")
    kinds = _kinds(role)
    given = {
        name: value
        for name, value in defaults.items()
        if name in kinds and not any("{{" in text for text in _strings(value))
    }
    assert len(given) >= 10
    assert setting_errors(given, kinds) == []


# --------------------------------------------------------------------------
# the kinds, without Ansible
# --------------------------------------------------------------------------

GOOD = {
    "unit_name": ["vllm", "vllm-before", "benchgate-rollout", "a_b.c:d"],
    "account": ["vllm", "_vllm", "svc.vllm-1"],
    "path": ["/opt/vllm/current/bin/vllm", "/var/lib/vllm", "/srv/models/Qwen3-14B-FP8"],
    "paths": [[], ["/srv/benchgate", "/var/lib/x"]],
    "model": ["/srv/models/tiny-llama", "Qwen/Qwen3-4B", "org/m@v1+x"],
    "model_name": ["", "qwen3-14b", "tiny"],
    "host": ["", "127.0.0.1", "0.0.0.0", "::", "fd00::7", "[::1]", "gpu-01.example.internal"],
    "interface": ["", "lo", "eth0", "enp3s0f1", "bond0.100"],
    "word": ["auto", "float16", "bfloat16"],
    "cpu_list": ["", "1", "2-15", "0,4-7", "0 5", 3],
    "cpu_quota": ["", "85%", "200%"],
    "system_calls": [
        [],
        ["@system-service"],
        ["@privileged", "@file-system", "pidfd_getfd"],
        ["mkdir:EPERM"],
    ],
    "limit": [65536, "65536", "infinity", "1024:65536"],
    "calendar": [["Tue *-*-* 02:00:00"], ["*-*-* 03:00:00", "Sat *-*-* 12:00:00 Europe/Berlin"]],
    "timespan": ["15min", "1h 30min", 0, "30s"],
    "integer": [0, 8000, "8000"],
    "boolean": [True, False, "yes", "false", 0, 1],
    "environment": [{}, {"OMP_NUM_THREADS": 2, "A_B": 'quo"te $HOME 50% é'}],
    "token": ["", 'k-"$x`\\%'],
    "argv_words": [[], ["--enforce-eager", "--max-num-seqs", 1], ["--chat-template", "{{ a }}\n"]],
    "argv_data": [None, {}, {"method": "ngram", "num_speculative_tokens": 3}],
}

NEWLINE = "x\nExecStartPre=+/bin/touch /tmp/pwned"
BAD = {
    "unit_name": [
        (NEWLINE, "control character"),
        ("vllm@x", "'@'"),
        ("a/b", "'/'"),
        ("-x", "starts with '-'"),
        ("", "is empty"),
    ],
    "account": [
        ("vllm\n", "control character"),
        ("vllm user", "' '"),
        ("1vllm", "starts with"),
        (1001, "starts with '1'"),  # systemd would read a number as a UID
        ("v" * 33, "longer than 32"),
    ],
    "path": [
        ("/var/lib/vllm /", "' '"),
        ("var/lib", "starts with 'v'"),
        ("/a%h", "'%'"),
        ('/a"b', "'\"'"),
        ("/a\\b", "'\\\\'"),
        ("/a$b", "'$'"),
        (NEWLINE, "control"),
    ],
    "paths": [(["/ok", "/a b"], "s[1] holds the character ' '"), ("/a", "must be a list")],
    "model": [("tiny\n[Service]", "control character"), ("", "is empty"), ("a b", "' '")],
    "model_name": [("tiny\n", "control character"), ("t%i", "'%'")],
    "host": [("127.0.0.1\n", "control character"), ("a/b", "'/'"), ("a b", "' '")],
    "interface": [("lo\n", "control character"), ("eth0 lo", "' '"), ("e" * 16, "longer than 15")],
    "word": [("auto\n", "control character"), ("Auto", "'A'")],
    "cpu_list": [("2-", "not in that form"), ("1\n", "control character"), ("1;2", "';'")],
    "cpu_quota": [("85", "not in that form"), ("85%\n", "control character")],
    "system_calls": [
        (["@system-service\nExecStartPre=+/bin/touch /tmp/pwned"], "[0] holds a control character"),
        (["@system-service ~@mount"], "' '"),
        (["~@mount"], "'~'"),
        (["@Mount"], "not in that form"),
        ("@system-service", "must be a list"),
    ],
    "limit": [("65536\n", "control character"), ("lots", "not in that form")],
    "calendar": [
        (["Tue *-*-* 02:00:00\nExecStartPre=/bin/true"], "control character"),
        (["daily%"], "'%'"),
    ],
    "timespan": [("15min\n", "control character"), ("15MIN", "'I'")],
    "integer": [
        (True, "boolean"),
        (-1, "0 or more"),
        ("8k", "whole number"),
        (1.5, "whole number"),
    ],
    "boolean": [("maybe", "true or false"), (2, "true or false")],
    "environment": [
        ({"A": "1\nB=2"}, "s.A holds a control character"),
        ({"BAD NAME": "x"}, "'BAD NAME'"),
        ({"A": {"x": 1}}, "string or a number"),
        ("A=1", "mapping"),
    ],
    "token": [("k\nx", "control character"), ("k x", "a space")],
    "argv_words": [(["a\x00b"], "NUL"), ("--flag", "list of words"), ([True], "must be a string")],
    "argv_data": [
        ({"model": "/m\n"}, "s.model holds a control character"),
        ({"k": object()}, "not a string"),
    ],
}


def test_every_kind_is_tested() -> None:
    assert set(GOOD) == set(KINDS) == set(BAD)


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_what_each_kind_allows(kind: str) -> None:
    for value in GOOD[kind]:
        assert setting_errors({kind: value}, {kind: kind}) == [], (kind, value)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_what_each_kind_refuses_and_says_why(kind: str) -> None:
    for value, why in BAD[kind]:
        errors = setting_errors({"s": value}, {"s": kind})
        assert len(errors) == 1, (kind, value, errors)
        assert why in errors[0], (kind, value, errors)
        assert f"may hold {KINDS[kind].may_hold}" in errors[0]


def test_a_setting_without_a_kind_is_a_problem() -> None:
    assert setting_errors({"x": "1"}, {}) == [
        f"x has no known kind (None); known: {', '.join(sorted(KINDS))}"
    ]
    assert "no known kind ('paht')" in setting_errors({"x": "/a"}, {"x": "paht"})[0]


def test_messages_never_show_a_secret() -> None:
    secret = "zq91secretzq91"
    errors = setting_errors(
        {
            "vllm_service_api_key": f"{secret}\n",
            "vllm_service_secret_environment": {"HF_TOKEN": f"{secret}\r", "OK": secret},
        },
        {"vllm_service_api_key": "token", "vllm_service_secret_environment": "environment"},
    )
    assert len(errors) == 2
    assert all(secret not in error for error in errors)
    assert "vllm_service_secret_environment.HF_TOKEN holds a control character" in errors[1]


# --------------------------------------------------------------------------
# the roles' preflight, run by ansible-playbook
# --------------------------------------------------------------------------


def _run(tmp_path: Path, play: dict[str, Any], hostvars: dict[str, Any], *extra: str) -> str:
    assert ANSIBLE_PLAYBOOK is not None
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    hostvars = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        **hostvars,
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"h1": hostvars}}}))
    env = ansible_env(tmp_path)
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(playbook), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    return f"rc={done.returncode}\n" + " ".join((done.stdout + done.stderr).split())


def _service_preflight(tmp_path: Path, **settings: Any) -> str:
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}\n")
    play = {
        "name": "Preflight",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Check the service settings",
                "ansible.builtin.include_role": {
                    "name": "vllm_service",
                    "tasks_from": "preflight.yml",
                },
            }
        ],
    }
    return _run(tmp_path, play, {"vllm_service_model": str(model), **settings})


@needs_ansible
def test_the_service_defaults_pass_the_preflight(tmp_path: Path) -> None:
    out = _service_preflight(tmp_path)
    assert out.startswith("rc=0"), out[-3000:]


@needs_ansible
def test_a_newline_in_the_system_call_lists_is_refused_by_name(tmp_path: Path) -> None:
    """Each of these passed the old preflight; the first two rendered
    ExecStartPre=+/bin/touch (run as root) into a unit that systemd-analyze verify
    accepts, the third made ReadWritePaths= cover the whole file system."""
    out = _service_preflight(
        tmp_path,
        vllm_service_system_call_filter=["@system-service\nExecStartPre=+/bin/touch /tmp/pwned"],
        vllm_service_system_call_deny=["@privileged", "@mount\n[Service]\nExecStartPre=+/bin/id"],
        vllm_service_state_dir="/var/lib/vllm /",
    )
    assert not out.startswith("rc=0"), out[-3000:]
    assert (
        "vllm_service_system_call_filter[0] holds a control character (a newline, tab, ...)" in out
    )
    assert "vllm_service_system_call_deny[1] holds a control character (a newline, tab, ...)" in out
    assert (
        "vllm_service_system_call_deny may hold a list of system call names and @groups "
        "(lowercase letters, digits, _ and -), each optionally with :ERRNO"
    ) in out
    assert "vllm_service_state_dir holds the character ' '" in out


@needs_ansible
def test_the_scheduler_units_settings_are_checked_too(tmp_path: Path) -> None:
    play = {
        "name": "Preflight",
        "hosts": "all",
        "gather_facts": False,
        "roles": [{"role": "rollout_scheduler"}],
    }
    settings = {
        "rollout_scheduler_project_dir": str(ROOT),
        "rollout_scheduler_versions": {"version": "0.32.0"},
    }
    out = _run(tmp_path, play, settings, "--tags", "rollout_scheduler_preflight")
    assert out.startswith("rc=0"), out[-3000:]

    settings.update(
        rollout_scheduler_on_calendar=["Tue *-*-* 02:00:00\nExecStartPre=+/bin/touch /tmp/pwned"],
        rollout_scheduler_user="benchgate rollout",
        rollout_scheduler_environment={"NO_PROXY": "a\nb"},
    )
    out = _run(tmp_path, play, settings, "--tags", "rollout_scheduler_preflight")
    assert not out.startswith("rc=0"), out[-3000:]
    assert "rollout_scheduler_on_calendar[0] holds a control character" in out
    assert "rollout_scheduler_user holds the character ' '" in out
    assert "rollout_scheduler_environment.NO_PROXY holds a control character" in out
