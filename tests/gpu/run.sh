#!/usr/bin/env bash
# One call on the GPU host: build the CUDA backend for sm_90, run its tests and the kernel lab.
#
#   tests/gpu/run.sh --out DIR [--build BUILD_DIR] [--quick] [--no-bench] [--build-only]
#
# Configures a fresh build (-DHYMT_SERVER=OFF -DHYMT_CUDA=ON -DHYMT_CUDA_ARCHS=90), builds
# hymt_gpu_tests, the bench tools and hymt with -j$(nproc), runs the GPU tests (DIR/gpu_tests.xml and
# .log) and bench/cuda_kernels (DIR/cuda_kernels.txt), and prints a short summary last. Exits non-zero
# when the build, a test or the bench fails. --build-only builds hymt and the bench tools without the tests
# and stops there (for a call that only measures).
#
# GoogleTest: the system's when CMake finds it; otherwise it is built from a source tree found at
# $GTEST_SOURCE_DIR, .devdata/googletest (carry it: cp -r /usr/src/googletest .devdata/) or
# /usr/src/googletest. Without any, the bench still runs and the tests are reported as not run.
set -uo pipefail

OUT="" BUILD="" QUICK="" BENCH=1 BUILD_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --quick) QUICK=--quick; shift ;;
    --no-bench) BENCH=0; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    *) echo "usage: $0 --out DIR [--build BUILD_DIR] [--quick] [--no-bench] [--build-only]" >&2; exit 2 ;;
  esac
done
[[ -n "$OUT" ]] || { echo "usage: $0 --out DIR [--build BUILD_DIR] [--quick] [--no-bench] [--build-only]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=$(nproc)
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  /usr/local/cuda/bin/nvcc --version 2>&1 | tail -2
  cmake --version | head -1
} >"$OUT/host.txt"
stamp "host: $(head -1 "$OUT/host.txt")"

# ---- GoogleTest ----
GTEST_ARGS=()
TESTS=ON
probe="$BUILD/gtest-probe"
mkdir -p "$probe"
cat >"$probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(probe CXX)
find_package(GTest REQUIRED)
EOF
if [[ $BUILD_ONLY == 1 ]]; then
  TESTS=OFF
elif ! cmake -S "$probe" -B "$probe/b" >/dev/null 2>&1; then
  src=""
  for d in "${GTEST_SOURCE_DIR:-}" "$ROOT/.devdata/googletest" /usr/src/googletest; do
    [[ -n "$d" && -f "$d/CMakeLists.txt" ]] && { src=$d; break; }
  done
  if [[ -n "$src" ]]; then
    stamp "building GoogleTest from $src"
    if cmake -S "$src" -B "$BUILD/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
         -DCMAKE_INSTALL_PREFIX="$BUILD/gtest-install" >"$OUT/gtest.log" 2>&1 &&
       cmake --build "$BUILD/gtest-build" -j"$JOBS" --target install >>"$OUT/gtest.log" 2>&1; then
      GTEST_ARGS=(-DCMAKE_PREFIX_PATH="$BUILD/gtest-install")
    else
      stamp "GoogleTest build failed (see gtest.log)"; TESTS=OFF
    fi
  else
    stamp "GoogleTest not found: the tests will not run (carry a source tree as .devdata/googletest)"; TESTS=OFF
  fi
fi

# ---- configure and build ----
stamp "configure ($BUILD)"
rm -f "$BUILD/CMakeCache.txt"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYMT_SERVER=OFF -DHYMT_CUDA=ON \
     -DHYMT_CUDA_ARCHS=90 -DHYMT_TESTS=$TESTS "${GTEST_ARGS[@]}" >"$OUT/configure.log" 2>&1; then
  tail -20 "$OUT/configure.log"; echo "SUMMARY: configure FAILED (configure.log)"; exit 1
