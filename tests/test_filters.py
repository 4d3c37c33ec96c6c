"""The vllm filter plugin, loaded the way Ansible loads it (FilterModule().filters())."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from _load import load_file
from test_serve import systemd_split

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def _load_plugin():
    return load_file(ROOT / "plugins/filter/vllm.py", "bg_filter_vllm")


PLUGIN = _load_plugin()
F = PLUGIN.FilterModule().filters()
SETTINGS = {
    "executable": "/opt/benchgate/vllm/current/bin/vllm",
    "model": "/models/target",
    "served_model_name": "tiny",
    "port": "8000",  # as it arrives from -e
    "speculative": {"method": "ngram", "num_speculative_tokens": "3", "prompt_lookup_max": 3},
    "cli": "config",
}


def test_filter_names():
    assert set(F) == {
        "side_by_side_unit",
        "vllm_serve_argv",
        "systemd_exec_quote",
        "vllm_speculative_errors",
        "vllm_cli_generation",
        "vllm_speculative_arms",
        "vllm_base_url",
        "systemd_env_line",
        "api_key_elsewhere",
        "vllm_draft_quantization_error",
    }


def test_draft_quantization_filter():
    fn = F["vllm_draft_quantization_error"]
    arm = {"model": "/srv/models/draft", "num_speculative_tokens": "3", "quantization": "fp8"}
    assert "is not quantized" in fn(arm, {"model_type": "qwen3"})
    assert fn(arm, {"quantization_config": {"quant_method": "fp8"}}) == ""
    with pytest.raises(AnsibleFilterError, match="config.json as a mapping"):
        fn(arm, "{}")


def test_speculative_arms_filter():
    arms = F["vllm_speculative_arms"](
        [{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}], [2, 3]
    )
    assert [a["name"] for a in arms] == ["off", "ngram-k2", "ngram-k3"]
    assert F["vllm_speculative_arms"]([]) == [{"name": "off", "config": {}}]
    with pytest.raises(AnsibleFilterError, match="whole number"):
        F["vllm_speculative_arms"]([{"method": "ngram"}], [0])
    with pytest.raises(AnsibleFilterError, match="list of mappings"):
        F["vllm_speculative_arms"]("ngram")


def test_argv_then_quote():
    argv = F["vllm_serve_argv"](SETTINGS)
    assert argv[:3] == [SETTINGS["executable"], "serve", "/models/target"]
    assert argv[argv.index("--port") + 1] == "8000"
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["num_speculative_tokens"] == 3
    line = F["systemd_exec_quote"](argv)
    assert line.startswith("/opt/benchgate/vllm/current/bin/vllm serve /models/target ")
    assert '--speculative-config "{\\"method\\":\\"ngram\\"' in line


def test_argv_old_cli():
    argv = F["vllm_serve_argv"](dict(SETTINGS, cli="flags"))
    assert argv[-6:] == [
        "--speculative-model",
        "[ngram]",
        "--num-speculative-tokens",
        "3",
        "--ngram-prompt-lookup-max",
        "3",
    ]


def test_argv_speculative_off():
    argv = F["vllm_serve_argv"](dict(SETTINGS, speculative={}))
    assert not any("spec" in w for w in argv)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("not a dict", "expects a mapping"),
        ({"model": "/m"}, "'executable' is required"),
        (dict(SETTINGS, tp=2), "unknown setting(s) tp"),
        (dict(SETTINGS, cli="new"), "cli must be 'config', 'flags' or 'none'"),
        (
            dict(
                SETTINGS,
                speculative={
                    "method": "ngramm",
                    "num_speculative_tokens": 3,
                    "prompt_lookup_max": 3,
                },
            ),
            "did you mean 'ngram'",
        ),
        (dict(SETTINGS, speculative=["ngram"]), "must be a mapping"),
        (dict(SETTINGS, cli="none"), "no speculative decoding options"),
        (dict(SETTINGS, extra_args="--enforce-eager"), "list of words"),
    ],
)
def test_argv_bad_input_raises(settings, message):
    with pytest.raises(AnsibleFilterError, match=None) as info:
        F["vllm_serve_argv"](settings)
    assert message in str(info.value)


@pytest.mark.parametrize("bad", ["/bin/echo hi", [], ["vllm", "serve"], ["/bin/x", None]])
def test_quote_bad_input_raises(bad):
    with pytest.raises(AnsibleFilterError):
        F["systemd_exec_quote"](bad)


def test_speculative_errors():
    assert F["vllm_speculative_errors"]({}) == []
    spec = {"model": "/models/draft", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}
    assert F["vllm_speculative_errors"](spec, 2) == []
    (msg,) = F["vllm_speculative_errors"](spec, 4)
    assert "must be 1 or the target's tensor_parallel_size (4)" in msg
    (msg,) = F["vllm_speculative_errors"]("{oops")
    assert "not valid JSON" in msg


def test_speculative_errors_check_a_batch_size_schedule():
    spec = {
        "method": "ngram",
        "num_speculative_tokens": "3",  # as it arrives from -e
        "prompt_lookup_max": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [3, 8, 0]],
    }
    assert F["vllm_speculative_errors"](spec) == [
        "num_speculative_tokens_per_batch_size ranges overlap: [1, 4, 3] and [3, 8, 0]"
    ]
    spec["num_speculative_tokens_per_batch_size"] = [[1, 4, 3], [5, 5, 0]]
    assert F["vllm_speculative_errors"](spec) == []
    (msg,) = F["vllm_speculative_errors"](spec, 1, "flags")
    assert "unknown key 'num_speculative_tokens_per_batch_size'" in msg
    with pytest.raises(AnsibleFilterError, match=r"entry \[0, 4, 3\]: batch sizes start at 1"):
        F["vllm_serve_argv"](
            dict(
                SETTINGS,
                speculative=dict(spec, num_speculative_tokens_per_batch_size=[[0, 4, 3]]),
            )
        )


def test_a_batch_size_schedule_reaches_execstart_intact():
    schedule = [[1, 1, 3], [2, 2, 0]]
    argv = F["vllm_serve_argv"](
        dict(
            SETTINGS,
            speculative=dict(
                SETTINGS["speculative"], num_speculative_tokens_per_batch_size=schedule
            ),
        )
    )
    body = argv[argv.index("--speculative-config") + 1]
    assert '"num_speculative_tokens_per_batch_size":[[1,1,3],[2,2,0]]' in body
    line = F["systemd_exec_quote"](argv)
    assert '\\"num_speculative_tokens_per_batch_size\\":[[1,1,3],[2,2,0]]}"' in line
    assert systemd_split(line) == argv


def test_cli_generation():
    found = F["vllm_cli_generation"]((DATA / "vllm-serve-help-all-0.32.0.txt").read_text())
    assert found["speculative"] == "config"
    assert isinstance(found["flags"], list) and "--speculative-config" in found["flags"]
    old = F["vllm_cli_generation"]((DATA / "vllm-serve-help-0.7.3-reconstructed.txt").read_text())
    assert old["speculative"] == "flags"
    with pytest.raises(AnsibleFilterError, match="--help=all"):
        F["vllm_cli_generation"]((DATA / "vllm-serve-help-0.32.0.txt").read_text())
    with pytest.raises(AnsibleFilterError):
        F["vllm_cli_generation"](None)


def test_missing_package_gives_an_actionable_error(monkeypatch):
    real_import = builtins.__import__

    def no_benchgate(name, *args, **kwargs):
        if name == "benchgate" or name.startswith("benchgate."):
            raise ImportError("No module named 'benchgate'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_benchgate)
    with pytest.raises(AnsibleFilterError, match="need the .benchgate. Python package"):
        F["systemd_exec_quote"](["/bin/true"])


UNIT = """[Unit]
Description=vLLM OpenAI-compatible server (tiny)

