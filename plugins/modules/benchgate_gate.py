#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Ansible reads DOCUMENTATION before the imports (validate-modules wants it so).
# ruff: noqa: E402

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchgate_gate
short_description: Judge a candidate vLLM release against its baseline benchmark
description:
  - Compares the per-trial metrics of a candidate benchmark result with those of a
    baseline result (schema C(benchgate.result/1)) and returns C(PASS), C(FAIL) or
    C(INCONCLUSIVE), with a reason per metric.
  - Each metric is judged with a one-sided Mann-Whitney U test and a Hodges-Lehmann
    estimate of the relative change with one-sided confidence bounds.
    FAIL when the regression is significant (p <= O(alpha)) and its estimate is beyond
    the metric's limit; PASS when the confidence bound rules out a regression beyond
    the limit; INCONCLUSIVE otherwise, or when either side has fewer than
    O(min_trials) valid trials. The full rule is in the docstring of C(benchgate.stats).
  - The module never fails the task because of the verdict; the play decides what to
    do with RV(passed) (block/rescue rollback stays visible in the playbook).
  - When O(ledger) is given, both results and the verdict are recorded in the SQLite
    ledger; only then does the task report a change.
  - Runs on the controller (C(delegate_to=localhost)) with the Python of the
    controller virtualenv where the C(benchgate) package is installed.
version_added: "0.1.0"
author:
  - benchgate contributors
requirements:
  - benchgate[controller] (Python package, with scipy)
attributes:
  check_mode:
    support: full
    description:
      - In check mode the results are judged and the verdict returned, but nothing is
        written to the ledger.
  diff_mode:
    support: none
