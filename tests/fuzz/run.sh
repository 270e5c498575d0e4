#!/usr/bin/env bash
# Builds the libFuzzer targets (ASan+UBSan, clang) and runs each for SECONDS, as many at once as there
# are cores, starting from the committed corpus (tests/fuzz/corpus/<target>). New inputs go to a
# scratch folder; a crash, leak, timeout, out-of-memory or sanitizer report fails the run and leaves
# the input in OUT/<target>/ (add it to the corpus as a regression once fixed).
#   tests/fuzz/run.sh SECONDS [BUILD_DIR] [TARGET...]
#   TARGET: default every target the build has (http_request only with HYMT_SERVER=ON)
#   environment: HYMT_FUZZ_OUT (default BUILD_DIR/fuzz-out); HYMT_SANITIZER_CMAKE_FLAGS (as in
#   scripts/sanitizer-build.sh, e.g. -DHYMT_SERVER=ON)
# Prints, per target, executions, exec/s, libFuzzer's final coverage (cov: edges, ft: features), the
# corpus at the end (inputs/size) and the peak RSS.
set -uo pipefail
seconds=${1:?usage: tests/fuzz/run.sh SECONDS [BUILD_DIR] [TARGET...]}
build=${2:-build-asan}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

scripts/sanitizer-build.sh asan "$build"  # configure only: it lists the targets the build has
rc=$?
if [[ $rc -eq 2 ]]; then exit 0; fi  # no clang: skipped with a message
if [[ $rc -ne 0 ]]; then exit $rc; fi
mapfile -t configured <"$build/fuzz/targets.txt"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=("${configured[@]}"); fi
for t in "${targets[@]}"; do
  if [[ " ${configured[*]} " != *" $t "* ]]; then
    echo "fuzz: $build has no target '$t' (it has: ${configured[*]}; http_request needs HYMT_SERVER=ON)" >&2
    exit 1
  fi
done
scripts/sanitizer-build.sh asan "$build" "${targets[@]/#/fuzz_}" || exit $?

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
  local cov ft corp rate rss
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$done_line")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/$t/log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$out/$t/log" | tail -1)
  if [[ $rc -eq 0 ]]; then
    printf '  %-16s ok      %10s execs  %6s exec/s  cov %6s  ft %6s  corp %12s  peak RSS %5s MB\n' "$t" \
      "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}"
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
