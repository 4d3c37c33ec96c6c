#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Ansible reads DOCUMENTATION before the imports (validate-modules wants it so).
# ruff: noqa: E402

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchgate_speculative_ab
short_description: Choose between plain and speculative decoding from measured arms
description:
  - Takes the benchmark results of the arms of a speculative decoding A/B on one
    host and release (C(off) plus each speculative configuration) and returns the
    arm that should serve, with the figures of every arm (tokens/s, TTFT, TPOT,
    acceptance rate, mean acceptance length, per-position acceptance).
  - A speculative arm wins only when the one-sided lower bound of its
    Hodges-Lehmann gain over C(off) on O(objective) exceeds O(min_gain_pct);
    among such arms the largest estimated gain wins. Otherwise C(off) serves. The
    rule is in the docstring of C(benchgate.ab).
  - An arm that could not start or be measured is listed with its error and never
    wins.
  - When O(ledger) is given, every arm's result and the choice are recorded in the
    SQLite ledger; only then does the task report a change.
  - Runs on the controller (C(delegate_to=localhost)) with the Python of the
    controller virtualenv where the C(benchgate) package is installed.
version_added: "0.2.0"
author:
  - benchgate contributors
requirements:
  - benchgate[controller] (Python package, with scipy)
attributes:
  check_mode:
    support: full
    description:
      - In check mode the choice is computed but nothing is written to the ledger.
  diff_mode:
    support: none
