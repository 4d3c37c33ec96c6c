"""Host figures: safetensors weights, roofline, process-tree and cgroup memory,
nvidia-smi, the cold-start record (benchgate.hostprobe and wait_ready.py)."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _load import load_file
from benchgate import hostprobe as hp

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / ".cache" / "models" / "tiny-llama"
CALIBRATION = REPO / "lab" / "calibration" / "h200-qwen3-14b-4b.json"
WAIT_READY = REPO / "roles" / "vllm_service" / "files" / "wait_ready.py"

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "F64": 8, "I32": 4, "U8": 1, "I8": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], cut: int = 0) -> int:
    """A safetensors file with zero-filled tensors; returns the data bytes written."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (offset - cut))
    return offset


# --------------------------------------------------------------------- safetensors


@pytest.mark.skipif(not (TINY / "model.safetensors").is_file(), reason="tiny model not built")
def test_weight_bytes_of_the_real_tiny_model():
    path = TINY / "model.safetensors"
    header, length = hp.safetensors_header(path)
    # Independent count: elements x dtype size from the shapes.
    from_shapes = sum(
        math.prod(info["shape"]) * DTYPE_BYTES[info["dtype"]]
        for name, info in header.items()
        if name != "__metadata__"
    )
    total, files = hp.model_weight_bytes(TINY)
    assert files == 1
    assert total == from_shapes == path.stat().st_size - 8 - length
    assert total > 1_000_000  # lm_head alone is 2048 x 128 x 4 bytes


def test_weight_bytes_of_a_written_file(tmp_path):
    written = write_safetensors(
        tmp_path / "model.safetensors",
        {"a": ("BF16", [64, 32]), "b": ("F32", [10]), "c": ("I64", [3, 3])},
    )
    assert written == 64 * 32 * 2 + 40 + 72
    assert hp.model_weight_bytes(tmp_path) == (written, 1)


def test_index_names_the_shards_and_a_consolidated_copy_is_ignored(tmp_path):
    one = write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"x": ("F16", [100])})
    two = write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"y": ("F16", [50])})
    write_safetensors(tmp_path / "consolidated.safetensors", {"x": ("F16", [150])})
    index = {
        "weight_map": {
            "x": "model-00001-of-00002.safetensors",
            "y": "model-00002-of-00002.safetensors",
        }
    }
    (tmp_path / hp.INDEX_FILE).write_text(json.dumps(index))
    assert hp.model_weight_bytes(tmp_path) == (one + two, 2)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(hp.WeightsError, match="names missing files"):
        hp.model_weight_bytes(tmp_path)


def test_bad_weights_are_errors_not_numbers(tmp_path):
    with pytest.raises(hp.WeightsError, match="not a folder"):
        hp.model_weight_bytes(tmp_path / "Qwen/Qwen3-8B")
    with pytest.raises(hp.WeightsError, match=r"no \*\.safetensors"):
        hp.model_weight_bytes(tmp_path)
    write_safetensors(tmp_path / "cut.safetensors", {"w": ("F32", [1000])}, cut=100)
    with pytest.raises(hp.WeightsError, match="outside the data"):
        hp.model_weight_bytes(tmp_path)
    (tmp_path / "cut.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(hp.WeightsError, match="not plausible"):
        hp.model_weight_bytes(tmp_path)
    (tmp_path / "cut.safetensors").write_bytes(struct.pack("<Q", 5) + b"[1,2]")
    with pytest.raises(hp.WeightsError, match="not a JSON object"):
        hp.model_weight_bytes(tmp_path)


# --------------------------------------------------------------------- GPUs and roofline


@pytest.mark.parametrize(
    ("name", "gbs"),
    [
        ("NVIDIA H200", 4800.0),
        ("NVIDIA H200 NVL", 4800.0),
        ("NVIDIA H100 80GB HBM3", 3350.0),
        ("NVIDIA H100 PCIe", 2000.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0),
        ("NVIDIA A100 80GB PCIe", 1935.0),
        ("NVIDIA A100-PCIE-40GB", 1555.0),
        ("NVIDIA A100-SXM4-40GB", 1555.0),
        ("NVIDIA L40S", 864.0),
        ("NVIDIA L40", 864.0),
        ("NVIDIA L4", 300.0),
        ("NVIDIA A10G", 600.0),
        ("NVIDIA GeForce RTX 4090", 1008.0),
        ("NVIDIA H100 NVL", None),
        ("Tesla T4", None),
        ("NVIDIA A10", None),
    ],
)
def test_bandwidth_table(name, gbs):
    known = hp.known_bandwidth(name)
    assert (known[1] if known else None) == gbs


SMI = """0, NVIDIA H200, 131072, 143771
1, NVIDIA H200, 512, 143771
"""


def test_nvidia_smi_parsing():
    gpus = hp.parse_nvidia_smi(SMI)
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_used_mib": 131072.0,
            "memory_total_mib": 143771.0,
        },
        {"index": 1, "name": "NVIDIA H200", "memory_used_mib": 512.0, "memory_total_mib": 143771.0},
    ]
    with pytest.raises(ValueError, match="unexpected"):
        hp.parse_nvidia_smi("0, NVIDIA H200, [N/A], 143771")
    seen = []

    def run(argv):
        seen.append(list(argv))
        return SMI

    assert hp.query_gpus(run)[0][1]["memory_used_mib"] == 512.0
    assert seen[0][1:] == hp.NVIDIA_SMI_QUERY

    def broken(argv):
        raise OSError("exit 9: NVIDIA-SMI has failed")

    assert hp.query_gpus(broken) == (None, "nvidia-smi failed: exit 9: NVIDIA-SMI has failed")
    assert hp.query_gpus(lambda argv: "\n") == (None, "nvidia-smi lists no GPU")


