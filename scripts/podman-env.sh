# shellcheck shell=bash
# Sourced by the demo and test scripts: podman settings this kind of VM needs
# (runc, not crun; explicit ulimits because root cannot raise them here).
BENCHGATE_ROOT="${BENCHGATE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export CONTAINERS_CONF="${BENCHGATE_ROOT}/scripts/containers.conf"
export BENCHGATE_IMAGE="${BENCHGATE_IMAGE:-localhost/benchgate-systemd:bookworm}"
