"""One way to write a figure: the same sign and placeholder in every table."""

from __future__ import annotations

import doctest
import importlib.util
from pathlib import Path

import pytest

from benchgate import cli_bench, cli_rollout, numfmt
from benchgate.numfmt import MISSING, number, pct_change

ROOT = Path(__file__).resolve().parents[1]


def test_doctests() -> None:
    assert doctest.testmod(numfmt).failed == 0


@pytest.mark.parametrize(
    ("value", "digits", "suffix", "text"),
    [
        (1234.56, 1, "", "1,234.6"),
        (-1234.56, 0, " MiB", "-1,235 MiB"),
        (79.25, 1, "%", "79.2%"),
        (None, 2, "%", MISSING),
    ],
)
def test_number(value: float | None, digits: int, suffix: str, text: str) -> None:
    assert number(value, digits, suffix) == text


def test_a_change_is_signed_with_the_ascii_minus() -> None:
    assert [pct_change(v) for v in (2.54, 0.0, -25.0, None)] == ["+2.5%", "+0.0%", "-25.0%", "-"]
    assert "\u2212" not in pct_change(-1.0)  # not the typographic minus


def test_the_tables_write_a_figure_the_same_way() -> None:
    spec = importlib.util.spec_from_file_location(
        "bg_numfmt_summary", ROOT / "plugins" / "callback" / "benchgate_summary.py"
    )
    assert spec and spec.loader
    callback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(callback)
    assert callback._tok(1234.5) == cli_rollout._tok_s(1234.5) == number(1234.5) == "1,234.5"
    assert callback._tok(None) == cli_rollout._tok_s(None) == cli_bench._mib(None) == MISSING
    assert callback._change(400, 300) == pct_change(-25.0)
