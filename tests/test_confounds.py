"""Issue 34, 3 "Confounds on record": what a measurement ran under (the host, what
vLLM said about itself at start-up) travels with the result's server_config, is
never the reason a measurement fails, and is named where two configurations differ."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _load import load_file
from benchgate import confounds, ledger, serverconfig
from benchgate import hostprobe as hp
from benchgate.bench import module_run
from benchgate.results import check_result_dict
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "workloads" / "demo.yml")

# ------------------------------------------------------------------ vLLM's own lines
# Each line below is as vLLM printed it: vLLM 0.26.0 on this repo's H200
# (lab/calibration/h200-vllm-6/summary.md, the spread experiment's start logs), or a
# published server log of another release; the message texts were also checked
# against vLLM's source (vllm/config/vllm.py, vllm/v1/engine/core.py,
# vllm/v1/worker/gpu_worker.py, vllm/config/compilation.py). "Using V2 Model Runner"
# is from the source only: the message is vLLM's, the prefix is its usual one.

VERSION_0_24 = (
    "(APIServer pid=1148) INFO 07-09 21:27:30 [api_server.py:1978] vLLM API server version 0.24.0"
)
# vLLM 0.24.0's engine banner (no compilation_config in this one).
BANNER_0_24 = (
    "(EngineCore pid=1878) INFO 07-09 21:27:35 [core.py:114] Initializing a V1 LLM engine "
    "(v0.24.0) with config: model='/workspace/base', speculative_config=None, "
    "tokenizer='/workspace/base', skip_tokenizer_init=False, tokenizer_mode=auto, "
    "revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=8192, "
    "download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
    "data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
    "quantization_config=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
    "seed=0, served_model_name=base, enable_prefix_caching=True, enable_chunked_prefill=True, "
    "pooler_config=None"
)
# A banner with the resolved compilation config: the start of the 0.24.0 one above
# with this repo's 0.26.0 server (lab/calibration/h100-vllm-4) and TP 2, then the
# compilation_config as published 0.2x banners print it (cut after cudagraph_mode).
BANNER_COMPILED = (
    "(EngineCore_DP0 pid=10479) INFO 02-06 03:33:23 [core.py:93] Initializing a V1 LLM engine "
    "(v0.26.0) with config: model='/tmp/bg/models/qwen3-14b', speculative_config=None, "
    "tensor_parallel_size=2, pipeline_parallel_size=1, enforce_eager=False, "
    "served_model_name=qwen3-14b, enable_prefix_caching=True, enable_chunked_prefill=True, "
    "pooler_config=None, compilation_config={'level': None, 'mode': "
    "<CompilationMode.VLLM_COMPILE: 3>, 'debug_dump_path': None, 'cache_dir': '', "
    "'backend': 'inductor', 'custom_ops': ['none'], 'inductor_passes': {}, 'cudagraph_mode': "
    "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_num_of_warmups': 1, "
    "'cudagraph_capture_sizes': [1, 2, 4, 8, 16], 'cudagraph_copy_inputs': False}"
)
# vLLM 0.26.0, plain decoding (start 1) and the 0.6B draft model at k=3 (start 2).
ASYNC_ON = (
    "(APIServer pid=752) INFO 12-06 23:17:01 [vllm.py:1109] Asynchronous scheduling is enabled."
)
ASYNC_OFF = (
    "(APIServer pid=1323) INFO 12-06 23:19:05 [vllm.py:1109] Asynchronous scheduling is disabled."
)
ASYNC_DRAFT = (
    "(APIServer pid=1323) WARNING 12-06 23:19:05 [vllm.py:1077] Async scheduling not supported "
    "with draft_model-based speculative decoding and will be disabled."
)
RUNNER_V1_DRAFT = (
    "(APIServer pid=1323) WARNING 12-06 23:19:05 [vllm.py:584] Model Runner V2 does not yet "
    "support speculative method 'draft_model'; using the V1 model runner instead."
)
RUNNER_V2 = "(EngineCore pid=893) INFO 12-06 23:17:20 [gpu_worker.py:385] Using V2 Model Runner"
RUNNER_V1_TRITON = (
    "WARNING 08-18 22:13:02 [vllm.py:534] Model Runner V2 requires Triton; using the V1 model "
    "runner instead."
)
GRAPHS_BY_BACKEND = (
    "(EngineCore pid=282) WARNING 06-01 21:56:11 [compilation.py:1416] "
    "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend "
    "FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting "
    "cudagraph_mode=PIECEWISE"
)
GRAPHS_OVERRIDDEN = (
    "(APIServer pid=2588191) WARNING 10-17 13:50:11 [vllm.py:385] NVIDIA Blackwell TRTLLM "
    "attention cannot support max_model_len >= 131072 (found 1048576), causing dynamic "
    "dispatching that breaks full cudagraphs. Overriding cudagraph_mode to PIECEWISE."
)
EAGER_SET = (
    "WARNING 03-27 12:18:25 [vllm.py:788] Enforce eager set, disabling torch.compile and "
    "CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none"
)
EAGER_GRAPHS = "INFO 05-19 02:38:06 [vllm.py:1081] Cudagraph is disabled under eager mode"
CPU_EAGER = (
    "WARNING 11-01 01:33:53 cpu_executor.py:332] CUDA graph is not supported on CPU, fallback "
    "to the eager mode."
)
NOISE = (
    "(EngineCore pid=1878) INFO 07-09 21:29:51 [kv_cache_utils.py:2146] GPU KV cache size: "
    "223,152 tokens"
)

# The H200 host of that experiment (lab/calibration/h200-vllm-6/results/host.txt:
# name, memory, driver, SM clock then and its maximum) as `nvidia-smi
# --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` prints it, and its CPU.
H200_CSV = "0, NVIDIA H200, 580.159.04, 345, 1980, 143771\n"
CPUINFO = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n"
)


def plain_log() -> str:
    return "\n".join([ASYNC_ON, BANNER_COMPILED, RUNNER_V2, NOISE]) + "\n"


def draft_log() -> str:
    return (
        "\n".join(
            [ASYNC_DRAFT, RUNNER_V1_DRAFT, ASYNC_OFF, BANNER_COMPILED, GRAPHS_BY_BACKEND, NOISE]
        )
        + "\n"
    )


# ------------------------------------------------------------------ engine_facts


def test_plain_decoding_facts() -> None:
    facts = confounds.engine_facts(plain_log())
    assert facts["vllm_version"] == "0.26.0"  # from the engine's banner
    assert facts["async_scheduling"] is True and facts["async_scheduling_note"] is None
    assert facts["model_runner"] == "V2" and facts["model_runner_note"] is None
    assert facts["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert facts["compilation_mode"] == "VLLM_COMPILE"
    assert facts["enforce_eager"] is False and facts["tensor_parallel_size"] == 2
    assert not any("KV cache size" in line for line in facts["lines"])
    assert ASYNC_ON in facts["lines"] and RUNNER_V2 in facts["lines"]
    json.dumps(facts)


def test_a_draft_model_turns_async_scheduling_off_and_falls_back_to_v1() -> None:
    """What vLLM 0.24.0/0.26.0 log for a draft model (lab/notes/2026-12-06-spread.md),
    and a backend that lowers the CUDA graph mode after the banner printed it."""
    facts = confounds.engine_facts(draft_log())
    assert facts["async_scheduling"] is False
    assert facts["async_scheduling_note"] == (
        "Async scheduling not supported with draft_model-based speculative decoding and will "
        "be disabled"
    )
    assert facts["model_runner"] == "V1"
    assert facts["model_runner_note"] == (
        "Model Runner V2 does not yet support speculative method 'draft_model'"
    )
    assert facts["cudagraph_mode"] == "PIECEWISE"  # the last line that says wins
    assert confounds.engine_facts(RUNNER_V1_TRITON)["model_runner_note"] == (
        "Model Runner V2 requires Triton"
    )
    # The warning and the state line in either order; the warning printed once per process.
    swapped = confounds.engine_facts("\n".join([ASYNC_OFF, ASYNC_DRAFT, RUNNER_V1_DRAFT] * 2))
    assert swapped["async_scheduling"] is False and swapped["async_scheduling_note"]
    assert swapped["lines"] == [ASYNC_OFF, ASYNC_DRAFT, RUNNER_V1_DRAFT]


def test_a_draft_model_asked_for_async_scheduling_keeps_it() -> None:
    """vLLM 0.26.0 with --async-scheduling and the draft model (start 3 of the spread
    experiment): on, and still the V1 model runner."""
    facts = confounds.engine_facts(
        "(APIServer pid=1866) INFO 12-06 23:21:18 [vllm.py:1109] Asynchronous scheduling is "
        "enabled.\n(APIServer pid=1866) WARNING 12-06 23:21:19 [vllm.py:584] Model Runner V2 "
        "does not yet support speculative method 'draft_model'; using the V1 model runner "
        "instead.\n"
    )
    assert (facts["async_scheduling"], facts["async_scheduling_note"]) == (True, None)
    assert facts["model_runner"] == "V1"


def test_cuda_graph_modes_and_eager_mode() -> None:
    assert confounds.engine_facts(GRAPHS_OVERRIDDEN)["cudagraph_mode"] == "PIECEWISE"
    line = "Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability."
    assert confounds.engine_facts(line)["cudagraph_mode"] == "PIECEWISE"
    eager = confounds.engine_facts(f"{EAGER_SET}\n{EAGER_GRAPHS}\n")
    assert (eager["enforce_eager"], eager["cudagraph_mode"], eager["compilation_mode"]) == (
        True,
        "NONE",
        "NONE",
    )
    cpu = confounds.engine_facts(CPU_EAGER)
    assert (cpu["enforce_eager"], cpu["cudagraph_mode"], cpu["compilation_mode"]) == (
        True,
        "NONE",
        None,
    )


@pytest.mark.parametrize(
    ("start", "async_on", "runner", "graphs"),
    [
        ("plain", True, "V2", "FULL_AND_PIECEWISE"),
        ("static", False, "V1", "FULL_AND_PIECEWISE"),
        ("schedule", False, "V1", "PIECEWISE"),
    ],
)
def test_real_cuda_start_up_logs(start: str, async_on: bool, runner: str, graphs: str) -> None:
    # CUDA vLLM 0.26.0 on an H100, 2026-12-07: plain decoding, the 4B draft at k=3 and
    # the same with num_speculative_tokens_per_batch_size (the lines of each server's
    # log that state these facts, as vLLM wrote them).
    text = (Path(__file__).parent / "data" / f"vllm-0.26.0-cuda-h100-start-{start}.log").read_text()
    facts = confounds.engine_facts(text)
    assert (facts["vllm_version"], facts["async_scheduling"]) == ("0.26.0", async_on)
    assert (facts["model_runner"], facts["cudagraph_mode"]) == (runner, graphs)
    assert (facts["compilation_mode"], facts["tensor_parallel_size"]) == ("VLLM_COMPILE", 1)


def test_what_no_line_states_stays_unknown() -> None:
    facts = confounds.engine_facts(f"{VERSION_0_24}\n{BANNER_0_24}\n-- No entries --\n")
    assert facts["vllm_version"] == "0.24.0" and facts["tensor_parallel_size"] == 1
    assert facts["enforce_eager"] is False
    for key in ("async_scheduling", "model_runner", "cudagraph_mode", "compilation_mode"):
        assert facts[key] is None, key
    empty = confounds.engine_facts("")
    assert {k for k, v in empty.items() if v not in (None, [])} == set()
    # Coloured output (a terminal's) reads the same; draft_tensor_parallel_size is not TP.
    colored = "\x1b[32mINFO\x1b[0m [vllm.py:840] Asynchronous scheduling is disabled."
    assert confounds.engine_facts(colored)["async_scheduling"] is False
    assert confounds.engine_facts("draft_tensor_parallel_size=4")["tensor_parallel_size"] is None


def test_the_argument_echo_is_not_read_and_secrets_are_not_kept() -> None:
    """The API server echoes what it was asked (with its key); a kept line loses any
    secret-looking value."""
    echo = (
        "(APIServer pid=733) INFO 11-14 21:01:38 [utils.py:253] non-default args: "
        "{'model_tag': 'm', 'api_key': ['s3cret'], 'compilation_config': {'cudagraph_mode': "
        "<CUDAGraphMode.PIECEWISE: 1>}}"
    )
    facts = confounds.engine_facts(echo)
    assert facts["cudagraph_mode"] is None and facts["lines"] == []
    odd = "Overriding cudagraph_mode to PIECEWISE. api_key='s3cret', hf_token=abc, tokenizer=t"
    [kept] = confounds.engine_facts(odd)["lines"]
    assert kept == "Overriding cudagraph_mode to PIECEWISE. api_key=***, hf_token=***, tokenizer=t"


def test_long_lines_are_kept_short() -> None:
    facts = confounds.engine_facts(BANNER_COMPILED)
    [kept] = facts["lines"]
    assert len(kept) < len(BANNER_COMPILED) and "with config:" in kept
    assert "cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE" in kept
    assert "served_model_name" not in kept  # only what matched follows the banner's start
    many = "\n".join(f"INFO [x.py:{i}] Asynchronous scheduling is enabled. {i}" for i in range(40))
    assert len(confounds.engine_facts(many)["lines"]) == 16


# ------------------------------------------------------------------ the journal


def test_the_start_of_the_unit_on_the_wall_clock() -> None:
    props = {"ExecMainStartTimestampMonotonic": "5000000", "ActiveEnterTimestampMonotonic": "1"}
    assert confounds.unit_start_epoch(props, now=1000.0, now_monotonic=15.0) == 990.0
    props = {"ExecMainStartTimestampMonotonic": "0", "ActiveEnterTimestampMonotonic": "9000000"}
    assert confounds.unit_start_epoch(props, now=1000.0, now_monotonic=15.0) == 994.0
    assert confounds.unit_start_epoch({}) is None


def test_read_engine_log_says_why_not() -> None:
    props = {"ExecMainStartTimestampMonotonic": "5000000"}
    asked: list[tuple[str, int]] = []

    def journal(unit: str, since: int) -> tuple[str | None, str | None]:
        asked.append((unit, since))
        return ASYNC_ON, None

    text, source, reason = confounds.read_engine_log(
        "vllm.service", props, journal, now=1000.5, now_monotonic=15.0
    )
    assert (text, reason) == (ASYNC_ON, None) and asked == [("vllm.service", 989)]
    assert source == "journalctl -u vllm.service --since @989"
    assert "no service unit" in str(confounds.read_engine_log(None, props, journal)[2])
    assert "start of vllm.service is not known" in str(
        confounds.read_engine_log("vllm.service", {}, journal)[2]
    )
    nothing = confounds.read_engine_log("vllm.service", props, lambda u, s: (None, "gone"))
    assert nothing == (None, None, "gone")


def fake_bin(bindir: Path, name: str, body: str) -> Path:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(f"#!{sys.executable}\nimport sys, time\n{body}")
    path.chmod(0o755)
    return path


def journalctl_body(log: Path, since_file: Path) -> str:
    """A journalctl that prints ``log`` for ``-u ... --since @N -o cat`` and notes N."""
    return (
        "args = sys.argv[1:]\n"
        "assert args[:2] == ['-u', 'vllm-test.service'] and '-o' in args, args\n"
        "assert args[args.index('-o') + 1] == 'cat', args\n"
        f"open({str(since_file)!r}, 'w').write(args[args.index('--since') + 1])\n"
        f"sys.stdout.write(open({str(log)!r}).read())\n"
    )


def test_the_journal_is_read_from_the_units_start_and_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    log, since = tmp_path / "vllm.log", tmp_path / "since"
    log.write_text(draft_log() + "".join(f"INFO request {i}\n" for i in range(5000)))
    fake_bin(bindir, "journalctl", journalctl_body(log, since))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    read = confounds._journal_reader(max_lines=100)
    text, reason = read("vllm-test.service", 1796535735)
    assert reason is None and text is not None and since.read_text() == "@1796535735"
    assert len(text.splitlines()) == 100 and text.startswith(ASYNC_DRAFT)
    text, _ = confounds._journal_reader(max_bytes=1000)("vllm-test.service", 1)
    assert text is not None and 1000 <= len(text.encode()) < 1000 + len(BANNER_COMPILED) + 2


def test_an_empty_or_failing_journal_gives_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bindir))
    assert "journalctl not found" in str(confounds._journal_reader()("u", 1)[1])
    fake_bin(
        bindir,
        "journalctl",
        "print('-- No entries --')\nsys.stderr.write('No journal files were found.\\n')\n",
    )
    text, reason = confounds._journal_reader()("u.service", 1)
    assert text is None
    assert (
        reason
        == "journalctl -u u.service has no lines since its start: No journal files were found."
    )
    monkeypatch.setattr(confounds, "_TIMEOUT_S", 0.5)
    fake_bin(bindir, "journalctl", "time.sleep(30)\n")
    assert confounds._journal_reader()("u.service", 1) == (
        None,
        "journalctl -u u.service printed nothing in 0.5 s",
    )
    fake_bin(bindir, "journalctl", "sys.stderr.write('Failed to add filter\\n')\nsys.exit(1)\n")
    assert confounds._journal_reader()("u.service", 1) == (
        None,
        "journalctl -u u.service failed (exit 1): Failed to add filter",
    )


# ------------------------------------------------------------------ the host


def test_gpus_from_nvidia_smi() -> None:
    asked: list[list[str]] = []

    def run(argv: Any) -> tuple[int, str, str]:
        asked.append(list(argv))
        return 0, H200_CSV, ""

    gpus, reason = confounds.gpu_facts(run)
    assert reason is None and asked[0][1:] == [
        "--query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,memory.total",
        "--format=csv,noheader,nounits",
    ]
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "driver_version": "580.159.04",
            "sm_clock_mhz": 345,
            "sm_clock_max_mhz": 1980,
            "memory_total_mib": 143771,
        }
    ]
    na = "0, NVIDIA H200, 580.159.04, [N/A], [N/A], 143771\n"
    assert confounds.gpu_facts(lambda a: (0, na, ""))[0][0]["sm_clock_mhz"] is None  # type: ignore[index]
    assert confounds.gpu_facts(lambda a: (9, "", "NVML: Driver/library mismatch\n")) == (
        None,
        "nvidia-smi failed (exit 9): NVML: Driver/library mismatch",
    )
    bad, why = confounds.gpu_facts(lambda a: (0, "0, only two\n", ""))
    assert bad is None and "columns" in str(why)


def test_a_cpu_host_has_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    gpus, reason = confounds.gpu_facts()
    assert gpus == [] and "nvidia-smi not found" in str(reason)


def test_cpu_model_and_counts(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert confounds.cpu_model(tmp_path) == "Intel(R) Xeon(R) Processor"
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd4f\n")
    assert confounds.cpu_model(tmp_path) is None  # an ARM kernel names no model
    assert confounds.cpu_model(tmp_path / "none") is None
    assert [confounds.cpu_count(x) for x in ("0-3,8", "2", "0 2-3", None, "x", "3-1")] == [
        5,
        1,
        3,
        None,
        None,
        None,
    ]


def test_nothing_read_never_fails_the_measurement(tmp_path: Path) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    out = confounds.context("u.service", {"ExecMainStartTimestampMonotonic": "1"}, "0-1",
                            tmp_path, broken, broken)  # fmt: skip
    assert out == {
        "host": None,
        "host_reason": "host facts not read: RuntimeError: boom",
        "engine": None,
        "engine_reason": "engine log not read: RuntimeError: boom",
    }


# ------------------------------------------------------------------ the probe


def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    argv = ["/opt/vllm/bin/vllm", "serve", "tiny", "--max-num-seqs", "1"]
    (proc / "4242" / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "4242" / "environ").write_bytes(b"VLLM_USE_V1=1\0")
    (proc / "4242" / "status").write_text("Name:\tvllm\nCpus_allowed_list:\t2-15\n")
    (proc / "4242" / "stat").write_text("4242 (vllm) S 1 0 0")
    (proc / "cpuinfo").write_text(CPUINFO)
    return proc


def test_the_probe_adds_host_and_engine_and_keeps_the_fingerprint(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    props = {"MainPID": "4242", "ExecMainStartTimestampMonotonic": "1000000"}
    probe = hp.ServiceProbe(
        unit="vllm.service",
        proc_root=str(proc),
        show=lambda unit: props,
        gpu_query=lambda: (None, "not asked"),
        gpu_facts_run=lambda argv: (0, H200_CSV, ""),
        journal=lambda unit, since: (draft_log(), None),
    )
    probe.sample("after", "t")
    config = probe.server_config()
    assert config is not None
    host = config["host"]
    assert host["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert host["server_cpus"] == 14 and host["cpus_online"] == os.cpu_count()
    assert host["gpus"][0]["name"] == "NVIDIA H200" and host["gpu_reason"] is None
    engine = config["engine"]
    assert engine["async_scheduling"] is False and engine["model_runner"] == "V1"
    assert engine["source"].startswith("journalctl -u vllm.service --since @")
    assert engine["log_lines_read"] == 6
    assert config["host_reason"] is None and config["engine_reason"] is None
    bare = {k: config[k] for k in ("argv", "env", "cpus")}
    assert serverconfig.fingerprint(config) == serverconfig.fingerprint(bare)
    assert serverconfig.config_text(config) == serverconfig.config_text(bare)
    # Without a unit there is no journal to read: the host is still known.
    pid_only = hp.ServiceProbe(pid=4242, proc_root=str(proc), gpu_facts_run=lambda a: (0, "", ""))
    pid_only.main_pid = 4242
    config = pid_only.server_config()
    assert config is not None and config["engine"] is None and config["host"]["gpus"] == []
    assert config["engine_reason"].startswith("no service unit or log file given")


def test_the_ledger_keeps_host_and_engine(tmp_path: Path) -> None:
    config = {
        "argv": ["vllm", "serve", "tiny"],
        "env": {},
        "cpus": "0-1",
        "host": {"cpu_model": "x", "cpus_online": 2, "server_cpus": 2, "gpus": [],
                 "gpu_reason": "nvidia-smi not found"},
        "host_reason": None,
        "engine": {**confounds.engine_facts(draft_log()), "source": "j", "log_lines_read": 6},
        "engine_reason": None,
    }  # fmt: skip
    db = tmp_path / "ledger.sqlite"
    run = ledger.record_result(db, {"trials": [], "server_config": config}, host="h", phase="b")
    assert ledger.runs(db)[0].server_config == config
    assert ledger.server_configs(db, [run]) == {run: config}


def test_the_engine_log_from_a_file(tmp_path: Path) -> None:
    # A server that is no unit (the GPU lab's, a container's) writes its log to a file.
    log = tmp_path / "vllm.log"
    log.write_text("older start\n" + draft_log())
    text, source, reason = confounds.read_engine_log(None, None, log_file=log)
    assert reason is None and source == f"the end of {log}"
    assert confounds.engine_facts(str(text))["model_runner"] == "V1"

    # A file given wins over the unit's journal, which is not asked.
    def no_journal(unit: str, since: int) -> tuple[str | None, str | None]:
        raise AssertionError("the journal was read")

    props = {"ExecMainStartTimestampMonotonic": "1"}
    assert confounds.read_engine_log("u.service", props, no_journal, log_file=log)[0] == text
    # Only the end is read, whole lines: start-up lines further back stay unread.
    last = draft_log().splitlines()[-1] + "\n"
    tail, _, _ = confounds.read_log_file(log, max_bytes=len(last.encode()) + 10)
    assert tail == last  # the line cut by the start of the read is dropped
    assert (
        confounds.read_log_file(log, max_lines=2)[0]
        == "\n".join(draft_log().splitlines()[-2:]) + "\n"
    )
    # What cannot be read gives a reason, never an error.
    missing = confounds.read_log_file(tmp_path / "none.log")
    assert missing[0] is None and "cannot read the server's log" in str(missing[2])
    (tmp_path / "empty.log").write_text("")
    assert "is empty" in str(confounds.read_log_file(tmp_path / "empty.log")[2])
    out = confounds.context(None, None, "0", tmp_path, journal=no_journal, log_file=log)
    assert out["engine"]["source"] == f"the end of {log}" and out["engine_reason"] is None


# ------------------------------------------------------------------ the module


def run_module(**service: Any) -> dict[str, Any]:
    """The vllm_benchmark module's run against a fake server: one short trial, with
    ``service`` (service_unit, service_pid, service_log) saying where the server is."""
    mod = load_file(REPO / "plugins" / "modules" / "vllm_benchmark.py", "vllm_benchmark")
    params = {name: s.get("default") for name, s in mod.ARGUMENT_SPEC.items()}
    with serve_in_thread(FakeConfig(ttft_s=0.001, itl_s=0.001)) as srv:
        params.update(
            base_url=srv.base_url,
            workload=DEMO,
            trials=1,
            num_requests=2,
            warmup=0,
            output_len=4,
            **service,
        )
        return module_run(params, check_mode=False)


def test_the_module_records_what_the_server_ran_under(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vllm_benchmark module's path: systemctl, journalctl and nvidia-smi are
    stand-ins on PATH; the server's process is this one."""
    bindir = tmp_path / "bin"
    log, since = tmp_path / "vllm.log", tmp_path / "since"
    log.write_text(draft_log())
    started_us = int((time.monotonic() - 30) * 1e6)
    fake_bin(
        bindir,
        "systemctl",
        f"print('MainPID={os.getpid()}')\nprint('ControlGroup=')\n"
        "print('InvocationID=abc')\nprint('ActiveState=active')\n"
        f"print('ExecMainStartTimestampMonotonic={started_us}')\n",
    )
    fake_bin(bindir, "journalctl", journalctl_body(log, since))
    fake_bin(
        bindir,
        "nvidia-smi",
        "memory = any('memory.used' in a for a in sys.argv)\n"
        "sys.stdout.write('0, NVIDIA H200, 0, 143771\\n' if memory else "
        f"{H200_CSV!r})\n",
    )
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    before = time.time()
    out = run_module(service_unit="vllm-test.service")
    server = out["result"]["server_config"]
    # This process, as /proc shows it (pytest, or an xdist worker under pytest -n).
    assert server["argv"] == Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]
    assert server["host"]["gpus"][0]["driver_version"] == "580.159.04"
    assert server["host"]["cpus_online"] == os.cpu_count()
    assert out["service_memory"]["before"]["gpus"][0]["memory_total_mib"] == 143771
    engine = server["engine"]
    assert (engine["async_scheduling"], engine["model_runner"], engine["cudagraph_mode"]) == (
        False,
        "V1",
        "PIECEWISE",
    )
    asked = int(since.read_text().lstrip("@"))
    assert before - 33 <= asked <= before - 29  # 30 s before, a second early
    check_result_dict(out["result"])
    json.dumps(server)


