#!/usr/bin/env bash
# A/B of a compile-time variant on the GPU host, after `gpu_run.sh gpu,random` (or build,random): hymt as
# built in build-gpu against build-gpu/variant/hymt, the same tree with gemv.cu compiled again with
# VARIANT_DEFS (e.g. "-DSOME_MACRO=1") and relinked; batch-1 decode (48 + 128 tokens) of each format in
# FORMATS (bf16 q4_k_m q8_0; the quantised files are made here if the ab stage has not made them),
# the two binaries alternated, ROUNDS rounds. Prints a line per run; logs go to $OUT/variant.tar.gz.
#   VARIANT_DEFS="-DX=1" FORMATS="q4_k_m q8_0" ROUNDS=2 bash tools/device/ab_build.sh
# VARIANT_SRC=path compiles that file in place of src/backends/cuda/gemv.cu (an earlier version, say, with
# VARIANT_DEFS="-I dir" naming a folder that holds the headers it was written against as backends/cuda/*.cuh).
set -u
B=$PWD/build-gpu; V=$B/variant; W=/tmp/hymt-gpu; OUT=${OUT:-/tmp/hymt-out}
: "${VARIANT_DEFS:?set VARIANT_DEFS to the -D flags of the variant}"
mkdir -p "$V" "$OUT"
T0=$(date +%s)
# The compile command of gemv.cu, writing variant/gemv.cu.o with the extra definitions; then a copy of the
# CUDA library with that object in place of the built one, and the hymt link command against the copy.
cc=$(ninja -C "$B" -t commands hymt | grep -- "-c .*src/backends/cuda/gemv.cu " | head -1)
cc=${cc/ -o CMakeFiles\/hymt_cuda.dir\/src\/backends\/cuda\/gemv.cu.o/ -o variant\/gemv.cu.o}
cc=${cc/nvcc /nvcc $VARIANT_DEFS }
if [[ -n ${VARIANT_SRC:-} ]]; then
  cc=$(sed "s| [^ ]*src/backends/cuda/gemv.cu | $(realpath "$VARIANT_SRC") |" <<<"$cc")
fi
( cd "$B" && eval "$cc" && cp libhymt_cuda.a variant/ && cd variant && ar r libhymt_cuda.a gemv.cu.o ) >"$W/variant_cc.log" 2>&1 &
CPID=$!
( for t in ${FORMATS:-q4_k_m q8_0}; do
    [[ $t == bf16 || -f $W/r7b-$t.gguf ]] || "$B/hymt" quantize --model "$W/r7b" --type "$t" -o "$W/r7b-$t.gguf"
  done ) >"$W/variant_quant.log" 2>&1 &
QPID=$!
wait $CPID; echo "variant compile: exit $? at $(( $(date +%s) - T0 ))s"
ln=$(ninja -C "$B" -t commands hymt | tail -1)
ln=${ln// libhymt_cuda.a / variant\/libhymt_cuda.a }
ln=${ln/ -o hymt / -o variant\/hymt }
( cd "$B" && eval "$ln" ) >>"$W/variant_cc.log" 2>&1; echo "variant link: exit $? at $(( $(date +%s) - T0 ))s"
wait $QPID
for r in $(seq 1 "${ROUNDS:-2}"); do
  for f in ${FORMATS:-q4_k_m q8_0}; do
    m=$W/r7b-$f.gguf; [[ $f == bf16 ]] && m=$W/r7b
    for v in built variant; do
      bin=$B/hymt; [[ $v == variant ]] && bin=$V/hymt
      log=$W/variant_${f}_${v}_$r.log
      timeout 60 "$bin" bench --model "$m" --device cuda --batches 1 --prompt 48 --gen 128 --prefill-seqs 1 \
        --prefill-len 48 >"$log" 2>&1
      echo "round $r $f $v: exit $? | $(grep -E '^1 x' "$log" | tr -s ' ') | $(grep -o 'device ran a graph for [0-9.]* ms' "$log")"
    done
  done
done
(cd "$W" && tar czf "$OUT/variant.tar.gz" variant_*.log)
echo "done at $(( $(date +%s) - T0 ))s"
