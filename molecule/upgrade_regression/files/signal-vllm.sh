#!/usr/bin/env bash
# Fault injection, run ON the molecule instance by faults.yml:
#   podman exec -i <instance> bash -s -- SIGNAL RELEASE_DIR [TIMEOUT [DELAY]] < signal-vllm.sh
# Waits until a new server process (not the one serving when this started),
# running from RELEASE_DIR, is being benchmarked (the benchmark client's Python
# runs and requests are in flight on the port), lets the benchmark run DELAY
# seconds (short: the candidate's benchmark lasts seconds), then sends SIGNAL
# to every process of the unit: KILL for a server that dies, STOP for one that
# hangs. Prints what it did; fails after TIMEOUT seconds.
set -euo pipefail
signal=$1
release=$2
timeout=${3:-600}
delay=${4:-0.5}
unit=${5:-vllm.service}
port=${6:-8000}
client='^/opt/benchgate/client/bin/python'

first_pid=$(systemctl show -p MainPID --value "$unit")
deadline=$((SECONDS + timeout))
while ((SECONDS < deadline)); do
  pid=$(systemctl show -p MainPID --value "$unit")
  if [[ $pid != 0 && $pid != "$first_pid" ]] \
    && grep -q "$release/" "/proc/$pid/maps" 2>/dev/null \
    && pgrep -f "$client" >/dev/null \
    && (($(ss -Htn state established "( sport = :$port )" | wc -l) > 0)); then
    sleep "$delay"
    inflight=$(ss -Htn state established "( sport = :$port )" | wc -l)
    systemctl kill --signal="$signal" "$unit"
    echo "SIG$signal sent to $unit (MainPID $pid, from $release) at $(date -u +%FT%TZ)" \
      "with $inflight requests in flight"
    exit 0
  fi
  sleep 0.5
done
echo "no benchmark of a new server from $release within ${timeout}s (MainPID $first_pid)" >&2
exit 1