def test_nvidia_smi_output_captured_on_an_h200():
    # nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits
    # run on an idle H200 host; parsed there by query_gpus() the same way.
    text = (REPO / "tests" / "data" / "nvidia-smi" / "h200-query-gpu-memory.csv").read_text()
    gpus = hp.parse_nvidia_smi(text)
    assert gpus == [
        {"index": 0, "name": "NVIDIA H200", "memory_used_mib": 0.0, "memory_total_mib": 143771.0}
    ]
    assert hp.known_bandwidth(gpus[0]["name"]) == ("H200", 4800.0)


def test_decode_bound_math():
    # 16 GB of weights over TP 2 on 4.8 TB/s: each step reads 8 GB -> 600 steps/s.
    assert hp.decode_bound_tokens_per_s(16 * 10**9, 2, 4800.0) == pytest.approx(600.0)
    assert hp.decode_bound_tokens_per_s(16 * 10**9, 1, 4800.0) == pytest.approx(300.0)
    with pytest.raises(ValueError):
        hp.decode_bound_tokens_per_s(0, 1, 4800.0)


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    # 8,000,000 bytes of BF16 weights.
    write_safetensors(folder / "model.safetensors", {"w": ("BF16", [2000, 2000])})
    return str(folder)


def test_roofline_from_the_gpu_table(model_dir):
    gpus = hp.parse_nvidia_smi(SMI)
    out = hp.roofline(model_dir, 2, None, gpus, None, tpot_ms_median=0.004, concurrency=1)
    assert out["available"] is True and out["reason"] is None
    assert out["weight_bytes"] == 8_000_000 and out["gpu_name"] == "NVIDIA H200"
    assert out["bandwidth_source"] == "datasheet: H200" and out["bandwidth_gbs"] == 4800.0
    bound = 4800e9 / 4_000_000
    assert out["decode_bound_tokens_per_s"] == pytest.approx(bound)
    assert out["measured_tokens_per_s"] == pytest.approx(250_000.0)
    assert out["efficiency_pct"] == pytest.approx(100 * 250_000 / bound)


def test_roofline_given_bandwidth_wins_and_concurrency_is_flagged(model_dir):
    out = hp.roofline(model_dir, 1, 20.0, hp.parse_nvidia_smi(SMI), None, 1.0, concurrency=4)
    assert out["bandwidth_source"] == "given" and out["bandwidth_gbs"] == 20.0
    assert out["decode_bound_tokens_per_s"] == pytest.approx(20e9 / 8e6)
    assert out["efficiency_pct"] == pytest.approx(100 * 1000 / 2500)
    assert "concurrency 4" in out["reason"]