fi
targets=(hymt cuda_kernels)
[[ $TESTS == ON ]] && targets+=(hymt_gpu_tests)
# Every other bench tool too (they are cheap); the ones that exist depend on the branch.
for t in $(find "$ROOT/bench" -maxdepth 1 \( -name '*.cc' -o -name '*.cu' \) -printf '%f\n' | sed 's/\.[^.]*$//'); do
  [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
done
stamp "build ${targets[*]} with -j$JOBS"
if ! cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -30; echo "SUMMARY: build FAILED (build.log)"; exit 1
fi
stamp "built"
[[ $BUILD_ONLY == 1 ]] && exit 0

# ---- tests ----
test_rc=0
if [[ $TESTS == ON ]]; then
  stamp "hymt_gpu_tests"
  timeout 300 "$BUILD/tests/hymt_gpu_tests" --gtest_output=xml:"$OUT/gpu_tests.xml" >"$OUT/gpu_tests.log" 2>&1
  test_rc=$?
  stamp "tests exit $test_rc"
  # Switches that are off by default: their tests again with the switch on (or a default switched off).
  # rerun NAME "VAR=VALUE ..." FILTER
  # writes gpu_tests_NAME.{log,xml}; the summary reports each.
  rerun() {
    stamp "hymt_gpu_tests with $2"
    env $2 timeout 120 "$BUILD/tests/hymt_gpu_tests" --gtest_filter="$3" \
      --gtest_output=xml:"$OUT/gpu_tests_$1.xml" >"$OUT/gpu_tests_$1.log" 2>&1
    local rc=$?
    stamp "tests with $2 exit $rc"
    (( test_rc == 0 )) && test_rc=$rc
    RERUNS+=("$1:$2")
  }
  RERUNS=()
  # The fused decode attention (RoPE and the KV write inside it).
  rerun fused HYMT_FUSE_ROPE_ATTN=1 'CudaOpsTest.RopeNormKvAttention*:CudaStreaming.GraphedDecodeMatchesEager*'
  # The bulk-copy GEMV (one token row, sm_90+): the fused products and graphs on it
  # (CudaMatMulTest.BulkAndRegisterKernels runs both kernels against the reference either way).
  rerun bulk HYMT_GEMV_BULK=1 \
    'CudaOpsTest.Fused*:CudaOpsTest.MixedType*:CudaMatMulTest.PersistentBlocks:CudaMatMulTest.Prequant*:CudaGraphTest.*'
  # Switched off by default: a replayed step's uploads as copies, and the greedy ids' copy on the compute
  # stream (the defaults: one kernel, and a stream of its own).
  rerun copies "HYMT_STAGE_KERNEL=0 HYMT_IDS_STREAM=0" 'CudaGraphTest.*:CudaStreaming.Lookahead*'
  # Kernels that let the next one launch at their start: the GEMVs too (HYMT_PDL_EARLY=2; 1, the small
  # kernels alone, is the default), and none (0, as before).
  rerun early HYMT_PDL_EARLY=2 'CudaOpsTest.*:CudaGraphTest.*:CudaStreaming.*:CudaMatMulTest.*'
  rerun late HYMT_PDL_EARLY=0 'CudaGraphTest.*:CudaStreaming.*'
  # Decode attention's splits merged in clusters of 8 and of 16 blocks whatever the context (by default on
  # sm_90+ 8 up to 256 positions, 16 beyond), and by the combine launch (no clusters), alone and with RoPE
  # inside the attention.
  rerun clusters8 HYMT_ATTN_CLUSTER=8 'CudaGraphTest.*:CudaStreaming.*:CudaOpsTest.RopeNormKvAttention*'
  rerun clusters16 HYMT_ATTN_CLUSTER=16 'CudaGraphTest.*:CudaStreaming.*:CudaOpsTest.RopeNormKvAttention*'
  rerun combine HYMT_ATTN_CLUSTER=0 'CudaGraphTest.*:CudaStreaming.*'
  # The RMSNorm inside a one-row int8 GEMV from the sums of squares the MatMulAdd before it wrote (off by
  # default: slower where measured).
  rerun sums HYMT_NORM_SUMS=1 'CudaGraphTest.*:CudaStreaming.*'
  rerun combine_fused "HYMT_ATTN_CLUSTER=0 HYMT_FUSE_ROPE_ATTN=1" \
    'CudaOpsTest.RopeNormKvAttention*:CudaStreaming.GraphedDecodeMatchesEager*'
fi

# ---- bench ----
bench_rc=0
if [[ $BENCH == 1 ]]; then
  stamp "cuda_kernels $QUICK"
  timeout 240 "$BUILD/bench/cuda_kernels" $QUICK >"$OUT/cuda_kernels.txt" 2>&1
  bench_rc=$?
  stamp "bench exit $bench_rc"
else
  echo "not run (--no-bench)" >"$OUT/cuda_kernels.txt"
fi

# ---- summary ----
echo
echo "==== summary ($(( $(date +%s) - T0 ))s) ===="
head -1 "$OUT/host.txt"
if [[ $TESTS == ON ]]; then
  grep -E "^\[==========\] .* ran|^\[  PASSED  \] [0-9]+ tests?\.|^\[  SKIPPED \] [0-9]+ tests?,|^\[  FAILED  \] " \
    "$OUT/gpu_tests.log" | head -40
  [[ $test_rc -eq 124 ]] && echo "tests TIMED OUT (300 s)"
  grep -B1 -A12 "Failure$" "$OUT/gpu_tests.log" | head -60
  for r in "${RERUNS[@]}"; do
    echo "with ${r#*:}:"
    grep -E "^\[  PASSED  \] [0-9]+ tests?\.|^\[  FAILED  \] " "$OUT/gpu_tests_${r%%:*}.log" | head -10
    grep -B1 -A12 "Failure$" "$OUT/gpu_tests_${r%%:*}.log" | head -30
  done
else
  echo "tests NOT RUN (no GoogleTest)"
fi
sed -n '/== ceilings/,/TFLOP/p' "$OUT/cuda_kernels.txt"
awk '$1 ~ /^(format|bf16|f8_e4m3|q8_0|q6_k|q4_k|q4_k-f32)$/ && ($4 == "1" || $4 == "rows")' "$OUT/cuda_kernels.txt"
sed -n '/== attention decode/,/^$/p' "$OUT/cuda_kernels.txt"
sed -n '/== decode step/,$p' "$OUT/cuda_kernels.txt"
[[ $bench_rc -ne 0 ]] && { echo "bench FAILED (exit $bench_rc):"; tail -5 "$OUT/cuda_kernels.txt"; }
rc=0
[[ $TESTS == ON && $test_rc -ne 0 ]] && rc=1
[[ $TESTS == OFF ]] && rc=1
[[ $bench_rc -ne 0 ]] && rc=1
echo "SUMMARY: tests $([[ $TESTS == ON ]] && { [[ $test_rc -eq 0 ]] && echo passed || echo FAILED; } || echo 'not run'), bench $([[ $bench_rc -eq 0 ]] && echo ok || echo FAILED); files in $OUT"
exit $rc
