#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Ansible reads DOCUMENTATION before the imports (validate-modules wants it so).
# ruff: noqa: E402

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Benchmark a running vLLM (OpenAI-compatible) server with a benchgate workload
description:
  - Runs a named, versioned benchgate workload against O(base_url) with benchgate's own
    streaming client (pinned apart from the vLLM release under test), and returns a
    result of schema C(benchgate.result/1) with one entry per trial, each valid or not.
  - Before and after each trial it scrapes C(/metrics) and reports the server's
    generation-token rate, its agreement with the client, and speculative decoding
    acceptance when the server exposes it.
  - Runs on the target host, with C(ansible_python_interpreter) pointing at the client
    virtualenv where the C(benchgate) package is installed, so the load is generated
    close to the server.
  - Measuring changes nothing on the host, so the task never reports a change, even
    when O(output_path) is written.
  - Failed requests do not fail the task; they make trials invalid (see RV(all_valid)).
    The task fails when the benchmark cannot start (server unreachable, no model, bad
    workload).
version_added: "0.1.0"
author:
  - benchgate contributors
requirements:
  - benchgate (Python package, client side; with httpx, prometheus-client and PyYAML)
attributes:
  check_mode:
    support: full
    description:
      - In check mode the workload is loaded and validated, and no request is sent.
  diff_mode:
    support: none
options:
  base_url:
    description:
      - URL of the server, for example C(http://127.0.0.1:8000). A trailing C(/v1) is
        accepted.
    type: str
    required: true
  model:
    description:
      - Model name to send in requests. By default the first model listed by
        C(GET /v1/models).
    type: str
  workload:
    description:
      - The workload, as a dict with the keys of a workload file, or the path (or
        name) of a workload YAML file on the target host.
    type: raw
    required: true
  concurrency:
    description: Override the workload's number of requests in flight.
    type: int
  num_requests:
    description: Override the workload's requests per trial.
    type: int
  trials:
    description: Override the workload's number of trials.
    type: int
  input_len:
    description: Override the workload's approximate prompt length in tokens.
    type: int
  output_len:
    description: Override the workload's output length in tokens (C(max_tokens)).
    type: int
  warmup:
    description: Override the workload's number of warm-up requests.
    type: int
  api_key:
    description:
      - API key of the server, sent as a Bearer token.
    type: str
  timeout:
    description:
      - Per-request timeout in seconds (overrides the workload's C(timeout_s)).
    type: float
  output_path:
    description:
      - Also write the full result JSON (with per-request records) to this path on the
        target host.
    type: path
  include_requests:
    description:
      - Return the per-request records in RV(result) too. They are always in
        O(output_path).
    type: bool
    default: false
notes:
  - Overrides change the workload's hash; results are compared only when name, version
    and hash agree.
seealso:
  - module: benchgate_gate
"""

EXAMPLES = r"""
- name: Benchmark the serving release with the demo workload
  vllm_benchmark:
    base_url: http://127.0.0.1:8000
    workload: /opt/benchgate/workloads/demo.yml
    output_path: /var/lib/benchgate/results/baseline.json
  register: __vllm_benchmark_baseline
  vars:
    ansible_python_interpreter: /opt/benchgate/client/bin/python

- name: Benchmark with an inline workload and an API key
  vllm_benchmark:
    base_url: "http://127.0.0.1:{{ vllm_service_port }}"
    model: tiny
    api_key: "{{ vllm_service_api_key }}"
    workload:
      name: smoke
      version: 1
      input_len: 32
      output_len: 32
      concurrency: 2
      num_requests: 8
      trials: 1
    trials: 3
"""

RETURN = r"""
workload:
  description: Identity of the workload measured (after overrides).
  returned: always
  type: dict
  sample: {"name": "demo", "version": 1, "hash": "b1a4eaef48..."}
all_valid:
  description: Whether every trial is valid (error rate within C(max_error_rate)).
  returned: success, not in check mode
  type: bool
valid_trials:
  description: Number of valid trials.
  returned: success, not in check mode
  type: int
summary:
  description:
    - Per metric (C(output_tokens_per_s), C(ttft_ms.median), ...), the samples of the
      valid trials, their median and which direction is better.
  returned: success, not in check mode
  type: dict
  sample:
    output_tokens_per_s: {"samples": [431.2, 436.0, 433.9], "median": 433.9, "better": "higher"}
target:
  description: Base URL, model and server version (from C(GET /version)).
  returned: success, not in check mode
  type: dict
  sample: {"base_url": "http://127.0.0.1:8000", "model": "tiny", "server_version": "0.32.0"}
result:
  description:
    - The full result, schema C(benchgate.result/1) (see docs/result-schema.md);
      per-request records only with O(include_requests).
  returned: success, not in check mode
  type: dict
output_path:
  description: Where the full result JSON was written, if anywhere.
  returned: success, not in check mode
  type: str
skipped:
  description: True in check mode (no load was sent).
  returned: check mode
  type: bool
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from benchgate.bench import BenchmarkError, module_run
    from benchgate.workload import WorkloadError
except ImportError:
    HAS_BENCHGATE = False
    BENCHGATE_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_BENCHGATE = True
    BENCHGATE_IMPORT_ERROR = None


ARGUMENT_SPEC = dict(
    base_url=dict(type="str", required=True),
    model=dict(type="str"),
    workload=dict(type="raw", required=True),
    concurrency=dict(type="int"),
    num_requests=dict(type="int"),
    trials=dict(type="int"),
    input_len=dict(type="int"),
    output_len=dict(type="int"),
    warmup=dict(type="int"),
    api_key=dict(type="str", no_log=True),
    timeout=dict(type="float"),
    output_path=dict(type="path"),
    include_requests=dict(type="bool", default=False),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_BENCHGATE:
        module.fail_json(msg=missing_required_lib("benchgate"), exception=BENCHGATE_IMPORT_ERROR)
    try:
        result = module_run(module.params, module.check_mode)
    except (BenchmarkError, WorkloadError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
