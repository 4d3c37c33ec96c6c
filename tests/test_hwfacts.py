"""GPU facts (benchgate.hwfacts, benchgate.gpus): parsing real nvidia-smi captures, the
no-GPU path, the FP8 rule, the interconnect summary and the advisory notes.

tests/data/nvidia-smi/h200-* are real output of nvidia-smi 580.159.04 on the lent H200
(one GPU), captured with benchgate's device tool. The multi-GPU topologies below are
constructed in the same format (tab-separated, ANSI-underlined header) because only a
one-GPU machine was lent; they are marked as such.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchgate import hwfacts

DATA = Path(__file__).resolve().parent / "data" / "nvidia-smi"
REPO = Path(__file__).resolve().parents[1]
H200_CSV = (DATA / "h200-query-gpu.csv").read_text()
H200_TOPO = (DATA / "h200-topo-m.txt").read_text()

# Constructed (not captured): a 4x L4 host like the field report's, PCIe only.
L4X4_CSV = "".join(
    f"{i}, NVIDIA L4, GPU-0000000{i}-0000-0000-0000-000000000000, 23034, 8.9, 2040, 6251, "
    f"72.00, 00000000:0{i}:00.0\n"
    for i in range(4)
)
L4X4_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tPHB\tSYS\tSYS\t0-15\t0\t\tN/A\n"
    "GPU1\tPHB\t X \tSYS\tSYS\t0-15\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNODE\t16-31\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNODE\t X \t16-31\t1\t\tN/A\n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP\n"
)
# Constructed: two NVLink-bridged GPUs with a NIC column and row.
NV2_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPXB\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tPXB\t0-31\t0\t\tN/A\n"
    "NIC0\tPXB\tPXB\t X \t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)
# Constructed: NVLink pairs (0-1, 2-3) joined over PCIe.
MIXED_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV4\tSYS\tSYS\t0-15\t0\n"
    "GPU1\tNV4\t X \tSYS\tSYS\t0-15\t0\n"
    "GPU2\tSYS\tSYS\t X \tNV4\t16-31\t1\n"
    "GPU3\tSYS\tSYS\tNV4\t X \t16-31\t1\n"
)


def fake_runner(csv: str, topo: str, topo_rc: int = 0):
    calls = []

    def run(argv):
        calls.append(list(argv))
        if argv[1:] == ["topo", "-m"]:
            return topo_rc, topo, "" if topo_rc == 0 else "topo failed"
        assert list(argv[1:]) == list(hwfacts.QUERY_ARGS)
        return 0, csv, ""

    run.calls = calls  # type: ignore[attr-defined]
    return run


# ----------------------------------------------------------------- the real capture


def test_query_fields_exist_in_the_real_help():
    """Every field benchgate queries is a property nvidia-smi 580 documents."""
    listed = set(re.findall(r'"([a-z0-9_.]+)"', (DATA / "h200-help-query-gpu.txt").read_text()))
    assert set(hwfacts.QUERY_FIELDS) <= listed
    assert {"clocks.max.memory", "gpu_name", "gpu_bus_id"} <= listed  # aliases, as printed


def test_units_of_the_real_capture_are_what_the_parser_assumes():
    header = (DATA / "h200-query-gpu-units.csv").read_text().splitlines()[0]
    columns = [c.strip() for c in header.split(",")]
    assert columns == [
        "index", "name", "uuid", "memory.total [MiB]", "compute_cap", "clocks.max.sm [MHz]",
        "clocks.max.memory [MHz]", "power.limit [W]", "pci.bus_id",
    ]  # fmt: skip


def test_parse_real_h200_csv():
    (gpu,) = hwfacts.parse_gpu_csv(H200_CSV)
    assert gpu.index == 0
    assert gpu.name == "NVIDIA H200"
    assert gpu.uuid == "GPU-fb4ffd17-a675-0338-5e73-c68c078704d4"
    assert gpu.memory_total_mib == 143771
    assert (gpu.compute_capability, gpu.architecture, gpu.native_fp8) == ("9.0", "Hopper", True)
    assert (gpu.clocks_max_sm_mhz, gpu.clocks_max_mem_mhz, gpu.power_limit_w) == (1980, 3201, 700.0)
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert (gpu.memory_bandwidth_gbs, gpu.memory_bandwidth_source) == (4800.0, "datasheet")


def test_parse_real_single_gpu_topology_with_ansi_header():
    assert "\x1b[4m" in H200_TOPO  # the real header is underlined even into a file
    assert hwfacts.parse_topology(H200_TOPO) == {}
    assert hwfacts.summarize_links({}, 1) == "single"


def test_gathered_h200_facts_match_the_committed_json():
    """lab/calibration/h200-facts.json came from gather() on the H200; the fixtures agree."""
    saved = json.loads((REPO / "lab" / "calibration" / "h200-facts.json").read_text())
    facts = hwfacts.gather(
        nvidia_smi="/bin/true",  # any executable; the runner answers
        calibration=str(REPO / "lab" / "calibration" / "h200-qwen3-14b-4b.json"),
        run=fake_runner(H200_CSV, H200_TOPO),
    )
    assert facts == saved["vllm_hardware"]
    assert facts["gpus"][0]["memory_bandwidth_source"] == "measured"
    assert 4200 < facts["memory_bandwidth_gbs"] < 4800


# ----------------------------------------------------------------- parsing edge cases


def test_parse_csv_not_available_values_and_bad_lines():
    line = "3, NVIDIA A10G, GPU-x, [N/A], 8.6, [N/A], [Not Supported], [N/A], 00000000:1E:00.0\n"
    (gpu,) = hwfacts.parse_gpu_csv(line)
    assert gpu.memory_total_mib is None and gpu.clocks_max_mem_mhz is None
    assert gpu.power_limit_w is None
    assert (gpu.native_fp8, gpu.architecture, gpu.memory_bandwidth_gbs) == (False, "Ampere", 600.0)
    with pytest.raises(ValueError, match="has 3 columns, expected 9"):
        hwfacts.parse_gpu_csv("0, NVIDIA H200, GPU-x\n")
    with pytest.raises(ValueError, match="index 'x' is not a number"):
        hwfacts.parse_gpu_csv(line.replace("3,", "x,", 1))


@pytest.mark.parametrize(
    ("cc", "fp8", "arch"),
    [
        ("7.0", False, "Volta"),
        ("7.5", False, "Turing"),
        ("8.0", False, "Ampere"),  # A100
        ("8.6", False, "Ampere"),  # A10, RTX 3090 -- the report called A10 "Ada"
        ("8.9", True, "Ada Lovelace"),  # L4, L40, L40S, RTX 4090 -- the report said no FP8
        ("9.0", True, "Hopper"),
        ("10.0", True, "Blackwell"),
        ("12.0", True, "Blackwell"),
        ("[N/A]", False, None),
        ("", False, None),
    ],
)
def test_fp8_rule(cc, fp8, arch):
    assert hwfacts.native_fp8(cc) is fp8
    assert hwfacts.architecture(cc) == arch


def test_topology_summaries():
    pcie = hwfacts.parse_topology(L4X4_TOPO)
    assert pcie == {(0, 1): "PHB", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS",
                    (1, 3): "SYS", (2, 3): "NODE"}  # fmt: skip
    assert hwfacts.summarize_links(pcie, 4) == "pcie"
    nvlink = hwfacts.parse_topology(NV2_TOPO)
    assert nvlink == {(0, 1): "NV18"}  # the NIC column and row are not GPU links
    assert hwfacts.summarize_links(nvlink, 2) == "nvlink"
    assert hwfacts.summarize_links(hwfacts.parse_topology(MIXED_TOPO), 4) == "mixed"
    # fewer pairs than GPUs need, or a cell nobody knows: unknown, never a guess
    assert hwfacts.summarize_links({(0, 1): "NV4"}, 3) == "unknown"
    assert hwfacts.summarize_links({(0, 1): "??"}, 2) == "unknown"
    with pytest.raises(ValueError, match="no GPU0 column"):
        hwfacts.parse_topology("No devices were found\n")


@pytest.mark.parametrize(
    ("name", "gbs"),
    [
        ("NVIDIA H200", 4800),
        ("NVIDIA H100 80GB HBM3", 3350),  # the SXM part's name
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA L4", 300),
        ("NVIDIA L40S", 864),  # not the L4 row
        ("NVIDIA GeForce RTX 4090", 1008),
    ],
)
def test_datasheet_bandwidth_comes_from_the_shared_table(name, gbs):
    """hwfacts uses benchgate.hostprobe's table (the roofline's), not a second one."""
    (gpu,) = hwfacts.parse_gpu_csv(f"0, {name}, GPU-x, 1, 8.9, 1, 1, 1, 0:0\n")
    assert (gpu.memory_bandwidth_datasheet_gbs, gpu.memory_bandwidth_source) == (gbs, "datasheet")


def test_bandwidth_table_has_no_guess_for_unknown_gpus():
    facts = hwfacts.gather(
        "/bin/true",
        run=fake_runner("0, NVIDIA GH200 480GB, GPU-x, 97871, 9.0, 1980, 2619, 900.00, 0:0\n", ""),
    )
    assert facts["memory_bandwidth_gbs"] is None
    assert "not in benchgate's bandwidth table" in facts["notes"][0]


# ----------------------------------------------------------------- gather


def test_gather_four_pcie_gpus():
    run = fake_runner(L4X4_CSV, L4X4_TOPO)
    facts = hwfacts.gather("/bin/true", run=run)
    assert [c[1:] for c in run.calls] == [list(hwfacts.QUERY_ARGS), ["topo", "-m"]]
    assert facts["gpu_count"] == 4 and facts["reason"] is None
    assert facts["names"] == ["NVIDIA L4"] and facts["homogeneous"]
    assert facts["interconnect"] == "pcie"
    assert facts["links"]["2-3"] == "NODE"
    assert facts["native_fp8"] and facts["min_compute_capability"] == "8.9"
    assert (facts["memory_bandwidth_gbs"], facts["memory_total_mib"]) == (300.0, 23034)


def test_gather_without_nvidia_smi_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = hwfacts.gather()
    assert facts["gpu_count"] == 0 and facts["interconnect"] == "none"
    assert "nvidia-smi not found" in facts["reason"]
    facts = hwfacts.gather(nvidia_smi=str(tmp_path / "nvidia-smi"))
    assert facts["gpu_count"] == 0 and str(tmp_path) in facts["reason"]


def test_gather_when_the_driver_does_not_answer():
    message = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    facts = hwfacts.gather("/bin/true", run=lambda argv: (9, message, ""))
    assert facts["gpu_count"] == 0
    assert facts["reason"].startswith("nvidia-smi --query-gpu failed (exit 9): NVIDIA-SMI has")
    facts = hwfacts.gather("/bin/true", run=lambda argv: (0, "garbage\n", ""))
    assert facts["gpu_count"] == 0 and "expected 9" in facts["reason"]


def test_gather_topology_failure_is_unknown_not_fatal():
    facts = hwfacts.gather("/bin/true", run=fake_runner(L4X4_CSV, "", topo_rc=3))
    assert facts["gpu_count"] == 4 and facts["interconnect"] == "unknown"
    assert any("topo -m failed (exit 3)" in n for n in facts["notes"])


def test_calibration_of_another_gpu_is_not_used():
    facts = hwfacts.gather(
        "/bin/true",
        calibration=str(REPO / "lab" / "calibration" / "h200-qwen3-14b-4b.json"),
        run=fake_runner(L4X4_CSV, L4X4_TOPO),
    )
    assert facts["memory_bandwidth_gbs"] == 300.0
    assert "measured on 'NVIDIA H200', not on NVIDIA L4: not used" in facts["notes"][0]


def test_gather_with_a_real_subprocess(tmp_path, monkeypatch):
    """A stand-in nvidia-smi on PATH that prints the real H200 capture."""
    import sys

    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"name = 'h200-topo-m.txt' if sys.argv[1:] == ['topo', '-m'] else 'h200-query-gpu.csv'\n"
        f"sys.stdout.write(open({str(DATA)!r} + '/' + name).read())\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = hwfacts.gather()
    assert facts["gpu_count"] == 1 and facts["interconnect"] == "single"
    assert facts["gpus"][0]["uuid"] == "GPU-fb4ffd17-a675-0338-5e73-c68c078704d4"


# ----------------------------------------------------------------- advice


def topics(notes, level=None):
    return [n.topic for n in notes if level is None or n.level == level]


def text(notes):
    return "\n".join(n.message for n in notes)


def l4x4():
    return hwfacts.gather("/bin/true", run=fake_runner(L4X4_CSV, L4X4_TOPO))


def test_advice_for_the_field_reports_setup():
    """4x L4 over PCIe, TP 4, a 4B draft at the target's TP: the report's losing case."""
    spec = {"model": "/srv/models/qwen3-4b", "num_speculative_tokens": 5}
    notes = hwfacts.hardware_advice(l4x4(), spec, 4)
    assert "warning" in [n.level for n in notes if n.topic == "interconnect"]
    assert "TP 4 over PCIe" in text(notes) and "0.63x" in text(notes)
    assert "draft_tp" in topics(notes, "caution")
    assert "each of the 5 draft steps pays the all-reduces" in text(notes)
    assert "memory-bound small GPU (NVIDIA L4, 300 GB/s)" in text(notes)
    assert "vram" in topics(notes, "caution")
    # the corrected Ada row: native FP8, not the report's dequant penalty
    assert "FP8 available natively (CC 8.9, Ada Lovelace)" in text(notes)
    assert "Marlin" not in text(notes)
    assert notes[-1].topic == "benchmark" and "final word" in notes[-1].message


def test_advice_changes_with_the_configuration():
    facts = l4x4()
    # a draft at TP 1 drops the draft-TP note, not the PCIe one
    one = hwfacts.hardware_advice(facts, {"model": "/m", "draft_tensor_parallel_size": 1}, 4)
    assert "draft_tp" not in topics(one) and "interconnect" in topics(one, "caution")
    # ngram: no draft weights, so no bandwidth or VRAM caution
    ngram = hwfacts.hardware_advice(facts, {"method": "ngram", "prompt_lookup_max": 3}, 2)
    assert not {"bandwidth", "vram", "draft_tp"} & set(topics(ngram))
    assert "ngram drafting runs no draft model" in text(ngram)
    # off: only the facts, no cautions
    off = hwfacts.hardware_advice(facts, {}, 1)
    assert topics(off, "caution") == [] and "speculative decoding is off" in text(off)
    # more TP than GPUs
    assert "warning" in [n.level for n in hwfacts.hardware_advice(facts, {}, 8)]


def test_advice_on_ampere_and_on_nvlink():
    a10 = hwfacts.gather(
        "/bin/true",
        run=fake_runner(
            "0, NVIDIA A10, GPU-a, 23028, 8.6, 1695, 6251, 150.00, 0:1\n"
            "1, NVIDIA A10, GPU-b, 23028, 8.6, 1695, 6251, 150.00, 0:2\n",
            NV2_TOPO,
        ),
    )
    assert a10["interconnect"] == "nvlink" and not a10["native_fp8"]
    notes = hwfacts.hardware_advice(a10, {"model": "/m"}, 2)
    fp8 = [n for n in notes if n.topic == "fp8"]
    assert fp8[0].level == "caution" and "no native FP8 (CC 8.6, Ampere)" in fp8[0].message
    assert "TP 2 over NVLink" in text(notes) and "draft_tp" not in topics(notes)


def test_advice_on_the_real_h200_and_without_gpu():
    saved = json.loads((REPO / "lab" / "calibration" / "h200-facts.json").read_text())
    spec = {"model": "/srv/models/qwen3-4b", "num_speculative_tokens": 3}  # as gathered
    notes = hwfacts.hardware_advice(saved["vllm_hardware"], spec, 1)
    assert topics(notes, "caution") == [] and topics(notes, "warning") == []
    assert "TP 1: no all-reduce" in text(notes)
    assert saved["advice"] == hwfacts.advice_dicts(notes)
    none = hwfacts.hardware_advice(hwfacts._no_gpu("nvidia-smi not found", []), {"model": "/m"}, 4)
    assert [n.topic for n in none] == ["gpus", "benchmark"]
    assert "hardware advice skipped" in none[0].message


def test_cli_reads_saved_facts(capsys):
    path = REPO / "lab" / "calibration" / "h200-facts.json"
    assert hwfacts.main(["--facts", str(path), "--speculative", '{"method": "ngram"}']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vllm_hardware"]["gpu_count"] == 1
    assert any("ngram drafting" in n["message"] for n in out["advice"])
    assert hwfacts.main(["--facts", str(path), "--speculative", "[1]"]) == 1
