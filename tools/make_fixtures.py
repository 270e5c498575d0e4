#!/usr/bin/env python3
"""Tiny random HunYuanDenseV1 models with reference outputs from HF transformers (the parity oracle).

Each fixture is a real `hunyuan_v1_dense` checkpoint (save_pretrained, f32 and bf16) with a small
vocabulary: the first N_RANKS ranks of hy.tiktoken followed by the 210 special tokens, so that the real
chat template and prompts tokenize. Reference outputs come from transformers on the CPU (eager
attention): logits at every position of prompt + continuation, and a greedy continuation.

  make_fixtures.py --data DIR (holds hy.tiktoken) --out DIR
"""

import argparse
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hy_common as hy  # noqa: E402

N_RANKS = 1024
VOCAB_ROWS = 1280  # 1024 ranks + 210 specials = 1234 tokens; rows past that have no token (as in the 7B)
GREEDY_TOKENS = 32
OUTPUT_GAIN = 4.0
MIN_GREEDY_MARGIN = 0.05   # top-2 logit gap required along every f32 greedy step
MIN_DISTINCT = 6           # a continuation must not be one short pattern repeated
SEED_TRIES = 40

FIXTURES = [
    # name, hidden, layers, heads, kv heads, head_dim, ffn, tied, tokenizer file, config layout, shard size
    dict(name="tiny-gqa1", hidden=64, layers=2, heads=4, kv=4, head_dim=16, ffn=128, tied=True,
         tokenizer="tiktoken", layout="hub", shard=None),
    dict(name="tiny-gqa2", hidden=128, layers=3, heads=4, kv=2, head_dim=32, ffn=256, tied=False,
         tokenizer="json", layout="saved", shard=None),
    dict(name="tiny-gqa4", hidden=256, layers=2, heads=4, kv=1, head_dim=64, ffn=512, tied=True,
         tokenizer="tiktoken", layout="hub", shard="2MB"),
]

PROMPTS = [
    hy.chat(hy.user_prompt("en", "zh", "Hello, world.")),
    hy.chat(hy.user_prompt("zh", "en", "今天天气很好。")),
    hy.chat(
        hy.user_prompt("en", "de", "The quick brown fox jumps over the lazy dog; 12345 e\u0301\u00e9\r\n  tabs\there."),
        system="You are a translator.",
    ),
]


def build_config(f, specials, rope_style):
    from transformers import AutoConfig

    rope = ({"rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}, "rope_theta": 10000.0}
            if rope_style == "legacy" else
            {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0}})
    return AutoConfig.for_model(
        "hunyuan_v1_dense",
        vocab_size=VOCAB_ROWS,
        hidden_size=f["hidden"],
        intermediate_size=f["ffn"],
        num_hidden_layers=f["layers"],
        num_attention_heads=f["heads"],
        num_key_value_heads=f["kv"],
        head_dim=f["head_dim"],
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        **rope,
        tie_word_embeddings=f["tied"],
        bos_token_id=specials["<|startoftext|>"],
        eos_token_id=specials["<|eos|>"],
        pad_token_id=specials["<|pad|>"],
        eod_token_id=specials["<|eos|>"],
        attention_bias=False,
    )


