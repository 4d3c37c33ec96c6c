"""The one reader of nvidia-smi's --query-gpu CSV, and its two callers."""

from __future__ import annotations

import pytest

from benchgate import hostprobe, hwfacts, nvidia_smi

FIELDS = ("index", "name", "memory.total")


def test_rows_keep_the_cells_as_printed() -> None:
    rows = nvidia_smi.parse_query_gpu("0, NVIDIA L4, 23034\n\n1, NVIDIA L4, [N/A]\n", FIELDS)
    assert [(r.index, dict(r.cells)) for r in rows] == [
        (0, {"index": "0", "name": "NVIDIA L4", "memory.total": "23034"}),
        (1, {"index": "1", "name": "NVIDIA L4", "memory.total": "[N/A]"}),
    ]


@pytest.mark.parametrize(
    ("cell", "text", "number", "whole"),
    [
        ("1980", "1980", 1980.0, 1980),
        (" 700.00 ", "700.00", 700.0, 700),
        ("[N/A]", None, None, None),
        ("[Not Supported]", None, None, None),
        ("", None, None, None),
        ("9.0a", "9.0a", None, None),
    ],
)
def test_cells(cell: str, text: str | None, number: float | None, whole: int | None) -> None:
    assert nvidia_smi.value(cell) == text
    assert nvidia_smi.number(cell) == number
    assert nvidia_smi.whole_number(cell) == whole


def test_a_figure_that_is_not_finite_is_no_whole_number() -> None:
    assert nvidia_smi.whole_number("nan") is None
    assert nvidia_smi.whole_number("inf") is None


def test_both_callers_read_a_bad_line_the_same_way() -> None:
    for parse, fields in (
        (hostprobe.parse_nvidia_smi, hostprobe.NVIDIA_SMI_FIELDS),
        (hwfacts.parse_gpu_csv, hwfacts.QUERY_FIELDS),
    ):
        with pytest.raises(ValueError, match=rf"line 2 has 2 columns, expected {len(fields)}"):
            parse(",".join(["0"] * len(fields)) + "\n0, x\n")
        with pytest.raises(ValueError, match="line 1: index 'GPU-0' is not a number"):
            parse(",".join(["GPU-0"] * len(fields)))


def test_query_args_print_the_fields_without_units() -> None:
    assert nvidia_smi.query_args(FIELDS) == [
        "--query-gpu=index,name,memory.total",
        "--format=csv,noheader,nounits",
    ]
    assert list(hwfacts.QUERY_ARGS) == nvidia_smi.query_args(hwfacts.QUERY_FIELDS)
    with pytest.raises(ValueError, match="must start with index"):
        nvidia_smi.parse_query_gpu("NVIDIA L4, 0\n", ("name", "index"))
