#!/usr/bin/env python3
"""Per-kernel GPU time of a decode step from Nsight Compute's CSV (gpu__time_duration.sum per launch).

ncu serialises kernels, so each duration is the kernel alone (no overlap with its neighbours, no
programmatic dependent launch). Usage:
  kprof.py NCU_CSV [--steps N]   prints kernels grouped by name: launches, total us, us per step."""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r'\(.*$', '', name)           # argument list
    name = re.sub(r'^(void )?hymt::cuda::(\(anonymous namespace\)::)?', '', name)
    return name[:90]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('csv')
    ap.add_argument('--steps', type=int, default=0, help='decode steps in the run (for per-step figures)')
    a = ap.parse_args()
    rows = []
    with open(a.csv, newline='') as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get('Metric Name') != 'gpu__time_duration.sum':
            continue
        v = float(r['Metric Value'].replace(',', ''))
        unit = r.get('Metric Unit', 'nsecond')
        us = v / 1000.0 if unit.startswith('n') else (v if unit.startswith('u') else v * 1000.0)
        rows.append((short(r['Kernel Name']), r.get('Grid Size', ''), r.get('Block Size', ''), us))
    if not rows:
        sys.exit('no gpu__time_duration rows in ' + a.csv)
    agg = defaultdict(lambda: [0, 0.0, set()])
    for n, g, b, us in rows:
        e = agg[n]
        e[0] += 1
        e[1] += us
        e[2].add(g)
    total = sum(e[1] for e in agg.values())
    steps = a.steps or 1
    print(f'{len(rows)} launches, {total:.1f} us in all' + (f', {total / steps:.1f} us per step' if a.steps else ''))
    print(f'{"kernel":<90} {"launches":>8} {"us":>10} {"us/launch":>9} {"us/step":>9}')
    for n, (c, us, grids) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f'{n:<90} {c:>8} {us:>10.1f} {us / c:>9.2f} {us / steps:>9.1f}')


if __name__ == '__main__':
    main()
