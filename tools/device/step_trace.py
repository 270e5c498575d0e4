#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel, from a CUPTI kernel trace.

  CUDA_INJECTION64_PATH=libkernel_trace.so HYMT_KERNEL_TRACE=trace.csv hymt bench ...  (kernel_trace.cc)
  tools/device/step_trace.py trace.csv [--split GatherRowsKernel] [--layers 32]

The trace's kernels are cut into steps at each launch of the --split kernel (one that runs once a step;
the steps come out rotated, which changes only the boundary's row); the steps with the most common kernel
count are the decode steps.
For each kernel position of a step it prints the mean over those steps of
  dur     its own duration (start of its first block to the end of its last; with programmatic dependent
          launches the start is before the wait on the kernel before, so this includes waiting),
  adds    end minus the previous kernel's end: what the kernel adds to the step's critical path,
  gap     start minus the previous kernel's end (negative: it started before the previous one ended),
then the same columns folded over the layers (positions that repeat with a layer's period), and the sum
of `adds` per kernel name. Only Python's standard library is used.
"""
import argparse
import collections
import re
import statistics
import sys


def short(name):
    """A kernel's name without its namespace, return type and parameters, with its template arguments'
    first word (the weight format of a GEMV, for one)."""
    s = name[5:] if name.startswith("void ") else name
    s = re.sub(r"\((anonymous namespace|anon)\)::", "", s)
    i = 0
    while i < len(s) and s[i] not in "<(":
        i += 1
    head = s[:i].split("::")[-1]
    if i < len(s) and s[i] == "<":
        depth, j = 0, i
        while j < len(s):
            depth += {"<": 1, ">": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        first = re.split(r"[,]", s[i + 1:j])[0].strip()
        first = re.sub(r"\(?[A-Za-z_:]*::", "", first).replace(")", "")
        return f"{head}<{first}>"
    return head


def load(path):
    """(start, end, short name, grid) of every kernel in kernel_trace.cc's CSV, in start order."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(",", 5)  # the name may hold commas
            if len(parts) == 6:
                a, b, gx, gy, gz, n = parts
                rows.append((int(a), int(b), short(n), (int(gx), int(gy), int(gz))))
    return sorted(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--split", default="GatherRowsKernel")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--skip", type=int, default=2, help="decode steps left out at the start (warm-up)")
    args = ap.parse_args()
    ks = load(args.csv)
    if not ks:
        sys.exit("no kernels in the trace")
    steps, cur = [], []
    for k in ks:
        if k[2].startswith(args.split) and cur:
            steps.append(cur)
            cur = []
        cur.append(k)
    steps.append(cur)
    lengths = collections.Counter(len(s) for s in steps)
    n, _ = lengths.most_common(1)[0]
    # A step also holds the kernels after its graph (the next step's uploads): keep those whose names match
    # the first decode step's at every position.
    decode = [s for s in steps if len(s) == n]
    ref = [k[2] for k in decode[0]]
    decode = [s for s in decode if [k[2] for k in s] == ref][args.skip:]
    print(f"{len(ks)} kernels, {len(steps)} steps; {len(decode)} decode steps of {n} kernels "
          f"(step lengths: {dict(lengths.most_common(5))})")
    if not decode:
        sys.exit("no decode steps")
    span = [s[-1][1] - s[0][0] for s in decode]
    starts = [decode[i + 1][0][0] - decode[i][0][0] for i in range(len(decode) - 1)]
    print(f"first kernel's start to last kernel's end: {statistics.mean(span) / 1e3:.3f} us mean; "
          f"step to step (start to start, consecutive steps only where they follow): "
          f"{statistics.median(starts) / 1e3:.3f} us median")

    def cols(i):
        dur = statistics.mean(s[i][1] - s[i][0] for s in decode) / 1e3
        if i == 0:
            return dur, dur, 0.0
        adds = statistics.mean(s[i][1] - s[i - 1][1] for s in decode) / 1e3
        gap = statistics.mean(s[i][0] - s[i - 1][1] for s in decode) / 1e3
        return dur, adds, gap

    per = [cols(i) for i in range(n)]
    # A layer's period: the distance between the first two launches of the attention kernel.
    att = [i for i, name in enumerate(ref) if name.startswith("AttnDecodeKernel")]
    period = att[1] - att[0] if len(att) > 1 else 0
    first = att[0] - 3 if att else 0  # a layer starts a few kernels before its attention
    print("\nkernel positions of one step (mean us): index, name, grid, dur, adds, gap")
    for i in range(n):
        if period and first + period <= i < first + (args.layers - 1) * period:
            continue  # the middle layers are folded below
        print(f"{i:4d} {ref[i]:28s} {str(decode[0][i][3]):16s} {per[i][0]:8.2f} {per[i][1]:8.2f} {per[i][2]:8.2f}")
    if period:
        print(f"\none layer ({period} kernels) folded over layers 2..{args.layers - 1} (mean us): "
              f"name, dur, adds, gap")
        tot = 0.0
        for j in range(period):
            idx = [first + period * L + j for L in range(1, args.layers - 1) if first + period * L + j < n]
            d = statistics.mean(per[i][0] for i in idx)
            a = statistics.mean(per[i][1] for i in idx)
            g = statistics.mean(per[i][2] for i in idx)
            names = sorted({ref[i] for i in idx})
            tot += a
            print(f"  {'/'.join(names):44s} {d:8.2f} {a:8.2f} {g:8.2f}")
        print(f"  a layer adds {tot:.2f} us")
    by = collections.defaultdict(float)
    for i in range(n):
        by[ref[i]] += per[i][1]
    print("\nadds summed per kernel name (us a step):")
    for name, a in sorted(by.items(), key=lambda x: -x[1]):
        print(f"  {name:32s} {a:9.2f}")


if __name__ == "__main__":
    main()
