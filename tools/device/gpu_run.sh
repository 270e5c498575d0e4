#!/usr/bin/env bash
# One device call on the GPU host (H200, CUDA 13, torch/transformers; nothing installable): builds hymt
# with CUDA, runs the GPU tests and kernel benchmarks, checks 7B parity against transformers, and runs
# hymt and transformers side by side at the 7B shape. Every stage is independent (a failing stage does not
# stop the others) and time-boxed; results go to $OUT (at most 8 files come back: see the end).
#   tools/device/gpu_run.sh [STAGES]     STAGES: comma-separated subset of
#                                         build,fixtures,gputests,kernels,random,parity,hfbench,hymtbench,budgets
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hymt-out}
W=/tmp/hymt-gpu
mkdir -p "$OUT" "$W"
STAGES=${1:-build,fixtures,gputests,kernels,random,parity,hfbench,hymtbench}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$W/summary.txt"; }
stage() {  # stage NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local t=$(date +%s)
  timeout "$secs" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  log "stage $name: exit $rc in $(( $(date +%s) - t ))s"
  tail -n 25 "$W/$name.log" | sed "s/^/  [$name] /" >>"$W/summary.txt"
  return $rc
}
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,driver_version --format=csv,noheader | tee -a "$W/summary.txt"
B=build-gpu
NPROC=$(nproc)

# Fixtures regenerate on the CPU while the GPU work runs (tools/make_fixtures.py picks confident seeds).
if has fixtures; then
  ( timeout 420 python3 tools/make_fixtures.py --data .devdata --out "$W/fixtures" >"$W/fixtures.log" 2>&1;
    echo "exit $?" >>"$W/fixtures.log" ) &
  FIX_PID=$!
fi
# A random 7B checkpoint, written by torch on the GPU while hymt builds.
if has random; then
  ( timeout 300 python3 tools/hf_peer.py make --model "$W/r7b" >"$W/random.log" 2>&1; echo "exit $?" >>"$W/random.log" ) &
  RAND_PID=$!
fi

if has build; then
  stage build 420 bash -c "cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYMT_SERVER=OFF -DHYMT_CUDA=ON \
    -DHYMT_CUDA_ARCHS=90 && cmake --build $B -j$NPROC"
fi
HYMT=$PWD/$B/hymt
if has gputests; then
  stage gputests 240 $B/tests/hymt_gpu_tests --gtest_brief=1 --gtest_output=xml:"$W/gpu_tests.xml"
  stage paritytests 240 $B/tests/hymt_parity_tests --gtest_brief=1
fi
if has kernels; then stage kernels 180 $B/bench/cuda_kernels; fi

if has random; then wait $RAND_PID; log "random checkpoint: $(tail -1 $W/random.log)"; fi
R7B=$W/r7b
if has parity && [[ -f $R7B/config.json ]]; then
  python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(0, 127957)) for _ in range(64)))" >"$W/ids.txt"
  stage fwd_cuda 120 "$HYMT" forward --model "$R7B" --device cuda --ids "$(cat $W/ids.txt)" -o "$W/hymt_cuda.f32"
  stage fwd_cpu 300 "$HYMT" forward --model "$R7B" --device cpu --ids "$(cat $W/ids.txt)" -o "$W/hymt_cpu.f32"
  stage parity 240 python3 tools/hf_peer.py parity --model "$R7B" --ids-file "$W/ids.txt" \
    --hymt cuda="$W/hymt_cuda.f32" --hymt cpu="$W/hymt_cpu.f32" --json "$W/parity.json"
fi
if has hymtbench && [[ -f $R7B/config.json ]]; then
  ( "$HYMT" quantize --model "$R7B" --type q8_0 -o "$W/r7b-q8_0.gguf" && \
    "$HYMT" quantize --model "$R7B" --type q4_k_m -o "$W/r7b-q4_k_m.gguf" ) >"$W/quantize.log" 2>&1 &
  QPID=$!
fi
if has hfbench && [[ -f $R7B/config.json ]]; then
  stage hfbench 240 python3 tools/hf_peer.py bench --model "$R7B" --json "$W/hf_bench.json"
fi
if has hymtbench && [[ -f $R7B/config.json ]]; then
  stage bench_bf16 150 "$HYMT" bench --model "$R7B" --device cuda --batches 1,256 --prompt 48 --gen 64 \
    --prefill-seqs 1 --prefill-len 2048 --json "$W/bench_bf16.json"
  wait $QPID; log "quantize: $(tail -2 $W/quantize.log | tr '\n' ' ')"
  for t in q8_0 q4_k_m; do
    stage bench_$t 120 "$HYMT" bench --model "$W/r7b-$t.gguf" --device cuda --batches 1,256 --prompt 48 --gen 64 \
      --prefill-seqs 1 --prefill-len 2048 --json "$W/bench_$t.json"
  done
fi
if has budgets && [[ -x tools/device/budgets.sh ]]; then stage budgets 360 bash tools/device/budgets.sh "$W/budgets"; fi

if has fixtures; then wait $FIX_PID; log "fixtures: $(tail -1 $W/fixtures.log)"; fi
log "done"
# Bring back at most 8 files: the summary, logs and JSON in one archive, the fixtures in another.
tar czf "$OUT/results.tar.gz" -C "$W" $(cd "$W" && ls *.log *.json *.txt *.xml 2>/dev/null) $( [[ -d $W/budgets ]] && echo budgets )
[[ -d $W/fixtures ]] && tar czf "$OUT/fixtures.tar.gz" -C "$W" fixtures
cp "$W/summary.txt" "$OUT/summary.txt"
cat "$W/summary.txt" | tail -n 120
