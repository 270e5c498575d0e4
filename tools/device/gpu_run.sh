#!/usr/bin/env bash
# One device call on the GPU host (H200, CUDA 13, torch/transformers; nothing installable): builds hymt
# with CUDA and runs the GPU tests (tests/gpu/run.sh), regenerates the parity fixtures, checks 7B parity
# against transformers, and runs hymt and transformers side by side at the 7B shape. Stages are
# independent and time-boxed; the whole call stays under BUDGET seconds. Results go to $OUT.
#   tools/device/gpu_run.sh [STAGES]   STAGES: comma-separated subset of
#       fixtures,gpu,build,tune,lab,random,parity,cpuparity,hfbench,hymtbench,ab,profile,steptrace,demo,budgets
#       (default: all but build, profile and budgets; build is the gpu stage's build without the tests,
#       for a call that only measures: build,lab,random,ab)
#   GPU_ENV: VAR=VALUE words set for the gpu stage alone (the GPU tests under a decode switch).
#   HB_FORMATS: the quantised files hymtbench runs besides bf16 (default "q4_k_m q8_0"; empty: bf16 alone,
#   and nothing is quantised unless ab runs); HB_BATCHES its batch sizes (default 1,256).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hymt-out}
W=/tmp/hymt-gpu
mkdir -p "$OUT" "$W"
STAGES=${1:-fixtures,gpu,random,parity,cpuparity,hfbench,hymtbench,demo}
BUDGET=${BUDGET:-560}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$W/summary.txt"; }
stage() {  # stage NAME SECONDS CMD...: runs CMD for at most SECONDS (less if the call's budget is short)
  local name=$1 secs=$2; shift 2
  local l=$(left); (( secs > l - 15 )) && secs=$(( l - 15 ))
  if (( secs < 10 )); then log "stage $name: skipped (out of time)"; return 1; fi
  local t=$(date +%s)
  timeout "$secs" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  log "stage $name: exit $rc in $(( $(date +%s) - t ))s"
  tail -n 12 "$W/$name.log" | sed "s/^/  [$name] /" >>"$W/summary.txt"
  return $rc
}
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,driver_version --format=csv,noheader | tee -a "$W/summary.txt"
B=$PWD/build-gpu
HYMT=$B/hymt
R7B=$W/r7b

# CPU-side work in the background while the build and GPU tests run.
if has fixtures; then
  ( timeout 420 python3 tools/make_fixtures.py --data .devdata --out "$W/fixtures" >"$W/fixtures.log" 2>&1;
    echo "exit $?" >>"$W/fixtures.log" ) &
  FIX_PID=$!
fi
if has random; then
  ( timeout 240 python3 tools/hf_peer.py make --model "$R7B" >"$W/random.log" 2>&1; echo "exit $?" >>"$W/random.log" ) &
  RAND_PID=$!
fi

# Build for sm_90, GPU tests (ops against the reference, graphs, fixtures against HF), kernel lab (--quick).
if has gpu; then stage gpu 330 env ${GPU_ENV:-} bash tests/gpu/run.sh --out "$W/gpu" --build "$B" --quick ${GPU_NO_BENCH:+--no-bench}; fi
if has build && ! has gpu; then
  stage build 300 bash tests/gpu/run.sh --out "$W/gpu" --build "$B" --build-only
fi

