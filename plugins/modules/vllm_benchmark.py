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
  - With O(model_dir), O(service_unit) (or O(service_pid)) it also reports the
    single-stream decode roofline of the served model, the memory of the service's
    process tree and GPUs before and after the trials, and the service's cold-start
    time (RV(roofline), RV(service_memory), RV(cold_start)); each is marked not
    available, with a reason, when it cannot be measured, never estimated.
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
  - benchgate (Python package, client side; with aiohttp, prometheus-client and PyYAML)
attributes:
  check_mode:
    support: full
    description:
      - In check mode the workload and the host options are validated; no request is
        sent, and neither the weights, nor the service's processes, nor the GPUs are read.
  diff_mode:
    support: none
options:
  base_url:
    description:
      - URL of the server, for example C(http://127.0.0.1:8000). A trailing C(/v1) is
        accepted.
    type: str
    required: true
  reference_base_url:
    description:
      - Side by side. A second server of the same model (for example the release that
        served before, started beside the candidate on another port). Both get the same
        prompts and their trials alternate, reference then candidate, then candidate then
        reference (ABBA), so that a machine whose speed drifts over minutes slows both
        sides alike. The candidate's result is RV(result), the reference's
        RV(reference_result); each carries C(interleaved) with one shared id, and the
        gate then leaves the run-to-run spread out.
    type: str
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
  slo:
    description:
      - Override the workload's service-level objectives, per request in milliseconds,
        with any of the keys C(ttft_ms), C(tpot_ms), C(e2el_ms). Each trial then
        reports C(goodput), the completed requests meeting all of them per second.
    type: dict
  model_dir:
    description:
      - Folder of the served model on the host (the role passes C(vllm_service_model)).
        Its safetensors headers give the weight bytes for RV(roofline); no tensor is
        loaded. Not a folder (a hub id) makes the roofline unavailable.
    type: path
  tensor_parallel_size:
    description: Tensor-parallel size of the server; each GPU reads 1/N of the weights.
    type: int
    default: 1
  bandwidth_gbs:
    description:
      - Memory bandwidth of one GPU in GB/s (1e9 bytes/s), for example a measured
        C(bandwidth_gbs.read_gbs) from C(python -m benchgate.calibrate). 0 looks the
        GPU that C(nvidia-smi) reports up in a table of datasheet figures (H200, H100
        SXM/PCIe, A100 40/80GB, L40S, L40, L4, A10G, RTX 4090).
    type: float
    default: 0
  service_unit:
    description:
      - systemd unit of the server (C(vllm.service)). Its C(MainPID) and cgroup give
        the processes whose memory RV(service_memory) reports, and its invocation
        checks that the cold-start record belongs to the current start. Its journal
        since that start tells what vLLM said about itself (asynchronous scheduling,
        model runner, CUDA graph mode, version), kept as the result's
        C(server_config.engine) beside the host's CPU and GPUs in C(server_config.host).
    type: str
  service_pid:
    description:
      - Main process of the server, instead of asking systemd for O(service_unit)'s
        C(MainPID). Its descendants count too.
    type: int
  service_log:
    description:
      - A file the server writes its log to, for a server that is not a systemd unit
        (a container, a process supervisor) or whose journal is not kept. Its last
        2 MiB (4000 lines) are read instead of O(service_unit)'s journal for
        C(server_config.engine); start-up lines older than that stay unread, and the
        facts they state unknown.
    type: path
  label:
    description:
      - What is measured (the role passes its phase, e.g. C(baseline)). Each trial's
        output tok/s and the median so far go to the host's journal under this label
        while the module runs (C(journalctl -t ansible-vllm_benchmark -f) follows it).
    type: str
  cpu_affinity:
    description:
      - CPUs the benchmark client runs on, as a cpulist (C(0), C(2-3), C(0,4-7)). On a
        small host, giving the client cores the server does not use takes their fight
        out of the measurement. Empty leaves the client where the host puts it.
    type: str
  cold_start_file:
    description:
      - The readiness record of the vllm_service role's C(wait_ready.py). Default
        C(/run/benchgate/<service_unit>.ready.json).
    type: path
notes:
  - Overrides change the workload's hash; results are compared only when name, version
    and hash agree.
  - Memory is read from C(/proc) and C(/sys/fs/cgroup) of the host; PSS needs root
    (C(become)) to read the server's C(smaps_rollup) and is null otherwise.
  - The roofline bound is bandwidth / (weight bytes / tensor-parallel size), as if
    every decode step read all weights once and nothing else; KV-cache reads,
    communication and the draft model of speculative decoding are left out, so it is
    an upper bound.
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
roofline:
  description:
    - Single-stream decode upper bound in tokens/s (C(decode_bound_tokens_per_s)) from
      C(weight_bytes), C(tensor_parallel_size) and C(bandwidth_gbs) (with
      C(bandwidth_source)), the measured per-request decode rate 1000 / median TPOT
      (C(measured_tokens_per_s)) and C(efficiency_pct), the one against the other.
      C(available) false with a C(reason) when any input is missing.
  returned: success, not in check mode
  type: dict
  sample:
    available: true
    weight_bytes: 28000000000
    tensor_parallel_size: 1
    bandwidth_gbs: 4800.0
    bandwidth_source: "datasheet: H200"
    decode_bound_tokens_per_s: 171.4
    measured_tokens_per_s: 140.2
    efficiency_pct: 81.8
service_memory:
  description:
    - Samples C(before) (before the warm-up) and C(after) (after the last trial), each
      with C(rss_bytes) and C(pss_bytes) summed over the server's process tree,
      C(cgroup_memory_current_bytes), C(cgroup_memory_peak_bytes) and C(gpus) (used and
      total MiB per GPU from nvidia-smi, null with C(gpu_reason) without it).
  returned: success, not in check mode
  type: dict
cold_start:
  description:
    - Seconds from the unit's last start to C(/health) 200 (C(healthy_s)) and to the
      first completion (C(first_completion_s)), from the readiness record;
      C(upper_bound) true when the service was already healthy at the first poll.
  returned: success, not in check mode
  type: dict
  sample: {"available": true, "healthy_s": 41.3, "first_completion_s": 42.1, "upper_bound": false}
reference_result:
  description:
    - With O(reference_base_url), the reference server's result (as RV(result)); written
      beside O(output_path) with C(-reference) before the suffix.
  returned: success with O(reference_base_url), not in check mode
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
    reference_base_url=dict(type="str"),
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
    slo=dict(type="dict"),
    model_dir=dict(type="path"),
    tensor_parallel_size=dict(type="int", default=1),
    bandwidth_gbs=dict(type="float", default=0),
    service_unit=dict(type="str"),
    service_pid=dict(type="int"),
    service_log=dict(type="path"),
    cold_start_file=dict(type="path"),
    cpu_affinity=dict(type="str"),
    label=dict(type="str"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_BENCHGATE:
        module.fail_json(msg=missing_required_lib("benchgate"), exception=BENCHGATE_IMPORT_ERROR)
    try:
        result = module_run(module.params, module.check_mode, log=module.log)
    except (BenchmarkError, WorkloadError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
