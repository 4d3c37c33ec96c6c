"""nvidia-smi's ``--query-gpu`` CSV, read one way for every caller.

:mod:`benchgate.hostprobe` (GPU memory, the roofline's GPU names) and
:mod:`benchgate.hwfacts` (the host's GPU facts) query different fields; both
build the command line with :func:`query_args` and read its output with
:func:`parse_query_gpu`. Runs on the target host: Python 3.9, stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["QueryRow", "number", "parse_query_gpu", "query_args", "value", "whole_number"]

# What nvidia-smi prints for a field it cannot report (lowercased).
NOT_AVAILABLE = (
    "",
    "[n/a]",
    "n/a",
    "[not supported]",
    "[unknown error]",
    "[insufficient permissions]",
)


@dataclass(frozen=True)
class QueryRow:
    """One GPU's line: its index, and each queried field's cell as printed (stripped)."""

    index: int
    cells: Mapping[str, str]


def query_args(fields: Sequence[str]) -> list[str]:
    """The arguments of ``nvidia-smi`` that print ``fields`` as CSV, without units."""
    return ["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def value(cell: str) -> str | None:
    """A cell's text; None when nvidia-smi says the field is not available."""
    cell = cell.strip()
    return None if cell.lower() in NOT_AVAILABLE else cell


def number(cell: str) -> float | None:
    """A cell as a number; None when not available or not a number."""
    text = value(cell)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def whole_number(cell: str) -> int | None:
    """A cell as a whole number (``1980``, ``1980.0``); None when not available or not a number."""
    found = number(cell)
    return None if found is None or not math.isfinite(found) else int(found)


def parse_query_gpu(text: str, fields: Sequence[str]) -> list[QueryRow]:
    """The GPUs of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``.

    ``fields`` must start with ``index``. Raises ValueError on a line that
    does not have one column per field, or whose index is not a number.
    """
    if not fields or fields[0] != "index":
        raise ValueError(f"the query must start with index, got {', '.join(fields)}")
    rows: list[QueryRow] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(
                f"nvidia-smi CSV line {lineno} has {len(cells)} columns, expected "
                f"{len(fields)} ({', '.join(fields)}): {line!r}"
            )
        index = whole_number(cells[0])
        if index is None:
            raise ValueError(f"nvidia-smi CSV line {lineno}: index {cells[0]!r} is not a number")
        rows.append(QueryRow(index, dict(zip(fields, cells))))
    return rows
