# The sanitizer and fuzzing stages of `make test`, sourced by scripts/run-tests.sh (which defines
# `stage` and $BUILD). Each kind has its own clang build folder holding only what its stages run:
#   build-asan  ASan+UBSan: the unit, parity and concurrency tests, the e2e scripts, and the fuzzers,
#               each run for HYMT_FUZZ_SECONDS (default 60) from the committed corpus
#   build-tsan  TSan: the engine's continuous batching and layer streaming (concurrency tests,
#               EngineBatchGreedy, Offload), the server's and the engine's unit tests, and `hymt serve`
#               through tests/e2e/server_lifecycle.py (disconnects, shutdown with work running)
# Without clang the stages skip themselves with a message.

# Sanitizer builds follow the main build's HYMT_SERVER, so that the server's tests join them.
server=$(sed -n 's/^HYMT_SERVER:BOOL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
export HYMT_SANITIZER_CMAKE_FLAGS="-DHYMT_SERVER=${server:-ON}"
# Any report fails the stage; leaks are reported at exit.
export ASAN_OPTIONS=detect_leaks=1:${ASAN_OPTIONS:-}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}

# Runs a stage only when its build exists (a skipped build skips its stages).
stage_if_built() {
  local dir=$1; shift
  if [[ -f "$dir/CMakeCache.txt" && $sanitizer_build_ok == 1 ]]; then stage "$@"; else
    echo "=== test stage: $1 skipped (no $dir)"; fi
}

build_sanitizer() {
  scripts/sanitizer-build.sh "$@"
  local rc=$?
  if [[ $rc -eq 2 ]]; then sanitizer_build_ok=0; return 0; fi
  if [[ $rc -eq 0 ]]; then sanitizer_build_ok=1; else sanitizer_build_ok=0; fi
  return $rc
}

sanitizer_build_ok=0
stage "asan+ubsan build" build_sanitizer asan build-asan hymt hymt_unit_tests hymt_parity_tests \
  hymt_concurrency_tests hymt_fuzzers
stage_if_built build-asan "asan+ubsan unit tests" build-asan/tests/hymt_unit_tests --gtest_brief=1
stage_if_built build-asan "asan+ubsan parity tests" build-asan/tests/hymt_parity_tests --gtest_brief=1
stage_if_built build-asan "asan+ubsan concurrency tests" build-asan/tests/hymt_concurrency_tests --gtest_brief=1
for t in tests/e2e/*.sh tests/e2e/*.py; do
  [[ -f "$t" ]] || continue
  case "$t" in
    *.sh) stage_if_built build-asan "asan+ubsan e2e $(basename "$t" .sh)" bash "$t" build-asan ;;
    *.py) stage_if_built build-asan "asan+ubsan e2e $(basename "$t" .py)" python3 "$t" build-asan ;;
  esac
done
stage_if_built build-asan "fuzz (${HYMT_FUZZ_SECONDS:-60} s each)" tests/fuzz/run.sh "${HYMT_FUZZ_SECONDS:-60}" build-asan

sanitizer_build_ok=0
stage "tsan build" build_sanitizer tsan build-tsan hymt_concurrency_tests hymt_parity_tests hymt_unit_tests hymt
stage_if_built build-tsan "tsan concurrency tests" build-tsan/tests/hymt_concurrency_tests --gtest_brief=1
stage_if_built build-tsan "tsan engine batching and layer streaming" build-tsan/tests/hymt_parity_tests \
  --gtest_brief=1 --gtest_filter='*EngineBatchGreedy*:*Offload*'
# Every suite of these files (the app_* ones are built with HYMT_SERVER).
tsan_unit_filter=$(sed -n 's/^TEST\(_F\|_P\)\{0,1\}(\([A-Za-z0-9_]*\),.*/\2.*/p' tests/unit/app_server_test.cc \
  tests/unit/app_cache_test.cc tests/unit/engine_test.cc | sort -u | paste -sd:)
stage_if_built build-tsan "tsan server and engine unit tests" build-tsan/tests/hymt_unit_tests --gtest_brief=1 \
  --gtest_filter="$tsan_unit_filter"

# A report kills the server (halt_on_error) and is written to a file, which fails the stage and is shown.
tsan_server() {
  local reports rc
  reports=$(mktemp -d)
  TSAN_OPTIONS="$TSAN_OPTIONS:log_path=$reports/tsan" "$@"
  rc=$?
  if compgen -G "$reports/tsan.*" >/dev/null; then cat "$reports"/tsan.*; rc=1; fi
  rm -rf "$reports"
  return $rc
}
if [[ ${server:-ON} == ON ]]; then
  stage_if_built build-tsan "tsan e2e server_lifecycle" tsan_server python3 tests/e2e/server_lifecycle.py build-tsan
fi
