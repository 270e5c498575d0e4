#!/usr/bin/env python3
"""The transformers side of hymt's GPU measurements, run on the GPU host in the same call as hymt.

  hf_peer.py parity --model DIR --ids-file IDS --hymt NAME=FILE.f32 [...]   compare hymt's logits with HF
  hf_peer.py bench --model DIR --json OUT.json                              HF generate speed and memory
  hf_peer.py offload --model DIR --gpu-mem 8GiB --json OUT.json              accelerate CPU offload speed

The model folder is a random-weight checkpoint written by `hymt make-random` (same files for both).
"""

import argparse
import json
import os
import subprocess
import sys
import time


def gpu_process_mib():
    """Memory the driver attributes to this process (context included), in MiB."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            pid, mib = [x.strip() for x in line.split(",")]
            if int(pid) == os.getpid():
                return int(mib)
    except Exception:
        pass
    return None


def load(model_dir, dtype, attn="sdpa", **kw):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=attn, **kw).eval()


def cmd_make(args):
    """A random-weight checkpoint of the Hunyuan-MT-7B shape, made on the GPU: N(0, 1/fan_in) matrices,
    N(0, 1) embedding, norm weights around 1 (as `hymt make-random` does), saved by transformers."""
    import math
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hy_common as hy

    cfg = AutoConfig.for_model(
        "hunyuan_v1_dense", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling={"type": "dynamic", "alpha": 1000.0, "factor": 1.0},
        tie_word_embeddings=True, bos_token_id=257, eos_token_id=259, pad_token_id=260, attention_bias=False)
    t0 = time.time()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g, device="cuda"))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g, device="cuda"))
            else:
                p.copy_(torch.randn(p.shape, generator=g, device="cuda") / math.sqrt(p.shape[1]))
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(args.model, safe_serialization=True, max_shard_size="5GB")
    hy.hub_layout(os.path.join(args.model, "config.json"))
    hy.write_tiktoken(os.path.join(args.model, "hy.tiktoken"), {bytes([b]): b for b in range(256)})
    print(f"random 7B checkpoint: {n} parameters, {time.time() - t0:.0f}s", flush=True)


def cmd_parity(args):
    import numpy as np
    import torch

    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    ids = [int(x) for x in open(args.ids_file).read().split()]
    n = len(ids)
    result = {"tokens": n, "tail": args.tail, "references": {}}
    refs = {}
    # bf16 with eager attention as well: how far two bf16 runs of transformers itself are apart when only
    # the attention kernel differs (the floor a bf16 engine can reach against the bf16 reference).
    for name, dtype, attn in (("bf16", torch.bfloat16, "sdpa"), ("f32", torch.float32, "sdpa"),
                              ("bf16_eager", torch.bfloat16, "eager")):
        model = load(args.model, dtype, attn).cuda()
        with torch.no_grad():
            logits = model(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()
        refs[name] = logits
        del model
        torch.cuda.empty_cache()
    vocab = refs["f32"].shape[1]
    for spec in args.hymt:
        label, path = spec.split("=", 1)
        got = np.fromfile(path, dtype=np.float32).reshape(n, vocab)
        for ref_name, ref in refs.items():
            last_cos = cos(got[-1], ref[-1])
            tail = slice(n - args.tail, n)
            agree = int((got[tail].argmax(-1) == ref[tail].argmax(-1)).sum())
            rel = float(np.abs(got - ref).max() / np.abs(ref).max())
            cos_all = float(np.mean([cos(got[i], ref[i]) for i in range(n)]))
            key = f"{label}_vs_hf_{ref_name}"
            result["references"][key] = {"last_cosine": last_cos, "mean_cosine": cos_all,
                                         "top1_agree_tail": agree, "rel_linf": rel}
            print(f"{key}: last-position cosine {last_cos:.6f}, mean cosine {cos_all:.6f}, "
                  f"top-1 agreement {agree}/{args.tail}, rel Linf {rel:.3e}", flush=True)
    # HF against itself: bf16 against f32 (how far the reference moves with precision) and bf16 sdpa
    # against bf16 eager (two bf16 runs that differ only in the attention kernel).
    for x, y in (("bf16", "f32"), ("bf16", "bf16_eager"), ("bf16_eager", "f32")):
        a, b = refs[x], refs[y]
        last, mean = cos(a[-1], b[-1]), float(np.mean([cos(a[i], b[i]) for i in range(n)]))
        result[f"hf_{x}_vs_hf_{y}_last_cosine"] = last
        result[f"hf_{x}_vs_hf_{y}_mean_cosine"] = mean
        print(f"hf {x} vs hf {y}: last-position cosine {last:.6f}, mean cosine {mean:.6f}", flush=True)
    json.dump(result, open(args.json, "w"), indent=1)


def timed(fn, reps=3):
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times


def cmd_bench(args):
    import torch

    torch.manual_seed(0)
    model = load(args.model, torch.bfloat16).cuda()
    vocab = 127957
    gen_kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    out = {"peer": "transformers generate", "dtype": "bf16", "attn": "sdpa"}

    # Batch 1: 48 prompt tokens, 64 new.
    x1 = torch.randint(0, vocab, (1, 48), device="cuda")
    model.generate(x1, max_new_tokens=8, min_new_tokens=8, **gen_kw)  # warm-up
    t, ts = timed(lambda: model.generate(x1, max_new_tokens=64, min_new_tokens=64, **gen_kw))
    out["batch1_decode_tok_s"] = 64 / t
    print(f"HF batch-1: {64 / t:.1f} tok/s (48 prompt + 64 new; runs {[round(v, 3) for v in ts]})", flush=True)

    # 256 sequences x (48 prompt + 64 new), prefill included.
    xb = torch.randint(0, vocab, (256, 48), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    t, ts = timed(lambda: model.generate(xb, attention_mask=torch.ones_like(xb), max_new_tokens=64,
                                         min_new_tokens=64, **gen_kw), reps=2)
    out["batch256_tok_s"] = 256 * 64 / t
    out["batch256_seconds"] = t
    print(f"HF 256 x (48+64): {256 * 64 / t:.0f} generated tok/s ({t:.2f}s)", flush=True)

    # Prefill of one 2,048-token prompt.
    xp = torch.randint(0, vocab, (1, 2048), device="cuda")
    with torch.no_grad():
        model(xp)
        t, ts = timed(lambda: model(xp), reps=5)
    out["prefill2048_tok_s"] = 2048 / t
    print(f"HF prefill 2048: {2048 / t:.0f} tok/s", flush=True)
    out["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    out["driver_process_mib"] = gpu_process_mib()
    json.dump(out, open(args.json, "w"), indent=1)


def cmd_offload(args):
    import torch

    mem = {0: args.gpu_mem, "cpu": "200GiB"}
    t0 = time.perf_counter()
    model = load(args.model, torch.bfloat16, device_map="auto", max_memory=mem)
    load_s = time.perf_counter() - t0
    x = torch.randint(0, 127957, (1, 48), device="cuda")
    gen_kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    model.generate(x, max_new_tokens=2, min_new_tokens=2, **gen_kw)
    t, _ = timed(lambda: model.generate(x, max_new_tokens=args.tokens, min_new_tokens=args.tokens, **gen_kw), reps=1)
    out = {"peer": "transformers + accelerate device_map offload", "max_memory": str(mem),
           "load_seconds": load_s, "batch1_decode_tok_s": args.tokens / t,
           "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30, "driver_process_mib": gpu_process_mib()}
    print(f"HF offload at {args.gpu_mem}: {out['batch1_decode_tok_s']:.2f} tok/s, driver {out['driver_process_mib']} MiB",
          flush=True)
    json.dump(out, open(args.json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("--model", required=True)
    p = sub.add_parser("parity")
    p.add_argument("--model", required=True)
    p.add_argument("--ids-file", required=True)
    p.add_argument("--hymt", action="append", default=[])
    p.add_argument("--tail", type=int, default=32)
    p.add_argument("--json", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--json", required=True)
    o = sub.add_parser("offload")
    o.add_argument("--model", required=True)
    o.add_argument("--gpu-mem", default="8GiB")
    o.add_argument("--tokens", type=int, default=16)
    o.add_argument("--json", required=True)
    args = ap.parse_args()
    {"make": cmd_make, "parity": cmd_parity, "bench": cmd_bench, "offload": cmd_offload}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
