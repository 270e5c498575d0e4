#!/usr/bin/env bash
# `make bench`: random-weight checkpoints of the real 7B shape (bf16, and q8_0 / q4_k_m GGUFs of it),
# then `hymt bench` on each, on the CPU. Prints decode tok/s and its fraction of the host read-bandwidth
# roofline measured in the same run, prefill FLOP/s, and paired runs (each short decode or prefill next
# to the ceiling measured right after it; hymt bench --pairs). Checkpoints are cached in $BENCH_DIR.
#   scripts/bench.sh [BUILD_DIR]     (BENCH_DIR defaults to BUILD_DIR/bench-models; needs ~28 GB of disk)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HYMT="$ROOT/$BUILD/hymt"
DIR=${BENCH_DIR:-$ROOT/$BUILD/bench-models}
SHAPE=${BENCH_SHAPE:-hunyuan-7b}
mkdir -p "$DIR"
if [[ ! -f "$DIR/$SHAPE-bf16/config.json" ]]; then
  echo "== making a random $SHAPE checkpoint (bf16) in $DIR"
  "$HYMT" make-random --shape "$SHAPE" --type bf16 -o "$DIR/$SHAPE-bf16"
fi
for t in q8_0 q4_k_m; do
  [[ -f "$DIR/$SHAPE-$t.gguf" ]] || "$HYMT" quantize --model "$DIR/$SHAPE-bf16" --type "$t" -o "$DIR/$SHAPE-$t.gguf"
done
for m in "$SHAPE-bf16" "$SHAPE-q8_0.gguf" "$SHAPE-q4_k_m.gguf"; do
  echo "== $m"
  "$HYMT" bench --model "$DIR/$m" --device cpu --prompt 16 --gen 16 --batches 1 \
    --prefill-seqs "${BENCH_PREFILL_SEQS:-64}" --prefill-len 64 --json "$DIR/$m.bench.json"
done
