#!/usr/bin/env bash
# Runs every test stage of `make test` and prints how long each took. Stages that need something
# absent (the shared data, a GPU) skip themselves with a message; a failing stage fails the run.
#   scripts/run-tests.sh [BUILD_DIR]
set -uo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
failed=()
stage() {
  local name=$1; shift
  local t0=$(date +%s)
  echo "=== test stage: $name"
  "$@"
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [[ $rc -eq 0 ]]; then echo "=== test stage: $name passed in ${dt}s"; else
    echo "=== test stage: $name FAILED (exit $rc) in ${dt}s"; failed+=("$name"); fi
}

stage "unit tests" "$BUILD/tests/hymt_unit_tests" --gtest_brief=1
stage "parity tests" "$BUILD/tests/hymt_parity_tests" --gtest_brief=1
stage "concurrency tests" "$BUILD/tests/hymt_concurrency_tests" --gtest_brief=1
for t in tests/e2e/*.sh tests/e2e/*.py; do
  [[ -f "$t" ]] || continue
  case "$t" in
    *.sh) stage "e2e $(basename "$t" .sh)" bash "$t" "$BUILD" ;;
    *.py) stage "e2e $(basename "$t" .py)" python3 "$t" "$BUILD" ;;
  esac
done
stage "soak 1 min" bash tests/soak/run.sh 1 "$BUILD"
if [[ -f tests/web/run.sh ]]; then stage "browser" bash tests/web/run.sh "$BUILD"; fi

# Sanitizer and fuzzing stages (scripts/sanitizer-tests.sh); HYMT_SANITIZERS=0 leaves them out.
if [[ "${HYMT_SANITIZERS:-1}" != 0 ]]; then source scripts/sanitizer-tests.sh; fi

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "all test stages passed"
