#!/usr/bin/python
# Copyright: benchgate contributors
# Apache License 2.0 (see pyproject.toml)

# Ansible reads DOCUMENTATION before the imports (validate-modules wants it so).
# ruff: noqa: E402

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchgate_host_event
short_description: Record in the ledger what happened to a host apart from a verdict
description:
  - Writes one row to the ledger's C(host_events) table, for example a host lost
    (unreachable, or failed before its verdict) during a rolling upgrade, so that
    the ledger names it beside the verdicts of the other hosts.
  - Runs on the controller (C(delegate_to=localhost)) with the Python of the
    controller virtualenv where the C(benchgate) package is installed.
version_added: "0.5.0"
author:
  - benchgate contributors
requirements:
  - benchgate (Python package)
attributes:
  check_mode:
    support: full
    description:
      - In check mode nothing is written.
  diff_mode:
    support: none
options:
  ledger:
    description: Path of the SQLite ledger on the controller.
    type: path
    required: true
  host:
    description: The host the event is about.
    type: str
    required: true
  event:
    description: What happened.
    type: str
    choices: [lost]
    required: true
  reason:
    description: One line that says what happened and what was kept.
    type: str
    required: true
  run_name:
    description: The rollout's name (C(benchgate_run_id)).
    type: str
  release:
    description: The release the rollout was upgrading to.
    type: str
"""

EXAMPLES = r"""
- name: Record the host lost during the rollout
  benchgate_host_event:
    ledger: "{{ benchgate_ledger }}"
    host: vllm-1
    event: lost
    reason: "lost: it stopped answering before its verdict; the rollout stopped"
    run_name: "{{ benchgate_run_id }}"
    release: "{{ vllm_version }}"
  delegate_to: localhost
  become: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""

RETURN = r"""
id:
  description: The row's id in C(host_events); null in check mode.
  returned: always
  type: int
  sample: 3
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from benchgate import ledger as bg_ledger
except ImportError:
    HAS_BENCHGATE = False
    BENCHGATE_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_BENCHGATE = True
    BENCHGATE_IMPORT_ERROR = None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ledger": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "event": {"type": "str", "choices": ["lost"], "required": True},
            "reason": {"type": "str", "required": True},
            "run_name": {"type": "str"},
            "release": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if not HAS_BENCHGATE:
        module.fail_json(msg=missing_required_lib("benchgate"), exception=BENCHGATE_IMPORT_ERROR)
    if module.check_mode:
        module.exit_json(changed=False, id=None)
    p = module.params
    try:
        row = bg_ledger.record_host_event(
            p["ledger"],
            host=p["host"],
            event=p["event"],
            reason=p["reason"],
            run_name=p["run_name"],
            release=p["release"],
        )
    except (bg_ledger.LedgerError, ValueError) as exc:
        module.fail_json(msg=f"could not record the host event in {p['ledger']}: {exc}")
    module.exit_json(changed=True, id=row)


if __name__ == "__main__":
    main()
