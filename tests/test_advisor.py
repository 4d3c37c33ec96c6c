"""The speculative-decoding advisor, pinned to the field report's L4 numbers."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from benchgate import advisor, cli_advise
from benchgate.advisor import (
    acceptance_from_counts,
    advise,
    break_even_draft_cost,
    expected_tokens,
    leviathan_expected_tokens,
    load_verify_curve,
    parse_rates,
    predict,
    wasteful_positions,
)

# field-report/speculative-decoding-when-it-hurts.txt, "Spec Decode Acceptance Rate (vLLM 0.32)"
ACCEPTED = [2001, 1642, 1386, 1143, 973]
DRAFTS = 2522
RATES = acceptance_from_counts(ACCEPTED, DRAFTS)
PLAIN_TOKS, SPEC_TOKS = 51.3, 32.5
# Qwen3-4B draft for Qwen3-14B target, both FP8; decode reads every weight once per step
SIZE_RATIO = 4.0 / 14.0


def test_field_report_table_reproduced():
    assert [round(100 * r, 1) for r in RATES] == [79.3, 65.1, 55.0, 45.3, 38.6]
    assert sum(ACCEPTED) == 7145
    assert round(sum(ACCEPTED) / (DRAFTS * len(ACCEPTED)), 3) == 0.567  # "56.7% overall"
    assert expected_tokens(RATES, 5) - 1 == pytest.approx(7145 / 2522)
    assert round(expected_tokens(RATES, 5) - 1, 2) == 2.83  # "2.83 tokens accepted per draft"
    # the rounded percentages give the same answer
    assert expected_tokens(parse_rates("79.3,65.1,55.0,45.3,38.6"), 5) == pytest.approx(3.833)


def test_positions_3_and_4_lower_the_speedup_at_the_size_ratio():
    # Flat verification: position 4 (0-based) stops paying above c = 0.203,
    # position 3 above c = 0.277; the draft/target size ratio is 0.286.
    assert break_even_draft_cost(RATES, 4).lowers_speedup_above == pytest.approx(0.2026, abs=1e-3)
    assert break_even_draft_cost(RATES, 3).lowers_speedup_above == pytest.approx(0.2773, abs=1e-3)
    assert wasteful_positions(RATES, SIZE_RATIO) == [3, 4]
    assert wasteful_positions(RATES, 0.25) == [4]
    assert wasteful_positions(RATES, 0.1) == []
    # Against plain decoding they only lose when the draft step costs more than a_k:
    assert break_even_draft_cost(RATES, 3).loses_to_plain_above == pytest.approx(0.453, abs=1e-3)
    assert break_even_draft_cost(RATES, 4).loses_to_plain_above == pytest.approx(0.386, abs=1e-3)


def test_a_rising_verify_curve_lowers_the_break_even():
    rising = [1.0 + 0.02 * i for i in range(6)]
    assert break_even_draft_cost(RATES, 3, rising).lowers_speedup_above < 0.2773
    assert wasteful_positions(RATES, 0.26, rising) == [3, 4]


def test_field_report_measurement_is_flagged():
    measured = SPEC_TOKS / PLAIN_TOKS  # 0.634
    advice = advise(RATES, SIZE_RATIO, measured_speedup=measured)
    assert advice.best_k == 3
    assert advice.best_speedup == pytest.approx(expected_tokens(RATES, 3) / (1 + 3 * SIZE_RATIO))
    assert advice.best_speedup == pytest.approx(1.61, abs=0.01)
    predicted_k5 = expected_tokens(RATES, 5) / (1 + 5 * SIZE_RATIO)  # 1.57
    assert advice.measured_vs_predicted == pytest.approx(measured / predicted_k5)
    assert advice.measured_vs_predicted == pytest.approx(0.40, abs=0.01)
    assert advice.implied_step_cost == pytest.approx(3.833 / 0.6335, abs=0.01)  # ~6 steps
    (warning,) = advice.warnings
    assert (
        "all-reduce" in warning and "bandwidth" in warning and "max_num_scheduled_tokens" in warning
    )
    assert "turn it off" in advice.recommendation


def test_off_for_a_flat_high_cost_draft():
    advice = advise([0.27, 0.12], draft_cost=0.5)
    assert advice.best_k is None
    assert advice.recommendation.startswith("off")
    assert advice.warnings == []


def test_off_when_the_gain_is_inside_the_margin():
    # k=1 predicts 1.03x: better than plain on paper, not worth it
    assert advise([0.339], draft_cost=0.3).best_k is None
    assert advise([0.339], draft_cost=0.3, margin=0.0).best_k == 1


def test_on_for_a_cheap_draft():
    advice = advise(RATES, draft_cost=0.05)
    assert advice.best_k == 5
    assert advice.best_speedup == pytest.approx(3.833 / 1.25, abs=1e-3)
    assert advice.wasteful_positions == []


def test_ngram_like_free_drafting_is_on():
    assert advise([0.74, 0.5, 0.3], draft_cost=0.0).best_k == 3


def test_leviathan_closed_form_matches_constant_rates():
    for alpha in (0.0, 0.5, 0.8, 1.0):
        for k in range(0, 6):
            rates = [alpha**i for i in range(1, 6)]
            assert leviathan_expected_tokens(alpha, k) == pytest.approx(expected_tokens(rates, k))
    assert advisor.leviathan_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2))


def test_verify_curve_table_and_file(tmp_path):
    curve = load_verify_curve({1: 10.0, 2: 11.0, 4: 15.0})  # milliseconds; normalised
    assert curve(1) == 1.0 and curve(2) == pytest.approx(1.1) and curve(3) == pytest.approx(1.3)
    assert curve(6) == pytest.approx(1.9)  # extended along the last segment
    path = tmp_path / "v.json"
    path.write_text(json.dumps([1.0, 1.5]))
    rows = predict([0.9], 0.1, str(path))
    assert rows[1].step_cost == pytest.approx(0.1 + 1.5)
    with pytest.raises(ValueError, match="n = 1"):
        load_verify_curve({2: 1.0})


def test_bad_rates():
    with pytest.raises(ValueError):
        parse_rates("79.3,abc")
    with pytest.raises(ValueError):
        advise([], 0.1)
    with pytest.raises(ValueError):
        advise([1.5], 0.1)


def _run_cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    cli_advise.register(parser.add_subparsers())
    args = parser.parse_args(["advise", *argv])
    out = io.StringIO()
    return args._run(args, out), out.getvalue()


def test_cli_table():
    rc, text = _run_cli("--acceptance", "79.3,65.1,55.0,45.3,38.6", "--draft-cost", "0.29")
    assert rc == 0
    assert "accepted per draft (all 5 positions): 2.833" in text
    assert "positions that lower the speedup (0-based): 3, 4" in text
    assert "recommendation: draft k=3" in text


def test_cli_json_with_measurement():
    rc, text = _run_cli(
        "--acceptance",
        "79.3,65.1,55.0,45.3,38.6",
        "--draft-cost",
        "0.29",
        "--measured-speedup",
        "0.634",
        "--json",
    )
    data = json.loads(text)
    assert rc == 0 and data["best_k"] == 3 and len(data["rows"]) == 6 and data["warnings"]


def test_cli_registered_in_benchgate():
    from benchgate import cli

    args = cli.build_parser().parse_args(["advise", "--acceptance", "50"])
    assert args._run is cli_advise.run


# issue 18: an fp8 Qwen3-14B step on the H200, 4.66 ms for one token, 4.58 ms for two
DIPPING_MS = [4.66, 4.58, 4.70, 4.69, 4.75]


def test_a_dipping_measured_curve_is_fitted_not_refused(tmp_path):
    curve = load_verify_curve(DIPPING_MS)
    assert isinstance(curve, advisor.TableCurve)
    # pool-adjacent-violators: (4.66, 4.58) -> 4.62 twice, (4.70, 4.69) -> 4.695 twice
    assert [curve(n) for n in range(1, 6)] == pytest.approx(
        [1.0, 1.0, 4.695 / 4.62, 4.695 / 4.62, 4.75 / 4.62]
    )
    assert all(curve(n + 1) >= curve(n) for n in range(1, 8))
    assert curve.fit_note and "n=2: 4.58 < 4.66" in curve.fit_note
    assert "non-decreasing fit" in curve.fit_note
    path = tmp_path / "fp8-curve.json"
    path.write_text(json.dumps({str(i + 1): v for i, v in enumerate(DIPPING_MS)}))
    rc, text = _run_cli("--acceptance", "79.3,65.1,55.0", "--verify-curve", str(path))
    assert rc == 0
    assert "note: verify curve: the measured verify costs fall at n=2: 4.58 < 4.66" in text


def test_monotone_fit_keeps_rising_data_and_pools_dips():
    assert advisor.monotone_fit([1.0, 1.1, 1.3]) == [1.0, 1.1, 1.3]
    assert advisor.monotone_fit([1.0, 0.9]) == pytest.approx([0.95, 0.95])
    assert advisor.monotone_fit([3.0, 1.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert load_verify_curve([1.0, 1.1]).fit_note is None  # type: ignore[attr-defined]


# H200, vLLM 0.26.0, Qwen3-14B-shaped target, Qwen3-4B-shaped draft, concurrency 1
# (lab/calibration/h200-vllm.md): plain 116.9 tok/s; per-position acceptance measured.
H200_K3_RATES = [0.792, 0.628, 0.531]


def test_draft_cost_from_an_arm_and_its_prediction():
    c = advisor.draft_cost_from_arm(H200_K3_RATES, 3, 76.4 / 116.9)
    assert c == pytest.approx((2.951 / (76.4 / 116.9) - 1.0) / 3)
    assert 1.1 < c < 1.25  # the drafting step cost more than a target step
    rows = predict([0.793], c)
    assert rows[1].speedup == pytest.approx(96.1 / 116.9, rel=0.05)  # k=1 measured: 0.822
    assert advisor.draft_cost_from_arm([0.8], 1, 100.0) == 0.0  # never below 0
    with pytest.raises(ValueError):
        advisor.draft_cost_from_arm([0.8], 2, 0.5)
    with pytest.raises(ValueError):
        advisor.draft_cost_from_arm([0.8], 1, 0.0)


def _result(tok_s: float, per_pos: list[float] | None = None) -> dict:
    trials = []
    for _ in range(3):
        server: dict = {"ok": True, "spec_decode": None}
        if per_pos:
            server["spec_decode"] = {
                "drafts": 100,
                "draft_tokens": 100 * len(per_pos),
                "accepted_tokens": 100 * sum(per_pos),
                "per_position_acceptance": per_pos,
            }
        trials.append({"valid": True, "server": server})
    return {"summary": {"metrics": {"output_tokens_per_s": {"median": tok_s}}}, "trials": trials}


def test_cli_fits_c_from_results(tmp_path):
    plain, arm = tmp_path / "off.json", tmp_path / "k3.json"
    plain.write_text(json.dumps(_result(116.9)))
    arm.write_text(json.dumps(_result(76.4, H200_K3_RATES)))
    rc, text = _run_cli("--fit-results", str(plain), str(arm), "--json")
    data = json.loads(text)
    assert rc == 0 and data["rates"] == pytest.approx(H200_K3_RATES)
    assert data["draft_cost"] == pytest.approx(
        advisor.draft_cost_from_arm(H200_K3_RATES, 3, 76.4 / 116.9)
    )
    assert data["rows"][3]["speedup"] == pytest.approx(76.4 / 116.9)  # fitted exactly there
    assert data["best_k"] is None and "fitted to the measured arm k=3" in data["notes"][0]
    rc, text = _run_cli("--acceptance", "79.3,65.1,55.0", "--fit-arm", "3:0.6535")
    assert rc == 0 and "recommendation: off" in text


def test_cli_fit_errors(tmp_path):
    assert _run_cli("--fit-arm", "3:0.6")[0] == 1  # no acceptance
    assert _run_cli("--acceptance", "50", "--fit-arm", "x")[0] == 1
    plain = tmp_path / "off.json"
    plain.write_text(json.dumps(_result(100.0)))
    assert _run_cli("--fit-results", str(plain), str(plain))[0] == 1  # no spec counters


def test_a_calibration_report_is_a_verify_curve(tmp_path):
    report = {
        "schema": "benchgate.calibration/1",
        "models": {
            "qwen3-14b": {
                "tp": {
                    "4": {"step_s": {"1": 2.0, "2": 2.2}},
                    "1": {"step_s": {"1": 6.835e-3, "2": 6.865e-3, "3": 6.855e-3}},
                }
            },
            "qwen3-4b": {"tp": {"1": {"step_s": {"1": 1.0, "2": 5.0}}}},
        },
    }
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(report))
    curve = load_verify_curve(str(path))
    assert curve(2) == pytest.approx(curve(3)) and curve(2) > 1.0  # TP 1 of the target, fitted
    with pytest.raises(ValueError, match="calibration report"):
        load_verify_curve({"schema": "benchgate.calibration/1", "models": {}})
