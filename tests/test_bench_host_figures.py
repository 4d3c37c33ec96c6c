"""The new figures through the module glue and the CLI, against the fake server."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from _load import load_file
from benchgate.bench import BenchmarkError, module_run, probe_from_module_params
from benchgate.cli import main
from benchgate.cli_bench import host_lines
from benchgate.results import check_result_dict
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "workloads" / "demo.yml")
CALIBRATION = REPO / "lab" / "calibration" / "h200-qwen3-14b-4b.json"


def params(**kw):
    mod = load_file(REPO / "plugins" / "modules" / "vllm_benchmark.py", "vllm_benchmark")
    base = {name: s.get("default") for name, s in mod.ARGUMENT_SPEC.items()}
    base.update(base_url="http://127.0.0.1:9", workload=DEMO)
    base.update(kw)
    return base


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}})
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4000
    )
    return str(folder)


def test_check_mode_validates_host_options_and_reads_nothing(tmp_path):
    # A model folder that does not exist is fine in check mode: nothing is read.
    out = module_run(params(model_dir=str(tmp_path / "absent"), service_unit="x.service"), True)
    assert out["skipped"] is True and "roofline" not in out
    with pytest.raises(BenchmarkError, match="tensor_parallel_size must be >= 1"):
        module_run(params(tensor_parallel_size=0), True)
    with pytest.raises(BenchmarkError, match="bandwidth_gbs"):
        module_run(params(bandwidth_gbs=-1.0), True)
    with pytest.raises(BenchmarkError, match="service_pid"):
        probe_from_module_params(params(service_pid=0))


def test_module_run_reports_roofline_memory_cold_start_and_goodput(tmp_path, model_dir):
    record = tmp_path / "ready.json"
    record.write_text(json.dumps({"healthy_s": 12.5, "first_completion_s": 13.0}))
    with serve_in_thread(FakeConfig(ttft_s=0.001, itl_s=0.001)) as srv:
        out = module_run(
            params(
                base_url=srv.base_url,
                trials=2,
                num_requests=3,
                warmup=0,
                output_len=4,
                concurrency=1,
                model_dir=model_dir,
                bandwidth_gbs=40.0,
                service_pid=os.getpid(),
                cold_start_file=str(record),
                slo={"ttft_ms": 10000, "tpot_ms": 10000},
            ),
            check_mode=False,
        )
    roof = out["roofline"]
    assert roof["available"] is True and roof["weight_bytes"] == 4000
    assert roof["decode_bound_tokens_per_s"] == pytest.approx(40e9 / 4000)
    assert roof["measured_tokens_per_s"] == pytest.approx(1000 / roof["tpot_ms_median"])
    assert roof["reason"] is None  # concurrency 1: a single-stream figure
    mem = out["service_memory"]
    assert mem["available"] is True and mem["pid"] == os.getpid()
    assert mem["before"]["rss_bytes"] > 0 and mem["after"]["rss_bytes"] > 0
    assert out["cold_start"]["healthy_s"] == 12.5 and out["cold_start"]["available"] is True
    metrics = out["summary"]["metrics"]
    assert metrics["goodput"]["samples"] == pytest.approx(metrics["request_throughput"]["samples"])
    assert out["result"]["workload"]["params"]["slo"] == {"ttft_ms": 10000.0, "tpot_ms": 10000.0}
    # Issue 35: the serving configuration, read from the server's process (here: this one).
    server = out["result"]["server_config"]
    # This process, as /proc shows it (pytest, or an xdist worker under pytest -n).
    assert server["argv"] == Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]
    assert server["cpus"]
    check_result_dict(out["result"])


def test_cli_flags_and_table(tmp_path, model_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps the table to the terminal
    dest = tmp_path / "r.json"
    with serve_in_thread(FakeConfig(ttft_s=0.001, itl_s=0.001)) as srv:
        rc = main(
            [
                "bench",
                "--base-url", srv.base_url,
                "--workload", "demo",
                "--trials", "1",
                "--num-requests", "2",
                "--warmup", "0",
                "--output-len", "4",
                "--model-dir", model_dir,
                "--tp", "2",
                "--calibration", str(CALIBRATION),
                "--service-pid", str(os.getpid()),
                "--slo-ttft-ms", "0.000001",
                "--output", str(dest),
            ]
        )  # fmt: skip
    assert rc == 0
    data = json.loads(dest.read_text())
    roof = data["roofline"]
    assert roof["bandwidth_gbs"] == pytest.approx(4207.979838742909)
    assert roof["decode_bound_tokens_per_s"] == pytest.approx(4207.979838742909e9 / 2000)
    assert data["trials"][0]["metrics"]["goodput"] == 0.0  # nobody meets a 1 ns TTFT
    assert data["cold_start"]["reason"] == "no service unit or cold_start_file given"
    text = capsys.readouterr().out
    assert "roofline: " in text and "(given)" in text and "SLO met" in text
    assert "cold start: not available" in text
    bad = main(["bench", "--base-url", "http://127.0.0.1:9", "--workload", "demo", "--tp", "0"])
    assert bad == 1


def test_host_lines_say_why_not():
    class R:
        roofline = {"available": False, "reason": "no model folder given (model_dir)"}
        service_memory = {"available": False, "reason": "no service unit or pid given"}
        cold_start = {"available": True, "healthy_s": 40.0, "first_completion_s": 41.0,
                      "upper_bound": True}  # fmt: skip

    lines = host_lines(R())
    assert lines == [
        "roofline: not available: no model folder given (model_dir)",
        "service memory: not available: no service unit or pid given",
        "cold start: /health 200 after 40.0 s, first completion after 41.0 s "
        "(upper bound: already up at the first poll)",
    ]
