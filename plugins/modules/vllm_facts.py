#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Ansible reads DOCUMENTATION before the imports (validate-modules wants it so).
# ruff: noqa: E402

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_facts
short_description: Gather the GPUs and the release of a vLLM host and advise on speculative decoding
description:
  - Reads the host's NVIDIA GPUs with C(nvidia-smi --query-gpu) (index, name, UUID, memory,
    compute capability, maximum clocks, power limit, PCI bus ID) and the link between each
    pair of GPUs with C(nvidia-smi topo -m), and returns them as the fact C(vllm_hardware).
  - The interconnect is summarised as C(nvlink) (every pair over NVLink), C(pcie) (every pair
    over a PCIe path, C(PIX), C(PXB), C(PHB), C(NODE) or C(SYS)), C(mixed), C(single) (one
    GPU), C(none) (no GPU) or C(unknown).
  - Native FP8 follows the compute capability, 8.9 or newer (Ada Lovelace, Hopper, Blackwell).
    Memory bandwidth is a measured figure from O(calibration) when it was measured on a GPU of
    the same name, else the datasheet figure from benchgate's table (C(benchgate.hostprobe)).
  - A host without C(nvidia-smi), or where it fails, is not an error. The facts then say
    C(gpu_count=0) and why (C(reason)).
  - With O(release) it also returns the fact C(vllm_release), what that vLLM release venv's
    C(SpeculativeConfig) declares, read from its source (C(vllm/config/speculative.py), or
    C(vllm/config.py) in vLLM 0.6 to 0.9) without importing vLLM; among it whether the release
    can draft by batch size (C(num_speculative_tokens_per_batch_size), vLLM 0.31.0 and later).
  - With O(speculative) and O(tensor_parallel_size) it also returns RV(advice), advisory notes
    from the field report's decision table (corrected). They never fail the task; the
    benchmark decides.
  - Runs on the target host, with C(ansible_python_interpreter) pointing at the benchgate
    client virtualenv (installed by the C(vllm_benchmark) role). It only reads, so it never
    reports a change.
version_added: "0.1.0"
author:
  - benchgate contributors
requirements:
  - benchgate (Python package, client side; this module needs only its standard-library parts)
  - nvidia-smi (NVIDIA driver) for GPU facts; without it the facts say there is no GPU
attributes:
  check_mode:
    support: full
    description:
      - The module only reads; check mode gathers the same facts.
  diff_mode:
    support: none
  facts:
    support: full
    description:
      - Returns the fact C(vllm_hardware), and C(vllm_release) with O(release).
options:
  speculative:
    description:
      - The speculative decoding settings the service runs with, as in
        C(vllm_service_speculative) (C({}) means off). Only used for RV(advice).
    type: dict
    default: {}
  tensor_parallel_size:
    description:
      - The target model's tensor-parallel size. Only used for RV(advice).
    type: int
    default: 1
  calibration:
    description:
      - Path on the target host of a C(benchgate.calibrate) JSON result. Its measured memory
        bandwidth replaces the datasheet figure for GPUs whose name matches its C(device).
    type: path
  nvidia_smi:
    description:
      - The C(nvidia-smi) executable. By default it is looked up on the C(PATH).
    type: path
  release:
    description:
      - A vLLM release venv on the target host, for example C(/opt/vllm/releases/0.32.0) or
        the C(current) link (links are resolved). When given, the module also returns
        RV(vllm_release). A folder without vLLM's source is not an error; the fact says so.
    type: path
notes:
  - The advice is a preflight hint, never a gate; the upgrade play's A/B of speculative
    decoding against plain decoding is what decides.
seealso:
  - module: vllm_benchmark
"""

EXAMPLES = r"""
- name: Gather the GPU facts
  vllm_facts:
  vars:
    ansible_python_interpreter: /opt/benchgate/client/bin/python

- name: Gather the GPU facts and advise on the service's speculative settings
  vllm_facts:
    speculative: "{{ vllm_service_speculative }}"
    tensor_parallel_size: "{{ vllm_service_tensor_parallel_size }}"
    calibration: /var/lib/benchgate/calibration.json
  register: __vllm_service_hardware
  vars:
    ansible_python_interpreter: /opt/benchgate/client/bin/python

- name: Show the advice
  ansible.builtin.debug:
    msg: "{{ __vllm_service_hardware.advice | map(attribute='message') | list }}"

- name: Find out whether the serving release can draft by batch size
  vllm_facts:
    release: /opt/vllm/current
  register: __vllm_service_release
  vars:
    ansible_python_interpreter: /opt/benchgate/client/bin/python

