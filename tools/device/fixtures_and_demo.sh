#!/usr/bin/env bash
# One device call: tokenizer goldens and parity fixtures (CPU) while the demo model trains (GPU).
# Needs .devdata/ (hy.tiktoken, flores200-devtest/, tatoeba/) carried with the call; writes to $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hymt-out}
W=/tmp/hymt-work
rm -rf "$W"; mkdir -p "$W" "$OUT"
D=.devdata
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, tiktoken, tokenizers, sacrebleu; print("torch", torch.__version__, "transformers", transformers.__version__, "tiktoken", tiktoken.__version__, "tokenizers", tokenizers.__version__, "sacrebleu", sacrebleu.__version__)'
(python3 tools/tokenizer_goldens.py --data "$D" --out "$W/tokenizer_goldens.json" >"$W/goldens.log" 2>&1; echo "exit $?" >>"$W/goldens.log") &
(python3 tools/make_fixtures.py --data "$D" --out "$W/fixtures" >"$W/fixtures.log" 2>&1; echo "exit $?" >>"$W/fixtures.log") &
python3 tools/train_demo.py --data "$D" --out "$W/demo" --seconds "${TRAIN_SECONDS:-330}" 2>&1 | tee "$W/train.log"
wait
echo "== goldens"; tail -5 "$W/goldens.log"; echo "== fixtures"; tail -12 "$W/fixtures.log"
cd "$W"
tar czf "$OUT/logs.tar.gz" *.log
[ -f tokenizer_goldens.json ] && gzip -c tokenizer_goldens.json >"$OUT/tokenizer_goldens.json.gz"
for d in fixtures/*/; do n=$(basename "$d"); tar czf "$OUT/fixture-$n.tar.gz" -C fixtures "$n"; done
if [ -d demo/model ]; then
  for f in demo/model/*.safetensors; do cp "$f" "$OUT/"; done
  tar czf "$OUT/demo_rest.tar.gz" --exclude='*.safetensors' demo
fi
ls -la "$OUT"
