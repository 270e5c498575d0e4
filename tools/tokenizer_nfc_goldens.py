#!/usr/bin/env python3
"""NFC goldens for the tokenizer's normaliser, from Python's unicodedata (runs anywhere, no GPU host).

For every FLORES-200 devtest line that NFC changes, keep the line number and a hash of its NFC form
(fnv1a64 over the code points as little-endian uint32, tools/hy_common.py's fnv1a64_ids); lines not
listed are already NFC. The FLORES text itself stays out of the repository.

  tokenizer_nfc_goldens.py --flores DIR --out tests/data/tokenizer/flores_nfc_goldens.json
"""

import argparse
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hy_common as hy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flores", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = {
        "reference": f"Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version}, NFC",
        "hash": "fnv1a64 over the NFC code points as little-endian uint32; lines are 1-based",
        "languages": {},
    }
    changed = 0
    for name in sorted(os.listdir(args.flores)):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(args.flores, name), "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        entries = {}
        for i, line in enumerate(lines):
            nfc = unicodedata.normalize("NFC", line)
            if nfc != line:
                entries[str(i + 1)] = hy.fnv1a64_ids([ord(c) for c in nfc])
        out["languages"][name[:-4]] = {"lines": len(lines), "changed": entries}
        changed += len(entries)
    out["changed_lines"] = changed
    with open(args.out, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    print(f"{changed} lines change under NFC")


if __name__ == "__main__":
    main()