[Service]
ExecStart=/opt/vllm/current/bin/vllm serve /srv/models/tiny --host 0.0.0.0 --port 8000 \
--speculative-config "{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 3}"
RemoveIPC=true
NoNewPrivileges=true
"""


def test_side_by_side_unit_runs_the_old_release_on_loopback_and_its_own_port():
    unit = UNIT.replace(" \\\n", " ")  # one ExecStart line, as vllm.service.j2 writes it
    out = F["side_by_side_unit"](unit, "/opt/vllm/releases/0.31.0/bin/vllm", 8001)
    exec_line = next(line for line in out.splitlines() if line.startswith("ExecStart="))
    words = exec_line[len("ExecStart=") :].split(" ")
    assert words[:3] == ["/opt/vllm/releases/0.31.0/bin/vllm", "serve", "/srv/models/tiny"]
    assert words[words.index("--host") + 1] == "127.0.0.1"
    assert words[words.index("--port") + 1] == "8001"
    assert words.count("--port") == words.count("--host") == 1
    # The speculative settings and the hardening are the old unit's.
    assert '--speculative-config "{\\"method\\": \\"ngram\\"' in exec_line
    assert "RemoveIPC=false" in out and "RemoveIPC=true" not in out
    assert "NoNewPrivileges=true" in out
    assert "side by side" in out.splitlines()[1]
    # A unit without --host/--port gets both.
    bare = "[Service]\nExecStart=/opt/vllm/current/bin/vllm serve m\n"
    assert F["side_by_side_unit"](bare, "/r/bin/vllm", 9001).splitlines()[1] == (
        "ExecStart=/r/bin/vllm serve m --port 9001 --host 127.0.0.1"
    )


def test_side_by_side_unit_refuses_what_it_cannot_run():
    with pytest.raises(AnsibleFilterError, match="no ExecStart"):
        F["side_by_side_unit"]("[Service]\n", "/r/bin/vllm", 8001)
    with pytest.raises(AnsibleFilterError, match="TCP port"):
        F["side_by_side_unit"](UNIT, "/r/bin/vllm", 70000)
