"""The end-of-run table of the benchgate_summary callback."""

from __future__ import annotations

from pathlib import Path

import pytest

from _load import load_file

pytest.importorskip("ansible")

_PATH = Path(__file__).parent.parent / "plugins" / "callback" / "benchgate_summary.py"
summary = load_file(_PATH, "benchgate_summary")


def test_one_line_per_host_with_change_and_rollback() -> None:
    lines = summary.format_summary(
        {
            "gpu-02": {
                "from": "0.31.0",
                "to": "0.32.0",
                "before_tok_s": "400",
                "after_tok_s": 300,
                "verdict": "FAIL",
                "rolled_back": "True",
                "reasons": ["slower by 25%"],
            },
            "gpu-01": {
                "from": "0.31.0",
                "to": "0.32.0",
                "before_tok_s": 400.0,
                "after_tok_s": 410.0,
                "verdict": "PASS",
                "rolled_back": False,
                "reasons": [],
            },
        }
    )
    assert lines[0].split() == [
        "host",
        "release",
        "median",
        "tok/s",
        "before",
        "median",
        "tok/s",
        "after",
        "change",
        "(interval)",
        "verdict",
    ]
    assert lines[1].split() == [
        "gpu-01",
        "0.31.0",
        "->",
        "0.32.0",
        "400.0",
        "410.0",
        "2.5%",
        "better",
        "PASS",
    ]
    assert lines[2].split()[-6:] == ["300.0", "25.0%", "worse", "FAIL", "(rolled", "back)"]
    assert lines[3] == "  gpu-02: slower by 25%"


def test_missing_figures_show_a_dash() -> None:
    lines = summary.format_summary(
        {
            "h": {
                "from": "0.31.0",
                "to": "0.32.0",
                "verdict": "ERROR",
                "before_tok_s": None,
                "after_tok_s": "",
            }
        }
    )
    assert lines[1].split()[-4:] == ["-", "-", "-", "ERROR"]


def test_the_change_is_the_gates_estimate_with_its_interval() -> None:
    """Issue 20: one story. The medians (369.1 -> 352.8, -4.4%) and the gate's
    estimate (+3.4%) can point opposite ways; the table shows the estimate."""
    lines = summary.format_summary(
        {
            "h": {
                "from": "0.31.0",
                "to": "0.32.0",
                "before_tok_s": 369.1,
                "after_tok_s": 352.8,
                "change_pct": "3.4",
                "change_lo_pct": -8.6,
                "change_hi_pct": 13.0,
                "verdict": "INCONCLUSIVE",
            }
        }
    )
    # Issue 35: beside the estimate, why the medians point the other way.
    assert lines[1].split("0.31.0 -> 0.32.0")[1].split(None, 2)[2] == (
        "3.4% better (8.6% worse to 13.0% better; each side's median: 4.4% worse, but the "
        "estimate weighs every candidate trial against every baseline trial)  INCONCLUSIVE"
    )


def test_side_by_side_the_line_gives_the_pairs_ratio_and_why_the_medians_fall() -> None:
    """Issue 35: the demo printed "559.5  545.9  6.2% better (95% interval 6.5% worse
    to 21.6% better)": medians falling, estimate rising, no word why. The line now
    gives the median of the pairs' ratios the estimate comes from, and says why,
    in the words of the gate's reason."""
    from benchgate import rules

    item = {
        "from": "0.31.0",
        "to": "0.32.0",
        "before_tok_s": 559.5,
        "after_tok_s": 545.9,
        "change_pct": 6.2,
        "change_lo_pct": -6.5,
        "change_hi_pct": 21.6,
        "interval_pct": 95,
        "pairs_change_pct": 5.9,
        "stage": "busy",
        "verdict": "PASS",
    }
    line = summary.format_summary({"h": item})[1]
    note = (
        "the pairs' median ratio: 5.9% better; each side's median: 2.4% worse, but the "
        "pairs compare trials that ran together"
    )
    assert f"6.2% better (95% interval 6.5% worse to 21.6% better; {note}) at busy" in line
    # The gate's own line says the same words.
    verdict = rules.MetricVerdict(
        metric="output_tokens_per_s",
        direction="higher",
        verdict="PASS",
        reason="",
        critical=True,
        max_regression_pct=5.0,
        n_baseline=8,
        n_candidate=8,
        baseline_median=559.5,
        candidate_median=545.9,
        change_pct=6.2,
        pairs_change_pct=5.9,
    )
    assert verdict.note() == note


def test_a_staged_verdict_names_the_stage_its_figures_come_from() -> None:
    """Issue 19: the demo inventory's workload is staged; the table's figures are
    the worst stage's, and the change cell says which stage that is and the
    level of its interval (each of two stages is judged at alpha 0.025: 95%)."""
    lines = summary.format_summary(
        {
            "h": {
                "from": "0.31.0",
                "to": "0.32.0",
                "before_tok_s": 814.2,
                "after_tok_s": 727.9,
                "change_pct": -10.6,
                "change_lo_pct": -18.1,
                "change_hi_pct": -2.8,
                "interval_pct": "95.0",
                "stage": "busy",
                "verdict": "INCONCLUSIVE",
            },
            "u": {"from": "0.31.0", "to": "0.32.0", "verdict": "PASS", "stage": None},
        }
    )
    assert (
        lines[1]
        .rstrip()
        .endswith("10.6% worse (95% interval 18.1% worse to 2.8% worse) at busy  INCONCLUSIVE")
    )
    assert " at " not in lines[2]


def test_a_host_lost_during_the_run_is_listed_lost_with_the_task_it_was_lost_in() -> None:
    """A host that went unreachable is named even when the play recorded nothing
    for it; a host with a verdict keeps it, and the task is added to its reasons."""
    recorded = {
        "b": {"from": "0.31.0", "to": "0.32.0", "verdict": "PASS", "reasons": ["ok"]},
        "c": {"from": "0.31.0", "to": "0.32.0", "verdict": "LOST", "reasons": ["lost: ..."]},
    }
    merged = summary.add_lost(recorded, {"a": "Measure the serving release", "b": "Return"})
    assert merged["a"]["verdict"] == "LOST"
    assert merged["a"]["reasons"] == ['unreachable during "Measure the serving release"']
    assert merged["b"]["verdict"] == "PASS"
    assert merged["b"]["reasons"] == ["ok", 'unreachable during "Return"']
    assert merged["c"] == recorded["c"]
    assert recorded["b"]["reasons"] == ["ok"]  # the input is not changed
    lines = summary.format_summary(merged)
    assert any(line.startswith("a ") and line.rstrip().endswith("LOST") for line in lines), lines


def test_a_host_that_failed_with_no_verdict_is_listed_failed_with_its_task() -> None:
    """A preflight failure, or a host lost mid-task that the connection reports as a
    failure (podman: "container state improper"), has no verdict: it is named."""
    recorded = {"b": {"from": "0.31.0", "to": "0.32.0", "verdict": "FAIL", "reasons": ["slower"]}}
    failed = {
        "a": ("Find the release that serves now", "Failed to set permissions\non remote files"),
        "b": ("Stop the rollout", "BLOCKED on b"),
    }
    merged = summary.add_lost(recorded, {}, failed)
    assert merged["a"]["verdict"] == "FAILED"
    assert merged["a"]["reasons"] == [
        'failed in "Find the release that serves now": Failed to set permissions on remote files'
    ]
    assert merged["b"] == recorded["b"]  # a verdict is kept as it is