# Decode GEMV tuning: the kernel lab's GEMV sections at several HYMT_GEMV_ITERS, and Nsight Compute on
# GEMVs of bf16, q8_0 and q4_k (NCU_FORMATS) at one token row: NCU_SHAPES lists name:skip pairs, the
# launches of the kernel to skip before the one profiled (216 per shape in `cuda_kernels --gemv`: q,o 0,
# k,v 216, gate,up 432, down 648, head 864); the default profiles gate,up.
if has tune && [[ -x $B/bench/cuda_kernels ]]; then
  for cfg in ${TUNE:-1:1 2:1 4:1 1:2 2:2 4:2 2:4 4:4}; do  # HYMT_GEMV_ITERS:HYMT_GEMV_RPT1
    HYMT_GEMV_ITERS=${cfg%:*} HYMT_GEMV_RPT1=${cfg#*:} stage tune_$cfg 60 "$B/bench/cuda_kernels" --gemv
  done
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [[ -n ${NO_NCU:-} ]] && NCU=""
  if [[ -n $NCU ]]; then
    for f in ${NCU_FORMATS:-bf16 q8_0 q4_k}; do
      k=GemvInt8Kernel; [[ $f == bf16 ]] && k=GemvKernel
      for sh in ${NCU_SHAPES:-gate:432}; do
        HYMT_LAB_ONLY=$f stage "ncu_${f}_${sh%%:*}" 60 "$NCU" --clock-control none -k "regex:$k" \
          --launch-skip "${sh#*:}" -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
          --section SchedulerStats --section InstructionStats --section SourceCounters "$B/bench/cuda_kernels" --gemv
      done
    done
  else
    log "tune: no ncu on this host"
  fi
fi

# The kernel lab's GEMV sections under other decode switches: LAB="VAR=VALUE[,VAR=VALUE] ...", each run once
# (the gpu stage's lab run is the default's).
if has lab && [[ -x $B/bench/cuda_kernels ]]; then
  for spec in ${LAB:-HYMT_GEMV_OCC=0}; do
    stage "lab_${spec//[=,]/_}" 60 env ${spec//,/ } "$B/bench/cuda_kernels" --gemv
  done
fi

if has random; then wait $RAND_PID; log "random 7B: $(tail -2 $W/random.log | tr '\n' ' ')"; fi
if [[ -f $R7B/config.json && -x $HYMT ]]; then
  if { has hymtbench && [[ -n ${HB_FORMATS-x} ]]; } || has ab || has steptrace; then
    ( "$HYMT" quantize --model "$R7B" --type q4_k_m -o "$W/r7b-q4_k_m.gguf" &&
      "$HYMT" quantize --model "$R7B" --type q8_0 -o "$W/r7b-q8_0.gguf" ) >"$W/quantize.log" 2>&1 &
    QPID=$!
  fi
  python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(0, 127957)) for _ in range(48)))" >"$W/ids.txt"
  if has parity; then
    stage fwd_cuda 90 "$HYMT" forward --model "$R7B" --device cuda --ids "$(cat $W/ids.txt)" -o "$W/hymt_cuda.f32"
    if has cpuparity; then
      stage fwd_cpu 150 "$HYMT" forward --model "$R7B" --device cpu --cpu-mem 100G --ids "$(cat $W/ids.txt)" -o "$W/hymt_cpu.f32"
    fi
    hy=(--hymt cuda="$W/hymt_cuda.f32"); [[ -f $W/hymt_cpu.f32 ]] && hy+=(--hymt cpu="$W/hymt_cpu.f32")
    stage parity 150 python3 tools/hf_peer.py parity --model "$R7B" --ids-file "$W/ids.txt" --tail 32 "${hy[@]}" \
      --json "$W/parity.json"
  fi
  if has hfbench; then stage hfbench 150 python3 tools/hf_peer.py bench --model "$R7B" --json "$W/hf_bench.json"; fi
  if has hymtbench; then
    stage bench_bf16 90 "$HYMT" bench --model "$R7B" --device cuda --batches ${HB_BATCHES:-1,256} --prompt 48 --gen 64 \
      --prefill-seqs 1 --prefill-len 2048 --json "$W/bench_bf16.json"
    [[ ${NOGRAPHS:-1} == 1 ]] && stage bench_bf16_nographs 60 "$HYMT" bench --model "$R7B" --device cuda --batches 1 --prompt 48 --gen 64 \
      --prefill-seqs 1 --prefill-len 48 --cuda-graphs off --json "$W/bench_bf16_nographs.json"
    [[ -n ${QPID:-} ]] && { wait $QPID; log "quantize: $(tail -c 300 $W/quantize.log | tr '\r\n' '  ')"; }
    for t in ${HB_FORMATS-q4_k_m q8_0}; do
      [[ -f $W/r7b-$t.gguf ]] && stage bench_$t 75 "$HYMT" bench --model "$W/r7b-$t.gguf" --device cuda --batches ${HB_BATCHES:-1,256} \
        --prompt 48 --gen 64 --prefill-seqs 1 --prefill-len 2048 --json "$W/bench_$t.json"
    done
  fi
