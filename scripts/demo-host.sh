#!/usr/bin/env bash
# Start (or reuse) a local podman container with systemd as PID 1 that plays a
# GPU-less vLLM host: the embedded demo target, and the molecule instances' twin.
#   scripts/demo-host.sh [NAME]      start NAME (default benchgate-demo)
#   scripts/demo-host.sh --rm [NAME] remove it
set -euo pipefail
source "$(dirname "$0")/podman-env.sh"

if [ "${1:-}" = "--rm" ]; then
  podman rm -f "${2:-benchgate-demo}" >/dev/null 2>&1 || true
  exit 0
fi
name="${1:-benchgate-demo}"
cache="${BENCHGATE_ROOT}/.cache"
mkdir -p "${cache}/models" "${cache}/wheels"

# Running, and answering: a container podman still lists as running after the
# machine was paused can refuse every exec ("cannot exec in a stopped
# container"); it is made again.
if [ "$(podman container inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = "true" ]; then
  if podman exec "$name" true >/dev/null 2>&1; then
    echo "demo host $name is running"
    exit 0
  fi
  echo "demo host $name is listed as running but does not answer: making it again"
fi
podman rm -f "$name" >/dev/null 2>&1 || true
# --cap-add SYS_ADMIN: systemd sets up the per-service namespaces that the
#   unit's hardening asks for (ProtectSystem, PrivateTmp, ...), as on a real host.
# --shm-size: vLLM's engine talks to its API server through /dev/shm (podman's
#   64 MiB default is too small).
# models: read-only, as a model share would be.
# wheels: the wheel share an air-gapped fleet would mount (scripts/bootstrap.sh
#   fills it on the controller with `pip download`).
# The controller's CA bundle: where package traffic passes a TLS-inspecting
#   proxy, the host must trust the same CA (inventory: PIP_CERT).
podman run -d --name "$name" --hostname "$name" --systemd=always --cap-add SYS_ADMIN \
  --shm-size 2g \
  -v "${cache}/models:/srv/models:ro" \
  -v "${cache}/wheels:/srv/wheels:ro" \
  -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/benchgate-controller-ca.crt:ro \
  "$BENCHGATE_IMAGE" >/dev/null
for _ in $(seq 1 60); do
  state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
  case "$state" in running|degraded) echo "demo host $name: systemd $state"; exit 0 ;; esac
  sleep 1
done
echo "demo host $name: systemd did not come up (state: ${state:-unknown})" >&2
exit 1
