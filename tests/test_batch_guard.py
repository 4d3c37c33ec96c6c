"""The rolling play's batch guard (roles/benchgate/tasks/batch_guard.yml).

Real ansible-playbook runs, serial like playbooks/upgrade.yml's upgrade play,
in which the canary is lost: its connection is refused (UNREACHABLE) after its
turn began. Ansible itself starts the next batch anyway (a host both
unreachable and failed by any_errors_fatal is counted twice,
ansible/ansible#56265); the guard stops it before any of its hosts is touched,
names the lost host in the summary and records it in the ledger.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchgate import ledger

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = shutil.which(
    "ansible-playbook", path=str(Path(sys.executable).parent)
) or shutil.which("ansible-playbook")
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")

INVENTORY = """\
vllm_hosts:
  hosts:
    canary:
      # Nothing listens on port 1: the first task that connects is UNREACHABLE.
      ansible_connection: ssh
      ansible_host: 127.0.0.1
      ansible_port: 1
    second: {ansible_connection: local, ansible_python_interpreter: "{{ ansible_playbook_python }}"}
    third: {ansible_connection: local, ansible_python_interpreter: "{{ ansible_playbook_python }}"}
"""

PLAY = """\
- name: Upgrade, canary first, then in batches
  hosts: vllm_hosts
  gather_facts: false
  serial: [1, 1]
  any_errors_fatal: true
  max_fail_percentage: 0
  tasks:
{guard}
    - name: Change the host
      ansible.builtin.copy:
        content: "changed\\n"
        dest: "{out}/touched-{{{{ inventory_hostname }}}}"
        mode: "0600"

    - name: Mark this host's turn done
      ansible.builtin.set_fact:
        __benchgate_batch_state: done
"""

GUARD = """\
    - name: Stop before this batch if a host of an earlier batch was lost, failed or blocked
      ansible.builtin.include_role:
        name: benchgate
        tasks_from: batch_guard.yml
        public: true
"""


def _run(tmp_path: Path, guard: bool) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK is not None
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(guard=GUARD if guard else "", out=tmp_path))
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        BENCHGATE_LOCK_FILE=str(tmp_path / "rollout.lock"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_SSH_RETRIES="0",
    )
    argv = [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(play)]
    argv += ["-e", "vllm_version=0.32.0", "-e", f"benchgate_ledger={tmp_path / 'ledger.sqlite'}"]
    argv += ["-e", "benchgate_run_id=run-1"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_without_the_guard_ansible_starts_the_next_batch_after_a_lost_host(tmp_path: Path) -> None:
    """Why the guard exists: with the pinned ansible-core, the batch after a
    lost canary runs (if this fails, Ansible fixed #56265; keep the guard)."""
    done = _run(tmp_path, guard=False)
    out = done.stdout + done.stderr
    assert "UNREACHABLE" in out, out
    assert (tmp_path / "touched-second").exists(), out


def test_the_guard_stops_the_next_batch_untouched_and_names_the_lost_host(tmp_path: Path) -> None:
    done = _run(tmp_path, guard=True)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "UNREACHABLE" in out, out
    # The next batch failed at the guard: not one of its hosts was changed.
    assert not (tmp_path / "touched-second").exists(), out
    assert not (tmp_path / "touched-third").exists(), out
    assert "STOPPED before second: canary lost" in out, out
    assert "third" not in out.split("PLAY RECAP")[0], out  # the third batch never started
    # The summary names the canary LOST, with the task it was lost in.
    summary = out.split("BENCHGATE SUMMARY")[1]
    assert "canary" in summary and "LOST" in summary, summary
    assert 'unreachable during "Change the host"' in summary, summary
    # The ledger keeps it.
    [event] = ledger.host_events(tmp_path / "ledger.sqlite")
    assert (event["host"], event["event"], event["run_name"], event["release"]) == (
        "canary",
        "lost",
        "run-1",
        "0.32.0",
    )
    assert "the rollout stopped before second" in event["reason"]
