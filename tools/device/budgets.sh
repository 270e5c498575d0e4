#!/usr/bin/env bash
# GPU memory budgets at the 7B shape (issue 7), on the GPU host: for each budget (24, 16, 12, 8, 6, 4 and
# 2 GiB) the plan hymt chooses for a random bf16 checkpoint, then `hymt bench` under that budget on the
# file in the plan's format (the q8_0 / q4_k_m GGUF quantised from the same checkpoint stands in for
# quantising at load, which would cost a minute per run), with the process's peak device memory sampled
# from the driver (nvidia-smi, every 100 ms). Then transformers + accelerate offload at 8 GiB for
# comparison, when time is left. Writes OUT/budgets.md (the table), OUT/*.json, OUT/*.log.
#   tools/device/budgets.sh [OUT]        OUT: $1, else $OUT, else /tmp/hymt-out/budgets
# Environment (defaults are where tools/device/gpu_run.sh leaves them):
#   R7B      the bf16 folder (/tmp/hymt-gpu/r7b); made with `hymt make-random` when missing
#   Q8, Q4   the GGUFs (/tmp/hymt-gpu/r7b-q8_0.gguf, r7b-q4_k_m.gguf); made with `hymt quantize` when missing
#   HYMT     the binary (build-gpu/hymt)     BUDGETS  "24 16 12 8 6 4 2"
#
# Time (limit 6 minutes on the H200, 16 cores): each run is the bench's load (mmap from the page cache
# and upload; ~5 s for 15 GB), a warm-up, batch 1 x (48 + 64) tokens, batch 64 x (48 + 64) and one
# 48-token prefill: ~10-15 s resident, ~25 s streamed at 2 GiB (~12 steps/s over PCIe). Each run is
# capped at RUN_LIMIT (60 s) and none starts after DEADLINE (280 s) of the script's own time; the
# transformers row runs only with HF_LIMIT (90 s) still left. Making missing files is not budgeted
# (gpu_run.sh makes them in earlier stages).
set -u
OUT=${1:-${OUT:-/tmp/hymt-out/budgets}}
W=${R7B:-/tmp/hymt-gpu/r7b}
Q8=${Q8:-$(dirname "$W")/r7b-q8_0.gguf}
Q4=${Q4:-$(dirname "$W")/r7b-q4_k_m.gguf}
HYMT=${HYMT:-build-gpu/hymt}
BUDGETS=${BUDGETS:-24 16 12 8 6 4 2}
RUN_LIMIT=${RUN_LIMIT:-60}
DEADLINE=${DEADLINE:-280}
HF_LIMIT=${HF_LIMIT:-90}
mkdir -p "$OUT"
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
log() { echo "[budgets $(elapsed)s] $*" | tee -a "$OUT/budgets.log"; }

[[ -x $HYMT ]] || { log "no hymt binary at $HYMT"; exit 1; }
if [[ ! -f $W/config.json ]]; then
  log "making the random bf16 checkpoint $W"
  "$HYMT" make-random --shape hunyuan-7b --type bf16 -o "$W" >>"$OUT/budgets.log" 2>&1 || exit 1
fi
[[ -f $Q8 ]] || { log "quantising $Q8"; "$HYMT" quantize --model "$W" --type q8_0 -o "$Q8" >>"$OUT/budgets.log" 2>&1; }
[[ -f $Q4 ]] || { log "quantising $Q4"; "$HYMT" quantize --model "$W" --type q4_k_m -o "$Q4" >>"$OUT/budgets.log" 2>&1; }

# peak_mib PID: the largest device memory the driver reported for PID while it ran (MiB).
# PID is the `timeout` wrapper: its children (hymt) are what the driver lists.
peak_watch() {
  local pid=$1 peak=0 used pids
  while kill -0 "$pid" 2>/dev/null; do
    pids=" $pid $(pgrep -P "$pid" | tr '\n' ' ') "
    used=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', *' -v ps="$pids" 'index(ps, " " $1 " ") {s += $2} END {if (s) print s}')
    [[ -n $used && $used -gt $peak ]] && peak=$used
    sleep 0.1
  done
  echo "$peak"
}

# One JSON value: jget FILE EXPR (a Python expression over `j`).
jget() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null || echo "-"; }

