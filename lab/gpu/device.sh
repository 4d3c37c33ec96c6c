#!/usr/bin/env bash
# There (the H200 device machine), run from the repository root by the `run` tool.
# Steps, one or more per call (lab/gpu/README.md lists the calls):
#   recv                    copy the carried parts (.cache/gpu/p*/) to $BG/parts
#   install I VERSION       join bundle I, install its wheels into $BG (sha256 checked)
#   models                  write the random-weight Qwen3-shaped model folders
#   calibrate               benchgate.calibrate: 14B target with 4B and 0.6B drafts
#   launch B | measure B [--stop] [--then-launch N] [--max-repeats R]   (experiment.py)
#   collect                 tar results + log tails into $OUT
#   pyspy                   unpack the carried py-spy wheel (.cache/gpu/tools) to $BG/pyspy
#   facts                   host CPU model, cores, steal, GPU clocks into results/spread/host.txt
#   spread ARGS             copy the tree (not .cache) to $BG/repo, start spread.py ARGS detached
#   ansible                 ansible-core from the carried wheels (.cache/gpu/tools/ansible) into $BG/ansible
#   roles TAGS              lab/gpu/roles.yml: the vllm_install role, vllm_facts, and (bench)
#                           vllm_benchmark + benchgate_gate on experiment.py's batch 51
#   watch S                 up to S seconds: print spread.py's log, tar results/spread to $OUT
#                           every 20 s (spread.tgz); returns early once spread.py wrote DONE
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
      else python3 -m zipfile -e "$BG/slim/vllm-$v.zip" "$BG/vllm-$v"; fi
      # the slimmed wheel again, for the vllm_install role (roles.yml): a wheel by name
      mkdir -p "$BG/wheelhouse" && mv "$BG/slim/vllm-$v.zip" "$BG/wheelhouse/vllm-$v-cp38-abi3-manylinux_2_28_x86_64.whl"
      cp -n "$BG"/deps.wheels/*.whl "$BG/wheelhouse/" 2>/dev/null
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
    stop)
      PYTHONPATH=src python3 lab/gpu/experiment.py stop "$1"; shift ;;
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
    pyspy)
      mkdir -p "$BG/pyspy.whl" "$BG/pyspy"
      python3 -m zipfile -e .cache/gpu/tools/py_spy-*.whl "$BG/pyspy.whl"
      cp "$(find "$BG/pyspy.whl" -type f -name py-spy | head -1)" "$BG/pyspy/py-spy"
      chmod +x "$BG/pyspy/py-spy" && "$BG/pyspy/py-spy" --version ;;
    facts)
      mkdir -p "$BG/results/spread"
      { date -u; uname -a; nproc; lscpu; grep -m1 "model name" /proc/cpuinfo
        grep "cpu MHz" /proc/cpuinfo | sort | uniq -c; head -1 /proc/stat
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,persistence_mode --format=csv
        nvidia-smi -q -d PERFORMANCE,CLOCK | head -60
        python3 -c "import torch; print('torch', torch.__version__)"; } > "$BG/results/spread/host.txt" 2>&1
      grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)|Hypervisor" "$BG/results/spread/host.txt"
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv ;;
    spread)
      rm -rf "$BG/repo" && mkdir -p "$BG/repo" && tar --exclude=./.cache -cf - . | tar -xf - -C "$BG/repo"
      (cd "$BG/repo" && PYTHONPATH=src setsid nohup python3 lab/gpu/spread.py "$@" > "$BG/spread.log" 2>&1 < /dev/null &)
      shift $#; sleep 2; cat "$BG/spread.log" ;;
    watch)
      t_end=$(( $(date +%s) + $1 )); shift; seen=0
      while :; do
        n=$(wc -l < "$BG/spread.log"); [ "$n" -gt "$seen" ] && sed -n "$((seen + 1)),${n}p" "$BG/spread.log" && seen=$n
        cp "$BG/spread.log" "$BG/results/spread/runner.log"
        tar -czf "$OUT/spread.tmp" -C "$BG/results" spread && mv "$OUT/spread.tmp" "$OUT/spread.tgz"
        [ -f "$BG/results/spread/DONE" ] && break
        [ "$(date +%s)" -ge "$t_end" ] && break
        sleep 20
      done
      nvidia-smi --query-gpu=memory.used,utilization.gpu,clocks.sm --format=csv,noheader ;;
    ansible)
      # ansible-core and its requirements from the carried wheels, beside the image's Python
      $PIPI --target "$BG/ansible" .cache/gpu/tools/ansible/*.whl 2>&1 | tail -3
      PYTHONPATH="$BG/ansible" python3 -m ansible playbook --version | head -3 ;;
    roles)
      # roles.yml with TAGS (install,facts | bench); the wheelhouse's dependencies are
      # vllm_install_extra_packages, exact pins from their file names
      tags=$1; shift
      # The image's python3 is a venv (/opt/torch/.venv) holding torch; a venv made from
      # it with --system-site-packages sees /usr's site-packages, not torch (2026-12-07).
      # A .pth there points at the image's packages, as a host with torch installed
      # system-wide would have it.
      python3 - <<'PY'
import site, sys, pathlib
if sys.prefix != sys.base_prefix:
    dest = pathlib.Path(sys.base_prefix) / "local/lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "dist-packages"
    if dest.is_dir():
        (dest / "zz-torch-image.pth").write_text(site.getsitepackages()[0] + "\n")
PY
      python3 - "$BG" > "$BG/roles-vars.json" <<'PY'
import json, pathlib, sys
bg = pathlib.Path(sys.argv[1])
pins = sorted("==".join(w.name.split("-")[:2]) for w in (bg / "wheelhouse").glob("*.whl")
              if not w.name.startswith("vllm-"))
off = sorted((bg / "results" / "spread").glob("s*-v26-off"))  # its last start: the baseline
base = {f"baseline_{load}": str(off[-1] / f"bench-{load}.json") for load in ("sc1", "ac64")}
print(json.dumps({"vllm_install_extra_packages": pins, "vllm_install_python": sys.executable,
                  **(base if off else {})}))
PY
      PYTHONPATH="$BG/ansible:$PWD/src" ANSIBLE_CONFIG="$PWD/ansible.cfg" python3 -m ansible playbook \
        -i localhost, -e ansible_python_interpreter="$(command -v python3)" -e @"$BG/roles-vars.json" \
        --tags "$tags" ${ROLES_EXTRA:-} lab/gpu/roles.yml 2>&1 | tail -60 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
