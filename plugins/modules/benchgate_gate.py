#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Its documentation: benchgate_gate.yml beside it.

from __future__ import annotations

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