{
  echo "| GPU budget | plan (hymt plan) | format run | peak device MiB (driver) | within budget | batch-1 decode tok/s | batch-64 decode tok/s | first token s (batch 1) | predicted tok/s (1 / batch) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$OUT/budgets.md"

for b in $BUDGETS; do
  if (($(elapsed) > DEADLINE)); then
    log "skipping ${b}G: past the ${DEADLINE}s deadline"
    echo "| ${b} GiB | skipped (time) | | | | | | | |" >>"$OUT/budgets.md"
    continue
  fi
  "$HYMT" plan --model "$W" --device cuda --gpu-mem "${b}G" --max-seqs 64 --ctx 128 >"$OUT/plan_${b}G.txt" 2>&1
  head=$(head -1 "$OUT/plan_${b}G.txt")
  predicted=$(sed -n 's/.*predicted decode: \([0-9.]*\) tokens\/s at batch 1, \([0-9]*\) tokens\/s at batch \([0-9]*\).*/\1 \/ \2 (batch \3)/p' "$OUT/plan_${b}G.txt")
  # The plan's format decides the file: the stored bf16, or the GGUF quantised the same way.
  case $head in
    *q4_k_m*) model=$Q4 fmt=q4_k_m ;;
    *q8_0*) model=$Q8 fmt=q8_0 ;;
    plan:*) model=$W fmt=bf16 ;;
    *) log "no plan at ${b}G: $head"; echo "| ${b} GiB | no plan: $head | | | | | | | |" >>"$OUT/budgets.md"; continue ;;
  esac
  log "${b}G: $head -> bench $fmt"
  timeout "$RUN_LIMIT" "$HYMT" bench --model "$model" --device cuda --gpu-mem "${b}G" --batches 1,64 --prompt 48 \
    --gen 64 --prefill-seqs 1 --prefill-len 48 --max-seqs 64 --ctx 128 --json "$OUT/bench_${b}G.json" \
    >"$OUT/bench_${b}G.log" 2>&1 &
  pid=$!
  peak=$(peak_watch $pid)
  wait $pid
  rc=$?
  j=$OUT/bench_${b}G.json
  if [[ $rc -ne 0 || ! -f $j ]]; then
    log "${b}G: bench exit $rc: $(tail -1 "$OUT/bench_${b}G.log")"
    echo "| ${b} GiB | ${head#plan: } | $fmt | $peak | | failed (exit $rc) | | | $predicted |" >>"$OUT/budgets.md"
    continue
  fi
  # The bench's own reading at the end of its run (the driver's figure for its process) also counts.
  last=$(jget "$j" "j.get('device_process_bytes', 0) >> 20")
  [[ $last =~ ^[0-9]+$ && $last -gt $peak ]] && peak=$last
  within=$( ((peak > 0 && peak <= b * 1024)) && echo yes || echo "NO")
  d1=$(jget "$j" "'%.1f' % [r for r in j['decode'] if r['seqs'] == 1][0]['decode_tok_s']")
  d64=$(jget "$j" "'%.0f' % [r for r in j['decode'] if r['seqs'] == 64][0]['decode_tok_s']")
  ttft=$(jget "$j" "'%.3f' % [r for r in j['decode'] if r['seqs'] == 1][0]['first_token_seconds']")
  echo "| ${b} GiB | ${head#plan: } | $fmt | $peak | $within | $d1 | $d64 | $ttft | $predicted |" >>"$OUT/budgets.md"
done

if (($(elapsed) + HF_LIMIT < 360)) && [[ -f tools/hf_peer.py ]]; then
  log "transformers + accelerate offload at 8 GiB"
  timeout "$HF_LIMIT" python3 tools/hf_peer.py offload --model "$W" --gpu-mem 8GiB --tokens 16 \
    --json "$OUT/hf_offload_8G.json" >"$OUT/hf_offload_8G.log" 2>&1
  j=$OUT/hf_offload_8G.json
  if [[ -f $j ]]; then
    echo "| 8 GiB | transformers + accelerate device_map offload | bf16 | $(jget "$j" "j['driver_process_mib']") | | $(jget "$j" "'%.2f' % j['batch1_decode_tok_s']") | | | |" >>"$OUT/budgets.md"
  fi
else
  log "skipping the transformers comparison: not enough time left"
fi
log "done"
cat "$OUT/budgets.md"