options:
  arms:
    description:
      - The arms, in the order they were measured. Each has a O(arms[].name) and a
        O(arms[].config) (the speculative settings; empty for plain decoding).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The arm's label, for example C(off) or C(ngram-k3).
        type: str
        required: true
      config:
        description: The speculative settings the arm served with (C({}) = off).
        type: dict
        default: {}
  results:
    description:
      - Benchmark result per arm name (a dict, as registered from the benchmark
        module, or the path of a result JSON file on the controller). An arm
        without a result is treated as failed.
      - A list of results for one arm is merged into one (its trials joined, every
        stage any of them measured kept).
    type: dict
    required: true
  extra_results:
    description:
      - More measurements of an arm, per arm name, each a list of results merged into its
        result in O(results) (its trials joined, every stage any of them measured kept), for
        example off measured again at a composed arm's threshold stage.
    type: dict
    default: {}
  starts:
    description:
      - Later server starts of off and the winner, one dict per start (the second start
        first), each with a result per arm name as in O(results). Each is judged alone by
        the same rule between off and the winner. The winner is kept when every start
        chooses it again; when one does not, every start's estimate is pooled (one sample a
        start, Student's t over starts) and the winner is kept only when the rule holds on
        the pooled interval, else plain decoding serves and the result says the arm was not
        decided across starts. Each start's results go to the ledger as phases
        C(arm:<name>#<start>).
    type: list
    elements: dict
    default: []
  starts_seconds:
    description:
      - What each later start cost on this host, in seconds (restarts and measurements),
        by start number (C("2")). Shown on each start's line, and their sum at the end of
        the reason (so in the ledger and the report).
    type: dict
    default: {}
  errors:
    description:
      - Why an arm could not be measured, per arm name (for example the start-up
        error of the server).
    type: dict
    default: {}
  objective:
    description:
      - The metric that decides, higher is better.
    type: str
    choices: [output_tokens_per_s, request_throughput, goodput]
    default: output_tokens_per_s
  min_gain_pct:
    description:
      - How much faster than C(off) a speculative arm must be proven to be
        (its lower confidence bound), in percent.
    type: float
    default: 0.0
  alpha:
    description: One minus the level of each one-sided confidence bound.
    type: float
    default: 0.05
  min_trials:
    description: Valid trials an arm needs to be considered.
    type: int
    default: 3
  rule:
    description:
      - Only for a staged workload (several load points, C(benchgate.stages)) - which stage
        picks the arm. C(never_slower) (the default) takes an arm only when it is proven
        faster than plain decoding at one stage at least and proven no more than
        O(max_loss_pct) slower at every stage; C(stage:NAME) lets that stage alone decide.
        The rule is in the docstring of C(benchgate.ab).
    type: str
    default: never_slower
  max_loss_pct:
    description:
      - With O(rule=never_slower), the largest loss against plain decoding tolerated at
        any stage, in percent.
    type: float
    default: 5.0
  ledger:
    description: Path of the SQLite ledger on the controller; nothing is recorded when unset.
    type: path
  host:
    description: The host the arms ran on (required with O(ledger)).
    type: str
  release:
    description: The vLLM release the arms ran on.
    type: str
"""

EXAMPLES = r"""
- name: Choose what serves on the new release
  benchgate_speculative_ab:
    arms:
      - {name: "off", config: {}}
      - {name: ngram-k3, config: {method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3}}
    # The result of each arm's benchmark, by arm name (roles/benchgate/tasks/speculative_arm.yml).
    results: "{{ __benchgate_arm_results }}"
    objective: "{{ benchgate_speculative_objective | default('output_tokens_per_s') }}"
    ledger: "{{ benchgate_ledger | default(playbook_dir ~ '/../artifacts/ledger.sqlite') }}"
    host: "{{ inventory_hostname }}"
    release: "{{ vllm_version }}"
  delegate_to: localhost
  become: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  register: __benchgate_ab

- name: Serve the winner
  ansible.builtin.include_role:
    name: vllm_service
  vars:
    vllm_service_speculative_override: "{{ __benchgate_ab.config }}"
"""

RETURN = r"""
winner:
  description: Name of the arm that should serve; null when no arm could be measured.
  returned: always
  type: str
  sample: "off"
config:
  description: The winner's speculative settings (C({}) = plain decoding).
  returned: always
  type: dict
reason:
  description: Why this arm, in one sentence.
  returned: always
  type: str
arms:
  description:
    - Per arm its figures and outcome (C(winner), C(reference), C(slower),
      C(not proven faster), C(beaten), C(failed)).
  returned: always
  type: list
  elements: dict
starts:
  description:
    - The later server starts that checked a speculative winner (O(starts)), each with
      C(start), C(arm), the C(winner) that start alone chose, its C(reason), the arm's
      C(gains) against off per stage in % and whether it C(held). Empty when off was chosen
      from the first start or no later start was given.
  returned: always
  type: list
  elements: dict
  sample: [{start: 2, arm: ngram-k3, winner: ngram-k3, held: true,
            gains: {single: 14.8, busy: 1.2}, reason: "..."}]
pooled:
  description:
    - When a later start did not choose the winner, the winner's change against off pooled
      over every start, per stage (C(gains) per start, C(mean_pct), C(lo_pct) and C(hi_pct)
      at C(alpha) one-sided), whether it was C(kept) and C(why). Null otherwise.
  returned: always
  type: dict
by_load:
  description:
    - Only for a staged workload. Arms proven faster than off at every low-load stage and
      proven slower above them, each with the setting that drafts only at that load
      (C(config) for C(--speculative-config), vLLM's C(num_speculative_tokens_per_batch_size);
      C(flags_config) for the per-flag CLI, C(disable_by_batch_size)), to measure as an arm.
      The table says the same in a C(by load:) line.
    - C(name) is the composed arm's name (C(<arm>-upto<up_to>)); C(threshold) the workload
      stage that measures the first batch size without drafting (C(up_to + 1) requests),
      or C(null) when a stage of the workload already does. Listed again as an arm (its
      config holds the schedule and another arm's config is that config without it), the
      composed arm is compared with off at every stage and at that threshold stage, and
      with the arm it came from; it is chosen only when it is nowhere slower than off and
      faster than that arm at some stage.
  returned: always
  type: list
  elements: dict
  sample: [{arm: ngram-k3, up_to: 1, helps_at: [single], hurts_at: [busy],
            config: {method: ngram, num_speculative_tokens: 3,
                     num_speculative_tokens_per_batch_size: [[1, 1, 3], [2, 2, 0]]},
            flags_config: {method: ngram, num_speculative_tokens: 3, disable_by_batch_size: 1},
            name: ngram-k3-upto1, threshold: {name: threshold, concurrency: 2}}]
table:
  description: The per-arm table as plain text.
  returned: always
  type: str
ledger_ids:
  description: Row ids written to the ledger.
  returned: when O(ledger) is set and not in check mode
  type: dict
  sample: {runs: {"off": 21, ngram-k3: 22}, choice_id: 4}
"""

import json
import os
import sqlite3
import traceback
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

BENCHGATE_IMPORT_ERROR = None
try:
    from benchgate import ab as bg_ab
    from benchgate import ledger as bg_ledger
    from benchgate import stages as bg_stages
except ImportError:
    BENCHGATE_IMPORT_ERROR = traceback.format_exc()

SCIPY_IMPORT_ERROR = None
try:
    import scipy  # noqa: F401  (the shift bounds)
except ImportError:
    SCIPY_IMPORT_ERROR = traceback.format_exc()


ARGUMENT_SPEC: dict[str, Any] = {
    "arms": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "name": {"type": "str", "required": True},
            "config": {"type": "dict", "default": {}},
        },
    },
    "results": {"type": "dict", "required": True},
    "extra_results": {"type": "dict", "default": {}},
    "starts": {"type": "list", "elements": "dict", "default": []},
    "starts_seconds": {"type": "dict", "default": {}},
    "errors": {"type": "dict", "default": {}},
    "objective": {
        "type": "str",
        "choices": ["output_tokens_per_s", "request_throughput", "goodput"],
        "default": "output_tokens_per_s",
    },
    "min_gain_pct": {"type": "float", "default": 0.0},
    "alpha": {"type": "float", "default": 0.05},
    "min_trials": {"type": "int", "default": 3},
    "rule": {"type": "str", "default": "never_slower"},
    "max_loss_pct": {"type": "float", "default": 5.0},
    "ledger": {"type": "path"},
    "host": {"type": "str"},
    "release": {"type": "str"},
}


def _load(value: Any, name: str) -> dict[str, Any] | None:
    if isinstance(value, list):
        parts = [p for p in (_load(v, name) for v in value) if p]
        return bg_stages.merge_staged(parts) if parts else None
    if value in (None, "", {}):
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        path = os.path.expanduser(value.strip())
        if not os.path.isfile(path):
            raise ValueError(f"results[{name}]: no such result file on the controller: {path}")
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
        if isinstance(loaded, dict):
            return loaded
    raise ValueError(f"results[{name}] must be a result dict or the path of a result JSON file")


def run(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    arms = [bg_ab.Arm(str(a["name"]), dict(a["config"] or {})) for a in params["arms"]]
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique, got {names}")
    unknown = sorted(set(params["results"]) - set(names))
    if unknown:
        raise ValueError(f"results for arms that are not listed: {', '.join(unknown)}")
    results = {name: _load(value, name) for name, value in params["results"].items()}
    for name, more in (params["extra_results"] or {}).items():
        if name not in names:
            raise ValueError(f"extra_results for an arm that is not listed: {name}")
        parts = [results.get(name), *(more if isinstance(more, list) else [more])]
        results[name] = _load([p for p in parts if p], name)
    errors = {str(k): str(v) for k, v in (params["errors"] or {}).items()}
    # The rule's settings, the same for the first start and every later one.
    rule = {
        key: params[key]
        for key in ("objective", "min_gain_pct", "alpha", "min_trials", "rule", "max_loss_pct")
    }
    # choose_any: arm by arm at every stage of a staged workload, else as before.
    choice = bg_ab.choose_any(arms, results, errors, **rule)
    starts = [
        {name: _load(value, f"{name}#{number}") for name, value in start.items()}
        for number, start in enumerate(params["starts"] or [], start=2)
    ]
    bg_ab.confirm_across_starts(choice, arms, starts, **rule)
    bg_ab.note_start_seconds(choice, params["starts_seconds"] or {})
    out = choice.to_dict()
    result: dict[str, Any] = {
        "changed": False,
        "winner": out["winner"],
        "config": out["config"],
        "reason": out["reason"],
        "arms": out["arms"],
        "by_load": out.get("by_load", []),
        "starts": out.get("starts", []),
        "pooled": out.get("pooled"),
        "table": (
            bg_ab.render_staged_table(choice)
            if isinstance(choice, bg_ab.StagedChoice)
            else bg_ab.render_table(choice)
        ),
    }
    if params["ledger"] and not check_mode:
        run_ids = {}
        for arm in arms:
            measured = results.get(arm.name)
            if measured:
                run_ids[arm.name] = bg_ledger.record_result(
                    params["ledger"],
                    measured,
                    host=params["host"],
                    phase=f"arm:{arm.name}",
                    release=params["release"],
                    speculative=arm.config,
                )
        for number, start in enumerate(starts, start=2):
            for name, measured in start.items():
                if measured:
                    run_ids[f"{name}#{number}"] = bg_ledger.record_result(
                        params["ledger"],
                        measured,
                        host=params["host"],
                        phase=f"arm:{name}#{number}",
                        release=params["release"],
                        speculative=next((a.config for a in arms if a.name == name), {}),
                    )
        choice_id = bg_ledger.record_ab_choice(
            params["ledger"], out, host=params["host"], release=params["release"]
        )
        result["changed"] = True
        result["ledger_ids"] = {"runs": run_ids, "choice_id": choice_id}
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
        result = run(module.params, module.check_mode)
    except (ValueError, OSError, RuntimeError, sqlite3.Error) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
