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
  - Compares the per-trial metrics of a candidate result with a baseline result (schema
    C(benchgate.result/1)) and returns C(PASS), C(FAIL) or C(INCONCLUSIVE) with a reason per
    metric. The judge (a one-sided Mann-Whitney U test and a Hodges-Lehmann estimate with
    one-sided bounds, per stage for a staged workload) is the C(benchgate) package's
    (C(benchgate.gate); the rule is in the docstring of C(benchgate.rules)).
  - The verdict never fails the task; the play decides what to do with RV(passed). With
    O(ledger), both results and the verdict are recorded; only then is the task changed.
version_added: "0.1.0"
author:
  - benchgate contributors
requirements:
  - benchgate[controller] (Python package, with scipy)
attributes:
  check_mode: {support: full, description: The verdict is returned; nothing is recorded.}
  diff_mode: {support: none}
options:
  baseline:
    description:
      - Baseline result, as a dict (a registered benchmark result) or the path of a result
        JSON file on the controller. A list of results (A-B-A's two baselines) is merged.
    type: raw
    required: true
  candidate:
    description:
      - Candidate result, as for O(baseline). A list (the first measurement and the extra
        trials after an INCONCLUSIVE verdict) is merged and all its trials are judged.
    type: raw
    required: true
  metrics:
    description: Metrics to judge; throughputs are better higher, latencies (C(*_ms)) lower.
    type: list
    elements: str
    default: [output_tokens_per_s, ttft_ms, tpot_ms]
  max_regression_pct:
    description: Largest tolerated regression, in percent, of a metric without O(thresholds).
    type: float
    default: 5.0
  thresholds:
    description: Per-metric limits in percent (C(ttft_ms=10)); a metric named here is judged.
    type: dict
    default: {}
  critical_metrics:
    description: Metrics that must PASS for the gate to pass (none among the judged ones, all).
    type: list
    elements: str
    default: [output_tokens_per_s]
  noncritical_fail:
    description: Whether a non-critical metric's FAIL fails the gate or only warns.
    type: str
    choices: [fail, warn]
    default: fail
  alpha:
    description: Significance of the one-sided test; each bound has the level one minus O(alpha).
    type: float
    default: 0.05
  min_trials:
    description: Fewest valid trials per side; with fewer the metric is INCONCLUSIVE.
    type: int
    default: 3
  latency_stat:
    description: Which per-trial statistic of a latency metric is compared.
    type: str
    choices: [median, mean, p50, p90, p95, p99]
    default: median
  fail_requires_bound:
    description: FAIL needs the whole interval beyond the limit (else a significant estimate).
    type: bool
    default: true
  set_aside_slowest:
    description: Share of each run's slowest trials set aside (0.25 = a quarter) against bursts.
    type: float
  run_spread_pct:
    description:
      - Standard deviation, in percent, of one measurement run's level on this host; the
        interval widens by it. Not applied to sides measured side by side (RV(side_by_side)).
    type: float
  ledger:
    description: Path of the SQLite ledger on the controller. Nothing is recorded when omitted.
    type: path
  host:
    description: Host the results belong to (C(inventory_hostname)); required with O(ledger).
    type: str
  release: {description: "vLLM release of the candidate, recorded in the ledger.", type: str}
  baseline_release:
    description: vLLM release of the baseline, recorded in the ledger.
    type: str
  phase:
    description: Arm label of the candidate run in the ledger (C(candidate:arm:ngram-k3)).
    type: str
    default: candidate
  baseline_phase:
    description: Arm label of the baseline run in the ledger.
    type: str
    default: baseline
"""

EXAMPLES = r"""
- name: Judge two result files on the controller and record the verdict
  benchgate_gate:
    baseline: /var/tmp/benchgate/baseline.json
    candidate: /var/tmp/benchgate/candidate.json
    thresholds:
      ttft_ms: 10
    ledger: "{{ playbook_dir }}/../artifacts/ledger.sqlite"
    host: "{{ inventory_hostname }}"
    release: "{{ vllm_version }}"
  delegate_to: localhost
  register: __benchgate_gate

- name: Block the rollout when the candidate is not proven as fast
  ansible.builtin.assert:
    that:
      - __benchgate_gate.passed
    fail_msg: "{{ __benchgate_gate.verdict }}: {{ __benchgate_gate.reasons | join('; ') }}"
    quiet: true
"""

RETURN = r"""
verdict: {description: Overall verdict., returned: always, type: str, sample: FAIL}
passed: {description: True only when the verdict is PASS., returned: always, type: bool}
reasons:
  description: The reasons behind the overall verdict, one line per deciding metric.
  returned: always
  type: list
  elements: str
side_by_side: {description: Whether the sides were judged as pairs., returned: always, type: bool}
gate_warnings:
  description: Non-blocking findings (a non-critical metric INCONCLUSIVE, or FAIL with C(warn)).
  returned: always
  type: list
  elements: str
metrics:
  description: Per-metric details.
  returned: always
  type: list
  elements: dict
  contains:
    metric: {description: Metric name., type: str}
    verdict: {description: "PASS, FAIL or INCONCLUSIVE for this metric.", type: str}
    reason: {description: "Explanation; staged: starts with C(stage NAME:).", type: str}
    stage: {description: The stage this line judges (staged workloads only)., type: str}
    interval_pct: {description: The level of the line's interval in %., type: float}
    critical: {description: Whether the metric is critical., type: bool}
    direction: {description: C(higher) or C(lower) is better., type: str}
    baseline_median: {description: Median of the baseline trials., type: float}
    candidate_median: {description: Median of the candidate trials., type: float}
    change_pct: {description: Hodges-Lehmann estimate of the relative change in %., type: float}
    change_lo_pct: {description: Lower bound of the change (null when unattainable)., type: float}
    change_hi_pct: {description: Upper bound of the change (null when unattainable)., type: float}
    regression_pct: {description: The change oriented so that positive is worse., type: float}
    p_value: {description: One-sided p-value for a regression., type: float}
    n_baseline: {description: Valid baseline trials used., type: int}
    n_candidate: {description: Valid candidate trials used., type: int}
table: {description: The verdict as a plain-text table., returned: always, type: str}
ledger_ids:
  description: Row ids written to the ledger.
  returned: when O(ledger) is set and not in check mode
  type: dict
  sample: {baseline_run_id: 12, candidate_run_id: 13, verdict_id: 7}
"""

import sqlite3
import traceback
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

BENCHGATE_IMPORT_ERROR = None
try:
    from benchgate import gate as bg_gate
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
        gate = bg_gate.run_gate(**module.params, check_mode=module.check_mode)
    except (ValueError, OSError, RuntimeError, sqlite3.Error) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**gate.result())


if __name__ == "__main__":
    main()
