#!/usr/bin/env bash
# What a task on a molecule instance costs through containers.podman's
# connection and through tests/ansible_plugins/connection/podman.py (the same
# with pipelining): 20 small tasks (10 command, 10 stat) on one systemd
# container from the benchgate-systemd image, timed with each connection.
#   lab/experiments/connection_cost.sh      (after scripts/test.sh built the image)
# 2026-12-07, 2-core reference machine: 22.5 s and 9.4 s (the first try, by
# hand), then 18.7 s and 7.3 s (this script, the demo host idle beside it).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
name=benchgate-connection-cost
trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
podman run -d --name "$name" --cap-add SYS_ADMIN localhost/benchgate-systemd:bookworm /lib/systemd/systemd >/dev/null
sleep 3
cat > "$work/play.yml" <<'PLAY'
- name: Twenty small tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Run a command
      ansible.builtin.command: "true"
      loop: "{{ range(10) | list }}"
      changed_when: false
    - name: Stat a folder
      ansible.builtin.stat: {path: /etc}
      loop: "{{ range(10) | list }}"
PLAY
export ANSIBLE_PIPELINING=true
for connection in containers.podman.podman podman; do
  start=$(date +%s%N)
  ANSIBLE_CONNECTION_PLUGINS=$PWD/tests/ansible_plugins/connection \
    .venv/bin/ansible-playbook -i "$name," -e ansible_connection=$connection \
      -e ansible_python_interpreter=/usr/bin/python3 "$work/play.yml" >/dev/null
  echo "$connection: $(( ($(date +%s%N) - start) / 1000000 )) ms for 20 tasks"
done
