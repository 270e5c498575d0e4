#!/usr/bin/env bash
# Configures and builds a sanitizer build of only the targets a test stage needs (clang, -O1, no CUDA).
#   scripts/sanitizer-build.sh asan DIR TARGET...   ASan+UBSan, with the libFuzzer targets (tests/fuzz)
#   scripts/sanitizer-build.sh tsan DIR TARGET...   ThreadSanitizer
# Without targets it only configures. HYMT_SANITIZER_CMAKE_FLAGS (e.g. -DHYMT_SERVER=OFF) is applied to
# a new build folder and to an existing one, so that the folder follows the flags of the latest call.
# Exits 2 (a skip) when clang or its sanitizer runtimes are missing.
set -euo pipefail
kind=$1
dir=$2
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if ! command -v clang++ >/dev/null; then
  echo "sanitizer-build: clang++ not found (scripts/setup-deps.sh --test installs it); skipping"
  exit 2
fi
case $kind in
  asan) flags=(-DHYMT_SANITIZE=address,undefined -DHYMT_FUZZ=ON) ;;
  tsan) flags=(-DHYMT_SANITIZE=thread) ;;
  *) echo "sanitizer-build: unknown kind '$kind' (asan or tsan)" >&2; exit 1 ;;
esac
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f $dir/CMakeCache.txt ]]; then
  # Build type "Sanitize": -O1 keeps the sanitizers' stack traces useful and the build short, and
  # without NDEBUG every assert stays on. -ffp-contract=off: GCC in ISO C++ mode never fuses a*b+c
  # into an FMA and clang does by default; the numeric tests' bounds and goldens come from GCC builds.
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -ffp-contract=off" \
    -DCMAKE_C_FLAGS_SANITIZE="-O1 -ffp-contract=off" \
    -DHYMT_CUDA=OFF "${flags[@]}" ${HYMT_SANITIZER_CMAKE_FLAGS:-} >/dev/null
elif [[ -n ${HYMT_SANITIZER_CMAKE_FLAGS:-} ]]; then
  cmake -S . -B "$dir" ${HYMT_SANITIZER_CMAKE_FLAGS} >/dev/null
fi
if [[ $# -gt 0 ]]; then cmake --build "$dir" -j "$(nproc)" --target "$@"; fi
