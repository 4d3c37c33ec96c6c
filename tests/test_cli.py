"""`benchgate bench` against the fake server (in a thread)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchgate import cli_bench
from benchgate.cli import COMMAND_MODULES, build_parser, main
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "workloads" / "demo.yml")
SMALL = ["--trials", "2", "--num-requests", "6", "--output-len", "8", "--warmup", "1"]


def test_every_command_is_registered_by_its_module():
    parser = build_parser()
    args = parser.parse_args(["bench", "--base-url", "http://x", "--workload", "demo"])
    assert args._run is cli_bench.run and args.command_name == "bench"
    for argv in (
        ["judge", "--baseline", "b.json", "--candidate", "c.json"],
        ["history", "--db", "x"],
        ["advise", "--acceptance", "50"],
        ["report", "--db", "x"],
    ):
        args = parser.parse_args(argv)
        assert args.command_name == argv[0]
        assert args._run.__module__ in {m.__name__ for m in COMMAND_MODULES}
    with pytest.raises(SystemExit):
        parser.parse_args([])


def test_bench_prints_table_and_writes_result(tmp_path, capsys):
    out = tmp_path / "r" / "result.json"
    with serve_in_thread(FakeConfig(ttft_s=0.005, itl_s=0.001)) as srv:
        code = main(
            ["bench", "--base-url", srv.base_url, "--workload", DEMO, *SMALL, "-o", str(out)]
        )
    assert code == 0
    text = capsys.readouterr().out
    assert "Summary over 2 valid trial(s)" in text and "output_tokens_per_s" in text
    assert "trial 2/2" in text  # progress bar
    data = json.loads(out.read_text())
    assert data["schema"] == "benchgate.result/1"
    assert data["target"] == {
        "base_url": srv.base_url,
        "model": "fake",
        "server_version": "0.0.0+fake",
    }
    params = data["workload"]["params"]
    assert (params["trials"], params["num_requests"], params["output_len"]) == (2, 6, 8)
    assert [len(t["requests"]) for t in data["trials"]] == [6, 6]


def test_bench_quiet_api_key_file_and_invalid_exit_status(tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    cfg = FakeConfig(ttft_s=0, itl_s=0, api_key="s3cret", fault="http_500", fault_every=3)
    with serve_in_thread(cfg) as srv:
        code = main(
            [
                "bench",
                "--base-url",
                srv.base_url,
                "--workload",
                DEMO,
                *SMALL,
                "--api-key-file",
                str(key),
                "--quiet",
                "-o",
                str(tmp_path / "r.json"),
            ]
        )
    assert code == 2  # ran, but trials are invalid (2 of 6 requests failed)
    assert capsys.readouterr().out == ""
    data = json.loads((tmp_path / "r.json").read_text())
    assert [t["errors_by_reason"] for t in data["trials"]] == [{"http_500": 2}] * 2
    assert "s3cret" not in (tmp_path / "r.json").read_text()


def test_bench_errors_exit_1_with_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"name": "x", "version": 1}))
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--workload", str(bad)]) == 1
    assert "workload field 'input_len': is required" in capsys.readouterr().err
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--workload", DEMO, "-q"]) == 1
    assert "cannot reach http://127.0.0.1:9/v1/models" in capsys.readouterr().err
    assert main(["bench", "--base-url", "http://x", "--workload", DEMO, "--concurrency", "0"]) == 1
    assert "'concurrency'" in capsys.readouterr().err


def test_bench_runs_every_stage_in_order_and_keeps_the_stage(tmp_path, capsys):
    out = tmp_path / "staged.json"
    staged = str(REPO / "workloads" / "demo-staged.yml")
    quick = ["--trials", "2", "--output-len", "4", "--num-requests", "3", "--warmup", "1"]
    with serve_in_thread(FakeConfig(ttft_s=0.002, itl_s=0.001)) as srv:
        code = main(
            ["bench", "--base-url", srv.base_url, "--workload", staged, *quick, "-o", str(out)]
        )
    assert code == 0
    text = capsys.readouterr().out
    assert "Stage single (concurrency 1)" in text and "Stage busy (concurrency 4)" in text
    assert "single: trial 2/2" in text and "busy: trial 2/2" in text
    data = json.loads(out.read_text())
    assert [(t["index"], t["stage"]) for t in data["trials"]] == [
        (0, "single"),
        (1, "single"),
        (2, "busy"),
        (3, "busy"),
    ]
    assert [(s["name"], s["params"]["concurrency"]) for s in data["stages"]] == [
        ("single", 1),
        ("busy", 4),
    ]
    assert [s["summary"]["valid_trials"] for s in data["stages"]] == [2, 2]
    assert [len(t["requests"]) for t in data["trials"]] == [3, 3, 3, 3]
    # The gate settings travel with the result for the judge.
    assert data["workload"]["params"]["stages"][1]["gate"]["critical"] == [
        "output_tokens_per_s",
        "ttft_ms",
    ]


def test_an_unstaged_result_has_no_stages():
    from benchgate.bench import run_benchmark

    with serve_in_thread(FakeConfig(ttft_s=0, itl_s=0)) as srv:
        result = run_benchmark(
            srv.base_url,
            {
                "name": "u",
                "version": 1,
                "input_len": 4,
                "output_len": 2,
                "concurrency": 1,
                "num_requests": 2,
                "trials": 1,
            },
        )
    data = result.to_dict()
    assert data["stages"] is None and data["trials"][0]["stage"] is None


def test_no_stage_reuses_another_stages_prompts(monkeypatch):
    # A prompt sent twice could be served from the prefix cache the second time.
    from benchgate import bench
    from benchgate.workload import parse_workload

    sent: list[str] = []
    real = bench.run_requests

    async def recording(client, base_url, model, workload, prompts, *args, **kwargs):
        sent.extend(p.text for p in prompts)
        return await real(client, base_url, model, workload, prompts, *args, **kwargs)

    monkeypatch.setattr(bench, "run_requests", recording)
    wl = parse_workload(
        {
            "name": "s",
            "version": 1,
            "input_len": 6,
            "output_len": 2,
            "concurrency": 1,
            "num_requests": 3,
            "trials": 2,
            "warmup": 1,
            "stages": [{"name": "a"}, {"name": "b", "concurrency": 2}],
        }
    )
    with serve_in_thread(FakeConfig(ttft_s=0, itl_s=0)) as srv:
        bench.run_benchmark(srv.base_url, wl)
    assert len(sent) == 2 * (1 + 2 * 3)
    assert len(set(sent)) == len(sent)


SECRET = "SECRET123"


@pytest.mark.parametrize(
    "argv",
    [
        # Issue 32: argparse quoted what it could not use, the -e value with it.
        ["rollout", "--extra_vars", f"vllm_service_api_key={SECRET}"],
        ["rollout", "-E", f"vllm_service_api_key={SECRET}"],
        ["rollout", f"-Evllm_service_api_key={SECRET}"],
        ["rollout", "--bogus", "-e", f"vllm_service_api_key={SECRET}", f"x{SECRET}"],
        ["rollout", "-e", f"vllm_service_api_key={SECRET}", "--keep-artifacts", SECRET],
        ["rollout", "-e", f"vllm_service_api_key={SECRET}", f"--ansible-output={SECRET}"],
        [f"--bogus={SECRET}", "rollout", "-e", f"vllm_service_api_key={SECRET}"],
        ["rollout", f"--l={SECRET}"],  # ambiguous: --limit, --ledger, --lock-file
        [SECRET, "-e", f"vllm_service_api_key={SECRET}"],  # an unknown command
        ["judge", "--baseline", "b", "--candidate", "c", "--threshold", SECRET],
    ],
)
def test_usage_errors_never_echo_a_value(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    out = capsys.readouterr()
    assert "error:" in out.err
    assert SECRET not in out.out + out.err
    # What to fix is still named: the option, never its value.
    if argv[1] in ("--extra_vars", "-E"):
        assert f"unrecognized arguments: {argv[1]} <hidden>" in out.err


def test_a_real_usage_error_exits_2_without_the_secret():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "benchgate.cli", "rollout", "--bogus"]
        + [
            "-e",
            f"vllm_service_api_key={SECRET}",
            "--extra_vars",
            f"vllm_service_api_key={SECRET}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert SECRET not in done.stdout + done.stderr
    assert "unrecognized arguments: --bogus --extra_vars <hidden>" in done.stderr


@pytest.mark.parametrize(
    "value",
    [
        "{vllm_service_api_key: SECRET123",  # not YAML
        "[SECRET123]",  # not a mapping
        "SECRET123",  # not KEY=VALUE
        "{vllm_service_api_key: 'SECRET123'}: x",
    ],
)
def test_a_bad_extra_vars_value_is_not_echoed(value, capsys):
    code = main(["rollout", "--project-dir", str(REPO), "-e", "vllm_version=0.32.0", "-e", value])
    assert code == 3
    err = capsys.readouterr().err
    assert "-e value #2" in err
    assert SECRET not in err
