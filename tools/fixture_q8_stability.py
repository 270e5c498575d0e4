#!/usr/bin/env python3
"""Records, for fixtures made before make_fixtures.py kept the record, which prompts keep their greedy
continuation under q8_0 weights and int8 activations (make_fixtures.q8_0_copy, the same simulation the
generator runs): the `q8_0_stable` list of reference.json, which tests/parity/gguf_roundtrip_test.cc holds
hymt's q8_0 files to. The weights and the other records are left as they are; the f32 greedy continuation
recomputed here must equal the stored one, or the fixture is not the one this script thinks it is.

  fixture_q8_stability.py --fixtures tests/data/fixtures --out DIR   (writes DIR/NAME.reference.json)
"""

import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402


def stored_ids(path):
    """{name: list of ints} for the I32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__" or info["dtype"] != "I32":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            out[name] = list(struct.unpack(f"<{(b - a) // 4}i", raw))
    return out


def main():
    import torch
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    for f in mf.FIXTURES:
        root = os.path.join(args.fixtures, f["name"])
        meta = json.load(open(os.path.join(root, "reference.json")))
        ids = stored_ids(os.path.join(root, "reference.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(os.path.join(root, "f32"), attn_implementation="eager")
        model = model.float().eval()
        q8 = mf.q8_0_copy(model)
        stable, margins = [], []
        for p in range(len(meta["prompts"])):
            prompt = ids[f"f32.prompt{p}.ids"]
            g32, margin = mf.greedy_with_margins(model, prompt, mf.GREEDY_TOKENS)
            if g32 != ids[f"f32.prompt{p}.greedy"]:
                raise SystemExit(f"{f['name']} prompt {p}: the recomputed f32 greedy path differs from the stored one")
            g8, _ = mf.greedy_with_margins(q8, prompt, mf.GREEDY_TOKENS)
            stable.append(g8 == g32)
            margins.append(round(margin, 4))
        meta["q8_0_stable"] = stable
        print(f"{f['name']}: q8_0-stable prompts {stable}; smallest f32 top-2 margins {margins}", flush=True)
        with open(os.path.join(args.out, f["name"] + ".reference.json"), "w") as out:
            json.dump(meta, out, indent=1, ensure_ascii=False)
            out.write("\n")


if __name__ == "__main__":
    main()
