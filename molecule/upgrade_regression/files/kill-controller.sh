#!/usr/bin/env bash
# Fault injection, run on the controller by faults.yml: a controller killed
# mid-rollout.
#   kill-controller.sh INSTANCE TIMEOUT CONDITION LOG -- COMMAND [ARG...]
# Starts COMMAND (ansible-playbook ...) in its own process group with its
# output in LOG, polls CONDITION (a bash snippet run on the instance) every
# second, and once it holds sends SIGKILL to the whole group: ansible-playbook,
# its workers and their podman exec clients die at once, as with a lost
# controller. Fails when COMMAND ends first or TIMEOUT passes.
set -uo pipefail
instance=$1
timeout=$2
condition=$3
log=$4
shift 4
[[ ${1:-} == -- ]] && shift

# Not a process group leader here (no job control), so setsid does not fork:
# $! is the new group's id.
setsid "$@" >"$log" 2>&1 &
group=$!
deadline=$((SECONDS + timeout))
while ((SECONDS < deadline)); do
  if ! kill -0 "$group" 2>/dev/null; then
    echo "the command ended before the condition held: $condition" >&2
    exit 1
  fi
  if podman exec "$instance" bash -c "$condition" >/dev/null 2>&1; then
    kill -KILL -- "-$group"
    wait "$group" 2>/dev/null
    echo "SIGKILL sent to the controller's process group $group at $(date -u +%FT%TZ) once: $condition"
    exit 0
  fi
  sleep 1
done
kill -KILL -- "-$group"
echo "the condition did not hold within ${timeout}s: $condition" >&2
exit 1