fi
# A/B of decode switches: AB="FORMAT:VAR=VALUE[,VAR=VALUE] ..." (FORMAT bf16, q8_0 or q4_k_m), each against
# the default run of that format in the same call; at batch 1 unless AB_BATCHES (e.g. 1,4) says otherwise.
if has ab && [[ -f $R7B/config.json && -x $HYMT ]]; then
  wait $QPID 2>/dev/null
  for spec in ${AB:-q4_k_m: q4_k_m:HYMT_GEMV_SMEM_X=0 q8_0: q8_0:HYMT_GEMV_SMEM_X=0 bf16:}; do
    f=${spec%%:*}; v=${spec#*:}; m=$W/r7b-$f.gguf; [[ $f == bf16 ]] && m=$R7B
    [[ -e $m ]] || continue
    name=ab_${f}_${v:-default}; name=${name//[=,]/_}
    k=2; base=$name; while [[ -e $W/$name.log ]]; do name=${base}_$k; k=$((k + 1)); done  # a repeated spec
    # PROMPT=N among the words: the prompt's length (48 by default); hymt ignores the variable itself.
    p=$(grep -o 'PROMPT=[0-9]*' <<<"$v" | cut -d= -f2)
    stage "$name" 40 env ${v//,/ } "$HYMT" bench --model "$m" --device cuda --batches ${AB_BATCHES:-1} --prompt ${p:-48} --gen 128 \
      --prefill-seqs 1 --prefill-len 48 --json "$W/$name.json"
  done
fi
# Nsight Systems over a bf16 bench (batch-1 decode, one 2,048-token prefill): time per kernel.
if has profile && [[ -f $R7B/config.json && -x $HYMT ]]; then
  NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  if [[ -n $NSYS ]]; then
    stage profile 120 "$NSYS" profile -o "$W/prof" --force-overwrite true --trace cuda "$HYMT" bench --model "$R7B" \
      --device cuda --batches 1 --prompt 48 --gen 256 --prefill-seqs 1 --prefill-len 2048
    stage profstats 90 "$NSYS" stats --report cuda_gpu_kern_sum,cuda_api_sum --format csv -o "$W/prof" "$W/prof.nsys-rep"
    for f in "$W"/prof_*.csv; do [[ -f $f ]] && head -25 "$f" | cut -c1-220 >>"$W/summary.txt"; done
  else
    log "profile: no nsys on this host"
  fi
fi
# Every kernel of batch-1 decodes timed on the device (tools/device/kernel_trace.cc, a CUPTI injection
# library: kernels inside the graphs too), folded into one step and one layer by tools/device/step_trace.py:
# what each kernel adds to the step. STEPTRACE="FORMAT[:VAR=VALUE,...] ..." (default q4_k_m).
if has steptrace && [[ -f $R7B/config.json && -x $HYMT ]]; then
  wait $QPID 2>/dev/null
  CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  CUPTI_INC=$(dirname "$(ls "$CUDA_ROOT"/include/cupti.h "$CUDA_ROOT"/extras/CUPTI/include/cupti.h 2>/dev/null | head -1)")
  CUPTI_LIB=$(dirname "$(ls "$CUDA_ROOT"/lib64/libcupti.so "$CUDA_ROOT"/extras/CUPTI/lib64/libcupti.so 2>/dev/null | head -1)")
  if g++ -shared -fPIC -O2 -I"$CUPTI_INC" -I"$CUDA_ROOT/include" tools/device/kernel_trace.cc -L"$CUPTI_LIB" -lcupti \
      -Wl,-rpath,"$CUPTI_LIB" -o "$W/libkernel_trace.so" >"$W/kernel_trace_build.log" 2>&1; then
    for spec in ${STEPTRACE:-q4_k_m}; do
      f=${spec%%:*}; v=${spec#*:}; [[ $spec == *:* ]] || v=""; m=$W/r7b-$f.gguf; [[ $f == bf16 ]] && m=$R7B
      name=trace_${f}_${v:-default}; name=${name//[=,]/_}
      stage "$name" 90 env ${v//,/ } CUDA_INJECTION64_PATH="$W/libkernel_trace.so" HYMT_KERNEL_TRACE="$W/$name.csv" \
        "$HYMT" bench --model "$m" --device cuda --batches 1 --prompt 48 --gen 128 --prefill-seqs 1 \
        --prefill-len 48 --json "$W/$name.json" &&
        stage "${name}_steps" 60 python3 tools/device/step_trace.py "$W/$name.csv"
      cat "$W/${name}_steps.log" >>"$W/summary.txt" 2>/dev/null
    done
  else
    log "steptrace: the CUPTI library did not build: $(tail -c 400 "$W/kernel_trace_build.log")"
  fi
fi
if has demo && [[ -x $HYMT ]]; then
  stage demo 60 bash -c "for m in models/demo; do for d in 'en zh' 'en de'; do set -- \$d;
    $HYMT translate --model \$m --device cuda --from \$1 --to \$2 'The house is big.' --quiet; done; done;
    $HYMT eval --device cuda --from en --to zh --tsv .devdata/tatoeba/en-zh.test.tsv --quiet"
fi
if has budgets && [[ -x tools/device/budgets.sh ]]; then stage budgets 300 bash tools/device/budgets.sh "$W/budgets"; fi

if has fixtures; then wait $FIX_PID; log "fixtures: $(tail -1 $W/fixtures.log)"; fi
log "done"
# At most 8 files come back: the summary, everything small in one archive, the fixtures in another.
(cd "$W" && tar czf "$OUT/results.tar.gz" --exclude='*.f32' --exclude='*.gguf' --exclude=r7b --exclude=fixtures \
  --exclude='build*' --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='trace_*.csv' .)
[[ -d $W/fixtures ]] && tar czf "$OUT/fixtures.tar.gz" -C "$W" fixtures
cp "$W/summary.txt" "$OUT/summary.txt"
tail -n 150 "$W/summary.txt"