options:
  baseline:
    description:
      - Baseline result, as a dict (for example a registered result of the benchmark
        module) or the path of a result JSON file on the controller.
      - A list of results (for example the two baseline measurements of an A-B-A-B
        interleaved run) is merged into one result, as for O(candidate).
    type: raw
    required: true
  candidate:
    description:
      - Candidate result, as a dict or the path of a result JSON file on the controller.
      - A list of results (for example the first measurement and the extra trials run
        after an INCONCLUSIVE verdict) is merged into one result, and all their trials
        are judged together.
    type: raw
    required: true
  metrics:
    description:
      - Metrics to judge. Throughputs (C(output_tokens_per_s), C(request_throughput))
        are better higher, latencies (C(ttft_ms), C(tpot_ms), C(itl_ms), C(e2el_ms))
        lower.
    type: list
    elements: str
    default: [output_tokens_per_s, ttft_ms, tpot_ms]
  max_regression_pct:
    description:
      - Largest tolerated regression, in percent, for every metric without its own
        entry in O(thresholds).
    type: float
    default: 5.0
  thresholds:
    description:
      - Per-metric limits in percent, for example C(ttft_ms=10). A metric listed here
        is judged even if it is missing from O(metrics).
    type: dict
    default: {}
  critical_metrics:
    description:
      - Metrics that must PASS for the gate to pass; one FAIL or INCONCLUSIVE among them
        decides the overall verdict. When none of the judged metrics is critical, all are.
    type: list
    elements: str
    default: [output_tokens_per_s]
  noncritical_fail:
    description:
      - What a FAIL of a non-critical metric does. C(fail) fails the gate, C(warn) only
        reports it. An INCONCLUSIVE non-critical metric never blocks.
    type: str
    choices: [fail, warn]
    default: fail
  alpha:
    description:
      - Significance level of the one-sided test. Each confidence bound has the level
        one minus O(alpha).
    type: float
    default: 0.05
  min_trials:
    description: Fewest valid trials per side; with fewer the metric is INCONCLUSIVE (never PASS).
    type: int
    default: 3
  latency_stat:
    description: Which per-trial statistic of a latency metric is compared.
    type: str
    choices: [median, mean, p50, p90, p95, p99]
    default: median
  fail_requires_bound:
    description:
      - If true (the default), FAIL needs the whole one-sided confidence interval beyond
        the limit; if false, a significant change whose point estimate is beyond the limit
        fails. The default keeps false blocks of identical releases under 5 %
        (docs/benchmarks.md); the cost is more INCONCLUSIVE verdicts, which add trials.
    type: bool
    default: true
  set_aside_slowest:
    description:
      - Share of each side's trials set aside at the slow end before judging (0.25 = the
        slowest quarter of each side), so that a burst of noise on a shared host, which only
        ever slows trials down, cannot drag the verdict. A regression slows every trial and
        still shows. Omitted, the default of C(benchgate.stats.GateConfig) applies
        (docs/benchmarks.md, "Bursts").
    type: float
  run_spread_pct:
    description:
      - Standard deviation, in percent, of the level of one measurement run on this host;
        the same release measured again, restarted or minutes later, comes out this much
        apart. Both bounds of the interval widen by it, less so the more runs each side
        has (A-B-A's second baseline, the candidate's extra trials). 0 (the default of
        C(benchgate.stats.GateConfig) when omitted) trusts the trials of one run, as a GPU
        host allows; a small shared CPU host needs it (docs/benchmarks.md, "Noise on a
        2-core machine").
      - Not applied when the two sides were measured side by side (every result of both
        sides carries C(interleaved) and the pairs match, see the C(vllm_benchmark) module's
        O(reference_base_url)). Their trials alternated, so a level that moves between
        runs moved both alike; they are then judged as pairs (trial i of each side, a
        Wilcoxon signed-rank test and interval on the pairs' ratios) and no trials are set
        aside. RV(side_by_side) says so.
    type: float
  ledger:
    description: Path of the SQLite ledger on the controller. Nothing is recorded when omitted.
    type: path
  host:
    description:
      - Host the results belong to (usually C(inventory_hostname)). Required with
        O(ledger).
    type: str
  release:
    description: vLLM release of the candidate, recorded in the ledger.
    type: str
  baseline_release:
    description: vLLM release of the baseline, recorded in the ledger.
    type: str
  phase:
    description:
      - Arm label of the candidate run in the ledger (for example C(candidate) or
        C(candidate:arm:ngram-k3) for the arm that a speculative A/B chose).
    type: str
    default: candidate
  baseline_phase:
    description: Arm label of the baseline run in the ledger.
    type: str
    default: baseline
"""

EXAMPLES = r"""
# The variables are those of playbooks/upgrade.yml and the vllm_benchmark role;
# the two measurements are registered here so that the example stands alone.
- name: Measure the serving release (fresh baseline)
  vllm_benchmark:
    base_url: "{{ vllm_benchmark_base_url }}"
    workload: >-
      {{ lookup('ansible.builtin.file', playbook_dir ~ '/../workloads/demo.yml') | from_yaml }}
  vars:
    ansible_python_interpreter: "{{ vllm_benchmark_client_root }}/client/bin/python"
  register: __benchgate_baseline_run

- name: Measure the candidate (after installing it and restarting the service)
  vllm_benchmark:
    base_url: "{{ vllm_benchmark_base_url }}"
    workload: >-
      {{ lookup('ansible.builtin.file', playbook_dir ~ '/../workloads/demo.yml') | from_yaml }}
  vars:
    ansible_python_interpreter: "{{ vllm_benchmark_client_root }}/client/bin/python"
  register: __benchgate_candidate_run

- name: Judge the candidate against the baseline
  benchgate_gate:
    baseline: "{{ __benchgate_baseline_run.result }}"
    candidate: "{{ __benchgate_candidate_run.result }}"
    max_regression_pct: "{{ benchgate_max_regression_pct | default(5) }}"
    thresholds:
      ttft_ms: 10
    ledger: "{{ benchgate_ledger | default(playbook_dir ~ '/../artifacts/ledger.sqlite') }}"
    host: "{{ inventory_hostname }}"
    release: "{{ vllm_version }}"
    baseline_release: "{{ __benchgate_baseline_run.target.server_version }}"
  delegate_to: localhost
  become: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  register: __benchgate_gate

# The play decides what a verdict does: here, fail into the rescue that rolls back.
- name: Block the rollout when the candidate is not proven as fast
  ansible.builtin.assert:
    that:
      - __benchgate_gate.passed
    fail_msg: "{{ __benchgate_gate.verdict }}: {{ __benchgate_gate.reasons | join('; ') }}"
    quiet: true

- name: Judge two result files on the controller, throughput only
  benchgate_gate:
    baseline: /var/tmp/benchgate/baseline.json
    candidate: /var/tmp/benchgate/candidate.json
    metrics: [output_tokens_per_s]
  delegate_to: localhost
"""

RETURN = r"""
verdict:
  description: Overall verdict.
  returned: always
  type: str
  sample: FAIL
passed:
  description: True only when the verdict is PASS. INCONCLUSIVE is not a pass.
  returned: always
  type: bool
  sample: false
reasons:
  description: The reasons behind the overall verdict, one line per deciding metric.
  returned: always
  type: list
  elements: str
  sample:
    - "output_tokens_per_s: 27.0% worse than the baseline's 412.3 tok/s (90% interval
      29.1% worse to 25.2% worse, p=0.004): worse beyond the 5% limit"
side_by_side:
  description:
    - Whether the sides were measured side by side (their trials alternated), so that
      they were judged as pairs and O(run_spread_pct) was not applied.
  returned: always
  type: bool
gate_warnings:
  description:
    - Non-blocking findings (a non-critical metric INCONCLUSIVE, or FAIL with
      O(noncritical_fail=warn)).
  returned: always
  type: list
  elements: str
metrics:
  description: Per-metric details.
  returned: always
  type: list
  elements: dict
  contains:
    metric:
      description: Metric name.
      type: str
    verdict:
      description: PASS, FAIL or INCONCLUSIVE for this metric.
      type: str
    reason:
      description: Human-readable explanation; for a staged workload it starts with
        C(stage NAME:).
      type: str
    stage:
      description: The stage this line judges (staged workloads only).
      type: str
    interval_pct:
      description: The confidence level of the line's interval in % (90 at alpha 0.05;
        a staged workload's stages share alpha, so two stages give 95).
      type: float
    critical:
      description: Whether the metric is critical.
      type: bool
    direction:
      description: C(higher) or C(lower) is better.
      type: str
    baseline_median:
      description: Median of the baseline trials.
      type: float
    candidate_median:
      description: Median of the candidate trials.
      type: float
    change_pct:
      description: Hodges-Lehmann estimate of the relative change, in percent (negative = lower).
      type: float
    change_lo_pct:
      description: One-sided lower confidence bound of the change (null when unattainable).
      type: float
    change_hi_pct:
      description: One-sided upper confidence bound of the change (null when unattainable).
      type: float
    regression_pct:
      description: The change oriented so that positive is worse.
      type: float
    p_value:
      description: One-sided Mann-Whitney U p-value for a regression.
      type: float
    n_baseline:
      description: Valid baseline trials used.
      type: int
    n_candidate:
      description: Valid candidate trials used.
      type: int
table:
  description:
    - The verdict as a plain-text table. Per metric the medians of both sides and the
      change that the reasons give (the estimate with its interval, better or worse).
  returned: always
  type: str
ledger_ids:
  description: Row ids written to the ledger.
  returned: when O(ledger) is set and not in check mode
  type: dict
  sample: {baseline_run_id: 12, candidate_run_id: 13, verdict_id: 7}
"""

import json
import os
import sqlite3
import traceback
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

BENCHGATE_IMPORT_ERROR = None
try:
    from benchgate import ledger as bg_ledger
    from benchgate import stages as bg_stages
    from benchgate import stats as bg_stats
except ImportError:
    BENCHGATE_IMPORT_ERROR = traceback.format_exc()

SCIPY_IMPORT_ERROR = None
try:
    import scipy  # noqa: F401  (the judge's test)
except ImportError:
    SCIPY_IMPORT_ERROR = traceback.format_exc()


ARGUMENT_SPEC: dict[str, Any] = {
    "baseline": {"type": "raw", "required": True},
    "candidate": {"type": "raw", "required": True},
    "metrics": {
        "type": "list",
        "elements": "str",
        "default": ["output_tokens_per_s", "ttft_ms", "tpot_ms"],
    },
    "max_regression_pct": {"type": "float", "default": 5.0},
    "thresholds": {"type": "dict", "default": {}},
    "critical_metrics": {"type": "list", "elements": "str", "default": ["output_tokens_per_s"]},
    "noncritical_fail": {"type": "str", "choices": ["fail", "warn"], "default": "fail"},
    "alpha": {"type": "float", "default": 0.05},
    "min_trials": {"type": "int", "default": 3},
    "latency_stat": {
        "type": "str",
        "choices": ["median", "mean", "p50", "p90", "p95", "p99"],
        "default": "median",
    },
    "fail_requires_bound": {"type": "bool", "default": True},
    "set_aside_slowest": {"type": "float"},
    "run_spread_pct": {"type": "float"},
    "ledger": {"type": "path"},
    "host": {"type": "str"},
    "release": {"type": "str"},
    "baseline_release": {"type": "str"},
    "phase": {"type": "str", "default": "candidate"},
    "baseline_phase": {"type": "str", "default": "baseline"},
}


def load_result(value: Any, name: str) -> dict[str, Any]:
    """A result given as a dict, a JSON string, or a path to a JSON file."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            loaded = json.loads(text)
        else:
            path = os.path.expanduser(text)
            if not os.path.isfile(path):
                raise ValueError(f"{name}: no such result file on the controller: {path}")
            with open(path, encoding="utf-8") as fh:
                loaded = json.load(fh)
        if isinstance(loaded, dict):
            return loaded
    raise ValueError(f"{name} must be a result dict or the path of a result JSON file")


def _as_list(value: Any, name: str) -> list[dict[str, Any]]:
    """Every result of one side: one, or a list, whose trials are all judged
    (merged): more trials measured after an INCONCLUSIVE verdict, A-B-A's
    second baseline, a second side-by-side measurement."""
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{name}: an empty list of results")
        return [load_result(item, f"{name}[{i}]") for i, item in enumerate(value)]
    return [load_result(value, name)]


def gate(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """Judge (and record unless ``check_mode``); return the module's result."""
    baselines = _as_list(params["baseline"], "baseline")
    candidates = _as_list(params["candidate"], "candidate")
    baseline = bg_stages.merge_staged(baselines)
    candidate = bg_stages.merge_staged(candidates)
    thresholds = {str(k): float(v) for k, v in (params["thresholds"] or {}).items()}
    specs = bg_stats.make_specs(
        metrics=params["metrics"],
        max_regression_pct=params["max_regression_pct"],
        thresholds=thresholds,
        critical=params["critical_metrics"],
    )
    config = bg_stats.GateConfig(
        alpha=params["alpha"],
        min_trials=params["min_trials"],
        noncritical_fail=params["noncritical_fail"],
        fail_requires_bound=params["fail_requires_bound"],
        latency_stat=params["latency_stat"],
        **{
            key: params[key]
            for key in ("set_aside_slowest", "run_spread_pct")
            if params.get(key) is not None
        },
    )
    # Side by side: both releases' trials alternated, so they are judged as
    # pairs, and the run-to-run spread (which A-B-A needs) is not added.
    config = bg_stats.config_for(config, baselines, candidates)
    # A staged workload is judged stage by stage (benchgate.stages: every stage
    # must pass, alpha split over the stages); an unstaged one as before.
    verdict = bg_stages.judge_any(baseline, candidate, specs, config)
    out = verdict.to_dict()
    # Each metric's line names its stage, as the overall reasons do (the role
    # shows and records these lines: "stage busy: output_tokens_per_s: ..."),
    # and the level of its two-sided interval, from the alpha it was judged at
    # (a stage's share of it for a staged workload: 95% for each of two).
    alphas = {s["stage"]: s["alpha"] for s in out.get("stages", [])}
    metrics = [
        {
            **m,
            "reason": f"stage {m['stage']}: {m['reason']}" if m.get("stage") else m["reason"],
            "interval_pct": round(100 * (1 - 2 * alphas.get(m.get("stage"), config.alpha)), 2),
        }
        for m in out["metrics"]
    ]
    result: dict[str, Any] = {
        "changed": False,
        "verdict": out["verdict"],
        "passed": out["passed"],
        "reasons": out["reasons"],
        "gate_warnings": out["warnings"],
        "side_by_side": config.paired,
        "metrics": metrics,
        "table": (
            bg_stages.render_table(verdict)
            if isinstance(verdict, bg_stages.StagedVerdict)
            else bg_stats.render_table(verdict, config.alpha)
        ),
    }
    if params["ledger"] and not check_mode:
        host = params["host"]
        b_id = bg_ledger.record_result(
            params["ledger"],
            baseline,
            host=host,
            phase=params["baseline_phase"],
            release=params["baseline_release"],
        )
        c_id = bg_ledger.record_result(
            params["ledger"],
            candidate,
            host=host,
            phase=params["phase"],
            release=params["release"],
        )
        v_id = bg_ledger.record_verdict(
            params["ledger"],
            out,
            host=host,
            release=params["release"],
            baseline_release=params["baseline_release"],
            phase=params["phase"],
            baseline_run_id=b_id,
            candidate_run_id=c_id,
        )
        result["changed"] = True
        result["ledger_ids"] = {
            "baseline_run_id": b_id,
            "candidate_run_id": c_id,
            "verdict_id": v_id,
        }
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_by={"ledger": ["host"]},
        supports_check_mode=True,
    )
    if BENCHGATE_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("benchgate"), exception=BENCHGATE_IMPORT_ERROR)
    if SCIPY_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("scipy"), exception=SCIPY_IMPORT_ERROR)
    try:
        result = gate(module.params, module.check_mode)
    except (ValueError, OSError, RuntimeError, sqlite3.Error) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