def test_the_module_reads_the_engine_from_a_log_file(tmp_path: Path) -> None:
    """No unit: the server's process by pid, its engine from the file it logs to."""
    log = tmp_path / "vllm.log"
    log.write_text(draft_log())
    out = run_module(service_pid=os.getpid(), service_log=str(log))
    server = out["result"]["server_config"]
    assert server["engine_reason"] is None and server["engine"]["source"] == f"the end of {log}"
    assert (server["engine"]["model_runner"], server["engine"]["cudagraph_mode"]) == (
        "V1",
        "PIECEWISE",
    )


# ------------------------------------------------------------------ texts and differences

OFF = {
    "argv": ["vllm", "serve", "m"],
    "env": {},
    "cpus": "0-15",
    "host": {
        "cpu_model": "AMD EPYC 9654 96-Core Processor",
        "cpus_online": 16,
        "server_cpus": 16,
        "gpus": [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "580.159.04",
             "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "memory_total_mib": 81559},
        ],
        "gpu_reason": None,
    },
    "engine": confounds.engine_facts(plain_log()),
}  # fmt: skip
DRAFT = {
    **OFF,
    "argv": ["vllm", "serve", "m", "--speculative-config", "{}"],
    "engine": confounds.engine_facts(draft_log()),
}


def test_context_text_for_a_legend() -> None:
    assert serverconfig.context_text(DRAFT) == (
        "host: AMD EPYC 9654 96-Core Processor, 16 CPUs online, server on 16; GPU NVIDIA H100 "
        "80GB HBM3 (driver 580.159.04, SM max 1980 MHz, 81559 MiB); engine: vLLM 0.26.0, async "
        "scheduling off, model runner V1, CUDA graphs PIECEWISE, compilation VLLM_COMPILE, TP 2"
    )
    cpu_host = {**OFF, "host": {"cpu_model": None, "cpus_online": 2, "gpus": []}, "engine": None}
    assert serverconfig.context_text(cpu_host) == "host: 2 CPUs online; GPU none"
    assert serverconfig.context_text({"argv": ["vllm"]}) == ""
    assert serverconfig.context_text(None) == ""


