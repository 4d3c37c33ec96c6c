#!/usr/bin/env bash
# There (the H200 device machine), run from the repository root by the `run` tool.
# Steps, one or more per call (lab/gpu/README.md lists the calls):
#   recv                    copy the carried parts (.cache/gpu/p*/) to $BG/parts
#   install I VERSION       join bundle I, install its wheels into $BG (sha256 checked)
#   models                  write the random-weight Qwen3-shaped model folders
#   calibrate               benchgate.calibrate: 14B target with 4B and 0.6B drafts
#   launch B | measure B [--stop] [--then-launch N] [--max-repeats R]   (experiment.py)
#   collect                 tar results + log tails into $OUT
set -u
BG=${BG:-/tmp/bg}
export BG
mkdir -p "$BG/parts" "$BG/results" "$BG/logs"
PIPI="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check"
while [ $# -gt 0 ]; do
  step=$1; shift
  case $step in
    recv)
      for d in .cache/gpu/p*; do [ -d "$d" ] && cp "$d"/* "$BG/parts/"; done
      ls -la "$BG/parts" ;;
    install)
      i=$1 v=$2; shift 2
      cat "$BG"/parts/b"$i".part* > "$BG/bundle-$i.tar"
      echo "bundle $i sha256 $(sha256sum "$BG/bundle-$i.tar" | cut -c1-16) (want $(cat "$BG/parts/bundle-$i.sha" 2>/dev/null || echo '?'))"
      tar -xf "$BG/bundle-$i.tar" -C "$BG" && rm -f "$BG/bundle-$i.tar" "$BG"/parts/b"$i".part*
      if [ -d "$BG/deps" ] && [ ! -f "$BG/deps/.done" ]; then
        $PIPI --target "$BG/deps.site" "$BG"/deps/*.whl 2>&1 | tail -3
        mv "$BG/deps" "$BG/deps.wheels" && mv "$BG/deps.site" "$BG/deps" && touch "$BG/deps/.done"
      fi
      mkdir -p "$BG/vllm-$v/bin"
      if command -v unzip >/dev/null; then unzip -q -o "$BG/slim/vllm-$v.zip" -d "$BG/vllm-$v"
      else python3 -m zipfile -e "$BG/slim/vllm-$v.zip" "$BG/vllm-$v"; fi && rm -f "$BG/slim/vllm-$v.zip"
      printf '#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n' > "$BG/vllm-$v/bin/vllm"
      chmod +x "$BG/vllm-$v/bin/vllm"
      PYTHONPATH="$BG/vllm-$v:$BG/deps" python3 -c "import vllm, vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__, 'imports')" 2>&1 | tail -3 ;;
    models)
      PYTHONPATH=src python3 lab/gpu/make_models.py "$BG/models" ;;
    calibrate)
      for d in ${CAL_DRAFTS:-qwen3-4b qwen3-0.6b}; do
        PYTHONPATH=src python3 -m benchgate.calibrate --target qwen3-14b --draft $d --tp 1 \
          --max-n 8 --reps 20 --bandwidth-mib 2048 --output "$BG/results/calibration-14b-$d.json" >/dev/null
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); m=r['models']; print(sys.argv[2], 'c =', round(r['draft_cost_ratio']['1'],3), 'T1 ms', {k: round(v['tp']['1']['step_s']['1']*1e3,3) for k,v in m.items()}, 'v(n)', [round(x,3) for x in m['qwen3-14b']['tp']['1']['verify_curve'].values()])" "$BG/results/calibration-14b-$d.json" $d
      done ;;
    launch)
      PYTHONPATH=src python3 lab/gpu/experiment.py launch "$1"; shift ;;
    measure)
      b=$1; shift; extra=()
      while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
        case $1 in
          --then-launch|--max-repeats|--ready-limit) extra+=("$1" "$2"); shift 2 ;;
          *) extra+=("$1"); shift ;;
        esac
      done
      PYTHONPATH=src python3 lab/gpu/experiment.py measure "$b" "${extra[@]}" ;;
    collect)
      for f in "$BG"/logs/*.log; do
        n=$(basename "$f" .log)
        grep -E "Error|error|Traceback|KV cache|Available|graph|init engine|took|Loading|model weights|Maximum concurrency|speculative|Speculative|version" "$f" | tail -40 > "$BG/results/$n.logtail.txt"
      done
      nvidia-smi > "$BG/results/nvidia-smi.txt" 2>&1
      tar -czf "$OUT/results-$(date +%H%M%S).tgz" -C "$BG" results ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
