#!/usr/bin/env bash
# Builds the libFuzzer targets (ASan+UBSan, clang) and runs each for SECONDS, as many at once as there
# are cores, starting from the committed corpus (tests/fuzz/corpus/<target>). New inputs go to a
# scratch folder; a crash, leak, timeout, out-of-memory or sanitizer report fails the run and leaves
# the input in OUT/<target>/ (add it to the corpus as a regression once fixed).
#   tests/fuzz/run.sh SECONDS [BUILD_DIR] [TARGET...]
#   environment: HYMT_FUZZ_OUT (default BUILD_DIR/fuzz-out)
# Prints, per target, executions and libFuzzer's final coverage (cov: edges, ft: features).
set -uo pipefail
seconds=${1:?usage: tests/fuzz/run.sh SECONDS [BUILD_DIR] [TARGET...]}
build=${2:-build-asan}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
scripts/sanitizer-build.sh asan "$build" "${targets[@]/#/fuzz_}"
rc=$?
if [[ $rc -eq 2 ]]; then exit 0; fi  # no clang: skipped with a message
if [[ $rc -ne 0 ]]; then exit $rc; fi

out=${HYMT_FUZZ_OUT:-$build/fuzz-out}
rm -rf "$out"
mkdir -p "$out"
# Limits: an input that takes over 10 s or a process above 2 GiB is a finding (hang, unbounded growth).
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:${ASAN_OPTIONS:-}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}

run_one() {
  local t=$1 seconds=$2 build=$3 out=$4
  mkdir -p "$out/$t/new"
  "$build/fuzz/fuzz_$t" "$out/$t/new" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/$t/" \
    >"$out/$t/log" 2>&1
  local rc=$?
  local done_line execs
  done_line=$(grep -E '^#[0-9]+.* cov: ' "$out/$t/log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t/log" | tail -1)
  local cov ft
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  if [[ $rc -eq 0 ]]; then
    printf '  %-16s ok      %10s execs  cov %6s  ft %6s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}"
  else
    printf '  %-16s FAILED  (exit %s) see %s\n' "$t" "$rc" "$out/$t/log"
    grep -E 'ERROR|SUMMARY|property|terminate|what\(\)' "$out/$t/log" | head -5 | sed 's/^/      /'
    ls "$out/$t"/crash-* "$out/$t"/leak-* "$out/$t"/timeout-* "$out/$t"/oom-* 2>/dev/null | sed 's/^/      input: /'
  fi
  return $rc
}
export -f run_one

echo "fuzzing ${#targets[@]} targets for ${seconds}s each, $(nproc) at a time"
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$build" "$out"
