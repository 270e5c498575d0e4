#!/usr/bin/env python3
"""Tokenizer golden files from the reference implementations (run where tiktoken and tokenizers exist).

For every FLORES-200 devtest file: tiktoken over hy.tiktoken with the Hunyuan split rule, no
normalisation. The FLORES text must not enter the repository, so per line we keep only a hash of the id
sequence (fnv1a64 over little-endian uint32 ids), plus the full ids of the first lines of each language.
Also: piece boundaries of the hy_ family's three-pass split rule (HF tokenizers' Split pre-tokenizers, as
llama.cpp's `hunyuan-dense`), and a check that a tokenizer.json converted from the ranks gives the same
ids through HF tokenizers.

  tokenizer_goldens.py --data DIR (holds hy.tiktoken and flores200-devtest/) --out FILE.json
"""

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hy_common as hy  # noqa: E402

FULL_IDS_PER_LANG = 20


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def piece_lengths_hash(pieces):
    return hy.fnv1a64_ids([len(p.encode("utf-8")) for p, _ in pieces])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-json-out", default=None)
    args = ap.parse_args()

    vocab_path = os.path.join(args.data, "hy.tiktoken")
    ranks = hy.load_tiktoken(vocab_path)
    enc = hy.make_encoding(ranks)
    print(f"ranks {len(ranks)}; specials start at {len(ranks)}", flush=True)

    from tokenizers import Regex, pre_tokenizers

    three_pass = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in hy.HY_DENSE_PATS]
    )
    hunyuan_split = pre_tokenizers.Split(Regex(hy.HUNYUAN_PAT), behavior="isolated", invert=False)

    t0 = time.time()
    tkjson = os.path.join(os.path.dirname(args.out), "hy-tokenizer.json")
    hf = hy.write_tokenizer_json(args.tokenizer_json_out or tkjson, ranks)
    print(f"tokenizer.json written in {time.time() - t0:.1f}s", flush=True)

    flores = os.path.join(args.data, "flores200-devtest")
    out = {
        "reference": "tiktoken over hy.tiktoken, Hunyuan split rule, allowed_special=all, no normalisation",
        "vocab_sha256": hashlib.sha256(open(vocab_path, "rb").read()).hexdigest(),
        "hash": "fnv1a64 over little-endian uint32 values",
        "three_pass_reference": "HF tokenizers Sequence of Split(isolated) over the hunyuan-dense regexes; "
        "hash of the UTF-8 byte length of each piece",
        "languages": {},
    }
    total_lines = total_bytes = hf_mismatch = roundtrip_fail = split_mismatch = 0
    t0 = time.time()
    for name in sorted(os.listdir(flores)):
        if not name.endswith(".txt"):
            continue
        code = name[:-4]
        lines = read_lines(os.path.join(flores, name))
        hashes, three, first, n_tokens = [], [], [], 0
        for i, line in enumerate(lines):
            ids = enc.encode(line, allowed_special="all")
            n_tokens += len(ids)
            if enc.decode_bytes(ids) != line.encode("utf-8"):
                roundtrip_fail += 1
            hashes.append(hy.fnv1a64_ids(ids))
            if i < FULL_IDS_PER_LANG:
                first.append(ids)
            if hf.encode(line, add_special_tokens=False).ids != ids:
                hf_mismatch += 1
            three.append(piece_lengths_hash(three_pass.pre_tokenize_str(line)))
            # The Hunyuan split through onig must agree with tiktoken's regex too (a cross-check).
            pieces = [p for p, _ in hunyuan_split.pre_tokenize_str(line)]
            if "".join(pieces) != line:
                split_mismatch += 1
            total_bytes += len(line.encode("utf-8"))
        total_lines += len(lines)
        out["languages"][code] = {
            "lines": len(lines),
            "tokens": n_tokens,
            "ids_hash": hashes,
            "first_ids": first,
            "three_pass_hash": three,
        }
        print(f"{code}: {len(lines)} lines, {n_tokens} tokens", flush=True)
    out["summary"] = {
        "lines": total_lines,
        "bytes": total_bytes,
        "roundtrip_failures": roundtrip_fail,
        "hf_tokenizer_json_mismatches": hf_mismatch,
        "hunyuan_split_concat_mismatches": split_mismatch,
        "seconds": round(time.time() - t0, 1),
    }
    print(json.dumps(out["summary"]), flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
