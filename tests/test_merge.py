"""More trials after an INCONCLUSIVE verdict: merging results, judging them together."""

from __future__ import annotations

import random
from typing import Any

import pytest

from benchgate import rules, samples


def result(values: list[float]) -> dict[str, Any]:
    return {
        "schema": "benchgate.result/1",
        "trials": [
            {"index": i, "valid": True, "metrics": {"output_tokens_per_s": v}}
            for i, v in enumerate(values)
        ],
        "summary": {
            "total_trials": len(values),
            "valid_trials": len(values),
            "metrics": {
                "output_tokens_per_s": {
                    "samples": values,
                    "median": sorted(values)[len(values) // 2],
                    "better": "higher",
                }
            },
        },
    }


def test_merge_joins_trials_and_recomputes_medians() -> None:
    merged = samples.merge_results([result([1.0, 2.0, 3.0]), result([10.0, 11.0])])
    assert [t["index"] for t in merged["trials"]] == [0, 1, 2, 3, 4]
    assert samples.samples_from_result(merged, "output_tokens_per_s") == [1, 2, 3, 10, 11]
    metric = merged["summary"]["metrics"]["output_tokens_per_s"]
    assert metric["median"] == 3.0 and metric["samples"] == [1, 2, 3, 10, 11]
    assert merged["summary"]["total_trials"] == 5 and merged["merged_from"] == 2
    with pytest.raises(ValueError):
        samples.merge_results([])


def test_more_trials_resolve_most_inconclusive_verdicts() -> None:
    """A 1% slower candidate, 4% trial noise, 8 baseline trials: with 3 candidate
    trials the gate often cannot bound the regression under 5%; adding 12 more
    resolves most of those comparisons (deterministic seeds)."""
    specs = rules.make_specs(metrics=["output_tokens_per_s"])
    before = after = 0
    for seed in range(60):
        rng = random.Random(seed)

        def noisy(level: float, n: int, rng: random.Random = rng) -> list[float]:
            return [level * (1 + rng.gauss(0, 0.04)) for _ in range(n)]

        baseline, first, more = (
            result(noisy(100.0, 8)),
            result(noisy(99.0, 3)),
            result(noisy(99.0, 12)),
        )
        before += rules.judge_results(baseline, first, specs).verdict == rules.INCONCLUSIVE
        merged = samples.merge_results([first, more])
        after += rules.judge_results(baseline, merged, specs).verdict == rules.INCONCLUSIVE
    assert before >= 20
    assert after <= before / 2
