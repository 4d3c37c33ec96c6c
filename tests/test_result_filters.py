"""The results filter plugin (figures per stage for messages), loaded as Ansible loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from _load import load_file
from benchgate.workload import parse_workload

ROOT = Path(__file__).resolve().parents[1]
F = load_file(ROOT / "plugins/filter/results.py", "bg_filter_results").FilterModule().filters()


def _summary(tok_s: float | None) -> dict:
    return {"metrics": {} if tok_s is None else {"output_tokens_per_s": {"median": tok_s}}}


def test_a_staged_result_gives_each_stage_its_own_figure_not_the_pooled_one():
    result = {
        "summary": _summary(500.0),  # both loads pooled: never shown
        "stages": [
            {"name": "single", "summary": _summary(250.14)},
            {"name": "busy", "summary": _summary(801.16)},
        ],
    }
    assert F["tok_s_by_stage"](result) == "single 250.1, busy 801.2"
    assert [b["name"] for b in F["result_stages"](result)] == ["single", "busy"]


def test_an_unstaged_result_gives_one_unnamed_figure():
    result = {"summary": _summary(12.345), "stages": []}
    assert F["tok_s_by_stage"](result) == "12.3"
    assert F["result_stages"](result) == [{"name": "", "summary": _summary(12.345)}]


@pytest.mark.parametrize("result", [None, "", {}, {"summary": _summary(None)}])
def test_a_missing_figure_is_a_question_mark(result):
    assert F["tok_s_by_stage"](result) == "?"


def test_a_stage_without_its_figure_keeps_its_name():
    result = {"stages": [{"name": "single", "summary": _summary(None)}, {"name": "busy"}]}
    assert F["tok_s_by_stage"](result) == "single ?, busy ?"


def test_what_is_not_a_result_is_refused():
    with pytest.raises(AnsibleFilterError, match="expects a measurement result"):
        F["result_stages"](["not", "a", "result"])


def test_workload_stages_adds_a_stage_or_keeps_only_some():
    workload = yaml.safe_load((ROOT / "workloads/demo-staged.yml").read_text())
    threshold = {"name": "threshold", "concurrency": 2}
    assert F["workload_stages"](workload) == workload
    more = F["workload_stages"](workload, [threshold])
    assert [s["name"] for s in more["stages"]] == ["single", "busy", "threshold"]
    only = F["workload_stages"](workload, [threshold], ["threshold"])
    assert only["stages"] == [threshold]
    # What the benchmark module gets is a valid workload: the stage replaces concurrency.
    parsed = parse_workload(only, base_dir=ROOT / "workloads")
    assert [(s.name, s.overrides.get("concurrency")) for s in parsed.stages] == [("threshold", 2)]
    assert workload["stages"][0]["name"] == "single"  # the input is not changed
    with pytest.raises(AnsibleFilterError, match="stage names repeat"):
        F["workload_stages"](workload, [{"name": "busy", "concurrency": 2}])
    with pytest.raises(AnsibleFilterError, match="no stage named nope"):
        F["workload_stages"](workload, [], ["nope"])