- name: Say why a batch-size schedule cannot be used
  ansible.builtin.debug:
    msg: "{{ __vllm_service_release.vllm_release.reason }}"
  when: not __vllm_service_release.vllm_release.batch_size_schedule
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host's facts.
  returned: always
  type: complex
  contains:
    vllm_hardware:
      description:
        - The host's GPUs, schema C(benchgate.hwfacts/1). C(gpu_count), C(reason) (why there
          is no GPU, else null), C(gpus) (one entry per GPU), C(names), C(homogeneous),
          C(native_fp8) (every GPU), C(min_compute_capability), C(interconnect), C(links)
          (C("0-1") to the C(topo -m) cell, for example C(NV18) or C(SYS)),
          C(memory_bandwidth_gbs) and C(memory_total_mib) (the smallest over the GPUs),
          C(notes).
        - Each GPU has C(index), C(name), C(uuid), C(memory_total_mib), C(compute_capability),
          C(architecture), C(native_fp8), C(clocks_max_sm_mhz), C(clocks_max_mem_mhz),
          C(power_limit_w), C(pci_bus_id), C(memory_bandwidth_gbs),
          C(memory_bandwidth_source) (C(measured), C(datasheet) or null),
          C(memory_bandwidth_datasheet_gbs) and C(memory_bandwidth_measured_gbs).
      returned: always
      type: dict
      sample:
        schema: benchgate.hwfacts/1
        gpu_count: 1
        reason: null
        names: ["NVIDIA H200"]
        native_fp8: true
        min_compute_capability: "9.0"
        interconnect: single
        memory_bandwidth_gbs: 4800.0
        memory_total_mib: 143771
    vllm_release:
      description:
        - What the release venv given as O(release) declares. C(path) (O(release) with links
          resolved), C(speculative_fields) (the sorted field names of vLLM's
          C(SpeculativeConfig), the keys C(--speculative-config) takes; null when no source was
          found or it could not be parsed), C(batch_size_schedule) (whether
          C(num_speculative_tokens_per_batch_size) is one of them) and C(reason) (what was
          found, in words).
      returned: when O(release) is given
      type: dict
      sample:
        path: /opt/vllm/releases/0.32.0
        speculative_fields: [method, model, num_speculative_tokens,
                             num_speculative_tokens_per_batch_size, prompt_lookup_max]
        batch_size_schedule: true
        reason: >-
          vllm/config/speculative.py of /opt/vllm/releases/0.32.0 declares
          num_speculative_tokens_per_batch_size
vllm_release:
  description:
    - The same as the fact C(vllm_release).
  returned: when O(release) is given
  type: dict
  sample:
    path: /opt/vllm/releases/0.30.0
    speculative_fields: [method, model, num_speculative_tokens, prompt_lookup_max]
    batch_size_schedule: false
    reason: >-
      vllm/config/speculative.py of /opt/vllm/releases/0.30.0 has no field
      num_speculative_tokens_per_batch_size: this release cannot draft by batch size
advice:
  description:
    - Advisory notes for the configured speculative decoding on this hardware, each with
      C(level) (C(info), C(caution) or C(warning)), C(topic) and C(message).
  returned: always
  type: list
  elements: dict
  sample:
    - level: info
      topic: fp8
      message: "FP8 available natively (CC 9.0, Hopper): FP8 checkpoints run W8A8 FP8 kernels"
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from benchgate.hwfacts import advice_dicts, gather, hardware_advice
    from benchgate.release_features import release_facts
except ImportError:
    HAS_BENCHGATE = False
    BENCHGATE_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_BENCHGATE = True
    BENCHGATE_IMPORT_ERROR = None


ARGUMENT_SPEC = dict(
    speculative=dict(type="dict", default={}),
    tensor_parallel_size=dict(type="int", default=1),
    calibration=dict(type="path"),
    nvidia_smi=dict(type="path"),
    release=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_BENCHGATE:
        module.fail_json(msg=missing_required_lib("benchgate"), exception=BENCHGATE_IMPORT_ERROR)
    params = module.params
    if params["tensor_parallel_size"] < 1:
        module.fail_json(msg="tensor_parallel_size must be 1 or more", changed=False)
    facts = gather(nvidia_smi=params["nvidia_smi"], calibration=params["calibration"])
    notes = hardware_advice(facts, params["speculative"], params["tensor_parallel_size"])
    ansible_facts = {"vllm_hardware": facts}
    result: dict[str, object] = {}
    if params["release"]:
        ansible_facts["vllm_release"] = result["vllm_release"] = release_facts(params["release"])
    module.exit_json(
        changed=False, ansible_facts=ansible_facts, advice=advice_dicts(notes), **result
    )


if __name__ == "__main__":
    main()
