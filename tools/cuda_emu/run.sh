#!/usr/bin/env bash
# Builds the CUDA backend and tests/gpu/cuda_ops_test.cc against the CPU stand-in in this folder and runs
# the tests on the CPU (slowly): a check of the kernels' indexing, reductions and synchronisation and of
# the backend's host logic on a machine without a GPU, before spending GPU time.
#   tools/cuda_emu/run.sh [BUILD_DIR] [gtest args...]     (default BUILD_DIR: build-emu)
#   tools/cuda_emu/run.sh BUILD_DIR bench                 bench/cuda_kernels.cu --smoke (its control flow)
#   tools/cuda_emu/run.sh BUILD_DIR engine [gtest args]   tests/gpu/cuda_streaming_test.cc: the engine and
#       session built with their CUDA paths (graphs, lookahead, streaming) on the stand-in (slow: a tiny
#       model's decode step takes ~0.5 s; --gtest_filter='*Lookahead*' ran in 2.5 minutes)
# Address and undefined-behaviour sanitizers are on: out-of-bounds device accesses and misaligned vector
# loads abort with a report.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-emu}; shift || true
mkdir -p "$B/gen" "$B/obj"
cmake -S . -B "$B/engine" -G Ninja -DHYMT_CUDA=OFF -DHYMT_SERVER=OFF -DHYMT_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$B/engine" hymt_engine >/dev/null
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -DHYMT_CUDA_EMU=1
       -Itools/cuda_emu/include -Isrc -Itests -DHYMT_SOURCE_DIR="\"$PWD\"" -DHYMT_BINARY_DIR="\"$PWD/$B\"")
srcs=()
for cu in src/backends/cuda/*.cu bench/cuda_kernels.cu; do
  out="$B/gen/$(basename "${cu%.cu}").cc"
  python3 tools/cuda_emu/cu2cc.py "$cu" "$out.tmp"
  cmp -s "$out.tmp" "$out" 2>/dev/null && rm "$out.tmp" || mv "$out.tmp" "$out"
  srcs+=("$out")
done
srcs+=(src/backends/cuda/*.cc tools/cuda_emu/emu.cc tests/gpu/cuda_ops_test.cc tests/test_util.cc)
bench_obj="$B/obj/$(echo "$B/gen/cuda_kernels.cc" | tr '/' '_').o"
objs=()
pids=()
for s in "${srcs[@]}"; do
  o="$B/obj/$(echo "$s" | tr '/' '_').o"
  objs+=("$o")
  if [[ ! -f "$o" || "$s" -nt "$o" || -n "$(find src/backends/cuda tools/cuda_emu/include -newer "$o" -print -quit)" ]]; then
    g++ "${FLAGS[@]}" -c "$s" -o "$o" &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
lib_objs=()
for o in "${objs[@]}"; do
  case "$o" in *cuda_ops_test*|*test_util*|"$bench_obj") ;; *) lib_objs+=("$o") ;; esac
done
test_objs=("$B/obj/tests_gpu_cuda_ops_test.cc.o" "$B/obj/tests_test_util.cc.o")
g++ "${FLAGS[@]}" "${lib_objs[@]}" "${test_objs[@]}" "$B/engine/libhymt_engine.a" -lgtest -lgtest_main -lpthread \
  -o "$B/hymt_gpu_tests_emu"
g++ "${FLAGS[@]}" "${lib_objs[@]}" "$bench_obj" "$B/engine/libhymt_engine.a" -lpthread -o "$B/cuda_kernels_emu"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=0:detect_leaks=0}
if [[ "${1:-}" == "bench" ]]; then exec "$B/cuda_kernels_emu" --smoke; fi
if [[ "${1:-}" == "engine" ]]; then
  shift
  # The engine library again, with HYMT_HAVE_CUDA: its CUDA paths call the backend built above.
  cmake -S . -B "$B/engine-cuda" -G Ninja -DHYMT_CUDA=OFF -DHYMT_SERVER=OFF -DHYMT_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-DHYMT_HAVE_CUDA >/dev/null
  ninja -C "$B/engine-cuda" hymt_engine >/dev/null
  g++ "${FLAGS[@]}" -DHYMT_HAVE_CUDA -c tests/gpu/cuda_streaming_test.cc -o "$B/obj/cuda_streaming_test.o"
  g++ "${FLAGS[@]}" "${lib_objs[@]}" "$B/obj/cuda_streaming_test.o" "$B/obj/tests_test_util.cc.o" \
    "$B/engine-cuda/libhymt_engine.a" -lgtest -lgtest_main -lpthread -o "$B/hymt_engine_tests_emu"
  exec "$B/hymt_engine_tests_emu" "$@"
fi
exec "$B/hymt_gpu_tests_emu" "$@"
