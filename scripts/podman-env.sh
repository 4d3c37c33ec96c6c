# shellcheck shell=bash
# Sourced by the demo and test scripts.
BENCHGATE_ROOT="${BENCHGATE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export BENCHGATE_IMAGE="${BENCHGATE_IMAGE:-localhost/benchgate-systemd:bookworm}"