def test_roofline_never_invents_a_number(model_dir, tmp_path):
    cpu = hp.roofline(model_dir, 1, None, None, "nvidia-smi not found", 5.0)
    assert cpu["available"] is False and cpu["decode_bound_tokens_per_s"] is None
    assert "nvidia-smi not found" in cpu["reason"] and "bandwidth_gbs" in cpu["reason"]
    assert cpu["weight_bytes"] == 8_000_000  # a fact, reported anyway
    unknown = hp.roofline(model_dir, 1, None, hp.parse_nvidia_smi("0, Tesla T4, 1, 15360"), None, 5)
    assert (
        unknown["available"] is False
        and "'Tesla T4' is not in the bandwidth table" in unknown["reason"]
    )
    mixed = hp.parse_nvidia_smi("0, NVIDIA L4, 1, 2\n1, NVIDIA L40S, 1, 2")
    assert "different kinds" in hp.roofline(model_dir, 2, None, mixed, None, 5)["reason"]
    hub = hp.roofline("Qwen/Qwen3-8B", 1, 4800.0, None, None, 5.0)
    assert hub["available"] is False and "not a folder" in hub["reason"]
    assert hp.roofline(None, 1, 4800.0, None, None, 5.0)["reason"].startswith("no model folder")
    assert "must be >= 1" in hp.roofline(model_dir, 0, 4800.0, None, None, 5.0)["reason"]
    bound_only = hp.roofline(model_dir, 1, 4800.0, None, None, None)
    assert bound_only["available"] is True and bound_only["efficiency_pct"] is None
    assert "no TPOT" in bound_only["reason"]


def test_bandwidth_from_the_calibration_file(tmp_path):
    assert hp.bandwidth_from_calibration(CALIBRATION) == pytest.approx(4207.979838742909)
    bad = tmp_path / "c.json"
    bad.write_text('{"bandwidth_gbs": {"copy_gbs": 1}}')
    with pytest.raises(ValueError, match="read_gbs"):
        hp.bandwidth_from_calibration(bad)


# --------------------------------------------------------------------- /proc and cgroups


def fake_proc(root: Path, pid: int, ppid: int, comm: str, rss_kb: int | None, pss_kb=None):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0\n")
    status = f"Name:\t{comm}\nPPid:\t{ppid}\n"
    if rss_kb is not None:
        status += f"VmRSS:\t{rss_kb:>8} kB\n"
    (d / "status").write_text(status)
    if pss_kb is not None:
        (d / "smaps_rollup").write_text(f"Rss:  {rss_kb} kB\nPss:  {pss_kb} kB\n")


@pytest.fixture
def proc(tmp_path):
    root = tmp_path / "proc"
    fake_proc(root, 1, 0, "systemd", 10_000, 9_000)
    fake_proc(root, 100, 1, "vllm", 2_000_000, 1_500_000)
    fake_proc(root, 101, 100, "VLLM::EngineCore", 8_000_000, 7_000_000)
    fake_proc(root, 102, 101, "python3 (spawn) x)", 1_000, 500)  # odd comm
    fake_proc(root, 103, 100, "kworker", None)  # no VmRSS: not counted
    fake_proc(root, 200, 1, "sshd", 50_000, 40_000)  # not in the tree
    (root / "self").mkdir()
    (root / "meminfo").write_text("MemTotal: 1 kB\n")
    return root


def test_process_tree_and_its_memory(proc):
    assert hp.process_tree(100, proc) == [100, 101, 103, 102]
    assert hp.process_tree(999, proc) == []
    mem = hp.tree_memory(100, proc)
    assert mem == {
        "pid": 100,
        "pids": 3,
        "rss_bytes": (2_000_000 + 8_000_000 + 1_000) * 1024,
        "pss_bytes": (1_500_000 + 7_000_000 + 500) * 1024,
    }
    (proc / "102" / "smaps_rollup").unlink()  # not readable: PSS unknown, RSS still known
    mem = hp.tree_memory(100, proc)
    assert mem["pss_bytes"] is None and mem["rss_bytes"] == (2_000_000 + 8_000_000 + 1_000) * 1024
    assert hp.tree_memory(999, proc)["rss_bytes"] is None


def test_cgroup_v2_and_v1(tmp_path):
    v2 = tmp_path / "v2" / "system.slice" / "vllm.service"
    v2.mkdir(parents=True)
    (v2 / "memory.current").write_text("123456789\n")
    (v2 / "memory.peak").write_text("223456789\n")
    assert hp.cgroup_memory("/system.slice/vllm.service", tmp_path / "v2") == {
        "cgroup": "/system.slice/vllm.service",
        "memory_current_bytes": 123456789,
        "memory_peak_bytes": 223456789,
    }
    v1 = tmp_path / "v1" / "memory" / "system.slice" / "vllm.service"
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text("42\n")
    got = hp.cgroup_memory("/system.slice/vllm.service", tmp_path / "v1")
    assert got["memory_current_bytes"] == 42 and got["memory_peak_bytes"] is None
    assert hp.cgroup_memory("/nope", tmp_path / "v2")["memory_current_bytes"] is None
    assert hp.cgroup_memory(None)["cgroup"] is None


