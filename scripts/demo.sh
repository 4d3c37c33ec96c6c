#!/usr/bin/env bash
# The quick start's first command: set this machine up, start the demo host (a
# systemd container), serve vLLM 0.31.0 on it, then run the main job,
# playbooks/upgrade.yml, to 0.32.0: baseline, install beside, switch, measure,
# judge, keep or roll back.
#   scripts/demo.sh                  the upgrade (passes when 0.32.0 is not slower)
#   scripts/demo.sh --slow-candidate the same upgrade with a candidate that is
#                                    starved (one sequence at a time): blocked,
#                                    rolled back, exits non-zero
set -euo pipefail
cd "$(dirname "$0")/.."
from_version=${BENCHGATE_DEMO_FROM:-0.31.0}
extra=()
if [ "${1:-}" = "--slow-candidate" ]; then
  extra=(-e @inventory/demo/slow-candidate.yml)
fi

scripts/bootstrap.sh
source .venv/bin/activate
scripts/demo-host.sh

printf '\n=== Serve vLLM %s on the demo host (deploy.yml)\n' "$from_version"
ansible-playbook playbooks/deploy.yml -e "vllm_version=${from_version}"

printf '\n=== Upgrade with the benchmark gate (upgrade.yml)\n'
ansible-playbook playbooks/upgrade.yml "${extra[@]}"
