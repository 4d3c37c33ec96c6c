#!/usr/bin/env bash
# Build the systemd base image for the demo host and molecule instances from
# Debian packages (no container registry is needed). The Debian mirror is read
# from this machine's apt sources at run time.
set -euo pipefail
source "$(dirname "$0")/podman-env.sh"

if podman image exists "$BENCHGATE_IMAGE"; then
  echo "image $BENCHGATE_IMAGE already present"
  exit 0
fi

# The first non-security "URIs:" (deb822) or "deb" line of the apt sources.
mirror=$(awk '/^(URIs:|deb )/ && !/security/ {print $2; exit}' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
if [ -z "$mirror" ]; then
  echo "build-image: no Debian mirror found in the apt sources" >&2
  exit 1
fi

echo "building $BENCHGATE_IMAGE from Debian bookworm packages"
mmdebstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,sudo,iproute2,procps,curl,ca-certificates,python3,python3-venv,python3-apt,libnuma1,libgomp1 \
  bookworm - "$mirror" \
  | podman import \
      --change 'CMD ["/lib/systemd/systemd"]' \
      --change 'STOPSIGNAL SIGRTMIN+3' \
      - "$BENCHGATE_IMAGE"
