"""The calibration probe on the CPU with the tiny shape (the GPU run is in lab/calibration)."""

from __future__ import annotations

import json

import pytest

from benchgate import calibrate

torch = pytest.importorskip("torch")


def test_split_follows_tensor_parallel_layout() -> None:
    shape = calibrate.KNOWN_SHAPES["qwen3-14b"]
    qkv, out, gate_up, down = shape.split(4)
    assert qkv == (5120, (5120 + 2 * 1024) // 4)  # column-parallel: outputs split
    assert out == (5120 // 4, 5120)  # row-parallel: inputs split
    assert gate_up == (5120, 2 * 17408 // 4)
    assert down == (17408 // 4, 5120)
    # 14.0 B parameters less embeddings/norms: about 13.2 B in the projections, bf16.
    assert 26e9 < shape.weight_bytes(1) < 27e9


def test_qwen3_small_draft_shapes() -> None:
    # Qwen3-4B and Qwen3-0.6B configs: projections only (no embeddings / lm_head)
    small = calibrate.KNOWN_SHAPES["qwen3-0.6b"]
    assert small.split(1) == [(1024, 2048 + 2 * 1024), (2048, 1024), (1024, 6144), (3072, 1024)]
    assert 0.85e9 < small.weight_bytes(1) < 0.9e9  # 28 layers x 15.7 M params, bf16
    assert calibrate.KNOWN_SHAPES["qwen3-4b"].weight_bytes(1) > 8 * small.weight_bytes(1)


def test_report_on_cpu(tmp_path) -> None:
    out = tmp_path / "cal.json"
    rc = calibrate.main(
        [
            "--target",
            "tiny",
            "--draft",
            "tiny",
            "--tp",
            "1,2",
            "--max-n",
            "3",
            "--bandwidth-mib",
            "4",
            "--reps",
            "3",
            "--device",
            "cpu",
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "benchgate.calibration/1"
    assert report["bandwidth_gbs"]["copy_gbs"] > 0
    curve = report["models"]["tiny"]["tp"]["1"]["verify_curve"]
    assert list(curve) == ["1", "2", "3"] and curve["1"] == 1.0
    assert set(report["draft_cost_ratio"]) == {"1", "2"}
    assert (
        report["models"]["tiny"]["tp"]["2"]["weight_bytes"]
        < report["models"]["tiny"]["tp"]["1"]["weight_bytes"]
    )