def test_locate_service_from_systemd_properties():
    shown = {
        "MainPID": "100",
        "ControlGroup": "/system.slice/vllm.service",
        "ActiveState": "active",
        "InvocationID": "abc",
    }
    pid, cg, props, reason = hp.locate_service("vllm.service", None, lambda unit: shown)
    assert (pid, cg, reason) == (100, "/system.slice/vllm.service", None)
    stopped = {"MainPID": "0", "ActiveState": "inactive", "ControlGroup": ""}
    pid, _, _, reason = hp.locate_service("vllm.service", None, lambda unit: stopped)
    assert pid is None and reason == "vllm.service has no main process (state inactive)"
    assert "failed" in hp.locate_service("vllm.service", None, lambda unit: {})[3]
    assert hp.locate_service(None, 77)[0] == 77
    assert hp.locate_service(None, None)[3] == "no service unit or pid given"
    text = (
        "MainPID=100\nControlGroup=/system.slice/vllm.service\nExecMainStartTimestampMonotonic=5\n"
    )
    assert hp.parse_systemctl_show(text)["ExecMainStartTimestampMonotonic"] == "5"


def test_memory_of_the_real_process_tree():
    """The real /proc: this test process and a child it starts."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(50):
            if child.pid in hp.process_tree(os.getpid()):
                break
            time.sleep(0.05)
        tree = hp.process_tree(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree
        mine = hp.tree_memory(os.getpid())
        assert mine["pids"] >= 2
        alone = hp.tree_memory(child.pid)
        assert alone["pids"] == 1 and alone["rss_bytes"] > 1_000_000  # a Python interpreter
        assert mine["rss_bytes"] > alone["rss_bytes"]
    finally:
        child.kill()
        child.wait()
    line = Path("/proc/self/cgroup").read_text().splitlines()[-1]
    cgroup = line.split(":", 2)[2]
    if Path("/sys/fs/cgroup", cgroup.lstrip("/"), "memory.current").is_file():
        assert hp.cgroup_memory(cgroup)["memory_current_bytes"] > 0


def test_service_probe_samples_before_and_after(proc, tmp_path, model_dir):
    shown = {"MainPID": "100", "ControlGroup": "", "InvocationID": "inv-1"}
    record = tmp_path / "ready.json"
    record.write_text(
        json.dumps(
            {
                "healthy_s": 41.25,
                "first_completion_s": 42.5,
                "upper_bound": False,
                "invocation_id": "inv-1",
            }
        )
    )
    probe = hp.ServiceProbe(
        unit="vllm.service",
        model_dir=model_dir,
        tensor_parallel_size=1,
        cold_start_file=str(record),
        gpu_query=lambda: (hp.parse_nvidia_smi("0, NVIDIA L4, 20000, 23034"), None),
        proc_root=str(proc),
        cgroup_root=str(tmp_path / "nocgroup"),
        show=lambda unit: shown,
    )
    probe.sample("before", "t0")
    fake_proc(proc, 104, 101, "worker", 4_000)  # a process started during the trials
    probe.sample("after", "t1")
    out = probe.report(tpot_ms_median=10.0, concurrency=1)
    mem = out["service_memory"]
    assert mem["available"] is True and mem["pid"] == 100 and mem["gpu_reason"] is None
    assert mem["after"]["rss_bytes"] - mem["before"]["rss_bytes"] == 4_000 * 1024
    assert mem["after"]["gpus"][0]["memory_used_mib"] == 20000.0
    roof = out["roofline"]
    assert roof["bandwidth_source"] == "datasheet: L4"
    assert roof["decode_bound_tokens_per_s"] == pytest.approx(300e9 / 8e6)
    assert roof["efficiency_pct"] == pytest.approx(100 * 100 / (300e9 / 8e6))
    assert out["cold_start"]["available"] is True and out["cold_start"]["healthy_s"] == 41.25


def test_service_probe_without_a_service():
    probe = hp.ServiceProbe(gpu_query=lambda: (None, "nvidia-smi not found"))
    probe.sample("before", "t0")
    out = probe.report(None, 1)
    assert out["service_memory"] == {
        "available": False,
        "reason": "no service unit or pid given",
        "unit": None,
        "pid": None,
        "cgroup": None,
        "gpu_reason": "nvidia-smi not found",
        "before": {
            "at": "t0",
            "pid": None,
            "pids": 0,
            "rss_bytes": None,
            "pss_bytes": None,
            "cgroup_memory_current_bytes": None,
            "cgroup_memory_peak_bytes": None,
            "gpus": None,
        },
        "after": None,
    }
    assert out["roofline"]["available"] is False
    assert out["cold_start"]["reason"] == "no service unit or cold_start_file given"


# --------------------------------------------------------------------- cold start


def load_wait_ready():
    return load_file(WAIT_READY, "wait_ready")


def test_wait_ready_record_and_what_the_benchmark_reads(tmp_path):
    wr = load_wait_ready()
    props = {
        "InvocationID": "inv-2",
        "ExecMainStartTimestampMonotonic": "1000000000",  # 1000 s after boot, in us
        "ActiveEnterTimestampMonotonic": "1000001000",
    }
    record = wr.cold_start_record(props, 1041.5, 1043.25, False, 1.0)
    assert record["healthy_s"] == 41.5 and record["first_completion_s"] == 43.25
    assert record["start_property"] == "ExecMainStartTimestampMonotonic"
    assert record["invocation_id"] == "inv-2" and record["upper_bound"] is False
    fallback = wr.cold_start_record(
        {"ExecMainStartTimestampMonotonic": "0", "ActiveEnterTimestampMonotonic": "2000000"},
        12.0,
        None,
        True,
        1.0,
    )
    assert fallback["healthy_s"] == 10.0 and fallback["upper_bound"] is True
    assert fallback["start_property"] == "ActiveEnterTimestampMonotonic"
    assert (
        wr.cold_start_record({"ExecMainStartTimestampMonotonic": "0"}, 1.0, 2.0, False, 1) is None
    )

    path = tmp_path / "run" / "benchgate" / "vllm.service.ready.json"
    assert wr.write_record(str(path), record) is None
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    got = hp.cold_start(str(path), {"InvocationID": "inv-2"})
    assert got["available"] is True and got["matches_current_start"] is True
    assert (got["healthy_s"], got["first_completion_s"]) == (41.5, 43.25)
    stale = hp.cold_start(str(path), {"InvocationID": "inv-3"})
    assert stale["available"] is False and "earlier start" in stale["reason"]
    unchecked = hp.cold_start(str(path), None)  # a pid given, no unit: cannot check
    assert unchecked["available"] is True and unchecked["matches_current_start"] is None
    missing = hp.cold_start(str(tmp_path / "none.json"), {})
    assert missing["available"] is False and "wait_ready.py" in missing["reason"]
    path.write_text("{}")
    assert "unreadable record" in hp.cold_start(str(path), {})["reason"]
    assert wr.write_record(str(tmp_path / "file" / "x.json"), record) is None
    (tmp_path / "blocker").write_text("")
    assert "blocker" in wr.write_record(str(tmp_path / "blocker" / "x.json"), record)


def test_default_cold_start_path():
    assert hp.default_cold_start_file("vllm.service") == "/run/benchgate/vllm.service.ready.json"
    assert hp.ServiceProbe(unit="vllm.service").cold_start_file == (
        "/run/benchgate/vllm.service.ready.json"
    )


def test_the_probe_reads_the_servers_configuration_without_its_secrets(tmp_path: Path) -> None:
    """Issue 35, 3: the result carries the server's argv, the vLLM environment and its
    CPUs, read from the running process; secret values never leave the host."""
    from benchgate import serverconfig

    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    argv = ["/opt/vllm/bin/vllm", "serve", "tiny", "--api-key", "s3cret", "--max-num-seqs=1"]
    (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    env = ["PATH=/usr/bin", "VLLM_USE_V1=1", "VLLM_API_KEY=s3cret", "HF_TOKEN=s3cret"]
    (proc / "environ").write_bytes(b"\0".join(e.encode() for e in env))
    (proc / "status").write_text("Name:\tvllm\nCpus_allowed_list:\t2-15\n", encoding="utf-8")
    (proc / "stat").write_text("4242 (vllm) S 1 0 0", encoding="utf-8")
    probe = hp.ServiceProbe(pid=4242, proc_root=str(tmp_path / "proc"))
    probe.main_pid = 4242
    config = probe.server_config()
    assert config is not None
    assert config["argv"] == [*argv[:4], "***", "--max-num-seqs=1"]
    assert config["env"] == {"VLLM_USE_V1": "1"} and config["cpus"] == "2-15"
    assert "s3cret" not in json.dumps(config)
    assert serverconfig.config_text(config) == "tiny --max-num-seqs 1 VLLM_USE_V1=1 cpus=2-15"
    assert hp.ServiceProbe(pid=1, proc_root=str(tmp_path / "none")).server_config() is None
