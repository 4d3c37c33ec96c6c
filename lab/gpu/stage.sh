#!/usr/bin/env bash
# Here (any x86-64 or arm64 box with pip and network): stage what the H200 device
# machine needs to serve CUDA vLLM, as parts small enough to carry (<= 64 MiB a
# call with the working tree).
#
#   lab/gpu/stage.sh            # releases 0.26.0 (new) and 0.24.0 (old)
#   RELEASES="0.26.0 0.25.0" lab/gpu/stage.sh
#
# Output, all under .cache/gpu/ (git-ignored):
#   dl/vllm-<v>-*.whl               the wheels as downloaded (pip download --no-deps)
#   slim/vllm-<v>.zip               the wheel minus what a dense bf16 model on Hopper
#                                   never loads: the FlashAttention-2 kernels (FA3 serves
#                                   on SM90), the Rust frontend binary (only with
#                                   VLLM_USE_RUST_FRONTEND=1), DeepGEMM (fp8) and the
#                                   SM100 FMHA sources
#   deps/*.whl                      serving dependencies the device image lacks
#   bundle-<i>.tar                  bundle 0 = deps + first release, bundle i = release i
#   p<i>-<j>/b<i>.part<j>           one carry folder per part (PART_MIB each, default 60)
# and prints the carry lists for lab/gpu/README.md's calls.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
G=.cache/gpu
RELEASES=${RELEASES:-"0.26.0 0.24.0"}
PART_MIB=${PART_MIB:-60}
PY=${PYTHON:-python3}
mkdir -p "$G/dl" "$G/slim"
for v in $RELEASES; do
  if ! ls "$G"/dl/vllm-"$v"-*.whl >/dev/null 2>&1; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      -d "$G/dl" "vllm==$v"
  fi
  if [ ! -f "$G/slim/vllm-$v.zip" ]; then
    cp "$G"/dl/vllm-"$v"-*.whl "$G/slim/vllm-$v.zip.tmp"
    zip -q -d "$G/slim/vllm-$v.zip.tmp" 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' \
      'vllm/vllm-rs' 'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*' || true
    mv "$G/slim/vllm-$v.zip.tmp" "$G/slim/vllm-$v.zip"
  fi
done
[ -n "$(ls "$G"/deps/*.whl 2>/dev/null)" ] || "$PY" lab/gpu/resolve_deps.py "$G/deps"
rm -rf "$G"/p[0-9]-* "$G"/bundle-*.tar
i=0
for v in $RELEASES; do
  if [ $i = 0 ]; then
    tar -cf "$G/bundle-$i.tar" -C "$G" deps "slim/vllm-$v.zip"
  else
    tar -cf "$G/bundle-$i.tar" -C "$G" "slim/vllm-$v.zip"
  fi
  split -b "${PART_MIB}m" -d -a 2 "$G/bundle-$i.tar" "$G/b$i.part"
  for part in "$G"/b$i.part*; do
    j=${part##*.part}
    mkdir -p "$G/p$i-$j" && mv "$part" "$G/p$i-$j/"
  done
  sha256sum "$G/bundle-$i.tar" | cut -c1-16 > "$G/bundle-$i.sha"
  cp "$G/bundle-$i.sha" "$G/p$i-00/"
  echo "bundle $i (vllm $v): $(du -m "$G/bundle-$i.tar" | cut -f1) MB, sha256 $(cat "$G/bundle-$i.sha"), parts:"
  for d in "$G"/p$i-*; do echo "  carry: $d"; done
  rm -f "$G/bundle-$i.tar"
  i=$((i + 1))
done