def randomize(model, f, seed):
    """Weights with a spread that keeps logits far from ties: N(0, 1/fan_in) matrices, with o_proj and
    down_proj scaled up so the residual stream is dominated by what the layers compute (otherwise a tied
    head mostly predicts the current token again), N(0, 1) embeddings (the rows without a token tiny, as
    untrained rows are), an untied head of logit scale ~16, and norm weights around 1 but all different."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n_tokens = N_RANKS + len(hy.SPECIAL_NAMES)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
                p[n_tokens:] *= 0.01
            elif "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=g) * (16.0 / math.sqrt(p.shape[1])))
                p[n_tokens:] *= 0.01
            else:
                gain = OUTPUT_GAIN if ("o_proj" in name or "down_proj" in name) else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * (gain / math.sqrt(p.shape[1])))


def q8_0_copy(model):
    """A copy of the model that computes as hymt's q8_0 CPU path does: matrices through ggml's Q8_0
    (blocks of 32 along a row, scale absmax/127 stored as f16, round to nearest) and the inputs of every
    matrix product quantised the same way (int8 activations). A greedy path that survives this is one
    hymt's q8_0 files must reproduce."""
    import copy
    import torch

    def q8(t):
        b = t.reshape(*t.shape[:-1], t.shape[-1] // 32, 32).double()
        d = b.abs().amax(-1, keepdim=True) / 127.0
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        codes = torch.round(b * inv).clamp(-127, 127)
        return (codes * d.float().half().double()).reshape(t.shape).to(t.dtype)

    q = copy.deepcopy(model)
    with torch.no_grad():
        for _, p in q.named_parameters():
            if p.dim() == 2 and p.shape[1] % 32 == 0:
                p.copy_(q8(p))
    for m in q.modules():
        if isinstance(m, torch.nn.Linear) and m.in_features % 32 == 0:
            m.register_forward_pre_hook(lambda mod, args: (q8(args[0]),))
    return q


def greedy_with_margins(model, prompt_ids, n):
    import torch

    ids, margins = list(prompt_ids), []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].double()
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt_ids):], min(margins)


def check_rope(model, f):
    import torch

    d = f["head_dim"]
    base = 10000.0 * 1000.0 ** (d / (d - 2))
    want = 1.0 / (base ** (torch.arange(0, d, 2).double() / d))
    got = model.model.rotary_emb.inv_freq.double()
    err = (got - want).abs().max().item() / want.abs().max().item()
    if err > 1e-6:
        print(f"{f['name']}: HF inv_freq differs from the alpha formula (rel err {err})", flush=True)
        return False
    print(f"{f['name']}: rope base {base:.6f}, inv_freq[1] {got[1].item():.10g} (formula agrees)", flush=True)
    return True


def reference(model, prompt_ids, n_tokens):
    """Greedy continuation (full recompute each step), then teacher-forced logits over everything."""
    import torch

    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            nxt = int(torch.argmax(logits))
            if nxt >= n_tokens:
                raise SystemExit("greedy chose a row without a token; make those rows smaller")
            ids.append(nxt)
        full = model(torch.tensor([ids])).logits[0].float()
    return ids[len(prompt_ids) :], full


