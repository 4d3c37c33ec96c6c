"""One way to write a figure: the same sign and placeholder in every table."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from _load import load_file
from benchgate import cli_bench, cli_rollout, numfmt
from benchgate.numfmt import MISSING, change_interval, change_words, number, pct_change

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
    callback = load_file(
        ROOT / "plugins" / "callback" / "benchgate_summary.py", "bg_numfmt_summary"
    )
    assert callback._tok(1234.5) == cli_rollout._tok_s(1234.5) == number(1234.5) == "1,234.5"
    assert callback._tok(None) == cli_rollout._tok_s(None) == cli_bench._mib(None) == MISSING
    assert callback._estimate({"before_tok_s": 400, "after_tok_s": 300}) == "25.0% worse"


def test_the_change_is_written_in_the_words_of_its_metric() -> None:
    """One story: a change reads better or worse, whichever sign its metric needs."""
    assert change_interval(-25.0, -30.0, -20.0) == "25.0% worse (30.0% worse to 20.0% worse)"
    assert change_interval(-25.0, -30.0, -20.0, higher_is_better=False) == (
        "25.0% better (20.0% better to 30.0% better)"
    )
    assert change_words(float("inf")) == "unbounded" and change_words(None) == MISSING
    assert change_interval(-25.0, -30.0, -20.0, level=95) == (
        "25.0% worse (95% interval 30.0% worse to 20.0% worse)"
    )


def test_no_table_or_reason_writes_the_typographic_minus_or_infinity() -> None:
    """Issue 17: the gate and the A/B wrote "\u2212" and "\u221e"; every writer is numfmt's."""
    from benchgate import ab, rules, table

    spec = rules.make_specs(metrics=["output_tokens_per_s"])[0]
    verdict = rules.judge_metric(spec, [100.0, 101.0, 102.0], [80.0, 81.0, 82.0])
    unattainable = rules.judge_metric(  # no bound attainable: the old code wrote "\u221e"
        spec, [100.0, 101.0], [99.0, 100.0], rules.GateConfig(min_trials=2, alpha=0.01)
    )
    assert unattainable.change_hi_pct == float("inf")
    gate_table = table.render_table(rules.combine([verdict, unattainable]))
    arms = [ab.Arm("off", {}), ab.Arm("ngram-k3", {"method": "ngram"})]
    choice = ab.choose(
        arms,
        {
            "off": {"trials": [_trial(x) for x in (100.0, 101.0, 102.0, 103.0)]},
            "ngram-k3": {"trials": [_trial(x) for x in (80.0, 81.0, 82.0, 83.0)]},
        },
    )
    text = gate_table + ab.render_table(choice) + " ".join(a.note for a in choice.arms)
    assert "worse" in gate_table and "ngram-k3" in text
    assert "\u2212" not in text and "\u221e" not in text


def _trial(tok_s: float) -> dict:
    return {"valid": True, "metrics": {"output_tokens_per_s": tok_s}}


def test_a_change_beyond_twice_reads_as_a_factor() -> None:
    """Issue 35, 4: a TTFT change printed as "4157.8% worse" reads "43× slower"; from a
    factor of 2 either way (+100%, -50%) every change is a factor, in every writer."""
    assert change_words(4157.8, higher_is_better=False) == "43× slower"
    assert change_words(-97.65) == "43× slower"  # a throughput at 1/42.6
    assert change_words(150.0) == "2.5× faster"
    assert change_words(-60.0, higher_is_better=False) == "2.5× faster"
    assert change_words(99.9) == "99.9% better" and change_words(-49.9) == "49.9% worse"
    assert change_interval(4157.8, 900.0, 6000.0, higher_is_better=False, level=95) == (
        "43× slower (95% interval 61× slower to 10× slower)"
    )
