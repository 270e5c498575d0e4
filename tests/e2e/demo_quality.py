#!/usr/bin/env python3
"""Quality of the demo model on the Tatoeba test sets (500 lines per direction), as `make test` checks it.

For bf16 (the checkpoint as shipped), q8_0 and q4_k_m (GGUF files written by `hymt quantize`):
  - chrF per direction must stay above a floor set just below the measured value (docs/BENCHMARKS.md);
  - q8_0 must be within 0.5 chrF of bf16 in every direction;
  - q4_k_m within 1.5 chrF of bf16 (measured: at most 0.9 lower; the bound leaves room for a 4-bit
    format's larger rounding on an 11M-parameter model and still fails if a format were misread, which
    costs tens of points).
Also: hymt's greedy bf16 translations against HF transformers' (tests/data/demo_hf_eval.json, made by
tools/train_demo.py from the same weights): the share of identical lines is reported and must stay high.

  demo_quality.py BUILD_DIR      (skips with a message when ../shared/data is absent)
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRECTIONS = [("en", "zh", "en-zh", False), ("zh", "en", "en-zh", True), ("en", "de", "en-de", False),
              ("de", "en", "en-de", True)]
# chrF measured with hymt (bf16 weights, f32 activations, greedy) on 2026-12-02; floors 0.5 below.
BF16_FLOOR = {"en-zh": 21.0, "zh-en": 38.9, "en-de": 33.0, "de-en": 34.1}
Q8_MAX_DELTA = 0.5
Q4_MAX_DROP = 1.5
MIN_HF_IDENTICAL = 0.80  # share of lines where hymt's greedy output equals HF's exactly


def shared_data():
    env = os.environ.get("HYMT_SHARED_DATA")
    for cand in ([env] if env else []) + [os.path.join(ROOT, "..", "shared", "data")]:
        if cand and os.path.isdir(os.path.join(cand, "tatoeba")):
            return cand
    return None


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    hymt = os.path.join(ROOT, build, "hymt") if not os.path.isabs(build) else os.path.join(build, "hymt")
    data = shared_data()
    if data is None:
        print("SKIP demo quality: shared data not found (set HYMT_SHARED_DATA or place it at ../shared/data)")
        return 0
    tmp = tempfile.mkdtemp(prefix="hymt-quality-")
    models = {"bf16": os.path.join(ROOT, "models", "demo")}
    for recipe in ("q8_0", "q4_k_m"):
        path = os.path.join(tmp, f"demo-{recipe}.gguf")
        run([hymt, "quantize", "--type", recipe, "-o", path])
        models[recipe] = path
    scores = {}
    failures = []
    for fmt, model in models.items():
        for src, tgt, pair, reverse in DIRECTIONS:
            key = f"{src}-{tgt}"
            out_json = os.path.join(tmp, f"{fmt}-{key}.json")
            hyp = os.path.join(tmp, f"{fmt}-{key}.txt")
            cmd = [hymt, "eval", "--model", model, "--from", src, "--to", tgt, "--tsv",
                   os.path.join(data, "tatoeba", f"{pair}.test.tsv"), "--quiet", "--json-out", out_json, "--hyp-out", hyp]
            if reverse:
                cmd.append("--reverse")
            run(cmd)
            scores[(fmt, key)] = json.load(open(out_json))
            print(f"{fmt:7s} {key}: chrF {scores[(fmt, key)]['chrf']:.2f}  BLEU {scores[(fmt, key)]['bleu']:.2f}")
    for src, tgt, _, _ in DIRECTIONS:
        key = f"{src}-{tgt}"
        b = scores[("bf16", key)]["chrf"]
        q8 = scores[("q8_0", key)]["chrf"]
        q4 = scores[("q4_k_m", key)]["chrf"]
        if b < BF16_FLOOR[key]:
            failures.append(f"bf16 {key}: chrF {b:.2f} below the floor {BF16_FLOOR[key]}")
        if abs(q8 - b) > Q8_MAX_DELTA:
            failures.append(f"q8_0 {key}: chrF {q8:.2f} differs from bf16 {b:.2f} by more than {Q8_MAX_DELTA}")
        if b - q4 > Q4_MAX_DROP:
            failures.append(f"q4_k_m {key}: chrF {q4:.2f} is more than {Q4_MAX_DROP} below bf16 {b:.2f}")

    # Agreement with HF transformers' greedy output of the same weights.
    hf = json.load(open(os.path.join(ROOT, "tests", "data", "demo_hf_eval.json")))
    for src, tgt, _, _ in DIRECTIONS:
        key = f"{src}-{tgt}"
        ids = hf["directions"][key]["hyp_ids"]
        decoded = run([hymt, "tokenize", "--model", models["bf16"], "--decode"],
                      input="\n".join(" ".join(map(str, x)) for x in ids) + "\n").stdout.split("\n")
        ours = open(os.path.join(tmp, f"bf16-{key}.txt"), encoding="utf-8").read().split("\n")
        same = sum(1 for a, b in zip(decoded, ours) if a.replace("\n", " ") == b)
        share = same / len(ids)
        print(f"hf-vs-hymt {key}: {same}/{len(ids)} identical greedy translations ({100 * share:.1f}%)")
        if share < MIN_HF_IDENTICAL:
            failures.append(f"{key}: only {100 * share:.1f}% of lines equal HF's greedy output")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