def test_differences_name_the_engine_and_the_host() -> None:
    assert serverconfig.differences(OFF, DRAFT, ("off", "draft-k3")) == [
        "async scheduling: on vs off",
        "model runner: V2 vs V1",
        "CUDA graphs: FULL_AND_PIECEWISE vs PIECEWISE",
    ]
    h200 = {
        **OFF,
        "host": {
            **OFF["host"],
            "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
            "gpus": [{**OFF["host"]["gpus"][0], "name": "NVIDIA H200", "driver_version": "570.1",
                      "memory_total_mib": 143771}],
        },
    }  # fmt: skip
    assert serverconfig.differences(OFF, h200) == [
        "CPU model: AMD EPYC 9654 96-Core Processor vs Intel(R) Xeon(R) Platinum 8480+",
        "GPU: NVIDIA H100 80GB HBM3 vs NVIDIA H200",
        "GPU driver: 580.159.04 vs 570.1",
    ]
    # The clock of the moment and the vLLM version are no confound to name; what only
    # one side knows is not a difference.
    idle = {
        **OFF,
        "host": {**OFF["host"], "gpus": [{**OFF["host"]["gpus"][0], "sm_clock_mhz": 345}]},
    }
    newer = {**OFF, "engine": {**OFF["engine"], "vllm_version": "0.27.0"}}
    old = {k: OFF[k] for k in ("argv", "env", "cpus")}
    assert serverconfig.differences(OFF, idle) == []
    assert serverconfig.differences(OFF, newer) == []
    assert serverconfig.differences(OFF, old) == [] and serverconfig.differences(old, OFF) == []
    cpu = {**OFF, "host": {**OFF["host"], "gpus": []}}
    assert serverconfig.differences(OFF, cpu) == ["GPU: NVIDIA H100 80GB HBM3 vs none"]
