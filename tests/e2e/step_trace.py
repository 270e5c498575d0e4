"""tools/device/step_trace.py on a made-up kernel trace whose answer is known.

The device benchmarks fold a CUPTI trace (tools/device/kernel_trace.cc) into one decode step and one
layer with step_trace.py; this checks its arithmetic and its reading of the CSV without a GPU: two warm-up
steps, ten decode steps of an embedding, 4 layers of 3 kernels (names with namespaces, template
arguments and commas, as the demangler writes them) and a head, one longer prefill step, each kernel
starting 200 ns before the previous one ends.

Usage: python3 tests/e2e/step_trace.py [BUILD_DIR]  (the build directory is not used)"""

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "device", "step_trace.py")
EMBED = "void hymt::cuda::(anonymous namespace)::GatherRowsKernel<(hymt::DType)1>(hymt::cuda::MatView, int)"
LAYER = [  # (name, duration ns)
    ("void hymt::cuda::(anonymous namespace)::RmsNormVecKernel<2>(hymt::cuda::MatView, float, bool)", 1500),
    ("void hymt::cuda::(anonymous namespace)::AttnDecodeKernel<false, 128, 4, 4, false, true>"
     "(hymt::cuda::AttentionArgs)", 4000),
    ("void hymt::cuda::(anonymous namespace)::GemvInt8Kernel<(hymt::DType)10, 1, true, 2, true>"
     "(hymt::cuda::(anonymous namespace)::GemvArgs, signed char const*, float2 const*)", 9000),
]
HEAD = "void hymt::cuda::(anonymous namespace)::ArgmaxRowsVecKernel<false>(int, float const*)"
OVERLAP = 200


def main():
    rows, t = [], 1_000_000

    def kernel(name, dur):
        nonlocal t
        start = t - OVERLAP
        rows.append(f"{start},{start + dur},8,1,33,{name}")
        t = start + dur

    def step(layers):
        kernel(EMBED, 1000)
        for _ in range(layers):
            for name, dur in LAYER:
                kernel(name, dur)
        kernel(HEAD, 3000)

    step(8)  # a prefill step: more kernels, left out of the decode steps
    for _ in range(12):
        step(4)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.csv")
        with open(path, "w") as f:
            f.write("\n".join(rows) + "\n")
        out = subprocess.run([sys.executable, TOOL, path, "--layers", "4"], capture_output=True, text=True,
                             check=True).stdout
    print(out)
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    expect("10 decode steps of 14 kernels" in out, "ten decode steps of 14 kernels (two warm-up steps left out)")
    # One layer: each kernel adds its duration less the overlap.
    m = re.search(r"a layer adds ([0-9.]+) us", out)
    want = sum(d - OVERLAP for _, d in LAYER) / 1e3
    expect(m is not None and abs(float(m.group(1)) - want) < 1e-6, f"a layer adds {want:.2f} us")
    for short, dur in (("RmsNormVecKernel<2>", 1500), ("AttnDecodeKernel<false>", 4000),
                       ("GemvInt8Kernel<DType10>", 9000)):
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(short) and "-0.20" in ln), None)
        expect(line is not None and f"{dur / 1e3:.2f}" in line and f"{(dur - OVERLAP) / 1e3:.2f}" in line,
               f"the folded layer's {short}: duration {dur / 1e3:.2f}, adds {(dur - OVERLAP) / 1e3:.2f}")
    # Per kernel name over a step: 4 layers of the GEMV.
    gemv = re.search(r"^\s+GemvInt8Kernel<DType10>\s+([0-9.]+)$", out, re.M)
    expect(gemv is not None and abs(float(gemv.group(1)) - 4 * (9000 - OVERLAP) / 1e3) < 1e-6,
           "the GEMV adds 35.20 us a step")
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("step_trace: all checks passed")


if __name__ == "__main__":
    main()