def main():
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    ranks = hy.load_tiktoken(os.path.join(args.data, "hy.tiktoken"), limit=N_RANKS)
    assert len(ranks) == N_RANKS
    enc = hy.make_encoding(ranks, "fixture")
    specials = hy.special_tokens(N_RANKS)
    n_tokens = N_RANKS + len(specials)
    prompt_ids = [enc.encode(p, allowed_special="all") for p in PROMPTS]

    for idx, f in enumerate(FIXTURES):
        root = os.path.join(args.out, f["name"])
        shutil.rmtree(root, ignore_errors=True)
        for rope_style in ("legacy", "parameters"):
            cfg = build_config(f, specials, rope_style)
            torch.manual_seed(idx)
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
            if check_rope(model, f):
                break
        else:
            raise SystemExit("no config spelling gives the alpha RoPE base")
        # Pick the first seed whose greedy paths are confident (no near-ties), varied, and unchanged by
        # q8_0 weights and activations: the tests then hold hymt to them exactly. If no seed gets every
        # prompt there, keep the best one and record which prompts are q8_0-stable.
        best = None
        for attempt in range(SEED_TRIES):
            seed = 1000 + 100 * idx + attempt
            randomize(model, f, seed=seed)
            if f["tied"]:
                model.tie_weights()
            q8 = q8_0_copy(model)
            stable, min_margin, varied = [], float("inf"), True
            for ids in prompt_ids:
                g32, margin = greedy_with_margins(model, ids, GREEDY_TOKENS)
                g8, _ = greedy_with_margins(q8, ids, GREEDY_TOKENS)
                stable.append(g8 == g32)
                min_margin = min(min_margin, margin)
                varied &= len(set(g32)) >= MIN_DISTINCT
            score = (varied and min_margin >= MIN_GREEDY_MARGIN, sum(stable), min_margin)
            if best is None or score > best[0]:
                best = (score, seed, stable)
            if score[0] and all(stable):
                break
        score, seed, stable = best
        if not score[0]:
            raise SystemExit(f"{f['name']}: no seed gave confident, varied greedy paths")
        randomize(model, f, seed=seed)
        if f["tied"]:
            model.tie_weights()
        print(f"{f['name']}: seed {seed}; q8_0-stable prompts {stable}; min margin {score[2]:.3f}", flush=True)
        n_params = sum(p.numel() for p in model.parameters())
        tensors, meta = {}, {"fixture": f, "params": n_params, "prompts": PROMPTS, "n_tokens": n_tokens,
                             "seed": seed, "q8_0_stable": stable,
                             "vocab_rows": VOCAB_ROWS, "greedy_tokens": GREEDY_TOKENS, "dtypes": {}}
        for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            m = model.to(dtype)
            folder = os.path.join(root, dtype_name)
            kw = {"max_shard_size": f["shard"]} if f["shard"] else {}
            m.save_pretrained(folder, safe_serialization=True, **kw)
            cfg_path = os.path.join(folder, "config.json")
            saved_cfg = open(cfg_path).read()
            if f["layout"] == "hub":
                hy.hub_layout(cfg_path)
            gen = {"bos_token_id": specials["<|startoftext|>"],
                   "eos_token_id": [specials["<|eos|>"], specials["<|endoftext|>"]],
                   "pad_token_id": specials["<|pad|>"], "do_sample": True, "top_k": 20, "top_p": 0.6,
                   "repetition_penalty": 1.05, "temperature": 0.7}
            json.dump(gen, open(os.path.join(folder, "generation_config.json"), "w"), indent=2)
            if f["tokenizer"] == "tiktoken":
                hy.write_tiktoken(os.path.join(folder, "hy.tiktoken"), ranks)
            else:
                tk = hy.write_tokenizer_json(os.path.join(folder, "tokenizer.json"), ranks)
                for p, ids in zip(PROMPTS, prompt_ids):
                    got = tk.encode(p, add_special_tokens=False).ids
                    if got != ids:
                        raise SystemExit(f"tokenizer.json disagrees with tiktoken on {p!r}: {got} vs {ids}")
            # Reload what was saved, so the reference is computed from exactly the files we ship.
            ref_model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
            if not check_rope(ref_model, f):
                print(f"{f['name']}: the hub spelling does not reload with alpha; keeping the saved one", flush=True)
                open(cfg_path, "w").write(saved_cfg)
                ref_model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
                if not check_rope(ref_model, f):
                    raise SystemExit("saved config does not reload with the alpha RoPE base")
            meta.setdefault("config_layout", {})[dtype_name] = json.load(open(cfg_path))
            dmeta = []
            for i, ids in enumerate(prompt_ids):
                greedy, logits = reference(ref_model, ids, n_tokens)
                tensors[f"{dtype_name}.prompt{i}.ids"] = torch.tensor(ids, dtype=torch.int32)
                tensors[f"{dtype_name}.prompt{i}.greedy"] = torch.tensor(greedy, dtype=torch.int32)
                tensors[f"{dtype_name}.prompt{i}.logits"] = logits.contiguous()
                top2 = torch.topk(logits, 2, dim=-1).values
                dmeta.append({"prompt_tokens": len(ids), "greedy": greedy,
                              "min_top2_margin": float((top2[:, 0] - top2[:, 1]).min()),
                              "logit_absmax": float(logits.abs().max())})
            meta["dtypes"][dtype_name] = dmeta
            if dtype_name == "f32":
                # How far f32 itself is from float64 (informs the 1e-4 bound).
                m64 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
                with torch.no_grad():
                    ids = prompt_ids[2]
                    l64 = m64(torch.tensor([ids])).logits[0]
                    l32 = ref_model(torch.tensor([ids])).logits[0].double()
                meta["f32_vs_f64_rel_linf"] = float((l64 - l32).abs().max() / l64.abs().max())
            model = model.float()
        save_file(tensors, os.path.join(root, "reference.safetensors"))
        json.dump(meta, open(os.path.join(root, "reference.json"), "w"), indent=1, ensure_ascii=False)
        print(f"{f['name']}: {n_params} params; f32 vs f64 {meta['f32_vs_f64_rel_linf']:.2e}; "
              f"greedy f32 {meta['dtypes']['f32'][0]['greedy'][:8]}...", flush=True)


if __name__ == "__main__":
    main()
